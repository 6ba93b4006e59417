/* override.c: the standard malloc family and glibc's __libc_* names, so that
 * LD_PRELOAD=libstrata.so or linking libstrata.a runs a program on strata.
 * Each forwards to the strata_* function with the same contract. */
#include <errno.h>
#include <stddef.h>
#include <unistd.h>

#include "api.h"
#include "os.h"
#include "strata.h"

#define EXPORT STRATA_EXPORT

EXPORT void *malloc(size_t size) { return alloc_inline(size); }
EXPORT void free(void *ptr) { free_inline(ptr); }
EXPORT void *calloc(size_t count, size_t size) { return api_calloc(count, size); }
EXPORT void *realloc(void *ptr, size_t size) { return api_realloc(ptr, size); }
EXPORT void *reallocarray(void *ptr, size_t count, size_t size)
{
    return api_reallocarray(ptr, count, size);
}
EXPORT int posix_memalign(void **out, size_t alignment, size_t size)
{
    return api_posix_memalign(out, alignment, size);
}
/* glibc's memalign and aligned_alloc take any alignment: up to 16 they are
 * malloc, others are rounded up to a power of two; only one too large to
 * be a power of two fails, with EINVAL. A drop-in replacement does the same. */
static void *memalign_as_glibc(size_t alignment, size_t size)
{
    if (alignment <= 8)
        return api_malloc(size);
    if (alignment <= 16)
        return api_aligned_alloc(16, size); /* glibc's malloc gives 16 to every size */
    if (alignment > SIZE_MAX / 2 + 1) {
        errno = EINVAL;
        return NULL;
    }
    size_t power = 32;
    while (power < alignment)
        power <<= 1;
    return api_aligned_alloc(power, size);
}

EXPORT void *aligned_alloc(size_t alignment, size_t size)
{
    return memalign_as_glibc(alignment, size);
}
EXPORT void *memalign(size_t alignment, size_t size)
{
    return memalign_as_glibc(alignment, size);
}
EXPORT void *valloc(size_t size) { return api_aligned_alloc(os_page_size(), size); }
EXPORT void *pvalloc(size_t size)
{
    size_t page = os_page_size();
    if (size > SIZE_MAX - page) {
        errno = ENOMEM;
        return NULL;
    }
    return api_aligned_alloc(page, (size + page - 1) & ~(page - 1));
}
EXPORT size_t malloc_usable_size(void *ptr) { return usable_size_inline(ptr); }

EXPORT void *__libc_malloc(size_t size) { return alloc_inline(size); }
EXPORT void __libc_free(void *ptr) { free_inline(ptr); }
EXPORT void *__libc_calloc(size_t count, size_t size) { return api_calloc(count, size); }
EXPORT void *__libc_realloc(void *ptr, size_t size) { return api_realloc(ptr, size); }
EXPORT void *__libc_memalign(size_t alignment, size_t size)
{
    return memalign_as_glibc(alignment, size);
}
EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }

/* ---- glibc's malloc interface, answered by strata ------------------------
 * Programs and monitoring tools call these; under LD_PRELOAD glibc's own
 * would report on its unused arena. */
#include <malloc.h>
#include <string.h>

/* 1 when memory went back to the OS (glibc's contract), 0 otherwise. */
EXPORT int malloc_trim(size_t pad)
{
    (void)pad; /* strata keeps no top chunk to pad */
    size_t purged = os_purged_bytes(), mapped = os_mapped_bytes();
    strata_trim();
    return os_purged_bytes() > purged || os_mapped_bytes() < mapped;
}

/* What strata holds mapped for small blocks: glibc's "arena" (the blocks
 * above 128 KiB, medium ones in segments too, are its "hblk" ones). */
static size_t small_mapped(const struct strata_stats *s)
{
    return s->mapped > s->large_bytes ? s->mapped - s->large_bytes : 0;
}

