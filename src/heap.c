/* heap.c: thread heaps. Each thread allocates from its own heap without
 * locks; a heap's pages are reached through current[] (and direct[] for the
 * inline path) and per-class lists of pages with free blocks. Invariants: a
 * page is current, listed, or full (neither); direct[] mirrors current[]
 * except in checked mode, where it points at page_empty so every call takes
 * the checked slow path. Heaps live in a pool and are never unmapped, so a
 * late remote free can always reach the heap it read from a segment. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "internal.h"

struct page page_empty;
struct heap heap_empty = {
    .direct = {[0 ... DIRECT_COUNT - 1] = &page_empty},
    .current = {[0 ... CLASS_COUNT - 1] = &page_empty},
    .owner_word = OWNER_NONE,
};
STRATA_TLS struct heap *thread_heap = &heap_empty;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap *pool_free;
static char *pool_chunk;
static size_t pool_chunk_left;
static pthread_key_t exit_key;

static _Atomic int init_state; /* 0 none, 1 running, 2 done */
static STRATA_TLS bool init_running_here;

static void heap_thread_exit(void *value);

static void fork_prepare(void)
{
    heap_lock_all();
    free_lock_all();
    segment_lock_all();
    large_lock_all();
}

static void fork_parent(void)
{
    large_unlock_all();
    segment_unlock_all();
    free_unlock_all();
    heap_unlock_all();
}

static void fork_child(void)
{
    heap_fork_child();
    free_fork_child();
    segment_fork_child();
    large_fork_child();
}

void strata_init(void)
{
    if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == 2))
        return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&init_state, &expected, 1)) {
        /* Another thread initialises; a recursive call from our own
         * initialisation (a libc call that allocates) may go on. */
        while (!init_running_here && atomic_load(&init_state) != 2)
            sched_yield();
        return;
    }
    init_running_here = true;
    os_page_size();
    options_init();
    sizeclass_init();
    if (pthread_key_create(&exit_key, heap_thread_exit) != 0)
        report_fatal("cannot create the thread-exit key", NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    init_running_here = false;
    atomic_store_explicit(&init_state, 2, memory_order_release);
}

