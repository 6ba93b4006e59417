/* large.c: blocks above SMALL_MAX, each its own mapping, grown and shrunk
 * with mremap. A registry (open addressing, under one lock) records every
 * live large block, so freeing or moving a pointer is validated exactly: the
 * cost is nothing beside the system call each of those makes anyway.
 * Invariants: a live block has exactly one registry entry, at its address
 * (tagged SLOT_MOVING while its own realloc remaps it); the registry's
 * entries and reserved room fill at most half of it; no system call runs
 * under large_lock (the registry grows, blocks are remapped and copied, with
 * the lock dropped).
 * The secure flavour ends every mapping with a guard page (past map_size,
 * which never counts it), makes a cached mapping inaccessible until it is
 * taken again, and never hands back the mapping freed last: a use after
 * free of a large block faults. It neither splits nor remaps cached
 * mappings (the guard would move) and moves blocks itself (secure.c). */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "core.h"
#include "sampled_blocks.h"

struct large_entry {
    uintptr_t address; /* 0: empty slot, 1: deleted */
    size_t map_size;
    size_t alignment;
    struct profile_sample *sample; /* the heap profiler's record of a sampled block */
};

#define SLOT_DELETED ((uintptr_t)1)

static pthread_mutex_t large_lock = PTHREAD_MUTEX_INITIALIZER;
static struct large_entry *table;
static size_t table_capacity; /* a power of two */
static size_t table_filled;   /* live and deleted slots */
static size_t table_reserved; /* entries kept free for blocks being moved */

/* A moving block's entry: its address tagged so that no lookup matches it,
 * while the slot stays taken. Blocks are 64-aligned: the bit is free. */
#define SLOT_MOVING ((uintptr_t)2)

/* ---- the registry of live blocks ---------------------------------------- */
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

/* The addresses of the large blocks freed (or moved away from) last: a
 * second free of one no block has taken since is a double free, not a
 * pointer strata never saw. Whether a block has taken the address is asked
 * of the registry when a free is in question (large_was_freed), not
 * settled by a walk of this ring at every registration, which cost each
 * large allocation 320 instructions. Under large_lock. */
#define RECENT_FREED 64
static uintptr_t recent_freed[RECENT_FREED];
static size_t recent_next;

static void recent_add(uintptr_t address)
{
    recent_freed[recent_next] = address;
    recent_next = (recent_next + 1) % RECENT_FREED;
}

bool large_was_freed(const void *p)
{
    bool found = false;
    pthread_mutex_lock(&large_lock);
    for (size_t i = 0; i < RECENT_FREED && !found; i++)
        found = recent_freed[i] == (uintptr_t)p;
    if (found && lookup((uintptr_t)p) != NULL)
        found = false; /* a block lives there again */
    pthread_mutex_unlock(&large_lock);
    return found;
}

static bool has_room(size_t entries)
{
    return (table_filled + table_reserved + entries) * 2 <= table_capacity;
}

/* Grows the table until `entries` more fit (large_lock held on entry and on
 * return, dropped around the system calls, so callers hold no state across
 * the call that another thread could change). False when no memory is to be
 * had for the table. */
static bool make_room(size_t entries)
{
    while (!has_room(entries)) {
        size_t live = 0;
        for (size_t i = 0; i < table_capacity; i++)
            live += table[i].address > SLOT_DELETED;
        /* Mostly deleted slots: rebuild at the same size. */
        size_t wanted = live + table_reserved + entries;
        size_t capacity = table_capacity == 0 ? 512
                          : wanted * 4 < table_capacity ? table_capacity : table_capacity * 2;
        pthread_mutex_unlock(&large_lock);
        struct large_entry *fresh = os_reserve(capacity * sizeof *fresh); /* strata's own: not charged */
        pthread_mutex_lock(&large_lock);
        if (fresh == NULL)
            return false;
        struct large_entry *old = fresh;
        size_t old_capacity = capacity;
        if (!has_room(entries) && capacity >= table_capacity) { /* else another thread grew it */
            live = 0;
            for (size_t i = 0; i < table_capacity; i++) {
                if (table[i].address <= SLOT_DELETED)
                    continue;
                size_t j = slot_of(table[i].address, capacity);
                while (fresh[j].address != 0)
                    j = (j + 1) & (capacity - 1);
                fresh[j] = table[i];
                live++;
            }
            old = table;
            old_capacity = table_capacity;
            table = fresh;
            table_capacity = capacity;
            table_filled = live;
        }
        if (old != NULL) {
            pthread_mutex_unlock(&large_lock);
            os_unreserve(old, old_capacity * sizeof *old);
            pthread_mutex_lock(&large_lock);
        }
    }
    return true;
}

