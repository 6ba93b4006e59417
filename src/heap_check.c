/* heap_check.c: the thread heaps' invariant checker, heap_check, and its
 * parts for one page and one bin, which the debug build runs at each bin
 * refill (heap_debug_refill). The invariants are written where they are
 * kept: pages.c (page lists and free lists), bins.c (bins), purge_policy.c
 * (dirty slices), segment.c (segment_check: slices and masks). A checker
 * returns NULL when sound, else a line naming the first broken invariant
 * with its values (checkers.h); it reads and never repairs. */
#include <stdio.h>

#include "checkers.h"
#include "heap_private.h"

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

const char *heap_check_locked(const struct heap *heap)
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
    os_lock_take(&heap->lock);
    const char *broken = heap_check_locked(heap);
    os_lock_give(&heap->lock);
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
        broken = heap_check_locked(heap);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "heap_check at a page refill", "%s", broken);
}
