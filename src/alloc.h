/* alloc.h: the default flavour's allocation and free (alloc.c): the inline
 * paths, a pop from or a push onto the calling thread's bin (bins.h), one
 * branch each, and the out-of-line paths behind them. The secure flavour
 * (secure.h) uses the same paths underneath its own checks; api.h chooses
 * between the two. */
#ifndef STRATA_ALLOC_H
#define STRATA_ALLOC_H

#include <stdbool.h>

#include "bins.h"
#include "report.h"

/* Allocates `size` bytes when the bin is empty or the size is large: the
 * heap's refill, a large mapping, the trim-and-retry at the memory limit;
 * NULL with errno = ENOMEM. */
STRATA_NOINLINE void *alloc_slow(size_t size);
/* A block of the class, for an alignment the class's blocks all have, for
 * a request of `size` bytes (the heap profiler's figure for a sample). */
void *alloc_class(unsigned class_index, size_t size);
/* A large block (`zero`: zeroed), with the trim-and-retry. */
void *alloc_large(size_t size, size_t alignment, bool zero);
/* A block above SMALL_MAX (`zero`: zeroed): a medium page up to MEDIUM_MAX,
 * a large mapping above; with the trim-and-retry. */
void *alloc_big(size_t size, bool zero);
/* Resizes a large block to `size` (above SMALL_MAX), with the trim-and-retry. */
void *realloc_large(void *p, size_t size);
/* Every free that is not into the caller's own bin with room;
 * free_segment_slow for a pointer into a segment. Either may start the
 * purger thread, which what they freed may have asked for. */
STRATA_NOINLINE void free_slow(void *p);
STRATA_NOINLINE void free_segment_slow(void *p);
/* A free filled the bin past its limit: half goes back to the pages. */
STRATA_NOINLINE void free_bin_full(struct heap *heap, struct bin *bin);
/* Every free the inline path does not finish: a pointer into a segment
 * that is the calling heap's (its segment then joins the heap's own
 * segments, and the block its bin), else free_segment_slow's or
 * free_slow's. */
STRATA_NOINLINE void free_elsewhere(void *p);

/* A block from the thread's bin for `size` (at most SMALL_REQUEST_MAX), or NULL
 * when the bin is empty (always, in the secure flavour, whose blocks come
 * from secure_malloc); never calls out, so callers stay leaf functions. */
static STRATA_ALWAYS_INLINE void *bin_try_pop(size_t size)
{
    return STRATA_SECURE_BUILD ? NULL : bin_pop(small_class(size));
}

/* A block of `size` from the thread's bin, or NULL when the size is above
 * SMALL_REQUEST_MAX or the bin is empty (always NULL in the secure flavour,
 * whose blocks come from secure_malloc); never calls out, so that a caller
 * with a slow path of its own (operator new's) tail-calls it. Checks: the
 * size is at most SMALL_REQUEST_MAX (the commonest, up to DIRECT_MAX, told apart first
 * with one compare, so that the class lookup takes no second branch);
 * bin_pop's. */
static STRATA_ALWAYS_INLINE void *alloc_pop(size_t size)
{
    unsigned class_index;
    if (likely(size <= DIRECT_MAX - SMALL_GUARD_BYTES))
        class_index = small_class(size); /* its DIRECT_MAX test folds away in each arm */
    else if (likely(size <= SMALL_REQUEST_MAX))
        class_index = small_class(size);
    else
        return NULL;
    return STRATA_SECURE_BUILD ? NULL : bin_pop(class_index);
}

/* The default flavour's allocation. Checks: alloc_pop's. Anything else is
 * alloc_slow's. */
static STRATA_ALWAYS_INLINE void *alloc_fast(size_t size)
{
    void *block = alloc_pop(size);
    if (likely(block != NULL))
        return block;
    return alloc_slow(size);
}

/* The default flavour's free. Checks: the pointer lies in one of the
 * calling heap's own segments (bin_push_own_segment); bin_push_in_segment's
 * (the start of a block the page has carved, after its lead, its guard
 * word below it intact, not free already); the
 * bin is within its limit. Anything else (a segment not among the heap's
 * own segments yet, NULL, a large block, another thread's block, a pointer
 * strata did not hand out, checked mode) is free_elsewhere's. */
static STRATA_ALWAYS_INLINE void free_fast(void *p)
{
    struct heap *heap = thread_heap;
    bool full;
    struct bin *bin = bin_push_own_segment(heap, p, &full);
    if (likely(bin != NULL)) {
        if (likely(!full))
            return;
        free_bin_full(heap, bin);
        return;
    }
    free_elsewhere(p);
}

#endif /* STRATA_ALLOC_H */