/* Inserts an entry (large_lock held; dropped if the table must grow). False
 * when no memory is to be had for the table; never with a reservation. */
static bool insert(uintptr_t address, size_t map_size, size_t alignment)
{
    for (;;) {
        if (table_capacity != 0) {
            size_t i = slot_of(address, table_capacity);
            while (table[i].address > SLOT_DELETED)
                i = (i + 1) & (table_capacity - 1);
            /* A deleted slot is reused without filling the table more. */
            if (table[i].address == SLOT_DELETED || has_room(1)) {
                table_filled += table[i].address == 0;
                table[i] = (struct large_entry){address, map_size, alignment, NULL};
                strata_assert_cmp((table_filled + table_reserved) * 2, <=, table_capacity);
                return true;
            }
        }
        if (!make_room(1))
            return false;
    }
}

/* Keeps room for one entry, for a block about to move, so that registering
 * it at its new address can never fail (large_lock held; may drop it). */
static bool reserve_entry(void)
{
    if (!make_room(1))
        return false;
    table_reserved++;
    return true;
}

/* A block whose entry `from` names (a live or a moving one) is now at `to`:
 * the registry follows, into the room reserve_entry kept (large_lock held). */
static void registry_move(uintptr_t from, uintptr_t to, size_t map_size, size_t alignment)
{
    struct large_entry *entry = lookup(from);
    strata_assert(entry != NULL && table_reserved > 0);
    table_reserved--;
    if (to == (from & ~SLOT_MOVING)) {
        *entry = (struct large_entry){to, map_size, alignment, NULL};
        return;
    }
    entry->address = SLOT_DELETED;
    recent_add(from & ~SLOT_MOVING);
    bool inserted = insert(to, map_size, alignment);
    strata_assert(inserted); /* the reserved room: no growth, no failure */
    (void)inserted;
}

/* ---- block headers ------------------------------------------------------ */
static size_t round_to_page(size_t size)
{
    size_t page = os_page_size();
    return (size + page - 1) & ~(page - 1);
}

/* Every large block starts LARGE_HEADER bytes into its mapping (or one
 * alignment unit in, for alignments above it), right after a header that
 * lets realloc and usable-size answer without the registry's lock when the
 * block still fits. The registry stays the authority for free and for
 * moves. The header's fields are checked against its magic, a keyed sum of
 * them all and the block's address: a write before the block's start (the
 * header's last field is the byte before it) is found at its free, its
 * realloc and its usable size, and a program cannot forge a header that
 * passes. */
#define LARGE_HEADER ((size_t)64)
#define LARGE_MAGIC ((uintptr_t)0x5354524c41524745u)

struct large_header {
    uintptr_t magic; /* large_magic of the block's address and the fields */
    size_t map_size;
    size_t offset;   /* from the mapping's start to the block */
    size_t asked;    /* the size last asked for: shrinking is a smaller ask */
};
_Static_assert(sizeof(struct large_header) <= LARGE_HEADER, "a header fits before its block");

static uintptr_t large_magic(const void *p, const struct large_header *h)
{
    uint64_t sum = (uint64_t)(uintptr_t)p ^ block_secret.link;
    sum = (sum ^ h->map_size) * 0x9e3779b97f4a7c15u;
    sum = (sum ^ h->offset) * 0xbf58476d1ce4e5b9u;
    sum = (sum ^ h->asked) * 0x94d049bb133111ebu;
    return (uintptr_t)(sum ^ (sum >> 31) ^ LARGE_MAGIC);
}

