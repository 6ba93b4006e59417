/* bins.c: the small-block engine behind bins.h. Each thread's bins cache
 * free blocks of each class in front of its pages: an empty bin is
 * refilled from the class's current page, a full one flushed by half back
 * to the blocks' pages; a class that swings between the two grows its bin,
 * within the heap's budget, and one left alone shrinks back (heap.h,
 * BIN_BYTES). A block of another live heap, freed by this thread, is kept
 * in its bin too, unread, to be handed out again while warm in this core's
 * cache; anything else goes to its owner: the owner's own page at once, or
 * the page's remote list, which the owner (or the purger, for an idle
 * owner) takes whole, or an exited thread's abandoned segment (segment.c).
 * A flush sends blocks home in runs, the blocks of one page that follow
 * each other in the bin, linked as the bin had them: spliced into the
 * heap's own page's free list at once, or pushed onto another heap's
 * page's remote list with one compare-and-swap; a class the thread does
 * not allocate (every class, until its first refill) keeps a bin of
 * BIN_PASS_BYTES, flushed whole, so that a consumer thread holds little of
 * others' memory and still passes it on a run at a time.
 * A bin is its owner's alone, touched by no lock; what lies behind it (the
 * pages' free lists, the current and available pages, the stack of pages
 * with remote frees) is touched only under the heap's lock, which a refill
 * and a flush take, so that the purger thread may collect an idle owner's
 * remote frees.
 * Invariants (bins_check): a bin holds `count` blocks, at most `limit`,
 * between its class's base limit and BIN_MAX_BLOCKS (set aside in
 * bin_drained_limit, the bin's 0 or its pass limit, while its class
 * drains), the limits' growth summing to bin_growth; every one is a
 * carved block of an in-use page of its class, counted as used in that
 * page (a page's class and carving do not change while one of its blocks
 * is out, so other heaps' blocks are safe to hold); in checked mode bins
 * have no room, so every call takes the checked slow path. A block on a
 * page's remote list is counted as used in its page until the owner takes
 * the list; a page with remote
 * blocks is on the stack of the heap its first pusher found as owner; a
 * closed stack (REMOTE_CLOSED) takes no page. */
#include "bins.h"
#include "heap_private.h"

/* A draining bin's limit when it passes other heaps' blocks on (heap.h,
 * BIN_PASS_BYTES). */
static uint32_t bin_pass_limit(unsigned class_index)
{
    size_t limit = BIN_PASS_BYTES / class_size[class_index];
    return (uint32_t)(limit < BIN_MIN_BLOCKS ? BIN_MIN_BLOCKS : limit > BIN_PASS_MAX_BLOCKS ? BIN_PASS_MAX_BLOCKS : limit);
}

/* A bin's limit before it grows (heap.h, BIN_BYTES). */
static uint32_t bin_base_limit(unsigned class_index)
{
    size_t limit = BIN_BYTES / class_size[class_index];
    return (uint32_t)(limit < BIN_MIN_BLOCKS ? BIN_MIN_BLOCKS : limit > BIN_BASE_MAX_BLOCKS ? BIN_BASE_MAX_BLOCKS : limit);
}

void bins_forget_use(struct heap *heap, bool draining)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        strata_assert(heap->bins[c].head == NULL);
        /* A class starts passing other heaps' blocks on, or draining,
         * until the thread's first refill of it. */
        uint32_t limit = strata_options.check || draining ? 0 : bin_pass_limit(c);
        bin_set(heap, &heap->bins[c], 0, limit);
        heap->bin_use[c] = 0;
        heap->bin_flushes[c] = 0;
        heap->bin_drained_limit[c] = strata_options.check ? 0 : bin_base_limit(c);
    }
    heap->bin_growth = 0;
    heap->bin_events = 0;
    heap->bins_aged_at = os_now_ns();
}

void bins_init(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        heap->bins[c].head = NULL;
        heap->bins[c].word = (uint64_t)(uint32_t)profile_next_pops(class_size[c]) << 32;
    }
    bins_forget_use(heap, false);
    heap_own_segments_clear(heap);
    atomic_store_explicit(&heap->remote, NULL, memory_order_release);
}

