/* check.h: the tests' tiny assertion layer. CHECK counts a pass or prints
 * the failing expression; check_finish prints this program's totals in the
 * line tests/run.sh adds up. */
#ifndef STRATA_TEST_CHECK_H
#define STRATA_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../bench/common.h"

static int check_passed, check_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            check_passed++;                                                      \
        } else {                                                                 \
            check_failed++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                        \
    } while (0)

static inline int check_finish(void)
{
    printf("checks: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

/* Resident memory of this process in bytes, from /proc/self/statm. */
static inline size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* Whether this process's resident size reflects strata's memory: not under a
 * sanitizer (tests/run.sh exports SANITIZER), whose shadow memory swamps it.
 * Tests then rely on strata's own mapping count and say what they skipped. */
static inline int resident_is_meaningful(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer == NULL || *sanitizer == '\0')
        return 1;
    printf("resident-size checks not run under %s\n", sanitizer);
    return 0;
}

/* A deterministic per-test random generator: the benchmarks' xorshift. */
#define check_random bench_random

#endif