static struct large_header *header_of(const void *p)
{
    return (struct large_header *)((uintptr_t)p - sizeof(struct large_header));
}

static void header_seal(const void *p, struct large_header *h)
{
    h->magic = large_magic(p, h);
}

/* The block at p now holds `asked` bytes, in place: its header says so,
 * sealed again. */
static void header_ask(const void *p, struct large_header *h, size_t asked)
{
    h->asked = asked;
    header_seal(p, h);
}

/* The header of a block the registry holds with `map_size`, checked (heap
 * lock or not: only the block's own calls write it); a broken one is
 * reported. */
static struct large_header *header_checked(const void *p, size_t map_size)
{
    struct large_header *h = header_of(p);
    if (unlikely(h->map_size != map_size || h->offset >= map_size || h->magic != large_magic(p, h)))
        report_fatal("write before the start of a block (its header is overwritten)", p);
    return h;
}

/* The header of a default-aligned large block, read without the lock; NULL
 * when `p` cannot be one (then the registry decides). A block's header is in
 * the same OS page as the block, so reading it never faults; but `p` may be
 * any pointer (a free or realloc of static memory comes here), and the
 * words before it no object's: their read is copied out of
 * AddressSanitizer's sight, which would report it in the sanitizer builds
 * wherever a program's variable lies at the page's LARGE_HEADER offset. */
static STRATA_NO_ADDRESS_CHECK struct large_header *quick_header(const void *p)
{
    /* The secure flavour trusts no header a program could have written,
     * and a freed block's page may be inaccessible. */
    if (STRATA_SECURE_BUILD)
        return NULL;
    if (((uintptr_t)p & (os_page_size() - 1)) != LARGE_HEADER)
        return NULL;
    struct large_header *h = header_of(p);
    const struct large_header words = {h->magic, h->map_size, h->offset, h->asked};
    return words.magic == large_magic(p, &words) ? h : NULL;
}

/* ---- the mapping cache -------------------------------------------------- */
/* Recently freed mappings, kept for reuse so that a program which frees and
 * allocates big buffers (or grows strings one after another) neither maps
 * nor faults them in again. Bounded in count, and in bytes by demand: 32 MiB,
 * or eight times the newest mapping freed when that is more, so that a
 * program replacing buffers of random sizes keeps several, and the next
 * buffer mostly finds one at least as large to split rather than a smaller
 * one to grow with fresh pages (twice kept one or two: the big-block table
 * faulted 1.4x the pages and ran 0.81x as fast); a mapping unused for two
 * purge delays is unmapped by the purger thread (which caching one asks
 * for: the mapping goes back whether or not the program calls again), or
 * by the next large-block call: after one delay, the big-block table
 * faulted 1.06x the pages and ran 0.94x as fast, its peak 0.6% higher.
 * Under large_lock. */
#define CACHE_SLOTS 8
#define CACHE_BYTES ((size_t)32 << 20)
#define CACHE_DEMAND 8

struct cached_mapping {
    char *base;
    size_t map_size;
    uint64_t freed_at;
};

static struct cached_mapping cache[CACHE_SLOTS];
static size_t cache_count, cache_bytes;

/* The cache's delay stretches as a heap's does (purge_policy.c, layout.h):
 * a mapping made, for want of a cached one, within the longest delay of an
 * expiry that dropped one at least as large doubles the time mappings stay
 * cached (up to PURGE_STRETCH_MAX doublings); PURGE_CALM_CHECKS expiries in
 * a row with no such mapping between them halve it again. */
static unsigned cache_stretch, cache_calm_expiries;
static uint64_t expired_at;     /* the last expiry that dropped a mapping */
static size_t expired_largest;  /* the largest it dropped, 0 once one is mapped again */

/* A mapping of map_size bytes is being made: was one dropped too soon? */
static void cache_missed(size_t map_size)
{
    if (expired_largest >= map_size && os_now_ns() - expired_at < purge_retake_window()) {
        if (cache_stretch < PURGE_STRETCH_MAX)
            cache_stretch++;
        cache_calm_expiries = 0;
        expired_largest = 0;
    }
}

static void cache_remove(size_t i)
{
    cache_bytes -= cache[i].map_size;
    cache[i] = cache[--cache_count];
}

