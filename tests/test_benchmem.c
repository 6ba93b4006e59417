/* test_benchmem.c: the benchmark programs' memory readings (bench/common.h)
 * follow real memory: touching 64 MB raises the resident reading by about
 * that much, the peak reading stays at or above the current one, and the
 * median helper is right. */
#include <sys/mman.h>

#include "check.h"

int main(void)
{
    struct bench_memory before = bench_current_memory();
    size_t size = (size_t)64 << 20;
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 1, size);
    struct bench_memory during = bench_current_memory();
    CHECK(during.resident_mb - before.resident_mb > 60 && during.resident_mb - before.resident_mb < 80);
    CHECK(during.virtual_mb - before.virtual_mb >= 63);
    munmap(p, size);
    struct bench_memory after = bench_current_memory();
    struct bench_memory peak = bench_peak_memory();
    CHECK(after.resident_mb < during.resident_mb - 60);
    CHECK(peak.resident_mb >= during.resident_mb - 0.5);
    CHECK(peak.virtual_mb >= during.virtual_mb - 0.5);

    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
    CHECK(bench_median(odd, 3) == 3);
    CHECK(bench_median(even, 4) == 2.5);
    return check_finish();
}
