/* api.c: the public strata_* allocation functions. They validate arguments
 * (errno ENOMEM for impossible sizes, EINVAL for bad alignments) and route
 * to the inline paths, the size-class heaps or the large blocks, through
 * alloc.c's retrying slow paths. The override, the C++ operators, arenas and
 * contexts call the same functions as api_*; only a program's own strata_*
 * calls go to Valgrind's malloc when memcheck runs (below). */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "api.h"
#include "core.h"
#include "heap.h"
#include "instrument.h"
#include "strata.h"

/* A small block that grows is moved to at least this fraction more: a
 * string grown in small steps is then copied a logarithmic number of times. */
#define SMALL_GROWTH_DIVISOR 4
/* A medium block that cannot grow in place moves to 1/8 more, as large
 * mappings keep 1/8 headroom. */
#define MEDIUM_GROWTH_DIVISOR 8

void *api_malloc(size_t size)
{
    return alloc_inline(size);
}

void api_free(void *ptr)
{
    free_inline(ptr);
}

void *api_calloc(size_t count, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    if (STRATA_SECURE_BUILD)
        return secure_calloc(total);
    if (total > SMALL_REQUEST_MAX)
        return alloc_big(total, true);
    void *p = alloc_inline(total);
    if (likely(p != NULL))
        memset(p, 0, total);
    return p;
}

/* The usable size of a live block of a segment, for `call`'s messages: a
 * pointer that starts no block (free slices, a freed medium block's among
 * them, the inside of a block, a page's lead) and a freed small block (its
 * two words a free block's, the check every free makes) are reported.
 * glibc stops both where its chunk is unmapped or trimmed away (a fault);
 * strata always does, with the address. */
static size_t live_block_size(const void *ptr, const char *not_allocated, const char *freed)
{
    size_t size = small_usable_size(ptr);
    if (unlikely(size == 0))
        report_fatal(not_allocated, ptr);
    if (unlikely(size <= SMALL_REQUEST_MAX && block_is_free(ptr)))
        report_fatal(freed, ptr);
    return size;
}

size_t api_usable_size(const void *ptr)
{
    if (STRATA_SECURE_BUILD)
        return secure_usable_size(ptr);
    if (ptr == NULL)
        return 0;
    if (is_segment_pointer(ptr))
        return live_block_size(ptr, "malloc_usable_size of a pointer that is not allocated",
                               "malloc_usable_size of a free block (a use after free)");
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
    /* Above the bins' sizes the copy, and likely the program's writes past
     * it (a block grows to be written), fill the new block: its pages come
     * resident in one call rather than a trap each, as a large block's
     * growth in place does (large.c). */
    if (size > SMALL_MAX) {
        if (is_segment_pointer(fresh))
            heap_medium_populate(fresh, size);
        else
            os_populate(fresh, size);
    }
    memcpy(fresh, ptr, old_size < size ? old_size : size);
    free_inline(ptr);
    return fresh;
}

void *api_realloc(void *ptr, size_t size)
{
    if (STRATA_SECURE_BUILD)
        return secure_realloc(ptr, size);
    if (ptr == NULL)
        return alloc_inline(size);
    if (size == 0) {
        free_inline(ptr);
        return NULL;
    }
    if (is_segment_pointer(ptr)) {
        /* A freed block kept in place would be handed out twice. */
        size_t old_size = live_block_size(ptr, "realloc of a pointer that is not allocated",
                                          "realloc of a free block (a use after free)");
        /* In place, unless a size that asks for 16-byte alignment would
         * keep a block of a class that only gives 8. */
        if (size <= old_size && size >= old_size / 2 &&
            !((size & 15) == 0 && ((uintptr_t)ptr & 15) != 0)) {
            /* A realloc is a free and an allocation: the block kept in
             * place goes unsampled from now on. */
            if (unlikely(profile_on) && old_size <= SMALL_MAX)
                small_guard_check(ptr);
            return ptr;
        }
        /* A medium block grows into the free slices after it. */
        if (size > old_size && old_size > SMALL_MAX && heap_medium_grow(ptr, size))
            return ptr;
        /* A block that grows tends to grow again (SMALL_GROWTH_DIVISOR;
         * MEDIUM_GROWTH_DIVISOR above SMALL_MAX). */
        size_t target = size;
        size_t grown = old_size + old_size / (old_size > SMALL_MAX ? MEDIUM_GROWTH_DIVISOR : SMALL_GROWTH_DIVISOR);
        if (size > old_size && size < grown && grown <= MEDIUM_MAX)
            target = (size & 15) == 0 ? (grown + 15) & ~(size_t)15 : grown; /* keep its alignment */
        void *moved = move_block(ptr, old_size, target);
        /* Without memory for the room to grow, the size asked may still be had. */
        if (unlikely(moved == NULL) && target > size)
            moved = move_block(ptr, old_size, size);
        return moved;
    }
    if (size > SMALL_MAX)
        return realloc_large(ptr, size);
    size_t old_size = large_usable_size(ptr);
    if (old_size == 0)
        report_fatal("realloc of a pointer strata did not allocate", ptr);
    return move_block(ptr, old_size, size);
}

