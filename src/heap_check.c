/* heap_check.c: the thread heaps' invariant checker, heap_check, made of
 * the checkers written where each invariant is kept: bins.c (bins_check),
 * pages.c (page_check: a page's counts and free list) and segment.c
 * (segment_check: slices and masks), with the page lists and the dirty
 * count (pages.c, purge_policy.c) checked here; the debug build runs it
 * every DEBUG_FULL_CHECK_EVERY refills (heap_debug_refill), and bins.c
 * the bin's and page's parts at each. A checker returns NULL when sound,
 * else a line naming the first broken invariant with its values
 * (checkers.h); it reads and never repairs. */
#include "checkers.h"
#include "bins.h"
#include "heap_private.h"

const char *heap_check_locked(const struct heap *heap)
{
    const char *broken = bins_check(heap);
    if (broken != NULL)
        return broken;
    size_t on_lists = 0;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        const struct page *current = heap->current[c];
        if (current != &page_empty && (!current->in_use || current->class_index != c))
            return heap_broken("current page of class %u (%p) is not in use for it", c,
                               (const void *)current);
        for (const struct page *page = heap->available[c]; page != NULL; page = page->next, on_lists++)
            if (!page->listed || page->class_index != c || page->free == NULL || page == current)
                return heap_broken("available page %p of class %u: listed %u, class %u, %s", (const void *)page,
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
             * page always is), or under a memory limit every block it could
             * carve: a current page whose carve the limit refused is left
             * for an available one (bins.c, current_with_free), and listed
             * again when a block of it comes back. */
            if (!page->listed && (page->class_index == CLASS_MEDIUM || page != heap->current[page->class_index]) &&
                (page->free != NULL || (page->capacity != page->reserved && !os_limited())))
                return heap_broken("page %p of class %u is neither current nor listed, yet has room",
                                   (const void *)page, page->class_index);
        }
        dirty += (size_t)__builtin_popcountll(s->dirty_mask);
    }
    /* Each of the heap's own segments (heap.h) is one of its segments, in
     * the entry of its slot. */
    for (unsigned k = 0; k < OWN_SEGMENT_SLOTS; k++) {
        uintptr_t entry = atomic_load_explicit(&heap->own_segments[k], memory_order_relaxed);
        if (entry == heap->own_segment_empty)
            continue;
        const struct segment *s = heap->segments;
        while (s != NULL && (uintptr_t)s != entry)
            s = s->next;
        if (s == NULL || own_segment_slot(entry) != k)
            return heap_broken("heap %p: own segment entry %u names %p, not the header of one of its "
                               "segments of that slot",
                               (const void *)heap, k, (const void *)entry);
    }
    if (listed != on_lists)
        return heap_broken("heap %p: %zu pages marked listed, %zu on the available lists",
                           (const void *)heap, listed, on_lists);
    if (dirty != heap->dirty_slices)
        return heap_broken("heap %p: %zu dirty slices counted, %zu in its segments", (const void *)heap,
                           heap->dirty_slices, dirty);
    return NULL;
}

const char *heap_check(struct heap *heap)
{
    /* The purger may be purging this heap's segments: hold it off. */
    os_lock_take(&heap->lock);
    const char *broken = heap_check_locked(heap);
    os_lock_give(&heap->lock);
    return broken;
}

/* Refills between two whole-heap checks in the debug build. */
#define DEBUG_FULL_CHECK_EVERY 256

void heap_debug_refill(struct heap *heap)
{
    if (++heap->refills % DEBUG_FULL_CHECK_EVERY != 0)
        return;
    const char *broken = heap_check(heap);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "heap_check at a page refill", "%s", broken);
}