static void free_to_owner(struct page *page, struct block *block);
static STRATA_ALWAYS_INLINE void free_to_owner_from(struct page *page, struct block *block, uintptr_t owner,
                                                    bool carved);
static void remote_list_forward(struct page *page);
static void remote_push(struct heap *heap, struct page *page, struct block *first, struct block *last,
                        uint32_t count);

/* The owner's refill or flush (heap lock held): counted for the purger,
 * and the heap no longer idle. */
static inline void heap_note_slow_call(struct heap *heap)
{
    heap->slow_calls++;
    if (unlikely(atomic_load_explicit(&heap->idle, memory_order_relaxed)))
        atomic_store_explicit(&heap->idle, false, memory_order_relaxed);
}

/* ---- the bins' invariants -------------------------------------------------- */
/* One bin: its count, limit and that every block is of a page of this heap
 * and class, or a carved block of another heap's page of the class. */
static const char *bin_check(const struct heap *heap, unsigned c)
{
    const struct bin *bin = &heap->bins[c];
    const struct block *bad;
    uint32_t count = bin_count(heap, bin), limit = bin_limit(heap, bin);
    /* The room's bits, were it ever below -1, would have borrowed from
     * the countdown's: a count past the limit is a broken word too. */
    size_t length = free_list_length(bin->head, (size_t)limit + 1, &bad);
    if (bad != NULL)
        return heap_broken("bin of class %u holds %p, whose words are not a free block's (written after free?)",
                           c, (const void *)bad);
    if (length != count || count > limit)
        return heap_broken("bin of class %u (%u bytes): %zu blocks listed, count %u, limit %u", c,
                           class_size[c], length, count, limit);
    for (const struct block *b = bin->head; b != NULL; b = block_link(b)) {
        const struct segment *segment = segment_of(b);
        const struct page *page = page_of((struct segment *)segment, b);
        bool own = atomic_load(&segment->owner) == heap->owner_word;
        /* Another heap's block (freed here) is in use in its page, whose
         * class and carving cannot change while it is out. */
        if (!page->in_use || page->class_index != c || !(own ? page_contains(page, b) : page_surely_carved(page, b)))
            return heap_broken("bin of class %u holds %p, not a carved block of a page of the class", c,
                               (const void *)b);
        const char *broken = free_block_state_check(b, class_size[c]);
        if (broken != NULL)
            return broken;
    }
    return NULL;
}

const char *bins_check(const struct heap *heap)
{
    const char *broken;
    size_t growth = 0;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        if ((broken = bin_check(heap, c)) != NULL)
            return broken;
        uint32_t base = strata_options.check ? 0 : bin_base_limit(c);
        uint32_t limit = heap->bin_drained_limit[c] ? heap->bin_drained_limit[c] : heap->bin_limit[c];
        if (heap->bin_drained_limit[c] && heap->bin_limit[c] != 0 && heap->bin_limit[c] != bin_pass_limit(c))
            return heap_broken("bin of class %u: draining with limit %u", c, heap->bin_limit[c]);
        if (limit < base || limit > BIN_MAX_BLOCKS)
            return heap_broken("bin of class %u: limit %u outside %u..%u", c, limit, base, BIN_MAX_BLOCKS);
        growth += (size_t)(limit - base) * class_size[c];
    }
    if (growth != heap->bin_growth || growth > HEAP_BIN_GROWTH_BYTES)
        return heap_broken("heap %p: bins grown by %zu bytes, %zu counted (budget %zu)", (const void *)heap,
                           growth, heap->bin_growth, HEAP_BIN_GROWTH_BYTES);
    /* Each page on the stack has a remote block or more, counted as used
     * until taken (pushes only add to them meanwhile). */
    const struct page *page = atomic_load_explicit(&heap->remote, memory_order_acquire);
    for (; page != NULL && page != REMOTE_CLOSED; page = page->remote_next) {
        uint32_t count = PAGE_REMOTE_BLOCKS(atomic_load_explicit(page_remote_word(page), memory_order_acquire));
        uint32_t used = __atomic_load_n(&page->used, __ATOMIC_RELAXED);
        if (count == 0 || count > used)
            return heap_broken("page %p on heap %p's remote stack: %u remote blocks, %u used", (const void *)page,
                               (const void *)heap, count, used);
    }
    return NULL;
}

