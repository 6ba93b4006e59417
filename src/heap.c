/* heap.c: thread heaps. Each thread allocates from its own heap without
 * locks: first from per-class bins (a bounded cache of free blocks, which is
 * all the inline paths touch), then from the pages behind them. Also the
 * heap's purge policy, the remote frees between heaps and thread exit.
 * Invariants (heap_check): a page is current, listed on its class's
 * available list, or full (neither); bins hold blocks of the heap's own
 * pages and small blocks of other heaps freed by this thread, each counted
 * in its page's `used` (a page's class and carving do not change while one
 * of its blocks is out, so other heaps' blocks are safe to hold); in
 * checked mode bins have no room, so every call takes the checked slow
 * path. Heaps live in a pool and are never unmapped, so a late remote free
 * can always reach the heap it read from a segment, and the list of every
 * heap can be walked unlocked. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "checkers.h"
#include "core.h"

struct page page_empty;
struct heap heap_empty = {
    .current = {[0 ... CLASS_COUNT - 1] = &page_empty},
    .owner_word = OWNER_NONE,
};
STRATA_TLS struct heap *thread_heap = &heap_empty;

/* The pool: heaps of exited threads, and heaps never used yet. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap *pool_free;
/* Heaps of exited threads kept whole (segments, resident free slices,
 * pages), newest first, for the next thread to take (pool lock). */
static struct heap *pool_parked;
/* Every heap ever made, newest first; pushed once (under the pool lock),
 * never unlinked, walked without a lock. */
static _Atomic(struct heap *) all_heaps;
static pthread_key_t exit_key;
_Atomic int purger_request = PURGER_IDLE;

static void purger_ask(void)
{
    int idle = PURGER_IDLE;
    if (atomic_load_explicit(&purger_request, memory_order_relaxed) == PURGER_IDLE)
        atomic_compare_exchange_strong(&purger_request, &idle, PURGER_REQUESTED);
}

/* Heaps are carved from mappings of this size, a cache line apart. */
#define HEAP_POOL_CHUNK ((size_t)64 * 1024)
/* A program's first two threads' heaps share one mapping, in the secure
 * flavour too (its quarantine ring is most of a heap). */
_Static_assert(2 * ((sizeof(struct heap) + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1)) <= HEAP_POOL_CHUNK,
               "a heap-pool chunk holds two heaps");

void heap_threads_init(void (*on_thread_exit)(void *))
{
    if (pthread_key_create(&exit_key, on_thread_exit) != 0)
        report_fatal("cannot create the thread-exit key", NULL);
}

/* Maps a chunk of heaps (outside the pool lock) and adds them to the pool. */
static bool pool_grow(void)
{
    size_t size = (sizeof(struct heap) + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    char *chunk = os_map(HEAP_POOL_CHUNK);
    if (chunk == NULL)
        return false;
    struct heap *first = NULL, *last = NULL;
    for (size_t at = 0; at + size <= HEAP_POOL_CHUNK; at += size) {
        struct heap *heap = (struct heap *)(chunk + at);
        pthread_mutex_init(&heap->lock, NULL);
        heap->next_free = first;
        if (first == NULL)
            last = heap;
        first = heap;
    }
    /* Onto the list of every heap under the pool lock, so that the list
     * fork_prepare locks (holding the pool lock) is the one it unlocks. */
    pthread_mutex_lock(&pool_lock);
    for (struct heap *heap = first; heap != NULL; heap = heap->next_free) {
        atomic_store_explicit(&heap->next_all, atomic_load_explicit(&all_heaps, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&all_heaps, heap, memory_order_release);
    }
    last->next_free = pool_free;
    pool_free = first;
    pthread_mutex_unlock(&pool_lock);
    return true;
}

static struct heap *heap_from_pool(void)
{
    for (;;) {
        pthread_mutex_lock(&pool_lock);
        struct heap *heap = pool_free;
        if (heap != NULL)
            pool_free = heap->next_free;
        pthread_mutex_unlock(&pool_lock);
        if (heap != NULL || !pool_grow())
            return heap;
    }
}

/* A bin's limit before it grows (layout.h, BIN_BYTES). */
static uint32_t bin_base_limit(unsigned class_index)
{
    size_t limit = BIN_BYTES / class_size[class_index];
    return (uint32_t)(limit < BIN_MIN_BLOCKS ? BIN_MIN_BLOCKS : limit > BIN_BASE_MAX_BLOCKS ? BIN_BASE_MAX_BLOCKS : limit);
}

/* The newest parked heap, now the calling thread's: its segments, pages and
 * resident free slices serve the thread from its first allocation. */
static struct heap *heap_unpark(void)
{
    pthread_mutex_lock(&pool_lock);
    struct heap *heap = pool_parked;
    if (heap != NULL)
        pool_parked = heap->next_free;
    pthread_mutex_unlock(&pool_lock);
    if (heap == NULL)
        return NULL;
    pthread_mutex_lock(&heap->lock);
    strata_assert(heap->live && heap->parked_at != 0);
    heap->parked_at = 0;
    heap->next_free = NULL;
    pthread_mutex_unlock(&heap->lock);
    return heap;
}

static void heap_own(struct heap *heap)
{
    counters_thread_begin();
    thread_heap = heap;
    pthread_setspecific(exit_key, heap);
}

struct heap *heap_acquire(void)
{
    strata_assert(thread_heap == &heap_empty);
    strata_assert_cmp(class_size[CLASS_COUNT - 1], ==, SMALL_MAX); /* configured */
    struct heap *heap = heap_unpark();
    if (heap != NULL) {
        heap_own(heap);
        heap_collect_remote(heap); /* what other threads freed meanwhile */
        return heap;
    }
    heap = heap_from_pool();
    if (heap == NULL)
        return NULL;
    strata_assert(!heap->live);
    for (size_t c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        heap->available[c] = NULL;
        heap->bins[c] = (struct bin){NULL, 0, strata_options.check ? 0 : bin_base_limit(c)};
        heap->bin_use[c] = 0;
    }
    heap->bin_growth = 0;
    heap->bin_events = 0;
    heap->bins_aged_at = os_now_ns();
    heap->segments = NULL;
    heap->dirty_slices = 0;
    heap->refills = 0;
    heap->purge_epoch = os_now_ns();
    heap->next_free = NULL;
    heap->owner_word = (uintptr_t)heap | (strata_options.check ? OWNER_CHECK_TAG : 0);
    atomic_store_explicit(&heap->remote, NULL, memory_order_release);
    /* Live (visible to the purger and statistics) only once initialised. */
    pthread_mutex_lock(&heap->lock);
    heap->live = true;
    heap->parked_at = 0;
    pthread_mutex_unlock(&heap->lock);
    if (strata_options.purger_at_start)
        purger_ask();
    heap_own(heap);
    return heap;
}

static void list_remove(struct heap *heap, struct page *page)
{
    strata_assert(page->listed && page->in_use);
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
    strata_assert(!page->listed && page->in_use && page->free != NULL);
    struct page **head = &heap->available[page->class_index];
    page->prev = NULL;
    page->next = *head;
    if (*head)
        (*head)->prev = page;
    *head = page;
    page->listed = 1;
}

/* An emptied page goes back to its segment, and the purge policy runs. */
static STRATA_NOINLINE void page_give_back(struct heap *heap, struct page *page)
{
    pthread_mutex_lock(&heap->lock);
    page_release(heap, page);
    heap_maybe_purge(heap);
    pthread_mutex_unlock(&heap->lock);
}

void page_free_block(struct heap *heap, struct page *page, struct block *block)
{
    if (unlikely(!page->in_use))
        report_fatal("free of a block that is not allocated", block);
    if (unlikely(page->class_index == CLASS_MEDIUM)) { /* its one block */
        strata_assert_cmp(page->used, ==, 1);
        counter_set(&page->used, 0);
        page_give_back(heap, page);
        return;
    }
    strata_assert_cmp(page->used, >, 0);
    struct block *head = page->free;
    if (unlikely(head == block))
        report_fatal("double free", block);
    block_set_next(block, head);
    page->free = block;
    counter_set(&page->used, page->used - 1); /* the caller accounts the bytes (counters_bytes_out), in batches */
    if (likely(head != NULL && page->used != 0))
        return;
    if (page == heap->current[page->class_index])
        return;
    if (page->used == 0) {
        if (page->listed)
            list_remove(heap, page);
        page_give_back(heap, page);
    } else if (!page->listed) {
        list_push(heap, page);
    }
}

/* An adopted segment's pages join the heap: each with free blocks (carved
 * further if need be) on its class's list, the full ones where they are. A
 * walk of its free lists, once per adoption. */
static void heap_adopt_pages(struct heap *heap, struct segment *segment)
{
    for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
        struct page *page = &segment->pages[i];
        if (!page->in_use)
            continue;
        strata_assert(!page->listed && page->used > 0);
        if (page->free == NULL)
            page_extend(page);
        if (page->free != NULL)
            list_push(heap, page);
    }
}

/* A page of the class for current[class] (heap lock held): from the heap's
 * free slices, then from segments of exited threads, adopted, and only then
 * from a new segment. NULL when a listed page (of an adopted segment) is to
 * be used instead, or when no memory is to be had. */
static struct page *page_for_class(struct heap *heap, unsigned class_index)
{
    struct page *page = page_new(heap, class_index, false);
    while (page == NULL) {
        struct segment *adopted = abandoned_adopt(heap);
        if (adopted == NULL)
            return page_new(heap, class_index, true);
        heap_adopt_pages(heap, adopted);
        if (heap->available[class_index] != NULL)
            return NULL;
        page = page_new(heap, class_index, false);
    }
    return page;
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
    if (page == NULL) {
        pthread_mutex_lock(&heap->lock);
        heap_maybe_purge(heap);
        page = page_for_class(heap, class_index);
        pthread_mutex_unlock(&heap->lock);
        if (page != NULL) {
            strata_assert(page->class_index == class_index && page->in_use && page->capacity == 0);
            page_extend(page);
        } else {
            page = heap->available[class_index];
            if (page == NULL)
                return false;
        }
    }
    if (page->listed)
        list_remove(heap, page);
    strata_assert(page->free != NULL && page->class_index == class_index);
    heap->current[class_index] = page;
    return true;
}

static inline void *block_pop(struct page *page)
{
    struct block *block = page->free;
    page->free = block_next(block);
    block_take(block);
    counter_set(&page->used, page->used + 1);
    return block;
}

/* ---- bins that adapt (layout.h, BIN_BYTES) ---------------------------- */
/* Records a refill or a flush of the class. A refill after a flush grows
 * the bin by half, the budget allowing: the class swings between the bin
 * and its pages. (A flush never grows it instead of flushing: the flush's
 * walk is what finds a block freed twice while in the bin.) */
static void bin_note(struct heap *heap, unsigned class_index, unsigned event)
{
    unsigned use = heap->bin_use[class_index];
    heap->bin_use[class_index] = (uint8_t)(event | BIN_ACTIVE);
    heap->bin_events++;
    if (event != BIN_REFILLED || !(use & BIN_FLUSHED) || strata_options.check)
        return;
    struct bin *bin = &heap->bins[class_index];
    uint32_t grow = bin->limit / 2;
    if (grow > BIN_MAX_BLOCKS - bin->limit)
        grow = BIN_MAX_BLOCKS - bin->limit;
    size_t bytes = (size_t)grow * class_size[class_index];
    if (grow == 0 || heap->bin_growth + bytes > HEAP_BIN_GROWTH_BYTES)
        return;
    bin->limit += grow;
    heap->bin_growth += bytes;
}

static void bin_trim(struct heap *heap, struct bin *bin, uint32_t keep);

/* Every BIN_AGE_EVERY refills and flushes, and a purge delay at least since
 * the last time: each class that was not refilled or flushed since then
 * shrinks its bin by half (not below its base), its excess blocks going back
 * to their pages. */
static void bins_age(struct heap *heap)
{
    if (heap->bin_events < BIN_AGE_EVERY)
        return;
    heap->bin_events = 0;
    uint64_t now = os_now_ns();
    if (now - heap->bins_aged_at < strata_options.purge_delay_ns)
        return;
    heap->bins_aged_at = now;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        unsigned use = heap->bin_use[c];
        heap->bin_use[c] = (uint8_t)(use & ~BIN_ACTIVE);
        struct bin *bin = &heap->bins[c];
        uint32_t base = bin_base_limit(c);
        if ((use & BIN_ACTIVE) || bin->limit <= base)
            continue;
        uint32_t limit = bin->limit / 2 < base ? base : bin->limit / 2;
        heap->bin_growth -= (size_t)(bin->limit - limit) * class_size[c];
        bin->limit = limit;
        if (bin->count > limit)
            bin_trim(heap, bin, limit);
    }
}