/* Moves expired mappings (or, with `all`, every one) to `out` for the caller
 * to unmap after unlocking; returns how many. */
static size_t cache_expire(struct cached_mapping *out, bool all)
{
    uint64_t now = os_now_ns();
    uint64_t delay = (2 * strata_options.purge_delay_ns) << cache_stretch;
    size_t n = 0, largest = 0;
    for (size_t i = 0; i < cache_count;) {
        if (all || now - cache[i].freed_at >= delay) {
            if (cache[i].map_size > largest)
                largest = cache[i].map_size;
            out[n++] = cache[i];
            cache_remove(i);
        } else {
            i++;
        }
    }
    if (n != 0 && !all) {
        /* Still set: nothing was mapped again since the last expiry. */
        if (expired_largest != 0 && ++cache_calm_expiries >= PURGE_CALM_CHECKS) {
            if (cache_stretch > 0)
                cache_stretch--;
            cache_calm_expiries = 0;
        }
        expired_at = now;
        expired_largest = largest;
    }
    return n;
}

/* Takes entry `i` out of the cache (none when CACHE_SLOTS): its base, and
 * its size in *map_size. */
static char *cache_take_slot(size_t i, size_t *map_size)
{
    if (i == CACHE_SLOTS)
        return NULL;
    char *base = cache[i].base;
    *map_size = cache[i].map_size;
    cache_remove(i);
    return base;
}

/* The smallest cached mapping of at least `low` and at most `high` bytes. */
static char *cache_take(size_t low, size_t high, size_t *map_size)
{
    /* The secure flavour passes over the mapping freed last. */
    size_t newest = CACHE_SLOTS;
    if (secure_has(SECURE_LARGE_GUARD))
        for (size_t i = 0; i < cache_count; i++)
            if (newest == CACHE_SLOTS || cache[i].freed_at > cache[newest].freed_at)
                newest = i;
    size_t best = CACHE_SLOTS;
    for (size_t i = 0; i < cache_count; i++)
        if (i != newest && cache[i].map_size >= low && cache[i].map_size <= high &&
            (best == CACHE_SLOTS || cache[i].map_size < cache[best].map_size))
            best = i;
    return cache_take_slot(best, map_size);
}

/* For a mapping of `size` bytes that no cached one fits as it is: the
 * smallest cached one above it (the caller splits off its tail), or else the
 * largest of at least size / 4 (the caller grows it with mremap): its
 * resident pages are reused where a new mapping would fault every page in. */
static char *cache_take_resizable(size_t size, size_t *map_size)
{
    if (secure_has(SECURE_LARGE_GUARD))
        return NULL;
    size_t best = CACHE_SLOTS;
    for (size_t i = 0; i < cache_count; i++) {
        size_t have = cache[i].map_size;
        if (have < size / 4)
            continue;
        if (best == CACHE_SLOTS) {
            best = i;
            continue;
        }
        size_t had = cache[best].map_size;
        if (have >= size ? had < size || have < had : had < size && have > had)
            best = i;
    }
    return cache_take_slot(best, map_size);
}

/* Keeps a freed mapping if it fits, evicting the oldest; false if it does
 * not belong in the cache (the caller unmaps it). */
static bool cache_put(char *base, size_t map_size, struct cached_mapping *evicted, size_t *n)
{
    size_t limit = CACHE_DEMAND * map_size > CACHE_BYTES ? CACHE_DEMAND * map_size : CACHE_BYTES;
    /* With no purge delay, freed memory goes back at once. */
    if (map_size > (size_t)PTRDIFF_MAX / 4 || strata_options.purge_delay_ns == 0)
        return false;
    while (cache_count == CACHE_SLOTS || cache_bytes + map_size > limit) {
        size_t oldest = 0;
        for (size_t i = 1; i < cache_count; i++)
            if (cache[i].freed_at < cache[oldest].freed_at)
                oldest = i;
        evicted[(*n)++] = cache[oldest];
        cache_remove(oldest);
    }
    strata_assert(cache_count < CACHE_SLOTS && cache_bytes + map_size <= limit);
    cache[cache_count++] = (struct cached_mapping){base, map_size, os_now_ns()};
    cache_bytes += map_size;
    return true;
}

