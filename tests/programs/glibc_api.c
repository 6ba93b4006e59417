/* glibc_api.c: glibc's malloc interface answered by strata. Linked with
 * libstrata.so or run under LD_PRELOAD=libstrata.so, with purging put off:
 * malloc_trim(0) after a freed burst gives memory back at once and says
 * so; mallinfo2 and mallinfo agree with strata's statistics;
 * malloc_info writes glibc's XML shape; malloc_stats prints strata's table;
 * mallopt accepts only what strata does; free_sized frees. Prints
 * "checks: N passed, N failed". */
#include <malloc.h>

#include "../check.h"
#include "strata.h"

/* Weak: from the linked or the preloaded library (glibc 2.36 has no
 * free_sized). */
int strata_stats_get(struct strata_stats *stats) __attribute__((weak));
void free_sized(void *ptr, size_t size) __attribute__((weak));
void free_aligned_sized(void *ptr, size_t alignment, size_t size) __attribute__((weak));

#define BURST 4096

int main(void)
{
    CHECK(strata_stats_get != NULL && free_sized != NULL && free_aligned_sized != NULL);
    if (strata_stats_get == NULL || free_sized == NULL || free_aligned_sized == NULL)
        return check_finish(); /* not on strata at all */
    static void *blocks[BURST];
    for (int i = 0; i < BURST; i++) {
        blocks[i] = malloc(4000);
        memset(blocks[i], 7, 4000);
    }
    struct strata_stats stats;
    strata_stats_get(&stats);
    struct mallinfo2 info = mallinfo2();
    /* Nothing else allocates between the two calls. */
    CHECK(info.uordblks + info.hblkhd == stats.allocated);
    CHECK(info.hblks == stats.large_blocks && info.hblkhd == stats.large_bytes);
    CHECK(info.uordblks >= (size_t)BURST * 4000);
    CHECK(info.arena >= info.uordblks);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* old programs still call it */
    struct mallinfo narrow = mallinfo();
#pragma GCC diagnostic pop
    CHECK((size_t)narrow.uordblks == info.uordblks);

    size_t full = resident_bytes();
    for (int i = 0; i < BURST; i++)
        free(blocks[i]);
    size_t freed = resident_bytes(); /* purging is put off: still resident */
    CHECK(malloc_trim(0) == 1);
    size_t trimmed = resident_bytes();
    printf("resident: full %zu KiB, freed %zu KiB, after malloc_trim %zu KiB\n", full >> 10,
           freed >> 10, trimmed >> 10);
    CHECK(trimmed < freed);
    CHECK(mallinfo2().fordblks < info.fordblks + (size_t)BURST * 4000 / 8); /* the freed blocks are not held */

    void *big = malloc(1 << 20);
    char xml[16384];
    FILE *out = fmemopen(xml, sizeof xml, "w");
    CHECK(out != NULL && malloc_info(0, out) == 0);
    fclose(out);
    CHECK(strncmp(xml, "<malloc version=\"1\">\n<heap nr=\"0\">", 34) == 0);
    CHECK(strstr(xml, "<total type=\"mmap\" count=\"1\"") != NULL);
    CHECK(strstr(xml, "</malloc>\n") != NULL);
    CHECK(malloc_info(1, stdout) == -1);
    free_sized(big, 1 << 20);
    void *aligned = aligned_alloc(4096, 8192);
    free_aligned_sized(aligned, 4096, 8192);
    CHECK(strata_stats_get(&stats) == 0 && stats.large_blocks == 0);

    CHECK(mallopt(M_MMAP_THRESHOLD, STRATA_MMAP_THRESHOLD) == 1);
    CHECK(mallopt(M_MMAP_THRESHOLD, 4096) == 0);
    CHECK(mallopt(M_ARENA_MAX, 1) == 0);
    CHECK(mallopt(M_TRIM_THRESHOLD, 0) == 0);

    fflush(stdout);
    malloc_stats(); /* on stderr: the caller checks it */
    return check_finish();
}