void *heap_bin_refill(struct heap *heap, unsigned class_index)
{
    strata_assert(heap->bins[class_index].head == NULL);
    bin_note(heap, class_index, BIN_REFILLED);
    if (!current_with_free(heap, class_index))
        return NULL;
    struct page *page = heap->current[class_index];
    struct block *first = block_pop(page);
    counters_bytes_out((long)page->block_size);
    if (unlikely(strata_options.check))
        return first;
    /* Move the page's free blocks into the (empty) bin so the next calls
     * stay inline: all at once when they fit, the list's length being
     * capacity - used; else half a bin, walked. */
    struct bin *bin = &heap->bins[class_index];
    struct block *taken = page->free;
    uint32_t moved = page->capacity - page->used;
    if (taken == NULL)
        return first;
    strata_assert_cmp(page->used, <=, page->capacity);
    if (moved <= bin->limit) {
        page->free = NULL;
    } else {
        struct block *last = taken;
        for (moved = 1; moved < bin->limit / 2; moved++)
            last = block_next(last);
        page->free = block_next(last);
        block_set_next(last, NULL);
    }
    strata_assert_cmp(moved, <=, bin->limit);
    bin->head = taken;
    counter_set(&bin->count, moved);
    counter_set(&page->used, page->used + moved);
    counters_bytes_out((long)page->block_size * (long)moved);
    bins_age(heap);
    if (STRATA_DEBUG_BUILD)
        heap_debug_refill(heap, class_index);
    return first;
}

/* Takes `count` blocks of a bin's list, from `block` on, into `taken`.
 * Taking one twice (a block freed again while still in the bin loops the
 * list) is reported, and so is a list that ends early or runs on, before
 * any page counts one back. */