/* The debug build's check at a refill: the bin and the page it came from
 * (heap lock held; the whole heap now and then: heap_debug_refill). */
static void bin_debug_refill(const struct heap *heap, unsigned class_index)
{
    const char *broken = bin_check(heap, class_index);
    if (broken == NULL && heap->current[class_index] != &page_empty)
        broken = page_check(heap->current[class_index]);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "heap_check at a page refill", "%s", broken);
}

uint32_t bin_cached_blocks(const struct heap *heap, unsigned class_index)
{
    return bin_count(heap, &heap->bins[class_index]);
}

static void *bin_refill_from_idle_heap(struct heap *heap, unsigned class_index);

/* Makes current[class] a page with a free block: the current one, carved
 * further or given back blocks from the remote list, else an available
 * page, else a new one; false when out of memory (heap lock held). Before
 * a new page, the bin may be refilled from an idle heap's page instead:
 * *taken is then the block for the caller, and current[class] unchanged. */
static bool current_with_free(struct heap *heap, unsigned class_index, void **taken)
{
    struct page *page = heap->current[class_index];
    if (page->free != NULL || page_extend(page))
        return true;
    heap_page_spent(heap, page);
    /* The remote lists only when no page of the class has a free block:
     * taken at every spent current page, each page's list held two blocks
     * on the cross-thread pairs (docs/design.md). */
    if (heap->available[class_index] == NULL && atomic_load_explicit(&heap->remote, memory_order_relaxed) != NULL) {
        heap_collect_remote(heap); /* may empty the page, which starts again */
        if (page->free != NULL || page_extend(page))
            return true;
    }
    page = heap->available[class_index];
    if (unlikely(page == NULL)) {
        if ((*taken = bin_refill_from_idle_heap(heap, class_index)) != NULL)
            return true;
        struct page *fresh = heap_page_new_carved(heap, class_index);
        if (fresh != NULL) {
            heap->current[class_index] = fresh;
            return true;
        }
        page = heap->available[class_index]; /* an adopted segment's, or none */
        if (page == NULL)
            return false;
    }
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

size_t bins_growth_budget(void)
{
    long held = counters_total();
    unsigned threads = heap_threads_holding();
    size_t share = held > 0 ? (size_t)held / (threads > 0 ? threads : 1) / BIN_GROWTH_SHARE : 0;
    return share < HEAP_BIN_GROWTH_MIN ? HEAP_BIN_GROWTH_MIN
           : share > HEAP_BIN_GROWTH_BYTES ? HEAP_BIN_GROWTH_BYTES
                                           : share;
}

/* The most blocks a bin of the class grows to (heap.h). */
static uint32_t bin_grown_most(unsigned class_index)
{
    size_t most = BIN_GROWN_MAX_BYTES / class_size[class_index];
    return most < BIN_MAX_BLOCKS ? (uint32_t)most : BIN_MAX_BLOCKS;
}

/* Records a refill or a flush of the class. A refill after a flush grows
 * the bin by half, the budget allowing: the class swings between the bin
 * and its pages. (A flush never grows it instead of flushing: the flush's
 * walk is what finds a block freed twice while in the bin.) */
static void bin_note(struct heap *heap, unsigned class_index, unsigned event)
{
    unsigned use = heap->bin_use[class_index];
    unsigned lately = (use & BIN_REFILLED_LATELY) | (event == BIN_REFILLED ? BIN_REFILLED_LATELY : 0);
    heap->bin_use[class_index] = (uint8_t)(event | BIN_ACTIVE | lately);
    heap->bin_events++;
    if (event != BIN_REFILLED || !(use & BIN_FLUSHED) || strata_options.check)
        return;
    struct bin *bin = &heap->bins[class_index];
    uint32_t limit = bin_limit(heap, bin);
    uint32_t most = bin_grown_most(class_index);
    if (limit >= most)
        return;
    uint32_t grow = limit / 2;
    if (grow > most - limit)
        grow = most - limit;
    size_t bytes = (size_t)grow * class_size[class_index];
    if (grow == 0 || heap->bin_growth + bytes > bins_growth_budget())
        return;
    bin_set_limit(heap, bin, limit + grow);
    heap->bin_growth += bytes;
}

static uint32_t bin_trim(struct heap *heap, struct bin *bin, uint32_t keep);

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
        heap->bin_use[c] = (uint8_t)(use & ~(BIN_ACTIVE | BIN_REFILLED_LATELY));
        struct bin *bin = &heap->bins[c];
        uint32_t base = bin_base_limit(c);
        uint32_t was = bin_limit(heap, bin);
        if ((use & BIN_ACTIVE) || was <= base)
            continue;
        uint32_t limit = was / 2 < base ? base : was / 2;
        heap->bin_growth -= (size_t)(was - limit) * class_size[c];
        if (bin_count(heap, bin) > limit)
            bin_trim(heap, bin, limit);
        bin_set_limit(heap, bin, limit);
    }
}

/* A block of the page for the caller, and its other free blocks but
 * `keep` into the (empty) bin so the next calls stay inline: all at once
 * when they fit and none is kept, the list's length being capacity -
 * used; else as many as fit, or half a bin, walked (the lock of the
 * page's heap held). */
static struct block *bin_fill_from_page(struct heap *heap, struct bin *bin, struct page *page, uint32_t keep)
{
    struct block *first = block_pop(page);
    counters_bytes_out((long)page_usable(page));
    if (unlikely(strata_options.check))
        return first;
    struct block *taken = page->free;
    strata_assert_cmp(page->used, <=, page->capacity);
    uint32_t free_blocks = page->capacity - page->used;
    if (free_blocks <= keep)
        return first;
    uint32_t moved = free_blocks - keep, limit = bin_limit(heap, bin);
    if (moved > limit)
        moved = limit / 2;
    if (moved == free_blocks) {
        page->free = NULL;
    } else {
        struct block *last = taken;
        for (uint32_t i = 1; i < moved; i++)
            last = block_next(last);
        page->free = block_next(last);
        block_set_next(last, NULL);
    }
    strata_assert_cmp(moved, <=, limit);
    bin->head = taken;
    bin_set_count(heap, bin, moved);
    counter_set(&page->used, page->used + moved);
    counters_bytes_out((long)page_usable(page) * (long)moved);
    bins_age(heap);
    return first;
}

/* heap_bin_refill's work, heap lock held. */
static void *bin_refill_locked(struct heap *heap, unsigned class_index)
{
    void *taken = NULL;
    if (!current_with_free(heap, class_index, &taken))
        return NULL;
    if (taken != NULL)
        return taken;
    void *first = bin_fill_from_page(heap, &heap->bins[class_index], heap->current[class_index], 0);
    if (STRATA_DEBUG_BUILD && !strata_options.check) /* checked mode's refill takes one block */
        bin_debug_refill(heap, class_index);
    return first;
}

/* A refill that would take a new page takes an idle heap's available page's
 * free blocks instead (both locks held): what a thread that stopped
 * allocating left free in its pages, its blocks freed by the threads that
 * run, serves them, rather than stay stranded while they take new pages.
 * The blocks stay the idle heap's, as a block another thread frees into
 * its bin does; only free blocks move (the idle heap's pages are never
 * carved from here: their owner reads its carving unlocked). */
static void *bin_refill_from_idle_heap(struct heap *heap, unsigned class_index)
{
    if (strata_options.check)
        return NULL;
    struct heap *idle = heap_idle_with_page(heap, class_index);
    if (idle == NULL)
        return NULL;
    struct page *page = idle->available[class_index];
    strata_assert(page->free != NULL && page->class_index == class_index);
    /* A page with room to carve keeps a free block, and so its place on
     * the list (heap_check: a page with room is current or listed). */
    uint32_t keep = page->capacity < page->reserved;
    if (page->capacity - page->used <= keep) {
        os_lock_give(&idle->lock);
        return NULL;
    }
    void *first = bin_fill_from_page(heap, &heap->bins[class_index], page, keep);
    if (page->free == NULL)
        list_remove(idle, page);
    os_lock_give(&idle->lock);
    if (STRATA_DEBUG_BUILD)
        bin_debug_refill(heap, class_index);
    return first;
}