static struct heap *heap_from_pool(void)
{
    pthread_mutex_lock(&pool_lock);
    struct heap *heap = pool_free;
    if (heap != NULL) {
        pool_free = heap->next_free;
    } else {
        size_t size = (sizeof(struct heap) + 63) & ~(size_t)63;
        if (pool_chunk_left < size) {
            size_t chunk = 64 * 1024;
            pool_chunk = os_map(chunk);
            pool_chunk_left = pool_chunk ? chunk : 0;
        }
        if (pool_chunk != NULL && pool_chunk_left >= size) {
            heap = (struct heap *)pool_chunk;
            pool_chunk += size;
            pool_chunk_left -= size;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    return heap;
}

static struct heap *heap_acquire(void)
{
    strata_init();
    struct heap *heap = heap_from_pool();
    if (heap == NULL)
        return NULL;
    for (size_t i = 0; i < DIRECT_COUNT; i++)
        heap->direct[i] = &page_empty;
    for (size_t c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        heap->available[c] = NULL;
    }
    heap->segments = NULL;
    heap->dirty_slices = 0;
    heap->next_free = NULL;
    heap->owner_word = (uintptr_t)heap | (strata_options.check ? OWNER_CHECK_TAG : 0);
    atomic_store_explicit(&heap->remote, NULL, memory_order_release);
    thread_heap = heap;
    pthread_setspecific(exit_key, heap);
    return heap;
}

static void set_current(struct heap *heap, unsigned class_index, struct page *page)
{
    heap->current[class_index] = page;
    if (class_size[class_index] > DIRECT_MAX || strata_options.check)
        return;
    size_t first = class_index == 0 ? 0 : class_size[class_index - 1] / 8 + 1;
    size_t last = class_size[class_index] / 8;
    for (size_t i = first; i <= last; i++)
        heap->direct[i] = page;
}

static void list_remove(struct heap *heap, struct page *page)
{
    if (page->prev)
        page->prev->next = page->next;
    else
        heap->available[page->class_index] = page->next;
    if (page->next)
        page->next->prev = page->prev;
    page->next = page->prev = NULL;
    page->listed = 0;
}

static void list_push(struct heap *heap, struct page *page)
{
    struct page **head = &heap->available[page->class_index];
    page->prev = NULL;
    page->next = *head;
    if (*head)
        (*head)->prev = page;
    *head = page;
    page->listed = 1;
}

void heap_free_event(struct heap *heap, struct page *page)
{
    if (unlikely(!page->in_use))
        report_fatal("free of a block that is not allocated", page->free);
    unsigned class_index = page->class_index;
    if (page == heap->current[class_index])
        return;
    if (page->used == 0) {
        if (page->listed)
            list_remove(heap, page);
        page_release(heap, page);
    } else if (!page->listed) {
        list_push(heap, page);
    }
}

static STRATA_NOINLINE void *refill(struct heap *heap, unsigned class_index)
{
    if (atomic_load_explicit(&heap->remote, memory_order_relaxed) != NULL)
        heap_collect_remote(heap);
    struct page *page = heap->current[class_index];
    if (page->free == NULL && !page_extend(page)) {
        page = heap->available[class_index];
        if (page != NULL) {
            list_remove(heap, page);
        } else {
            page = page_new(heap, class_index);
            if (page == NULL) {
                errno = ENOMEM;
                return NULL;
            }
            page_extend(page);
        }
        set_current(heap, class_index, page);
    }
    return block_pop(page);
}

static void *alloc_class(struct heap *heap, unsigned class_index)
{
    struct page *page = heap->current[class_index];
    void *block = likely(page->free != NULL) ? block_pop(page) : refill(heap, class_index);
    if (unlikely(strata_options.check) && block != NULL && class_size[class_index] >= 16)
        ((uintptr_t *)block)[1] = 0; /* clear the freed-block canary */
    return block;
}

void *heap_alloc_class(unsigned class_index)
{
    struct heap *heap = thread_heap;
    if (unlikely(heap == &heap_empty)) {
        heap = heap_acquire();
        if (heap == NULL) {
            errno = ENOMEM;
            return NULL;
        }
    }
    return alloc_class(heap, class_index);
}

void *heap_alloc_slow(struct heap *heap, size_t size)
{
    if (unlikely(size > SMALL_MAX))
        return large_alloc(size, 0);
    if (unlikely(heap == &heap_empty)) {
        heap = heap_acquire();
        if (heap == NULL) {
            errno = ENOMEM;
            return NULL;
        }
    }
    return alloc_class(heap, size_class(size));
}

void heap_collect_remote(struct heap *heap)
{
    struct block *list = atomic_exchange_explicit(&heap->remote, NULL, memory_order_acquire);
    while (list != NULL) {
        struct block *next = list->next;
        free_collected(heap, list);
        list = next;
    }
}

static void heap_abandon(struct heap *heap)
{
    heap_collect_remote(heap);
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct page *page = heap->current[c];
        heap->current[c] = &page_empty;
        if (page->in_use && page->used == 0)
            page_release(heap, page);
        for (page = heap->available[c]; page != NULL; page = page->next)
            page->listed = 0;
        heap->available[c] = NULL;
    }
    for (size_t i = 0; i < DIRECT_COUNT; i++)
        heap->direct[i] = &page_empty;
    heap_segments_abandon(heap);
    /* From here every free of this heap's blocks takes the abandoned path;
     * closing the list sends late remote frees there too. */
    struct block *late = atomic_exchange_explicit(&heap->remote, REMOTE_CLOSED, memory_order_acq_rel);
    while (late != NULL) {
        struct block *next = late->next;
        free_redispatch(late);
        late = next;
    }
    pthread_mutex_lock(&pool_lock);
    heap->next_free = pool_free;
    pool_free = heap;
    pthread_mutex_unlock(&pool_lock);
}

static void heap_thread_exit(void *value)
{
    struct heap *heap = value;
    if (heap == NULL || heap == &heap_empty)
        return;
    thread_heap = &heap_empty;
    heap_abandon(heap);
}

void heap_lock_all(void)
{
    pthread_mutex_lock(&pool_lock);
}

void heap_unlock_all(void)
{
    pthread_mutex_unlock(&pool_lock);
}

void heap_fork_child(void)
{
    pthread_mutex_init(&pool_lock, NULL);
}
