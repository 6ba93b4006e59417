/* bench/common.h: what every benchmark program shares: a clock, a random
 * generator, and memory readings from /proc/self/status. */
#ifndef STRATA_BENCH_COMMON_H
#define STRATA_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline unsigned long long bench_random(unsigned long long *state)
{
    unsigned long long x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline int bench_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (sorts them in place). */
static inline double bench_median(double *values, size_t n)
{
    qsort(values, n, sizeof *values, bench_compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

struct bench_memory {
    double resident_mb;
    double virtual_mb;
};

/* Reads two "Name: N kB" fields of /proc/self/status, in MB. */
static inline struct bench_memory bench_status(const char *rss_field, const char *vm_field)
{
    struct bench_memory m = {0, 0};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        double kb;
        if (strncmp(line, rss_field, strlen(rss_field)) == 0 &&
            sscanf(line + strlen(rss_field), " %lf", &kb) == 1)
            m.resident_mb = kb / 1024.0;
        if (strncmp(line, vm_field, strlen(vm_field)) == 0 &&
            sscanf(line + strlen(vm_field), " %lf", &kb) == 1)
            m.virtual_mb = kb / 1024.0;
    }
    if (f != NULL)
        fclose(f);
    return m;
}

static inline struct bench_memory bench_peak_memory(void)
{
    return bench_status("VmHWM:", "VmPeak:");
}

static inline struct bench_memory bench_current_memory(void)
{
    return bench_status("VmRSS:", "VmSize:");
}

#endif