void *heap_bin_refill(struct heap *heap, unsigned class_index)
{
    strata_assert(heap->bins[class_index].head == NULL);
    heap->bin_flushes[class_index] = 0;
    if (unlikely(heap->bin_drained_limit[class_index] != 0)) {
        bin_set_limit(heap, &heap->bins[class_index], heap->bin_drained_limit[class_index]);
        heap->bin_drained_limit[class_index] = 0;
    }
    bin_note(heap, class_index, BIN_REFILLED);
    os_lock_take(&heap->lock);
    heap_note_slow_call(heap);
    void *block = bin_refill_locked(heap, class_index);
    os_lock_give(&heap->lock);
    return block;
}

/* Walks `count` blocks of a bin's list, from `block` on, into `taken`,
 * each link checked (block_next): a list that ends early or runs on (a
 * loop, which never reaches the end) is reported before any page counts
 * one back. The blocks stay linked as the bin had them, so that a run of
 * one page's blocks goes back as the chain it already is. */
static void blocks_walk(struct block *block, uint32_t count, struct block **taken)
{
    strata_assert_cmp(count, <=, BIN_MAX_BLOCKS + 1);
    for (uint32_t i = 0; i < count; i++) {
        if (unlikely(block == NULL))
            report_fatal("double free or write after free (a thread cache lost count)",
                         i ? taken[i - 1] : NULL);
        taken[i] = block;
        block = block_next(block);
    }
    if (unlikely(block != NULL))
        report_fatal("double free or write after free (a thread cache's list runs on)", block);
}

/* Whether block b lies in `page` (of `segment`), where block a does: at
 * once when the two share a slice, which lies in one page. */
static inline bool blocks_share_page(struct segment *segment, struct page *page, const struct block *a,
                                     const struct block *b)
{
    if ((((uintptr_t)a ^ (uintptr_t)b) >> SLICE_SHIFT) == 0)
        return true;
    return segment_of(b) == segment && page_of(segment, b) == page;
}

/* Blocks walked from a bin (blocks_walk, each linked to the next) go back
 * to their pages, a run of one page's blocks that follow each other at a
 * time: the heap's own spliced into the page's free list, other heaps'
 * pushed onto the page's remote list with one compare-and-swap (a live
 * owner's). Returns how many were the heap's (heap lock held). */
static uint32_t blocks_to_pages(struct heap *heap, struct block **taken, uint32_t count)
{
    uint32_t own = 0;
    for (uint32_t i = 0; i < count;) {
        struct segment *segment = segment_of(taken[i]);
        struct page *page = page_of(segment, taken[i]);
        uint32_t run = 1;
        while (i + run < count && blocks_share_page(segment, page, taken[i], taken[i + run]))
            run++;
        uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
        if (owner == heap->owner_word) {
            page_free_run(heap, page, taken[i], taken[i + run - 1], run);
            own += run;
        } else if (owner == OWNER_ABANDONED) {
            for (uint32_t k = 0; k < run; k++)
                free_to_owner(page, taken[i + k]);
        } else {
            /* The bin's blocks were each shown carved when they were freed
             * into it. */
            remote_push((struct heap *)(owner & ~OWNER_TAGS), page, taken[i], taken[i + run - 1], run);
        }
        i += run;
    }
    return own;
}