static void blocks_take(struct block *block, uint32_t count, struct block **taken)
{
    strata_assert_cmp(count, <=, BIN_MAX_BLOCKS + 1);
    for (uint32_t i = 0; i < count; i++) {
        if (unlikely(block == NULL))
            report_fatal("double free or write after free (a thread cache lost count)",
                         i ? taken[i - 1] : NULL);
        struct block *next = block_next(block); /* reports a block taken twice */
        block_take(block);
        taken[i] = block;
        block = next;
    }
    if (unlikely(block != NULL))
        report_fatal("double free or write after free (a thread cache's list runs on)", block);
}

static void free_to_owner(struct page *page, struct block *block, bool may_cache);

/* Blocks taken from a bin go back to their pages: the heap's own here,
 * other heaps' to their owners. Returns how many were the heap's. */
static uint32_t blocks_to_pages(struct heap *heap, struct block **taken, uint32_t count)
{
    uint32_t own = 0;
    for (uint32_t i = 0; i < count; i++) {
        struct segment *segment = segment_of(taken[i]);
        struct page *page = page_of(segment, taken[i]);
        if (atomic_load_explicit(&segment->owner, memory_order_relaxed) == heap->owner_word) {
            page_free_block(heap, page, taken[i]);
            own++;
        } else {
            free_to_owner(page, taken[i], false);
        }
    }
    return own;
}

void heap_bin_flush(struct heap *heap, struct bin *bin)
{
    strata_assert_cmp(bin->count, >, bin->limit);
    bin_note(heap, (unsigned)(bin - heap->bins), BIN_FLUSHED);
    bin_trim(heap, bin, bin->limit / 2);
    bins_age(heap);
}

/* Leaves `keep` blocks in the bin, the rest going back to their pages. */
static void bin_trim(struct heap *heap, struct bin *bin, uint32_t keep)
{
    strata_assert_cmp(keep, <, bin->count);
    struct block *cut = bin->head;
    for (uint32_t i = 1; i < keep; i++)
        cut = block_next(cut);
    struct block *rest = keep ? block_next(cut) : cut;
    uint32_t moved = bin->count - keep;
    /* The rest is taken before the list is cut after `cut`: a loop in the
     * list then shows in the rest, whichever blocks it goes through. */
    struct block *taken[BIN_MAX_BLOCKS + 1];
    blocks_take(rest, moved, taken);
    if (keep)
        block_set_next(cut, NULL);
    else
        bin->head = NULL;
    counter_set(&bin->count, keep);
    uint32_t own = blocks_to_pages(heap, taken, moved);
    counters_bytes_out(-(long)own * (long)class_size[bin - heap->bins]);
}

static void bins_flush_all(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct block *block = heap->bins[c].head;
        uint32_t count = heap->bins[c].count;
        counters_bytes_out(-(long)count * (long)class_size[c]);
        heap->bins[c].head = NULL;
        heap->bins[c].count = 0;
        struct block *taken[BIN_MAX_BLOCKS + 1];
        blocks_take(block, count, taken);
        blocks_to_pages(heap, taken, count);
    }
}

/* ---- medium blocks (layout.h, CLASS_MEDIUM) ------------------------------ */
void *heap_medium_alloc(struct heap *heap, size_t size, bool zero)
{
    pthread_mutex_lock(&heap->lock);
    heap_maybe_purge(heap);
    struct page *page = page_new_medium(heap, size);
    pthread_mutex_unlock(&heap->lock);
    if (page == NULL)
        return NULL;
    counters_bytes_out((long)page->block_size);
    /* The slices may hold an old block's free-block words (resident ones, or
     * purged ones whose purge failed), which a free would take for a double
     * free: they are cleared as block_take clears a small block's, and a
     * zeroed block is always written. */
    if (zero)
        memset(page->start, 0, size);
    else
        block_take((struct block *)page->start);
    return page->start;
}

bool heap_medium_grow(void *block, size_t size)
{
    struct heap *heap = thread_heap;
    struct segment *segment = segment_of(block);
    struct page *page = page_of(segment, block);
    if (atomic_load_explicit(&segment->owner, memory_order_relaxed) != heap->owner_word ||
        page->class_index != CLASS_MEDIUM || size > MEDIUM_MAX)
        return false;
    size_t old_size = page->block_size;
    pthread_mutex_lock(&heap->lock);
    bool grown = page_grow_medium(heap, page, size);
    pthread_mutex_unlock(&heap->lock);
    if (grown)
        counters_bytes_out((long)page->block_size - (long)old_size);
    return grown;
}

/* ---- frees from any thread ------------------------------------------------ */
/* Keeps another live heap's small block in the calling heap's bin of its
 * class, where it stays counted as used in its page: the caller hands it
 * out again while it is warm in its cache, or gives it to its owner when
 * the bin overflows. False, doing nothing, when the bin may not keep it:
 * the caller's own block, an exited thread's, a medium block, checked mode
 * (no room in bins), or a block the owner may not have carved yet. */
