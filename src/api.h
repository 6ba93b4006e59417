/* api.h: the allocation calls as the library's own layers above the core
 * make them (api.c), and the inline paths the override, `operator new` and
 * the contexts take: the default flavour's (alloc.h) or, in the secure
 * flavour, secure.h's. */
#ifndef STRATA_API_H
#define STRATA_API_H

#include "alloc.h"
#include "secure.h"

/* The strata_* calls, never sent to Valgrind's malloc, unlike a program's. */
void *api_malloc(size_t size);
void api_free(void *ptr);
void *api_calloc(size_t count, size_t size);
void *api_realloc(void *ptr, size_t size);
void *api_reallocarray(void *ptr, size_t count, size_t size);
void *api_aligned_alloc(size_t alignment, size_t size);
int api_posix_memalign(void **out, size_t alignment, size_t size);
size_t api_usable_size(const void *ptr);

/* The flavour's allocation and free: a constant chooses, so each build's
 * inline path is its own flavour's alone. */
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

/* malloc_usable_size: the calling heap's own small block answered inline
 * (own_block_usable_size), anything else by api_usable_size. */
static STRATA_ALWAYS_INLINE size_t usable_size_inline(const void *p)
{
    if (STRATA_SECURE_BUILD)
        return api_usable_size(p);
    size_t size = own_block_usable_size(thread_heap, p);
    return likely(size != 0) ? size : api_usable_size(p);
}

#endif /* STRATA_API_H */