void heap_bin_flush(struct heap *heap, struct bin *bin)
{
    strata_assert_cmp(bin_count(heap, bin), >, bin_limit(heap, bin));
    unsigned c = (unsigned)(bin - heap->bins);
    if (heap->bin_drained_limit[c] != 0 && bin_limit(heap, bin) == 0) {
        /* Draining: the one block the inline free just pushed (its link
         * the empty bin's NULL, checked there as every freed block is)
         * goes to its page with no walk, no clock and no aging. */
        strata_assert_cmp(bin_count(heap, bin), ==, 1);
        struct block *block = bin->head;
        bin->head = NULL;
        bin_set_count(heap, bin, 0);
        os_lock_take(&heap->lock);
        heap_note_slow_call(heap);
        /* Only the heap's own blocks reach a bin of limit 0 (bins.h,
         * bin_push_foreign): the owner word confirms it. */
        struct segment *segment = segment_of(block);
        uint32_t own = 1;
        if (likely(atomic_load_explicit(&segment->owner, memory_order_relaxed) == heap->owner_word))
            page_free_block(heap, page_of(segment, block), block);
        else
            own = blocks_to_pages(heap, &block, 1);
        counters_bytes_out(-(long)own * (long)class_usable(c));
        os_lock_give(&heap->lock);
        return;
    }
    bin_note(heap, c, BIN_FLUSHED);
    os_lock_take(&heap->lock);
    heap_note_slow_call(heap);
    /* A class whose frees outrun its allocations flush after flush drains
     * until the next refill (its limit kept in bin_drained_limit). Of its
     * own blocks, the bin goes back whole and its frees go to their pages,
     * so that the pages empty and start again from their first block,
     * rather than each keep a block of the bin's. Of other heaps' blocks
     * (a consumer's), the bin keeps passing them on, with a limit of
     * BIN_PASS_BYTES: one compare-and-swap a page's run of them
     * (blocks_to_pages), not one a block, and little held for others. */
    uint32_t limit = bin_limit(heap, bin);
    bool passing = heap->bin_drained_limit[c] != 0; /* the whole bin goes, in runs */
    uint32_t keep = passing ? 0 : limit / 2;
    uint32_t moved = bin_count(heap, bin) - keep;
    uint32_t own = bin_trim(heap, bin, keep);
    if (!passing && heap->bin_flushes[c] < UINT8_MAX && ++heap->bin_flushes[c] >= BIN_DRAIN_FLUSHES) {
        heap->bin_drained_limit[c] = limit;
        limit = 2 * own >= moved ? 0 : bin_pass_limit(c);
        if (bin_count(heap, bin) != 0)
            bin_trim(heap, bin, 0);
    }
    bin_set_limit(heap, bin, limit);
    bins_age(heap);
    os_lock_give(&heap->lock);
}

/* Leaves `keep` blocks in the bin, the rest going back to their pages;
 * returns how many of those were the heap's own (heap lock held). */
static uint32_t bin_trim(struct heap *heap, struct bin *bin, uint32_t keep)
{
    uint32_t count = bin_count(heap, bin);
    strata_assert_cmp(keep, <, count);
    struct block *cut = bin->head;
    for (uint32_t i = 1; i < keep; i++)
        cut = block_next(cut);
    struct block *rest = keep ? block_next(cut) : cut;
    uint32_t moved = count - keep;
    /* The rest is taken before the list is cut after `cut`: a loop in the
     * list then shows in the rest, whichever blocks it goes through. */
    struct block *taken[BIN_MAX_BLOCKS + 1];
    blocks_walk(rest, moved, taken);
    if (keep)
        block_set_next(cut, NULL);
    else
        bin->head = NULL;
    bin_set_count(heap, bin, keep);
    uint32_t own = blocks_to_pages(heap, taken, moved);
    counters_bytes_out(-(long)own * (long)class_usable((unsigned)(bin - heap->bins)));
    return own;
}

void bins_flush_all(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct bin *bin = &heap->bins[c];
        struct block *block = bin->head;
        uint32_t count = bin_count(heap, bin);
        counters_bytes_out(-(long)count * (long)class_usable(c));
        bin->head = NULL;
        bin_set_count(heap, bin, 0);
        struct block *taken[BIN_MAX_BLOCKS + 1];
        blocks_walk(block, count, taken);
        blocks_to_pages(heap, taken, count);
    }
}

/* ---- another heap's blocks ------------------------------------------------ */
/* Free already: on a list of its owner (a bin, a page, the remote list),
 * in another heap's bin, or on an exited thread's segment; else to its own
 * page, its owner's remote list or its abandoned segment. */
static void free_unkept(struct page *page, struct block *block)
{
    if (unlikely(block_is_free(block)))
        report_fatal("double free", block);
    free_to_owner(page, block);
}