/* ---- mappings and placing a block in one -------------------------------- */
/* The secure flavour's guard page after each mapping; 0 in the default. */
static size_t guard_size(void)
{
    return secure_has(SECURE_LARGE_GUARD) ? os_page_size() : 0;
}

static void unmap_mapping(char *base, size_t map_size)
{
    os_unmap(base, map_size + guard_size());
}

static void unmap_all(const struct cached_mapping *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        unmap_mapping(list[i].base, list[i].map_size);
}

/* A new mapping of map_size bytes and its guard page. */
static char *map_mapping(size_t map_size, size_t alignment)
{
    size_t guard = guard_size();
    char *base = os_map_aligned(map_size + guard, alignment);
    if (base != NULL && guard != 0 && !os_protect(base + map_size, guard, false)) {
        os_unmap(base, map_size + guard);
        return NULL;
    }
    return base;
}

/* The first `bytes` (whole OS pages) of a reused mapping made to read as
 * zero: only its resident OS pages can hold data, since the others were
 * never touched or were given back, so those alone are zeroed and the
 * others are left to fault in as zero when the program first touches
 * them (a memset of the whole block faulted in every page of a block
 * whose program touches three: the secure flavour, which zeroes every
 * block, ran the medium table at 2.9-4.3 k operations a second, 50 faults
 * each). All of it where the kernel does not say which pages are
 * resident. */
static void mapping_zero(char *base, size_t bytes)
{
    size_t page = os_page_size(), pages = bytes / page;
    unsigned char resident[OS_RESIDENT_MAX_PAGES];
    for (size_t first = 0; first < pages; first += OS_RESIDENT_MAX_PAGES) {
        size_t count = pages - first < OS_RESIDENT_MAX_PAGES ? pages - first : OS_RESIDENT_MAX_PAGES;
        char *from = base + first * page;
        if (!os_resident_map(from, count, resident)) {
            memset(from, 0, count * page);
            continue;
        }
        for (size_t i = 0; i < count;) { /* each run of resident pages in one memset */
            size_t run = 0;
            while (i + run < count && (resident[i + run] & 1))
                run++;
            if (run != 0)
                memset(from + i * page, 0, run * page);
            i += run + 1;
        }
    }
}

static void *place(char *base, size_t map_size, size_t offset, size_t asked)
{
    char *p = base + offset;
    strata_assert(offset >= LARGE_HEADER && offset + asked <= map_size);
    struct large_header *h = header_of(p);
    *h = (struct large_header){0, map_size, offset, asked};
    header_seal(p, h);
    return p;
}

/* Whether a block of `usable` bytes last asked to be `asked` should stay
 * where it is for a new size: it fits, and it is not a shrink to less than
 * half (a block that grows into a roomy mapping keeps the room). */
static bool stays(size_t usable, size_t asked, size_t size)
{
    return size <= usable && (size >= asked || size >= usable / 2);
}

