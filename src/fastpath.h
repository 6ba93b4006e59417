/* fastpath.h: the inline allocation and free paths, for the API, the
 * override and the contexts: a pop from or a push onto the calling thread's
 * bin, one branch each, and the three out-of-line calls they fall back to
 * (api.c, free.c). Nothing else of the core is visible through it. */
#ifndef STRATA_FASTPATH_H
#define STRATA_FASTPATH_H

#include "layout.h"
#include "os.h"

/* Allocates `size` bytes when the bin is empty or the size is large: the
 * heap's refill, a large mapping, the trim-and-retry at the memory limit;
 * NULL with errno = ENOMEM. */
STRATA_NOINLINE void *alloc_slow(size_t size);
/* Every free that is not into the caller's own bin with room (free.c). */
STRATA_NOINLINE void free_slow(void *p);
/* A free filled the bin past its limit: half goes back to the pages. */
STRATA_NOINLINE void free_bin_full(struct heap *heap, struct bin *bin);

/* A block from the thread's bin for `size` (at most SMALL_MAX), or NULL
 * when the bin is empty; never calls out, so callers stay leaf functions. */
static inline void *bin_try_pop(size_t size)
{
    struct heap *heap = thread_heap;
    unsigned c = size <= DIRECT_MAX ? class_of_direct[(size + 7) >> 3] : size_class(size);
    struct bin *bin = &heap->bins[c];
    struct block *block = bin->head;
    if (likely(block != NULL)) {
        bin->head = block->next;
        bin->count--;
    }
    return block;
}

static inline void *alloc_inline(size_t size)
{
    if (likely(size <= SMALL_MAX)) {
        void *block = bin_try_pop(size);
        if (likely(block != NULL))
            return block;
    }
    return alloc_slow(size);
}

static inline void free_inline(void *p)
{
    if (likely(is_segment_pointer(p))) {
        struct segment *segment = segment_of(p);
        struct heap *heap = thread_heap;
        if (likely(atomic_load_explicit(&segment->owner, memory_order_relaxed) ==
                   (uintptr_t)heap)) {
            struct bin *bin = &heap->bins[segment->class_of_slice[slice_of(p)]];
            struct block *block = p;
            if (unlikely(block == bin->head))
                report_fatal("double free", p);
            block->next = bin->head;
            bin->head = block;
            if (likely(++bin->count <= bin->limit))
                return;
            free_bin_full(heap, bin);
            return;
        }
    }
    free_slow(p);
}

#endif /* STRATA_FASTPATH_H */