void heap_free_block(void *p)
{
    struct segment *segment = segment_of(p);
    /* Acquire: free_to_owner's order against a heap being given up. */
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    struct heap *self = thread_heap;
    const struct slice *slice = foreign_carved_slice(self, segment, p, owner);
    if (likely(slice != NULL)) {
        small_guard_check(p);
        bool full;
        struct bin *bin = bin_keep_foreign(self, slice_class(slice), p, owner, false, &full);
        if (bin != NULL) {
            if (unlikely(full))
                heap_bin_flush(self, bin);
            return;
        }
        /* One the bin may not keep: to its owner, its two words read first
         * as bin_push reads them. */
        struct block *block = p;
        if (unlikely(block_is_free(block)))
            report_fatal("double free", block);
        free_to_owner_from(&segment->pages[slice_page_index(slice)], block, owner, true);
        return;
    }
    free_unkept(free_segment_page(p), p);
}

void free_unchecked_block(void *p, bool guard)
{
    if (guard && small_guard_broken(p)) {
        release_sample_or_report_guard(p);
        heap_free_validated(p);
        return;
    }
    report_fatal("double free", p);
}

void heap_free_validated(void *p)
{
    struct heap *heap = thread_heap;
    bool full;
    struct bin *bin = bin_push_own(heap, p, &full);
    if (bin == NULL)
        heap_free_block(p);
    else if (unlikely(full))
        heap_bin_flush(heap, bin);
}

/* ---- remote frees ---------------------------------------------------------- */
/* free_to_owner with the segment's owner word loaded (acquire) and, when
 * `carved`, the block shown to be a carved small block of its page. */
static STRATA_ALWAYS_INLINE void free_to_owner_from(struct page *page, struct block *block, uintptr_t owner,
                                                    bool carved)
{
    struct segment *segment = segment_of(block);
    struct heap *self = thread_heap;
    for (;;) {
        if (owner == self->owner_word) { /* checked mode's local free, a medium block, or a bad one */
            if (unlikely(!page_carved(page, block)))
                report_fatal("free of a block that was never allocated", block);
            /* Read before the free: it may release the page and its segment. */
            long size = (long)page_usable(page);
            os_lock_take(&self->lock);
            page_free_block(self, page, block);
            os_lock_give(&self->lock);
            counters_bytes_out(-size);
            return;
        }
        if (owner == OWNER_ABANDONED) {
            if (abandoned_free_block(page, block))
                return;
            owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
            continue;
        }
        struct heap *heap = (struct heap *)(owner & ~OWNER_TAGS);
        /* The carve that covered a block came before its hand-out, which
         * came before the program passed it here: a small block its page
         * has not carved was never allocated, and spliced into the page's
         * free list it would be carved over while listed. */
        if (!carved && unlikely(page->class_index != CLASS_MEDIUM &&
                                !slice_holds_block_any_thread(&segment->slices[slice_of(block)],
                                                              (uint32_t)((uintptr_t)block & SEGMENT_MASK))))
            report_fatal("free of a block that was never allocated", block);
        remote_push(heap, page, block, block, 1);
        return;
    }
}

/* Pushes the chain first..last (`count` blocks, linked but for last) onto
 * the page's remote list with one compare-and-swap, and the page onto its
 * owner's stack when its list was empty: a consumer's run of blocks of
 * one page crosses the cores once, not once a block. */