static bool bin_keep_foreign(struct heap *self, struct page *page, struct block *block, uintptr_t owner)
{
    unsigned class_index = page->class_index;
    if (owner == self->owner_word || owner == OWNER_ABANDONED || class_index >= CLASS_COUNT ||
        self->bins[class_index].limit == 0 || !page_surely_carved(page, block))
        return false;
    struct bin *bin = &self->bins[class_index];
    if (unlikely(block == bin->head))
        report_fatal("double free", block);
    if (bin_link(bin, block))
        heap_bin_flush(self, bin);
    return true;
}

/* A validated block that is not free, to whichever heap is to have it:
 * the caller's own page, the caller's bin (when `may_cache`, as
 * bin_keep_foreign says), the owner's remote list, or an exited thread's
 * abandoned segment. */
static void free_to_owner(struct page *page, struct block *block, bool may_cache)
{
    struct segment *segment = segment_of(block);
    struct heap *self = thread_heap;
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    for (;;) {
        if (owner == self->owner_word) { /* checked mode's local free, or a bad one */
            if (unlikely(!page_carved(page, block)))
                report_fatal("free of a block that was never allocated", block);
            /* Read before the free: it may release the page and its segment. */
            long size = (long)page->block_size;
            page_free_block(self, page, block);
            counters_bytes_out(-size);
            return;
        }
        if (owner == OWNER_ABANDONED) {
            if (abandoned_free_block(page, block))
                return;
            owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
            continue;
        }
        if (may_cache && bin_keep_foreign(self, page, block, owner))
            return;
        struct heap *heap = (struct heap *)(owner & ~OWNER_CHECK_TAG);
        struct block *old = atomic_load_explicit(&heap->remote, memory_order_relaxed);
        do {
            if (old == REMOTE_CLOSED)
                break;
            if (unlikely(old == block)) /* the same thread's last remote free */
                report_fatal("double free", block);
            block_set_next_tagged(block, old, BLOCK_REMOTE);
        } while (!atomic_compare_exchange_weak_explicit(&heap->remote, &old, block,
                                                        memory_order_release,
                                                        memory_order_relaxed));
        if (old != REMOTE_CLOSED)
            return;
        /* The owner is exiting: its segments are marked abandoned before its
         * list closes, so the owner word has changed by now. */
        owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    }
}

void heap_free_block(struct page *page, struct block *block)
{
    /* Another live heap's small block, freed by a thread with a bin for
     * it: cached without a read of the block, which the program left cold
     * in another core's cache (the read was a quarter of a server's time,
     * stalled on it). A second free of it is found as the owner's own
     * inline free finds one: at once when it is the bin's newest, else by
     * the allocation or flush that meets it the second time, its check
     * word cleared by the first hand-out (layout.h, struct block). */
    uintptr_t owner = atomic_load_explicit(&segment_of(block)->owner, memory_order_relaxed);
    if (likely(bin_keep_foreign(thread_heap, page, block, owner)))
        return;
    /* Free already: on a list of its owner (a bin, a page, the remote
     * list), in another heap's bin, or on an exited thread's segment. */
    if (unlikely(block_is_free(block)))
        report_fatal("double free", block);
    free_to_owner(page, block, true);
}

void heap_collect_remote(struct heap *heap)
{
    struct block *list = atomic_exchange_explicit(&heap->remote, NULL, memory_order_acquire);
    strata_assert(list != REMOTE_CLOSED);
    long returned = 0;
    while (list != NULL) {
        struct block *next = block_next_tagged(list, BLOCK_REMOTE);
        struct segment *segment = segment_of(list);
        struct page *page = page_of(segment, list);
        if (atomic_load_explicit(&segment->owner, memory_order_relaxed) == heap->owner_word) {
            /* Only the owner knows how far its page is carved. */
            if (unlikely(!page_carved(page, list)))
                report_fatal("free of a block that was never allocated", list);
            returned += (long)page->block_size;
            page_free_block(heap, page, list);
        } else {
            block_take(list); /* it leaves this list to be freed again elsewhere */
            heap_free_block(page, list); /* a stale push into a recycled heap */
        }
        list = next;
    }
    counters_bytes_out(-returned);
}

/* ---- purge policy ---------------------------------------------------------- */
void heap_purge_dirty(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next)
        segment_purge_dirty(s);
    heap->dirty_slices = 0;
    heap_release_empty_segments(heap);
}

/* Purges the slices that have stayed free since the last check: a two-step
 * generation, aging_mask marking what was dirty then. */
static void heap_purge_aged(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        uint64_t aged = s->dirty_mask & s->aging_mask;
        if (aged) {
            purge_slices(s, aged);
            s->dirty_mask &= ~aged;
            strata_assert_cmp(heap->dirty_slices, >=, (size_t)__builtin_popcountll(aged));
            heap->dirty_slices -= (size_t)__builtin_popcountll(aged);
        }
        s->aging_mask = s->dirty_mask;
    }
    heap_release_empty_segments(heap);
}

