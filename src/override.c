/* override.c: the standard malloc family and glibc's __libc_* names, so that
 * LD_PRELOAD=libstrata.so or linking libstrata.a runs a program on strata.
 * Each forwards to the strata_* function with the same contract. */
#include <errno.h>
#include <stddef.h>
#include <unistd.h>

#include "alloc.h"
#include "os.h"
#include "strata.h"

#define EXPORT STRATA_EXPORT

EXPORT void *malloc(size_t size) { return alloc_inline(size); }
EXPORT void free(void *ptr) { free_inline(ptr); }
EXPORT void *calloc(size_t count, size_t size) { return strata_calloc(count, size); }
EXPORT void *realloc(void *ptr, size_t size) { return strata_realloc(ptr, size); }
EXPORT void *reallocarray(void *ptr, size_t count, size_t size)
{
    return strata_reallocarray(ptr, count, size);
}
EXPORT int posix_memalign(void **out, size_t alignment, size_t size)
{
    return strata_posix_memalign(out, alignment, size);
}
EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
    return strata_aligned_alloc(alignment, size);
}
EXPORT void *memalign(size_t alignment, size_t size)
{
    return strata_aligned_alloc(alignment, size);
}
EXPORT void *valloc(size_t size) { return strata_aligned_alloc(os_page_size(), size); }
EXPORT void *pvalloc(size_t size)
{
    size_t page = os_page_size();
    if (size > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return strata_aligned_alloc(page, (size + page - 1) & ~(page - 1));
}
EXPORT size_t malloc_usable_size(void *ptr) { return strata_usable_size(ptr); }

EXPORT void *__libc_malloc(size_t size) { return alloc_inline(size); }
EXPORT void __libc_free(void *ptr) { free_inline(ptr); }
EXPORT void *__libc_calloc(size_t count, size_t size) { return strata_calloc(count, size); }
EXPORT void *__libc_realloc(void *ptr, size_t size) { return strata_realloc(ptr, size); }
EXPORT void *__libc_memalign(size_t alignment, size_t size)
{
    return strata_aligned_alloc(alignment, size);
}
EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }
