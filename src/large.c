/* large.c: blocks above SMALL_MAX, each its own mapping, grown and shrunk
 * with mremap. A registry (open addressing, under one lock) records every
 * live large block, so freeing or resizing a pointer is validated exactly:
 * the cost is nothing beside the system call each operation makes anyway. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "internal.h"

struct large_entry {
    uintptr_t address; /* 0: empty slot, 1: deleted */
    size_t map_size;
    size_t alignment;
};

#define SLOT_DELETED ((uintptr_t)1)

static pthread_mutex_t large_lock = PTHREAD_MUTEX_INITIALIZER;
static struct large_entry *table;
static size_t table_capacity; /* a power of two */
static size_t table_filled;   /* live and deleted slots */

static size_t slot_of(uintptr_t address, size_t capacity)
{
    uint64_t h = (uint64_t)(address >> 12) * 0x9e3779b97f4a7c15u;
    return (size_t)(h >> 20) & (capacity - 1);
}

static struct large_entry *lookup(uintptr_t address)
{
    if (table == NULL)
        return NULL;
    for (size_t i = slot_of(address, table_capacity);; i = (i + 1) & (table_capacity - 1)) {
        if (table[i].address == address)
            return &table[i];
        if (table[i].address == 0)
            return NULL;
    }
}

static bool grow_table(void)
{
    size_t capacity = table_capacity ? table_capacity * 2 : 512;
    size_t live = 0;
    for (size_t i = 0; i < table_capacity; i++)
        live += table[i].address > SLOT_DELETED;
    if (live * 4 < table_capacity)
        capacity = table_capacity; /* mostly deleted slots: rebuild in place size */
    struct large_entry *fresh = os_map(capacity * sizeof *fresh);
    if (fresh == NULL)
        return false;
    for (size_t i = 0; i < table_capacity; i++) {
        if (table[i].address <= SLOT_DELETED)
            continue;
        size_t j = slot_of(table[i].address, capacity);
        while (fresh[j].address != 0)
            j = (j + 1) & (capacity - 1);
        fresh[j] = table[i];
    }
    if (table != NULL)
        os_unmap(table, table_capacity * sizeof *table);
    table = fresh;
    table_capacity = capacity;
    table_filled = live;
    return true;
}

static bool insert(uintptr_t address, size_t map_size, size_t alignment)
{
    if ((table_filled + 1) * 2 > table_capacity && !grow_table())
        return false;
    size_t i = slot_of(address, table_capacity);
    while (table[i].address > SLOT_DELETED)
        i = (i + 1) & (table_capacity - 1);
    if (table[i].address == 0)
        table_filled++;
    table[i] = (struct large_entry){address, map_size, alignment};
    return true;
}

static size_t round_to_page(size_t size)
{
    size_t page = os_page_size();
    return (size + page - 1) & ~(page - 1);
}

void *large_alloc(size_t size, size_t alignment)
{
    strata_init();
    size_t page = os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page - alignment) {
        errno = ENOMEM;
        return NULL;
    }
    if (size == 0)
        size = 1;
    size_t map_size = round_to_page(size);
    void *p = os_map_aligned(map_size, alignment > page ? alignment : page);
    if (p == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&large_lock);
    bool ok = insert((uintptr_t)p, map_size, alignment);
    pthread_mutex_unlock(&large_lock);
    if (!ok) {
        os_unmap(p, map_size);
        errno = ENOMEM;
        return NULL;
    }
    return p;
}

bool large_free(void *p)
{
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    size_t map_size = 0;
    if (entry != NULL) {
        map_size = entry->map_size;
        entry->address = SLOT_DELETED;
    }
    pthread_mutex_unlock(&large_lock);
    if (entry == NULL)
        return false;
    os_unmap(p, map_size);
    return true;
}

size_t large_usable_size(const void *p)
{
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    size_t size = entry ? entry->map_size : 0;
    pthread_mutex_unlock(&large_lock);
    return size;
}

void *large_realloc(void *p, size_t size)
{
    size_t page = os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page - size / 8) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    size_t old_size = entry ? entry->map_size : 0;
    size_t alignment = entry ? entry->alignment : 0;
    pthread_mutex_unlock(&large_lock);
    if (old_size == 0)
        report_fatal("realloc of a pointer strata did not allocate", p);

    size_t exact = round_to_page(size);
    if (exact <= old_size && exact >= old_size / 2)
        return p; /* fits, and shrinking would return too little to matter */
    /* Growth keeps 1/8 headroom, so a string grown in small steps costs a
     * system call per 12% of growth rather than one per page. */
    size_t new_size = exact > old_size ? round_to_page(size + size / 8) : exact;
    void *q;
    if (alignment > page && exact > old_size) {
        q = large_alloc(new_size, alignment);
        if (q == NULL)
            return NULL;
        memcpy(q, p, old_size);
        large_free(p);
        return q;
    }
    /* The registry changes in the same critical section as the mapping: if
     * mremap moves the block, another thread may map the old address as
     * soon as it is free, and must not find it registered with our size. */
    pthread_mutex_lock(&large_lock);
    q = os_remap(p, old_size, new_size);
    bool ok = true;
    if (q != NULL) {
        lookup((uintptr_t)p)->address = SLOT_DELETED;
        ok = insert((uintptr_t)q, new_size, alignment);
    }
    pthread_mutex_unlock(&large_lock);
    if (q == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    if (!ok)
        report_fatal("cannot grow the large-block registry", q);
    return q;
}

void large_lock_all(void)
{
    pthread_mutex_lock(&large_lock);
}

void large_unlock_all(void)
{
    pthread_mutex_unlock(&large_lock);
}

void large_fork_child(void)
{
    pthread_mutex_init(&large_lock, NULL);
}