void heap_maybe_purge(struct heap *heap)
{
    if (heap->dirty_slices == 0)
        return;
    if (heap->dirty_slices >= PURGER_WANTED_SLICES &&
        strata_options.background_purge == BACKGROUND_PURGE_AUTO)
        purger_ask();
    uint64_t delay = strata_options.purge_delay_ns;
    if (heap->dirty_slices > HEAP_DIRTY_LIMIT || delay == 0) {
        heap_purge_dirty(heap);
        return;
    }
    uint64_t now = os_now_ns();
    if (now - heap->purge_epoch < delay)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}

void heap_purge_idle(struct heap *heap, void *unused)
{
    (void)unused;
    /* A heap whose owner checked lately purges itself: leave it alone, so
     * the purger's madvise never interrupts a busy thread. */
    uint64_t now = os_now_ns();
    if (heap->dirty_slices == 0 || now - heap->purge_epoch < 2 * strata_options.purge_delay_ns)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}


/* ---- thread exit ------------------------------------------------------------ */
/* A thread's exit parks its heap whole: bins flushed and remote frees
 * collected, so that what it holds is counted in its pages, but its
 * segments, pages and resident free slices kept for the next thread to
 * start (heap_unpark), which then faults in nothing and maps nothing.
 * Other threads' frees of its blocks push onto its remote list meanwhile,
 * as to a running owner's. One that stays parked for the purge delay is
 * retired by the purger (heap_retire_parked), as if its thread had just
 * exited without parking: its empty segments go back to the OS and the
 * others to the abandoned list. Without a purger thread to do that
 * (STRATA_BACKGROUND_PURGE=0) or with a purge delay of 0, exit retires the
 * heap at once. */

/* The current pages with no block in use go back to their segments. */
static void current_release_empty(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct page *page = heap->current[c];
        if (page->in_use && page->used == 0) {
            heap->current[c] = &page_empty;
            page_release(heap, page);
        }
    }
}

/* Gives up a heap no thread owns (a parked one, or the exiting thread's):
 * its segments leave it, and it goes back to the pool empty. */
static void heap_abandon(struct heap *heap)
{
    strata_assert(heap->live);
    /* Not live first, waiting for a purger or statistics call that may hold
     * the lock: from here on only this thread looks. */
    pthread_mutex_lock(&heap->lock);
    heap->live = false;
    pthread_mutex_unlock(&heap->lock);
    if (STRATA_DEBUG_BUILD) {
        const char *broken = heap_check(heap);
        if (broken != NULL)
            report_assert(__FILE__, __LINE__, "heap_check as a heap is given up", "%s", broken);
    }
    bins_flush_all(heap);
    heap_collect_remote(heap);
    current_release_empty(heap);
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        for (struct page *page = heap->available[c]; page != NULL; page = page->next)
            page->listed = 0;
        heap->available[c] = NULL;
    }
    heap_segments_abandon(heap);
    strata_assert(heap->segments == NULL && heap->dirty_slices == 0);
    /* From here every free of this heap's blocks takes the abandoned path;
     * closing the list sends late remote frees there too. */
    struct block *late = atomic_exchange_explicit(&heap->remote, REMOTE_CLOSED, memory_order_acq_rel);
    while (late != NULL) {
        struct block *next = block_next_tagged(late, BLOCK_REMOTE);
        block_take(late);
        heap_free_block(page_of(segment_of(late), late), late);
        late = next;
    }
    pthread_mutex_lock(&pool_lock);
    heap->next_free = pool_free;
    pool_free = heap;
    pthread_mutex_unlock(&pool_lock);
}

static void heap_park(struct heap *heap)
{
    if (STRATA_DEBUG_BUILD) {
        const char *broken = heap_check(heap);
        if (broken != NULL)
            report_assert(__FILE__, __LINE__, "heap_check at thread exit", "%s", broken);
    }
    bins_flush_all(heap);
    heap_collect_remote(heap);
    pthread_mutex_lock(&heap->lock);
    current_release_empty(heap);
    if (heap->dirty_slices > PARK_DIRTY_SLICES)
        heap_purge_dirty(heap);
    heap->parked_at = os_now_ns();
    pthread_mutex_unlock(&heap->lock);
    pthread_mutex_lock(&pool_lock);
    heap->next_free = pool_parked;
    pool_parked = heap;
    pthread_mutex_unlock(&pool_lock);
}

bool heap_thread_exit(struct heap *heap)
{
    if (heap == NULL || heap == &heap_empty)
        return false;
    thread_heap = &heap_empty;
    bool park = strata_options.purge_delay_ns != 0 &&
                strata_options.background_purge != BACKGROUND_PURGE_NEVER;
    if (park)
        heap_park(heap);
    else
        heap_abandon(heap);
    counters_thread_end();
    if (park) /* the purger retires it if no thread comes for it */
        purger_ask();
    return park;
}

/* Heaps taken off the parked list and being given up (pool lock): a trim
 * waits for them, so that it returns with their memory back. */
static unsigned retiring;