void *api_reallocarray(void *ptr, size_t count, size_t size)
{
    size_t total;
    if (unlikely(__builtin_mul_overflow(count, size, &total))) {
        errno = ENOMEM;
        return NULL;
    }
    return api_realloc(ptr, total);
}

void *api_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    if (STRATA_SECURE_BUILD)
        return secure_aligned_alloc(alignment, size);
    if (alignment <= 8)
        return alloc_inline(size);
    if (size > SMALL_REQUEST_MAX || alignment > SLICE_SIZE)
        return alloc_large(size, alignment, false);
    /* Pages start on slice boundaries, so every block of a class whose size
     * and page lead are multiples of the alignment is aligned; its slot
     * holds the size and the guard word. */
    unsigned c = class_aligned_from(request_class(size), alignment);
    if (c == CLASS_COUNT)
        return alloc_large(size, alignment, false);
    return alloc_class(c, size);
}

int api_posix_memalign(void **out, size_t alignment, size_t size)
{
    if (alignment < sizeof(void *) || (alignment & (alignment - 1)) != 0)
        return EINVAL;
    int saved = errno;
    void *p = api_aligned_alloc(alignment, size);
    errno = saved;
    if (p == NULL)
        return ENOMEM;
    *out = p;
    return 0;
}

/* ---- the exported strata_* calls ------------------------------------------
 * Under Valgrind they go to the process's malloc family: the one memcheck
 * replaces (the preloaded override, told to it with --soname-synonyms, or
 * glibc's beside the API library), so that it sees their blocks and reports
 * a use after free, a leak or an invalid free in them. Resolved when start-up
 * has found Valgrind; never the override's own functions calling back here,
 * since those call api_*. */
static struct {
    void *(*allocate)(size_t);                       /* malloc */
    void (*release)(void *);                         /* free */
    void *(*allocate_zeroed)(size_t, size_t);        /* calloc */
    void *(*resize)(void *, size_t);                 /* realloc */
    int (*allocate_aligned)(void **, size_t, size_t); /* posix_memalign */
    size_t (*usable_size)(void *);                   /* malloc_usable_size */
    _Atomic int state; /* 0 not looked up, 1 found, 2 not found */
} process_malloc;

static STRATA_NOINLINE bool process_malloc_found(void)
{
    int state = atomic_load_explicit(&process_malloc.state, memory_order_acquire);
    if (state == 0) {
        *(void **)&process_malloc.allocate = os_default_symbol("malloc");
        *(void **)&process_malloc.release = os_default_symbol("free");
        *(void **)&process_malloc.allocate_zeroed = os_default_symbol("calloc");
        *(void **)&process_malloc.resize = os_default_symbol("realloc");
        *(void **)&process_malloc.allocate_aligned = os_default_symbol("posix_memalign");
        *(void **)&process_malloc.usable_size = os_default_symbol("malloc_usable_size");
        bool all = process_malloc.allocate && process_malloc.release && process_malloc.allocate_zeroed &&
                   process_malloc.resize && process_malloc.allocate_aligned && process_malloc.usable_size;
        state = all ? 1 : 2;
        atomic_store_explicit(&process_malloc.state, state, memory_order_release);
    }
    return state == 1;
}

#define UNDER_VALGRIND() (unlikely(instrument_valgrind) && process_malloc_found())

STRATA_EXPORT void *strata_malloc(size_t size)
{
    return UNDER_VALGRIND() ? process_malloc.allocate(size) : alloc_inline(size);
}

STRATA_EXPORT void strata_free(void *ptr)
{
    if (UNDER_VALGRIND())
        process_malloc.release(ptr);
    else
        free_inline(ptr);
}

STRATA_EXPORT void *strata_calloc(size_t count, size_t size)
{
    return UNDER_VALGRIND() ? process_malloc.allocate_zeroed(count, size) : api_calloc(count, size);
}

STRATA_EXPORT size_t strata_usable_size(const void *ptr)
{
    return UNDER_VALGRIND() ? (ptr ? process_malloc.usable_size((void *)ptr) : 0) : api_usable_size(ptr);
}

STRATA_EXPORT void *strata_realloc(void *ptr, size_t size)
{
    return UNDER_VALGRIND() ? process_malloc.resize(ptr, size) : api_realloc(ptr, size);
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
    if (!UNDER_VALGRIND())
        return api_aligned_alloc(alignment, size);
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    void *p = NULL;
    int failed = process_malloc.allocate_aligned(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size);
    if (failed != 0)
        errno = failed;
    return failed != 0 ? NULL : p;
}

STRATA_EXPORT int strata_posix_memalign(void **out, size_t alignment, size_t size)
{
    return UNDER_VALGRIND() ? process_malloc.allocate_aligned(out, alignment, size)
                            : api_posix_memalign(out, alignment, size);
}