/* ---- allocation and free ------------------------------------------------ */
void *large_alloc(size_t size, size_t alignment, bool zero)
{
    config_init();
    if (size == 0)
        size = 1; /* an aligned malloc(0): a byte of its own mapping, not one past it */
    size_t page = os_page_size();
    size_t offset = alignment > LARGE_HEADER ? alignment : LARGE_HEADER;
    if (size > (size_t)PTRDIFF_MAX - page - offset) {
        errno = ENOMEM;
        return NULL;
    }
    size_t map_size = round_to_page(size + offset);
    struct cached_mapping expired[CACHE_SLOTS], evicted[CACHE_SLOTS + 1] = {{0}};
    char *base = NULL;
    size_t resize_from = 0, n_evicted = 0;
    bool tail_cached = false;
    pthread_mutex_lock(&large_lock);
    size_t n = cache_expire(expired, false);
    /* Cached mappings are page-aligned: a block aligned to a page or less
     * lies at its alignment (the offset) in any of them. (Taken for
     * alignments up to LARGE_HEADER only, posix_memalign(4096, 4096) and
     * its free mapped and unmapped a mapping each: 11 us a pair, glibc's
     * 110 ns.) */
    if (alignment <= page) {
        base = cache_take(map_size, 2 * map_size, &map_size);
        if (base == NULL)
            base = cache_take_resizable(map_size, &resize_from); /* leaves resize_from 0 if none */
        if (base == NULL)
            cache_missed(map_size);
        /* A larger one is split: its tail stays cached, resident, as a
         * mapping of its own, where shrinking it would give the pages back. */
        if (resize_from > map_size) {
            if (cache_put(base + map_size, resize_from - map_size, evicted, &n_evicted))
                tail_cached = true;
            else
                evicted[n_evicted++] = (struct cached_mapping){base + map_size, resize_from - map_size, 0};
            resize_from = 0;
        }
    }
    pthread_mutex_unlock(&large_lock);
    unmap_all(expired, n);
    unmap_all(evicted, n_evicted);
    if (tail_cached)
        purger_ask();
    if (resize_from != 0) {
        char *resized = os_remap(base, resize_from, map_size);
        if (resized == NULL)
            os_unmap(base, resize_from);
        base = resized;
    }
    bool reused = base != NULL;
    if (reused && secure_has(SECURE_LARGE_GUARD) && !os_protect(base, map_size, true)) {
        unmap_mapping(base, map_size);
        base = NULL;
        reused = false;
    }
    if (base == NULL)
        base = map_mapping(map_size, alignment > page ? alignment : page);
    if (base == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    /* A fresh mapping is zero already; of a reused one (up to twice the
     * size, cache_take), the pages the block reaches are zeroed. */
    if (zero && reused)
        mapping_zero(base, round_to_page(offset + size));
    void *p = place(base, map_size, offset, size);
    pthread_mutex_lock(&large_lock);
    bool ok = insert((uintptr_t)p, map_size, alignment);
    pthread_mutex_unlock(&large_lock);
    if (!ok) {
        unmap_mapping(base, map_size);
        errno = ENOMEM;
        return NULL;
    }
    counters_bytes_out((long)(map_size - offset));
    return p;
}

void large_attach_sample(void *p, struct profile_sample *sample)
{
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    strata_assert(entry != NULL && entry->sample == NULL);
    entry->sample = sample;
    pthread_mutex_unlock(&large_lock);
}

bool large_free(void *p)
{
    if (sampled_blocks_hold(p)) {
        sampled_block_free(p);
        return true;
    }
    struct cached_mapping evicted[CACHE_SLOTS + 1];
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    if (entry == NULL) {
        pthread_mutex_unlock(&large_lock);
        return false;
    }
    struct profile_sample *sample = entry->sample;
    size_t map_size = entry->map_size;
    struct large_header *h = header_checked(p, map_size);
    bool page_aligned = entry->alignment <= os_page_size();
    entry->address = SLOT_DELETED;
    recent_add((uintptr_t)p);
    char *base = (char *)p - h->offset;
    h->magic = 0; /* a stale pointer to this address is no longer a block */
    counters_bytes_out(-(long)(map_size - h->offset));
    if (secure_has(SECURE_LARGE_GUARD)) {
        /* Inaccessible before any thread can take it from the cache; the
         * system call outside the lock. */
        pthread_mutex_unlock(&large_lock);
        bool hidden = page_aligned && os_protect(base, map_size, false);
        pthread_mutex_lock(&large_lock);
        page_aligned = hidden;
    }
    size_t n = cache_expire(evicted, false);
    bool kept = page_aligned && cache_put(base, map_size, evicted, &n);
    pthread_mutex_unlock(&large_lock);
    if (sample != NULL)
        profile_sample_drop(sample);
    unmap_all(evicted, n);
    if (kept)
        purger_ask(); /* it gives the mapping back if no allocation takes it */
    else
        unmap_mapping(base, map_size);
    return true;
}

size_t large_cache_expire_now(void)
{
    struct cached_mapping expired[CACHE_SLOTS];
    pthread_mutex_lock(&large_lock);
    size_t n = cache_expire(expired, false), left = cache_count;
    pthread_mutex_unlock(&large_lock);
    unmap_all(expired, n);
    return left;
}

void large_cache_release(void)
{
    struct cached_mapping all[CACHE_SLOTS];
    pthread_mutex_lock(&large_lock);
    size_t n = cache_expire(all, true);
    pthread_mutex_unlock(&large_lock);
    unmap_all(all, n);
}

size_t large_usable_size(const void *p)
{
    if (sampled_blocks_hold(p))
        return sampled_block_usable_size(p);
    const struct large_header *h = quick_header(p);
    if (h != NULL && !strata_options.check)
        return h->map_size - h->offset;
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    size_t size = entry ? entry->map_size - header_checked(p, entry->map_size)->offset : 0;
    pthread_mutex_unlock(&large_lock);
    return size;
}

/* ---- realloc, in steps -------------------------------------------------- */
/* The realloc of a block aligned above a page that must grow: a new block
 * of that alignment, the contents copied (mremap keeps only page
 * alignment). */
static void *realloc_aligned_by_copy(void *p, size_t size, size_t alignment, size_t old_size, size_t offset)
{
    void *q = large_alloc(size + growth_headroom(size), alignment, false);
    if (q == NULL) /* without memory for the headroom, the size asked may still be had */
        q = large_alloc(size, alignment, false);
    if (q == NULL)
        return NULL;
    memcpy(q, p, old_size - offset);
    large_free(p);
    return q;
}

/* Growing into a cached mapping that is already faulted in beats mremap
 * plus a fault per new page; a growing block will use the room. The copy
 * runs outside the lock; the block stays registered at p meanwhile.
 * Returns the moved block; p itself when no cached mapping fits (nothing
 * done); NULL with errno set when there is no room to register it. */
static void *realloc_into_cached(void *p, size_t size, size_t exact, size_t old_size, size_t offset,
                                 size_t alignment)
{
    size_t cached_size = 0;
    pthread_mutex_lock(&large_lock);
    char *cached = cache_take(exact, 16 * exact, &cached_size);
    bool reserved = cached != NULL && reserve_entry();
    pthread_mutex_unlock(&large_lock);
    if (cached == NULL)
        return p;
    if (!reserved) {
        os_unmap(cached, cached_size);
        errno = ENOMEM;
        return NULL;
    }
    void *q = place(cached, cached_size, offset, size);
    memcpy(q, p, old_size - offset);
    pthread_mutex_lock(&large_lock);
    registry_move((uintptr_t)p, (uintptr_t)q, cached_size, alignment);
    pthread_mutex_unlock(&large_lock);
    header_of(p)->magic = 0;
    os_unmap((char *)p - offset, old_size);
    counters_bytes_out((long)cached_size - (long)old_size);
    return q;
}

/* Resizes the block's mapping to new_size bytes with mremap. Its entry is
 * tagged as moving while mremap runs, outside the lock: once mremap moves
 * it, another thread may map the old address and must not find it
 * registered with our size; the room to register the new address is
 * reserved first, so a failure leaves the block as it was. (Nothing else
 * may use a block its own realloc is moving.) */
static void *realloc_by_remap(void *p, size_t size, size_t old_size, size_t new_size, size_t offset,
                              size_t alignment)
{
    pthread_mutex_lock(&large_lock);
    if (!reserve_entry()) {
        pthread_mutex_unlock(&large_lock);
        errno = ENOMEM;
        return NULL;
    }
    struct large_entry *moving = lookup((uintptr_t)p);
    strata_assert(moving != NULL && moving->map_size == old_size);
    moving->address |= SLOT_MOVING;
    pthread_mutex_unlock(&large_lock);
    char *base = os_remap((char *)p - offset, old_size, new_size);
    void *q = base != NULL ? place(base, new_size, offset, size) : p;
    pthread_mutex_lock(&large_lock);
    registry_move((uintptr_t)p | SLOT_MOVING, (uintptr_t)q, base != NULL ? new_size : old_size,
                  alignment);
    pthread_mutex_unlock(&large_lock);
    if (base == NULL && new_size < old_size) {
        header_ask(p, header_of(p), size); /* a shrink that could not give memory back still fits */
        return p;
    }
    if (base == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    counters_bytes_out((long)new_size - (long)old_size);
    /* The caller grew the block to write it, and will likely grow it into
     * the headroom too: fault that in with one call, not a trap a page. */
    if (new_size > old_size)
        os_populate(base + old_size, new_size - old_size);
    return q;
}

/* A sampled block of the bins' sizes grown past them: a large block now,
 * unsampled (a realloc is a free and an allocation). */
static void *realloc_sampled(void *p, size_t size)
{
    size_t old_size = sampled_block_usable_size(p);
    void *q = large_alloc(size, 0, false);
    if (q == NULL)
        return NULL;
    memcpy(q, p, old_size < size ? old_size : size);
    sampled_block_free(p);
    return q;
}

/* Steps: the header alone when the size stays; the registry's word on
 * the block; then a copy for a block aligned above a page, a move into a
 * cached mapping for growth, or else mremap. */
void *large_realloc(void *p, size_t size)
{
    strata_assert(!STRATA_SECURE_BUILD); /* secure.c moves its blocks itself */
    if (sampled_blocks_hold(p))
        return realloc_sampled(p, size);
    /* A string grown in small steps reallocs thousands of times between
     * moves: those calls only read the header (a size that stays fits in
     * the mapping, so it cannot overflow below). */
    struct large_header *quick = quick_header(p);
    if (quick != NULL && !strata_options.check &&
        stays(quick->map_size - quick->offset, quick->asked, size)) {
        header_ask(p, quick, size);
        return p;
    }
    size_t page = os_page_size();
    if (size > (size_t)PTRDIFF_MAX - page - growth_headroom(size) - LARGE_HEADER) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&large_lock);
    struct large_entry *entry = lookup((uintptr_t)p);
    size_t old_size = entry ? entry->map_size : 0;
    size_t alignment = entry ? entry->alignment : 0;
    /* A sampled block's realloc ends its sample (one that stays in place
     * by the header alone, above, keeps it, as it was first sampled). */
    struct profile_sample *sample = entry ? entry->sample : NULL;
    if (sample != NULL)
        entry->sample = NULL;
    pthread_mutex_unlock(&large_lock);
    if (sample != NULL)
        profile_sample_drop(sample);
    if (old_size == 0)
        report_fatal("realloc of a pointer strata did not allocate", p);

    struct large_header *header = header_checked(p, old_size);
    size_t offset = header->offset;
    size_t exact = round_to_page(size + offset);
    if (stays(old_size - offset, header->asked, size)) {
        header_ask(p, header, size);
        return p;
    }
    if (alignment > page && exact > old_size)
        return realloc_aligned_by_copy(p, size, alignment, old_size, offset);
    if (exact > old_size) {
        void *q = realloc_into_cached(p, size, exact, old_size, offset, alignment);
        if (q != p)
            return q;
    }
    /* Growth keeps headroom (options.h): a string grown in small steps costs a
     * system call per 12% of growth rather than one per page. */
    size_t new_size = exact > old_size ? round_to_page(size + growth_headroom(size) + offset) : exact;
    void *q = realloc_by_remap(p, size, old_size, new_size, offset, alignment);
    /* Without memory for the headroom, the size asked may still be had. */
    if (q == NULL && new_size > exact)
        q = realloc_by_remap(p, size, old_size, exact, offset, alignment);
    return q;
}

/* ---- statistics, fork --------------------------------------------------- */
void large_stats(size_t *blocks, size_t *bytes, size_t *cached)
{
    pthread_mutex_lock(&large_lock);
    for (size_t i = 0; i < table_capacity; i++) {
        if (table[i].address <= SLOT_DELETED || (table[i].address & SLOT_MOVING))
            continue; /* a block being moved is counted once it has moved */
        const struct large_header *h = header_of((void *)table[i].address);
        (*blocks)++;
        *bytes += h->map_size - h->offset;
    }
    *cached += cache_bytes;
    pthread_mutex_unlock(&large_lock);
    sampled_blocks_stats(blocks, bytes);
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
    /* A mover of the parent that had reserved room is gone. */
    table_reserved = 0;
}
