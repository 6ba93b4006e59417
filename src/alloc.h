/* alloc.h: the inline allocation and free paths, for the API, the override
 * and the contexts: a pop from or a push onto the calling thread's bin, one
 * branch each; and the out-of-line paths behind them (alloc.c). In the secure flavour every allocation and free goes to
 * secure.c instead, which uses the same paths underneath. Nothing else of
 * the core is visible through it. */
#ifndef STRATA_ALLOC_H
#define STRATA_ALLOC_H

#include <stdbool.h>

#include "layout.h"
#include "report.h"

/* Allocates `size` bytes when the bin is empty or the size is large: the
 * heap's refill, a large mapping, the trim-and-retry at the memory limit;
 * NULL with errno = ENOMEM. */
STRATA_NOINLINE void *alloc_slow(size_t size);
/* A block of the class, for an alignment the class's blocks all have. */
void *alloc_class(unsigned class_index);
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
/* The strata_* allocation calls as the library's own layers make them
 * (api.c): never sent to Valgrind's malloc, unlike a program's. */
void *api_malloc(size_t size);
void api_free(void *ptr);
void *api_calloc(size_t count, size_t size);
void *api_realloc(void *ptr, size_t size);
void *api_reallocarray(void *ptr, size_t count, size_t size);
void *api_aligned_alloc(size_t alignment, size_t size);
int api_posix_memalign(void **out, size_t alignment, size_t size);
size_t api_usable_size(const void *ptr);

/* The secure flavour's allocation calls (secure.c): each block checked when
 * handed out and given a canary, each free validated and checked, then held
 * in the thread's quarantine; sizes are what was asked. */
STRATA_NOINLINE void *secure_malloc(size_t size);
STRATA_NOINLINE void secure_free(void *p);
void *secure_calloc(size_t total);
void *secure_realloc(void *p, size_t size);
void *secure_aligned_alloc(size_t alignment, size_t size);
size_t secure_usable_size(const void *p);

/* A free filled the bin past its limit: half goes back to the pages. */
STRATA_NOINLINE void free_bin_full(struct heap *heap, struct bin *bin);

/* A block from the thread's bin of a class, or NULL when it is empty. */
static STRATA_ALWAYS_INLINE void *bin_pop(unsigned class_index)
{
    struct bin *bin = &thread_heap->bins[class_index];
    struct block *block = bin->head;
    if (likely(block != NULL)) {
        bin->head = block_next(block);
        block_take(block);
        counter_set(&bin->count, bin->count - 1);
    }
    return block;
}

/* A block from the thread's bin for `size` (at most SMALL_MAX), or NULL
 * when the bin is empty (always, in the secure flavour, whose blocks come
 * from secure_malloc); never calls out, so callers stay leaf functions. */
static STRATA_ALWAYS_INLINE void *bin_try_pop(size_t size)
{
    return STRATA_SECURE_BUILD ? NULL : bin_pop(small_class(size));
}

/* The default flavour's allocation and free; the secure flavour's under its
 * own checks. The commonest sizes (up to DIRECT_MAX) are told apart first,
 * with one compare: the class lookup then takes no second branch. */
static STRATA_ALWAYS_INLINE void *alloc_fast(size_t size)
{
    unsigned class_index;
    if (likely(size <= DIRECT_MAX))
        class_index = small_class(size); /* its DIRECT_MAX test folds away in each arm */
    else if (likely(size <= SMALL_MAX))
        class_index = small_class(size);
    else
        return alloc_slow(size);
    void *block = STRATA_SECURE_BUILD ? NULL : bin_pop(class_index);
    if (likely(block != NULL))
        return block;
    return alloc_slow(size);
}

static STRATA_ALWAYS_INLINE void free_fast(void *p)
{
    if (likely(is_segment_pointer(p))) {
        struct heap *heap = thread_heap;
        bool full;
        struct bin *bin = bin_push_own(heap, p, &full);
        if (likely(bin != NULL)) {
            if (likely(!full))
                return;
            free_bin_full(heap, bin);
            return;
        }
        free_segment_slow(p);
        return;
    }
    free_slow(p);
}

static STRATA_ALWAYS_INLINE void *alloc_inline(size_t size)
{
    return STRATA_SECURE_BUILD ? secure_malloc(size) : alloc_fast(size);
}

static STRATA_ALWAYS_INLINE void free_inline(void *p)
{
    if (STRATA_SECURE_BUILD)
        secure_free(p);
    else
        free_fast(p);
}

#endif /* STRATA_ALLOC_H */