static void remote_push(struct heap *heap, struct page *page, struct block *first, struct block *last,
                        uint32_t count)
{
    uintptr_t old = atomic_load_explicit(page_remote_word(page), memory_order_relaxed), new;
    do {
        struct block *head = PAGE_REMOTE_HEAD(old);
        /* The same block as the last remote free of the page, or more
         * blocks than the page holds (blocks freed again and again). */
        if (unlikely(head == first || PAGE_REMOTE_BLOCKS(old) + count > page->reserved))
            report_fatal("double free", first);
        block_set_next(last, head);
        new = (uintptr_t)first | ((uintptr_t)(PAGE_REMOTE_BLOCKS(old) + count) << PAGE_REMOTE_SHIFT);
    } while (!atomic_compare_exchange_weak_explicit(page_remote_word(page), &old, new,
                                                    /* after the last taker's reads of the tail and link */
                                                    memory_order_acq_rel, memory_order_relaxed));
    if (PAGE_REMOTE_BLOCKS(old) != 0)
        return;
    /* The page's list was empty: `last` is its oldest, and the page joins
     * its owner's stack (no one takes the list before it has: the page is
     * on no stack while its list is empty). */
    page->remote_tail = last;
    struct page *top = atomic_load_explicit(&heap->remote, memory_order_relaxed);
    do {
        if (top == REMOTE_CLOSED)
            break;
        page->remote_next = top;
    } while (!atomic_compare_exchange_weak_explicit(&heap->remote, &top, page,
                                                    memory_order_seq_cst, /* against a sleeping purger (purge.c) */
                                                    memory_order_relaxed));
    if (top != REMOTE_CLOSED) {
        purger_ask(); /* to collect it, should the owner stay idle */
        return;
    }
    /* The heap is being given up: its segments are marked abandoned
     * before its stack closes; the page's list, which no one else will
     * take, is freed here, each block where it now belongs. */
    remote_list_forward(page);
}

static void free_to_owner(struct page *page, struct block *block)
{
    free_to_owner_from(page, block, atomic_load_explicit(&segment_of(block)->owner, memory_order_acquire), false);
}

/* Takes a page's remote list, every block of it freed again wherever it
 * now belongs (its heap was given up, or it was pushed onto the stack of a
 * heap that no longer owns it). */
static void remote_list_forward(struct page *page)
{
    uintptr_t taken = atomic_exchange_explicit(page_remote_word(page), 0, memory_order_acq_rel);
    struct block *late = PAGE_REMOTE_HEAD(taken);
    for (uint32_t i = 0; i < PAGE_REMOTE_BLOCKS(taken); i++) {
        struct block *next = block_next(late);
        block_take(late); /* it leaves this list to be freed again elsewhere */
        heap_free_block(late);
        late = next;
    }
}

void heap_collect_remote(struct heap *heap)
{
    if (atomic_load_explicit(&heap->remote, memory_order_relaxed) == NULL)
        return;
    struct page *page = atomic_exchange_explicit(&heap->remote, NULL, memory_order_acquire);
    strata_assert(page != REMOTE_CLOSED);
    long returned = 0;
    while (page != NULL) {
        /* Both read before the list is taken: a free that finds it empty
         * then writes them again. */
        struct page *next = page->remote_next;
        struct block *tail = page->remote_tail;
        if (unlikely(atomic_load_explicit(&segment_of(page)->owner, memory_order_relaxed) != heap->owner_word)) {
            remote_list_forward(page); /* a stale push into a recycled heap */
        } else {
            /* Released: the next free to find the list empty writes the
             * tail and link read above. */
            uintptr_t taken = atomic_exchange_explicit(page_remote_word(page), 0, memory_order_acq_rel);
            uint32_t count = PAGE_REMOTE_BLOCKS(taken);
            returned += (long)count * (long)page_usable(page);
            page_take_remote(heap, page, PAGE_REMOTE_HEAD(taken), tail, count);
        }
        page = next;
    }
    counters_bytes_out(-returned);
}

bool heap_remote_pending(const struct heap *heap)
{
    return atomic_load_explicit(&heap->remote, memory_order_seq_cst) != NULL;
}

/* The list only grows at its head meanwhile (heap lock held: it is
 * collected under that lock alone). */
void heap_remote_for_each(const struct heap *heap, void (*fn)(const struct page *, void *), void *arg)
{
    const struct page *page = atomic_load_explicit(&heap->remote, memory_order_acquire);
    for (; page != NULL && page != REMOTE_CLOSED; page = page->remote_next) {
        uint32_t count = PAGE_REMOTE_BLOCKS(atomic_load_explicit(page_remote_word(page), memory_order_acquire));
        for (uint32_t i = 0; i < count; i++)
            fn(page, arg);
    }
}

void heap_remote_close(struct heap *heap)
{
    struct page *page = atomic_exchange_explicit(&heap->remote, REMOTE_CLOSED, memory_order_acq_rel);
    while (page != NULL) {
        struct page *next = page->remote_next;
        remote_list_forward(page);
        page = next;
    }
}
