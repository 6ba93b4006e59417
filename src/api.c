/* api.c: the public strata_* allocation functions. They validate arguments
 * (errno ENOMEM for impossible sizes, EINVAL for bad alignments) and route
 * to the inline paths, the size-class heaps or the large blocks, through
 * alloc.c's retrying slow paths. */
#include <errno.h>
#include <string.h>

#include "alloc.h"
#include "core.h"
#include "strata.h"

/* A small block that grows is moved to at least this fraction more: a
 * string grown in small steps is then copied a logarithmic number of times. */
#define SMALL_GROWTH_DIVISOR 4
/* A medium block that cannot grow in place moves to 1/8 more, as large
 * mappings keep 1/8 headroom. */
#define MEDIUM_GROWTH_DIVISOR 8

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
        return alloc_big(total, true);
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

/* Moves a block to a new one of `size`; when no memory is to be had, a
 * block that grows fails (NULL, ENOMEM, the block as it was) and one that
 * shrinks stays where it is, as glibc's realloc never fails a shrink. */
static void *move_block(void *ptr, size_t old_size, size_t size)
{
    int saved = errno;
    void *fresh = alloc_inline(size);
    if (unlikely(fresh == NULL)) {
        if (size > old_size)
            return NULL;
        errno = saved;
        return ptr;
    }
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
        /* In place, unless a size that asks for 16-byte alignment would
         * keep a block of a class that only gives 8. */
        if (size <= old_size && size >= old_size / 2 &&
            !((size & 15) == 0 && ((uintptr_t)ptr & 15) != 0))
            return ptr;
        /* A medium block grows into the free slices after it. */
        if (size > old_size && old_size > SMALL_MAX && heap_medium_grow(ptr, size))
            return ptr;
        /* A block that grows tends to grow again (SMALL_GROWTH_DIVISOR;
         * MEDIUM_GROWTH_DIVISOR above SMALL_MAX). */
        size_t target = size;
        size_t grown = old_size + old_size / (old_size > SMALL_MAX ? MEDIUM_GROWTH_DIVISOR : SMALL_GROWTH_DIVISOR);
        if (size > old_size && size < grown && grown <= MEDIUM_MAX)
            target = (size & 15) == 0 ? (grown + 15) & ~(size_t)15 : grown; /* keep its alignment */
        return move_block(ptr, old_size, target);
    }
    if (size > SMALL_MAX)
        return realloc_large(ptr, size);
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
        return alloc_large(size, alignment, false);
    /* Pages start on slice boundaries, so every block of a class whose size
     * is a multiple of the alignment is aligned. */
    unsigned c = size_class(size > alignment ? size : alignment);
    while (c < CLASS_COUNT && class_size[c] % alignment != 0)
        c++;
    if (c == CLASS_COUNT)
        return alloc_large(size, alignment, false);
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