void heap_retire_parked(bool all)
{
    uint64_t now = os_now_ns();
    struct heap *retired = NULL;
    unsigned count = 0;
    pthread_mutex_lock(&pool_lock);
    for (struct heap **at = &pool_parked; *at != NULL;) {
        struct heap *heap = *at;
        if (all || now - heap->parked_at >= strata_options.purge_delay_ns) {
            *at = heap->next_free;
            heap->next_free = retired;
            retired = heap;
            count++;
        } else {
            at = &heap->next_free;
        }
    }
    retiring += count;
    pthread_mutex_unlock(&pool_lock);
    while (retired != NULL) {
        struct heap *next = retired->next_free;
        heap_abandon(retired);
        retired = next;
    }
    pthread_mutex_lock(&pool_lock);
    retiring -= count;
    pthread_mutex_unlock(&pool_lock);
    /* The purger may be giving some up right now. */
    for (bool busy = all; busy;) {
        pthread_mutex_lock(&pool_lock);
        busy = retiring != 0;
        pthread_mutex_unlock(&pool_lock);
        if (busy)
            os_yield();
    }
}

/* ---- walks, fork, trim -------------------------------------------------------- */
static struct heap *heap_first(void)
{
    return atomic_load_explicit(&all_heaps, memory_order_acquire);
}

static struct heap *heap_next(struct heap *heap)
{
    return atomic_load_explicit(&heap->next_all, memory_order_relaxed);
}

void heap_lock_all(void)
{
    /* No purger or statistics call is then inside a heap, and no owner is
     * between two slice-mask updates. */
    pthread_mutex_lock(&pool_lock);
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        pthread_mutex_lock(&h->lock);
}

void heap_unlock_all(void)
{
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        pthread_mutex_unlock(&h->lock);
    pthread_mutex_unlock(&pool_lock);
}

void heap_fork_child(void)
{
    /* The forking thread held every lock; the others' threads are gone,
     * the purger with any heap it was giving up (lost to the child). */
    pthread_mutex_init(&pool_lock, NULL);
    retiring = 0;
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        pthread_mutex_init(&h->lock, NULL);
}

void heap_for_each_live(void (*fn)(struct heap *, void *), void *arg, bool try_only)
{
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h)) {
        if (try_only) {
            if (pthread_mutex_trylock(&h->lock) != 0)
                continue;
        } else {
            pthread_mutex_lock(&h->lock);
        }
        if (h->live)
            fn(h, arg);
        pthread_mutex_unlock(&h->lock);
    }
}

void heap_trim_own(void)
{
    struct heap *heap = thread_heap;
    if (heap == &heap_empty)
        return;
    bins_flush_all(heap);
    heap_collect_remote(heap);
    pthread_mutex_lock(&heap->lock);
    current_release_empty(heap);
    heap_purge_dirty(heap);
    pthread_mutex_unlock(&heap->lock);
}

/* ---- invariant checker (tests and the debug build) ----------------------- */
static STRATA_TLS char heap_broken[224];

#define BROKEN(...) (snprintf(heap_broken, sizeof heap_broken, __VA_ARGS__), heap_broken)

/* The length of a free list, up to bound + 1; *broken names a block whose
 * words are not a free block's (the walk stops there). */
static size_t list_length(const struct block *block, size_t bound, const struct block **broken)
{
    size_t n = 0;
    *broken = NULL;
    for (; block != NULL && n <= bound; block = block_link(block)) {
        if (!block_is_free(block)) {
            *broken = block;
            break;
        }
        n++;
    }
    return n;
}

static bool page_contains(const struct page *page, const void *p)
{
    size_t offset = (size_t)((const char *)p - page->start);
    return (const char *)p >= page->start && offset % page->block_size == 0 &&
           offset / page->block_size < page->capacity;
}

/* The secure flavour: a free block's state says it is free (layout.h). */
static const char *free_state_check(const struct block *b, size_t slot)
{
    if (STRATA_SECURE_BUILD && *block_state(b, slot) != 0)
        return BROKEN("free block %p has the state %u of a block handed out", (const void *)b,
                      *block_state(b, slot));
    return NULL;
}

/* One page's counts and free list. */
static const char *page_check(const struct page *page)
{
    const char *broken;
    if (page->used > page->capacity || page->capacity > page->reserved)
        return BROKEN("page %p: used %u, capacity %u, reserved %u", (const void *)page, page->used,
                      page->capacity, page->reserved);
    const struct block *bad;
    size_t length = list_length(page->free, page->capacity, &bad);
    if (bad != NULL)
        return BROKEN("page %p: free list holds %p, whose words are not a free block's (written after free?)",
                      (const void *)page, (const void *)bad);
    if (length != page->capacity - page->used)
        return BROKEN("page %p: free list of %zu%s blocks, capacity - used is %u",
                      (const void *)page, length, length > page->capacity ? "+" : "",
                      page->capacity - page->used);
    for (const struct block *b = page->free; b != NULL; b = block_link(b)) {
        if (!page_contains(page, b))
            return BROKEN("page %p: free list holds %p, not one of its carved blocks",
                          (const void *)page, (const void *)b);
        if ((broken = free_state_check(b, page->block_size)) != NULL)
            return broken;
    }
    return NULL;
}

