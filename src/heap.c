/* heap.c: thread heaps. Each thread allocates from its own heap without
 * locks: first from per-class bins (a bounded cache of free blocks, which is
 * all the inline paths touch), then from the pages behind them. Invariants:
 * a page is current, listed on its class's available list, or full
 * (neither); bins hold only blocks of pages this heap owns, counted in their
 * page's `used`; in checked mode bins have no room, so every call takes the
 * checked slow path. Heaps live in a pool and are never unmapped, so a late
 * remote free can always reach the heap it read from a segment. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "strata.h"

struct page page_empty;
struct heap heap_empty = {
    .current = {[0 ... CLASS_COUNT - 1] = &page_empty},
    .owner_word = OWNER_NONE,
};
STRATA_TLS struct heap *thread_heap = &heap_empty;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap *pool_free;
static struct heap *live_heaps; /* heaps with a thread, for the purger and stats */
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
    purger_fork_child();
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
    purge_delay_ns = (uint64_t)strata_options.purge_delay_ms * 1000000u;
    sizeclass_init();
    if (pthread_key_create(&exit_key, heap_thread_exit) != 0)
        report_fatal("cannot create the thread-exit key", NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    stats_init();
    init_running_here = false;
    atomic_store_explicit(&init_state, 2, memory_order_release);
}

/* Initialise while the process has one thread, before main or when the
 * library is loaded: a fork can then never catch initialisation half done.
 * Calls that come earlier (other constructors) initialise on first use. */
__attribute__((constructor)) static void strata_init_at_load(void)
{
    strata_init();
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
            pthread_mutex_init(&heap->lock, NULL);
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
    for (size_t c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        heap->available[c] = NULL;
        size_t limit = BIN_BYTES / class_size[c];
        limit = limit < BIN_MIN_BLOCKS ? BIN_MIN_BLOCKS : limit > BIN_MAX_BLOCKS ? BIN_MAX_BLOCKS : limit;
        heap->bins[c] = (struct bin){NULL, 0, strata_options.check ? 0 : (uint32_t)limit};
    }
    heap->bins[CLASS_NONE] = (struct bin){NULL, 0, 0};
    heap->segments = NULL;
    heap->dirty_slices = 0;
    heap->unpublished = 0;
    heap->purge_epoch = os_now_ns();
    heap->next_free = NULL;
    heap->owner_word = (uintptr_t)heap | (strata_options.check ? OWNER_CHECK_TAG : 0);
    atomic_store_explicit(&heap->remote, NULL, memory_order_release);
    /* Live (visible to the purger and statistics) only once initialised. */
    pthread_mutex_lock(&pool_lock);
    heap->prev_live = NULL;
    heap->next_live = live_heaps;
    if (live_heaps)
        live_heaps->prev_live = heap;
    live_heaps = heap;
    pthread_mutex_unlock(&pool_lock);
    thread_heap = heap;
    pthread_setspecific(exit_key, heap);
    return heap;
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

void page_free_block(struct heap *heap, struct page *page, struct block *block)
{
    if (unlikely(!page->in_use))
        report_fatal("free of a block that is not allocated", block);
    struct block *head = page->free;
    if (unlikely(head == block))
        report_fatal("double free", block);
    block->next = head;
    page->free = block;
    page->used--; /* the caller accounts the bytes (stats_bytes_out), in batches */
    if (likely(head != NULL && page->used != 0))
        return;
    if (page == heap->current[page->class_index])
        return;
    if (page->used == 0) {
        if (page->listed)
            list_remove(heap, page);
        pthread_mutex_lock(&heap->lock);
        page_release(heap, page);
        pthread_mutex_unlock(&heap->lock);
    } else if (!page->listed) {
        list_push(heap, page);
    }
}

/* Makes current[class] a page with a free block; false when out of memory. */
static bool current_with_free(struct heap *heap, unsigned class_index)
{
    struct page *page = heap->current[class_index];
    if (page->free != NULL || page_extend(page))
        return true;
    if (atomic_load_explicit(&heap->remote, memory_order_relaxed) != NULL) {
        heap_collect_remote(heap);
        if (page->free != NULL)
            return true;
    }
    page = heap->available[class_index];
    if (page != NULL) {
        list_remove(heap, page);
    } else {
        pthread_mutex_lock(&heap->lock);
        heap_maybe_purge(heap);
        page = page_new(heap, class_index);
        pthread_mutex_unlock(&heap->lock);
        if (page == NULL)
            return false;
        /* Populate only for a class in steady use: a program that takes one
         * block of a big class would otherwise get four faulted in. */
        if (heap->current[class_index] == &page_empty)
            page->fresh = 0;
        page_extend(page);
    }
    heap->current[class_index] = page;
    return true;
}

static void *bin_refill(struct heap *heap, unsigned class_index);

void *heap_bin_refill(struct heap *heap, unsigned class_index)
{
    void *block = bin_refill(heap, class_index);
    purger_start_if_wanted();
    if (unlikely(block == NULL) && strata_options.limit_mb) {
        /* At the memory limit: give back what the caches hold, then retry. */
        strata_trim();
        block = bin_refill(heap, class_index);
    }
    if (unlikely(block == NULL))
        errno = ENOMEM;
    return block;
}

static void *bin_refill(struct heap *heap, unsigned class_index)
{
    if (!current_with_free(heap, class_index))
        return NULL;
    struct page *page = heap->current[class_index];
    struct block *first = block_pop(page);
    stats_bytes_out((long)page->block_size);
    if (unlikely(strata_options.check)) {
        if (class_size[class_index] >= 16)
            ((uintptr_t *)first)[1] = 0; /* clear the freed-block canary */
        return first;
    }
    /* Move the page's free blocks into the (empty) bin so the next calls
     * stay inline: all at once when they fit, the list's length being
     * capacity - used; else half a bin, walked. */
    struct bin *bin = &heap->bins[class_index];
    struct block *taken = page->free;
    uint32_t moved = page->capacity - page->used;
    if (taken == NULL)
        return first;
    if (moved <= bin->limit) {
        page->free = NULL;
    } else {
        struct block *last = taken;
        for (moved = 1; moved < bin->limit / 2; moved++)
            last = last->next;
        page->free = last->next;
        last->next = NULL;
    }
    bin->head = taken;
    bin->count = moved;
    page->used += moved;
    stats_bytes_out((long)page->block_size * (long)moved);
    return first;
}

/* Returns a list of blocks, each to its page. */
static void blocks_to_pages(struct heap *heap, struct block *block)
{
    while (block != NULL) {
        struct block *next = block->next;
        page_free_block(heap, page_of(segment_of(block), block), block);
        block = next;
    }
}

void heap_bin_flush(struct heap *heap, struct bin *bin)
{
    uint32_t keep = bin->limit / 2;
    struct block *block = bin->head;
    for (uint32_t i = 1; i < keep; i++)
        block = block->next;
    struct block *rest = keep ? block->next : block;
    if (keep)
        block->next = NULL;
    else
        bin->head = NULL;
    size_t class_index = (size_t)(bin - heap->bins);
    long returned = class_index < CLASS_COUNT ? (long)(bin->count - keep) * (long)class_size[class_index] : 0;
    bin->count = keep;
    blocks_to_pages(heap, rest);
    stats_bytes_out(-returned);
    purger_start_if_wanted();
}

static void bins_flush_all(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct block *block = heap->bins[c].head;
        stats_bytes_out(-(long)heap->bins[c].count * (long)class_size[c]);
        heap->bins[c].head = NULL;
        heap->bins[c].count = 0;
        blocks_to_pages(heap, block);
    }
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
    struct bin *bin = &heap->bins[class_index];
    struct block *block = bin->head;
    if (block != NULL) {
        bin->head = block->next;
        bin->count--;
        return block;
    }
    return heap_bin_refill(heap, class_index);
}

void *heap_alloc_slow(struct heap *heap, size_t size)
{
    if (unlikely(size > SMALL_MAX))
        return large_alloc(size, 0);
    if (unlikely(heap == &heap_empty))
        return heap_alloc_class(size_class(size));
    return heap_bin_refill(heap, size_class(size));
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
    /* Out of the live list first, then wait for a purger or statistics
     * call that may hold the lock: from here on only this thread looks. */
    pthread_mutex_lock(&pool_lock);
    if (heap->prev_live)
        heap->prev_live->next_live = heap->next_live;
    else
        live_heaps = heap->next_live;
    if (heap->next_live)
        heap->next_live->prev_live = heap->prev_live;
    pthread_mutex_unlock(&pool_lock);
    pthread_mutex_lock(&heap->lock);
    pthread_mutex_unlock(&heap->lock);
    bins_flush_all(heap);
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
    heap_segments_abandon(heap);
    stats_heap_retire(heap);
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
    /* fork_prepare held pool_lock, so no purger held a heap's lock; a
     * thread of the parent may have held its own, and is gone. */
    pthread_mutex_init(&pool_lock, NULL);
    for (struct heap *h = live_heaps; h != NULL; h = h->next_live)
        pthread_mutex_init(&h->lock, NULL);
}

void heap_for_each_live(void (*fn)(struct heap *, void *), void *arg, bool try_only)
{
    pthread_mutex_lock(&pool_lock);
    for (struct heap *h = live_heaps; h != NULL; h = h->next_live) {
        if (try_only) {
            if (pthread_mutex_trylock(&h->lock) != 0)
                continue;
        } else {
            pthread_mutex_lock(&h->lock);
        }
        fn(h, arg);
        pthread_mutex_unlock(&h->lock);
    }
    pthread_mutex_unlock(&pool_lock);
}

void heap_trim_own(void)
{
    struct heap *heap = thread_heap;
    if (heap == &heap_empty)
        return;
    bins_flush_all(heap);
    heap_collect_remote(heap);
    pthread_mutex_lock(&heap->lock);
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct page *page = heap->current[c];
        if (page->in_use && page->used == 0) {
            heap->current[c] = &page_empty;
            page_release(heap, page);
        }
    }
    heap_purge_dirty(heap);
    pthread_mutex_unlock(&heap->lock);
}

/* ---- invariant checker (tests and checked builds) ----------------------- */
static size_t list_length(const struct block *block, size_t bound)
{
    size_t n = 0;
    for (; block != NULL && n <= bound; block = block->next)
        n++;
    return n;
}

static bool page_contains(const struct page *page, const void *p)
{
    size_t offset = (size_t)((const char *)p - page->start);
    return (const char *)p >= page->start && offset % page->block_size == 0 &&
           offset / page->block_size < page->capacity;
}

static size_t heap_check_locked(const struct heap *heap);

size_t heap_check(struct heap *heap)
{
    /* The purger may be purging this heap's segments: hold it off. */
    pthread_mutex_lock(&heap->lock);
    size_t problems = heap_check_locked(heap);
    pthread_mutex_unlock(&heap->lock);
    return problems;
}

static size_t heap_check_locked(const struct heap *heap)
{
    size_t problems = 0;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        const struct bin *bin = &heap->bins[c];
        problems += list_length(bin->head, bin->limit + 1) != bin->count;
        problems += bin->count > bin->limit;
        for (const struct block *b = bin->head; b != NULL; b = b->next) {
            const struct segment *segment = segment_of(b);
            const struct page *page = page_of((struct segment *)segment, b);
            problems += atomic_load(&segment->owner) != heap->owner_word;
            problems += !page->in_use || page->class_index != c || !page_contains(page, b);
        }
        for (const struct page *page = heap->available[c]; page != NULL; page = page->next)
            problems += !page->listed || page->class_index != c || page->free == NULL;
    }
    for (const struct segment *s = heap->segments; s != NULL; s = s->next) {
        problems += atomic_load(&s->owner) != heap->owner_word;
        problems += (s->dirty_mask & ~s->free_mask) != 0 || (s->free_mask & 1) != 0;
        problems += (s->aging_mask & ~s->dirty_mask) != 0;
        uint64_t covered = 0;
        unsigned in_use = 0;
        for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
            const struct page *page = &s->pages[i];
            if (!page->in_use)
                continue;
            in_use++;
            uint64_t run = (((uint64_t)1 << page->slice_count) - 1) << i;
            problems += (covered & run) != 0 || (s->free_mask & run) != 0;
            covered |= run;
            for (unsigned k = i; k < i + page->slice_count; k++)
                problems += s->page_of_slice[k] != i || s->class_of_slice[k] != page->class_index;
            problems += page->used > page->capacity || page->capacity > page->reserved;
            problems += list_length(page->free, page->capacity) != page->capacity - page->used;
            for (const struct block *b = page->free; b != NULL; b = b->next)
                problems += !page_contains(page, b);
        }
        problems += (covered | s->free_mask | 1) != ~(uint64_t)0;
        for (unsigned k = 1; k < SLICES_PER_SEGMENT; k++)
            if ((s->free_mask >> k) & 1)
                problems += s->page_of_slice[k] != 0 || s->class_of_slice[k] != CLASS_NONE;
        problems += in_use != s->pages_in_use;
    }
    return problems;
}