/* glibc's fields from strata's statistics: small blocks are the "arena",
 * blocks above 128 KiB the "hblk" ones; uordblks + hblkhd is what is
 * allocated. */
EXPORT struct mallinfo2 mallinfo2(void)
{
    struct strata_stats s;
    strata_stats_get(&s);
    struct mallinfo2 info;
    memset(&info, 0, sizeof info);
    info.arena = small_mapped(&s);
    info.hblks = s.large_blocks;
    info.hblkhd = s.large_bytes;
    info.usmblks = s.allocated_peak;
    info.uordblks = s.allocated - s.large_bytes;
    info.fordblks = s.cached;
    return info;
}

static int clamp_int(size_t value)
{
    return value > (size_t)INT32_MAX ? INT32_MAX : (int)value;
}

EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 wide = mallinfo2();
    struct mallinfo info;
    memset(&info, 0, sizeof info);
    info.arena = clamp_int(wide.arena);
    info.hblks = clamp_int(wide.hblks);
    info.hblkhd = clamp_int(wide.hblkhd);
    info.usmblks = clamp_int(wide.usmblks);
    info.uordblks = clamp_int(wide.uordblks);
    info.fordblks = clamp_int(wide.fordblks);
    return info;
}

EXPORT void malloc_stats(void)
{
    strata_stats_print(stderr); /* glibc prints on stderr too */
}

/* glibc's XML shape: one <heap> for the small blocks, with a <size> per
 * class in use (count: blocks in use, total: their bytes), and the large
 * mappings as glibc's "mmap" total. */
EXPORT int malloc_info(int options, FILE *out)
{
    if (options != 0 || out == NULL) {
        errno = EINVAL;
        return -1;
    }
    struct strata_stats s;
    strata_stats_get(&s);
    size_t small = small_mapped(&s);
    fprintf(out, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
    for (size_t c = 0; c < s.classes; c++)
        if (s.size_class[c].blocks_in_use != 0)
            fprintf(out, "  <size from=\"%zu\" to=\"%zu\" total=\"%zu\" count=\"%zu\"/>\n",
                    s.size_class[c].block_size, s.size_class[c].block_size,
                    s.size_class[c].block_size * s.size_class[c].blocks_in_use,
                    s.size_class[c].blocks_in_use);
    fprintf(out,
            "</sizes>\n<total type=\"fast\" count=\"0\" size=\"0\"/>\n"
            "<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
            "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
            "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n</heap>\n"
            "<total type=\"fast\" count=\"0\" size=\"0\"/>\n<total type=\"rest\" count=\"0\" size=\"%zu\"/>\n"
            "<total type=\"mmap\" count=\"%zu\" size=\"%zu\"/>\n"
            "<system type=\"current\" size=\"%zu\"/>\n<system type=\"max\" size=\"%zu\"/>\n"
            "<aspace type=\"total\" size=\"%zu\"/>\n<aspace type=\"mprotect\" size=\"%zu\"/>\n</malloc>\n",
            s.cached, small, small, small, small, s.cached, s.large_blocks,
            s.large_bytes, s.mapped, s.mapped, s.mapped, s.mapped);
    return 0;
}

/* Only what strata does anyway is accepted: its mmap threshold, fixed at
 * STRATA_MMAP_THRESHOLD. Every other setting has no strata equivalent
 * (strata's are STRATA_* variables read at start) and returns 0, glibc's
 * "not done". */
EXPORT int mallopt(int param, int value)
{
    return param == M_MMAP_THRESHOLD && (size_t)value == STRATA_MMAP_THRESHOLD;
}

/* C23: the size (and alignment) must be the ones the block was asked with;
 * strata finds both from the pointer. */
EXPORT void free_sized(void *ptr, size_t size)
{
    (void)size;
    free_inline(ptr);
}

EXPORT void free_aligned_sized(void *ptr, size_t alignment, size_t size)
{
    (void)alignment;
    (void)size;
    api_free(ptr);
}