/* One bin: its count, limit and that every block is of a page of this heap
 * and class. */
static const char *bin_check(const struct heap *heap, unsigned c)
{
    const struct bin *bin = &heap->bins[c];
    const struct block *bad;
    size_t length = list_length(bin->head, (size_t)bin->limit + 1, &bad);
    if (bad != NULL)
        return BROKEN("bin of class %u holds %p, whose words are not a free block's (written after free?)",
                      c, (const void *)bad);
    if (length != bin->count || bin->count > bin->limit)
        return BROKEN("bin of class %u (%u bytes): %zu blocks listed, count %u, limit %u", c,
                      class_size[c], length, bin->count, bin->limit);
    for (const struct block *b = bin->head; b != NULL; b = block_link(b)) {
        const struct segment *segment = segment_of(b);
        const struct page *page = page_of((struct segment *)segment, b);
        bool own = atomic_load(&segment->owner) == heap->owner_word;
        /* Another heap's block (freed here) is in use in its page, whose
         * class and carving cannot change while it is out. */
        if (!page->in_use || page->class_index != c || !(own ? page_contains(page, b) : page_surely_carved(page, b)))
            return BROKEN("bin of class %u holds %p, not a carved block of a page of the class", c,
                          (const void *)b);
        const char *broken = free_state_check(b, class_size[c]);
        if (broken != NULL)
            return broken;
    }
    return NULL;
}

static const char *heap_check_locked(const struct heap *heap)
{
    const char *broken;
    size_t on_lists = 0, growth = 0;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        if ((broken = bin_check(heap, c)) != NULL)
            return broken;
        uint32_t base = strata_options.check ? 0 : bin_base_limit(c);
        if (heap->bins[c].limit < base || heap->bins[c].limit > BIN_MAX_BLOCKS)
            return BROKEN("bin of class %u: limit %u outside %u..%u", c, heap->bins[c].limit, base,
                          BIN_MAX_BLOCKS);
        growth += (size_t)(heap->bins[c].limit - base) * class_size[c];
        const struct page *current = heap->current[c];
        if (current != &page_empty && (!current->in_use || current->class_index != c))
            return BROKEN("current page of class %u (%p) is not in use for it", c,
                          (const void *)current);
        for (const struct page *page = heap->available[c]; page != NULL; page = page->next, on_lists++)
            if (!page->listed || page->class_index != c || page->free == NULL || page == current)
                return BROKEN("available page %p of class %u: listed %u, class %u, %s", (const void *)page,
                              c, page->listed, page->class_index,
                              page == current ? "also current" : page->free ? "has free blocks" : "no free block");
    }
    size_t dirty = 0, listed = 0;
    for (const struct segment *s = heap->segments; s != NULL; s = s->next) {
        if ((broken = segment_check(s, heap->owner_word)) != NULL)
            return broken;
        for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
            const struct page *page = &s->pages[i];
            if (!page->in_use)
                continue;
            if ((broken = page_check(page)) != NULL)
                return broken;
            listed += page->listed;
            /* Neither current nor listed: full, every block carved (a medium
             * page always is). */
            if (!page->listed && (page->class_index == CLASS_MEDIUM || page != heap->current[page->class_index]) &&
                (page->free != NULL || page->capacity != page->reserved))
                return BROKEN("page %p of class %u is neither current nor listed, yet has room",
                              (const void *)page, page->class_index);
        }
        dirty += (size_t)__builtin_popcountll(s->dirty_mask);
    }
    if (listed != on_lists)
        return BROKEN("heap %p: %zu pages marked listed, %zu on the available lists",
                      (const void *)heap, listed, on_lists);
    if (dirty != heap->dirty_slices)
        return BROKEN("heap %p: %zu dirty slices counted, %zu in its segments", (const void *)heap,
                      heap->dirty_slices, dirty);
    if (growth != heap->bin_growth || growth > HEAP_BIN_GROWTH_BYTES)
        return BROKEN("heap %p: bins grown by %zu bytes, %zu counted (budget %zu)", (const void *)heap,
                      growth, heap->bin_growth, HEAP_BIN_GROWTH_BYTES);
    return NULL;
}

const char *heap_check(struct heap *heap)
{
    /* The purger may be purging this heap's segments: hold it off. */
    pthread_mutex_lock(&heap->lock);
    const char *broken = heap_check_locked(heap);
    pthread_mutex_unlock(&heap->lock);
    return broken;
}

/* Refills between two whole-heap checks in the debug build. */
#define DEBUG_FULL_CHECK_EVERY 256

void heap_debug_refill(struct heap *heap, unsigned class_index)
{
    const char *broken = bin_check(heap, class_index);
    if (broken == NULL && heap->current[class_index] != &page_empty)
        broken = page_check(heap->current[class_index]);
    if (broken == NULL && ++heap->refills % DEBUG_FULL_CHECK_EVERY == 0)
        broken = heap_check(heap);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "heap_check at a page refill", "%s", broken);
}
