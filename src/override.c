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
/* glibc's memalign and aligned_alloc take any alignment: up to 16 they are
 * malloc, others are rounded up to a power of two; only one too large to
 * be a power of two fails, with EINVAL. A drop-in replacement does the same. */
static void *memalign_as_glibc(size_t alignment, size_t size)
{
    if (alignment <= 8)
        return strata_malloc(size);
    if (alignment <= 16)
        return strata_aligned_alloc(16, size); /* glibc's malloc gives 16 to every size */
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    size_t power = 32;
    while (power < alignment)
        power <<= 1;
    return strata_aligned_alloc(power, size);
}

EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
    return memalign_as_glibc(alignment, size);
}
EXPORT void *memalign(size_t alignment, size_t size)
{
    return memalign_as_glibc(alignment, size);
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
    return memalign_as_glibc(alignment, size);
}
EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }
