/* api.c: the public strata_* functions and the slow paths behind the
 * inline ones. They validate arguments (errno ENOMEM for impossible sizes,
 * EINVAL for bad alignments) and route to the inline fast paths, the
 * size-class heaps or the large-block mappings; at the memory limit
 * (STRATA_LIMIT_MB) an allocation that fails gives back what the caches
 * hold (strata_trim) and tries once more, the one place for that policy. */
#include <errno.h>
#include <string.h>

#include "core.h"
#include "fastpath.h"
#include "strata.h"

/* A small block that grows is moved to at least this fraction more: a
 * string grown in small steps is then copied a logarithmic number of times. */
#define SMALL_GROWTH_DIVISOR 4

static void purge_all(struct heap *heap, void *unused)
{
    (void)unused;
    heap_purge_dirty(heap);
}

STRATA_EXPORT void strata_trim(void)
{
    strata_init();
    heap_trim_own();
    heap_for_each_live(purge_all, NULL, true);
    segment_cache_release();
    large_cache_release();
}

/* Whether a failed allocation is worth a second try: only at the memory
 * limit, where the caches may hold what the limit lacks. */
static bool trim_for_retry(void)
{
    if (likely(strata_options.limit_mb == 0))
        return false;
    strata_trim();
    return true;
}

static STRATA_NOINLINE void *alloc_class_slow(unsigned class_index)
{
    struct heap *heap = thread_heap;
    if (unlikely(heap == &heap_empty)) {
        strata_init();
        heap = heap_acquire();
        if (heap == NULL) {
            errno = ENOMEM;
            return NULL;
        }
    }
    void *block = heap_bin_refill(heap, class_index);
    purger_start_if_wanted();
    if (unlikely(block == NULL) && trim_for_retry())
        block = heap_bin_refill(heap, class_index);
    if (unlikely(block == NULL))
        errno = ENOMEM;
    return block;
}

/* A block of the class: from the bin, else the slow path. */
static void *alloc_class(unsigned class_index)
{
    struct bin *bin = &thread_heap->bins[class_index];
    struct block *block = bin->head;
    if (likely(block != NULL)) {
        bin->head = block->next;
        bin->count--;
        return block;
    }
    return alloc_class_slow(class_index);
}

static void *large_alloc_retrying(size_t size, size_t alignment, bool zero)
{
    strata_init();
    void *p = zero ? large_calloc(size) : large_alloc(size, alignment);
    if (unlikely(p == NULL) && errno == ENOMEM && trim_for_retry())
        p = zero ? large_calloc(size) : large_alloc(size, alignment);
    return p;
}

void *alloc_slow(size_t size)
{
    if (unlikely(size > SMALL_MAX))
        return large_alloc_retrying(size, 0, false);
    return alloc_class_slow(size_class(size));
}

void free_bin_full(struct heap *heap, struct bin *bin)
{
    heap_bin_flush(heap, bin);
    purger_start_if_wanted();
}

STRATA_EXPORT void *strata_malloc(size_t size)
{
    return alloc_inline(size);
}

STRATA_EXPORT void strata_free(void *ptr)
{
    free_inline(ptr);
}

STRATA_EXPORT void *strata_calloc(size_t count, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (total > SMALL_MAX)
        return large_alloc_retrying(total, 0, true);
    void *p = alloc_inline(total);
    if (likely(p != NULL))
        memset(p, 0, total);
    return p;
}

STRATA_EXPORT size_t strata_usable_size(const void *ptr)
{
    if (ptr == NULL)
        return 0;
    if (is_segment_pointer(ptr))
        return small_usable_size(ptr);
    return large_usable_size(ptr);
}

static void *move_block(void *ptr, size_t old_size, size_t size)
{
    void *fresh = alloc_inline(size);
    if (fresh == NULL)
        return NULL;
    memcpy(fresh, ptr, old_size < size ? old_size : size);
    free_inline(ptr);
    return fresh;
}

STRATA_EXPORT void *strata_realloc(void *ptr, size_t size)
{
    if (ptr == NULL)
        return alloc_inline(size);
    if (size == 0) {
        free_inline(ptr);
        return NULL;
    }
    if (is_segment_pointer(ptr)) {
        size_t old_size = small_usable_size(ptr);
        if (unlikely(old_size == 0))
            report_fatal("realloc of a pointer that is not allocated", ptr);
        if (size <= old_size && size >= old_size / 2)
            return ptr;
        /* A block that grows tends to grow again (SMALL_GROWTH_DIVISOR). */
        size_t target = size;
        size_t grown = old_size + old_size / SMALL_GROWTH_DIVISOR;
        if (size > old_size && size < grown && grown <= SMALL_MAX)
            target = grown;
        return move_block(ptr, old_size, target);
    }
    if (size > SMALL_MAX) {
        void *q = large_realloc(ptr, size);
        if (unlikely(q == NULL) && errno == ENOMEM && trim_for_retry())
            q = large_realloc(ptr, size);
        return q;
    }
    size_t old_size = large_usable_size(ptr);
    if (old_size == 0)
        report_fatal("realloc of a pointer strata did not allocate", ptr);
    return move_block(ptr, old_size, size);
}

STRATA_EXPORT void *strata_reallocarray(void *ptr, size_t count, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return strata_realloc(ptr, total);
}

STRATA_EXPORT void *strata_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    if (alignment <= 8)
        return alloc_inline(size);
    if (size > SMALL_MAX || alignment > SLICE_SIZE)
        return large_alloc_retrying(size, alignment, false);
    /* Pages start on slice boundaries, so every block of a class whose size
     * is a multiple of the alignment is aligned. */
    unsigned c = size_class(size > alignment ? size : alignment);
    while (c < CLASS_COUNT && class_size[c] % alignment != 0)
        c++;
    if (c == CLASS_COUNT)
        return large_alloc_retrying(size, alignment, false);
    return alloc_class(c);
}

STRATA_EXPORT int strata_posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
        return EINVAL;
    int saved = errno;
    void *p = strata_aligned_alloc(alignment, size);
    errno = saved;
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}
