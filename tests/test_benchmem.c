/* test_benchmem.c: the benchmark programs' memory readings (bench/common.h)
 * follow real memory: touching 64 MB raises the resident reading by about
 * that much, the peak reading stays at or above the current one, and the
 * median helper is right. */
#include <sys/mman.h>

#include "check.h"

/* Touching a 64 MB mapping shows in the current reading and stays in the
 * peak one after it is gone. */
static void test_readings(void)
{
    struct bench_memory before = bench_current_memory();
    size_t size = (size_t)64 << 20;
    char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    memset(p, 1, size);
    struct bench_memory during = bench_current_memory();
    CHECK_CMP(during.resident_mb - before.resident_mb, >, 60);
    CHECK_CMP(during.resident_mb - before.resident_mb, <, 80);
    CHECK_CMP(during.virtual_mb - before.virtual_mb, >=, 63);
    munmap(p, size);
    struct bench_memory after = bench_current_memory();
    struct bench_memory peak = bench_peak_memory();
    CHECK_CMP(after.resident_mb, <, during.resident_mb - 60);
    CHECK_CMP(peak.resident_mb, >=, during.resident_mb - 0.5);
    CHECK_CMP(peak.virtual_mb, >=, during.virtual_mb - 0.5);
}

static void test_median(void)
{
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
    CHECK_CMP(bench_median(odd, 3), ==, 3);
    CHECK_CMP(bench_median(even, 4), ==, 2.5);
}

static const struct check_test tests[] = {
    {"readings", test_readings},
    {"median", test_median},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
