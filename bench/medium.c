/* bench/medium.c: medium and big blocks replaced one at a time, as buffers
 * for files, images and messages are. "medium": 4 live blocks of 128 KiB to
 * 4 MiB, one freed and another allocated at each step, three of its pages
 * written. "big": 20 live blocks of 5 to 25 MiB replaced at random, each
 * zeroed by the program over its whole length. Reports operations (a free
 * and an allocation each) per second, the page faults per operation, and the
 * peak resident memory; the harness counts the system calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common.h"

static long minor_faults(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
}

int main(int argc, char **argv)
{
    const char *mode = "medium";
    long steps = 0;
    const struct bench_flag flags[] = {
        BENCH_STRING_FLAG("-m", "medium|big", &mode,
                          "4 live blocks of 128 KiB..4 MiB, or 20 of 5..25 MiB (default medium)"),
        BENCH_LONG_FLAG("-n", "steps", &steps, 0, "blocks replaced; 0: 20000 for medium, 2000 for big (default 0)"),
    };
    const struct bench_command_line command_line = {"medium", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    int big = bench_choice(&command_line, "-m", mode, "medium|big") == 1;
    if (steps == 0)
        steps = big ? 2000 : 20000;
    size_t live = big ? 20 : 4;
    size_t low = big ? (size_t)5 << 20 : (size_t)128 << 10;
    size_t high = big ? (size_t)25 << 20 : (size_t)4 << 20;
    unsigned char *blocks[20] = {0};
    size_t sizes[20] = {0};
    unsigned long long rng = 42;
    unsigned long checksum = 0;
    long faults_before = minor_faults();
    double start = bench_now();
    for (long i = 0; i < steps + (long)live; i++) {
        size_t slot = big ? (size_t)(bench_random(&rng) % live) : (size_t)i % live;
        if (blocks[slot] != NULL) {
            checksum += blocks[slot][sizes[slot] - 1];
            free(blocks[slot]);
        }
        size_t size = low + (size_t)(bench_random(&rng) % (high - low + 1));
        unsigned char *p = malloc(size);
        if (p == NULL) {
            fprintf(stderr, "malloc(%zu) failed\n", size);
            return 1;
        }
        if (big) {
            memset(p, (int)(i & 0xff), size);
        } else {
            p[0] = 1;
            p[size / 2] = 2;
            p[size - 1] = 3;
        }
        blocks[slot] = p;
        sizes[slot] = size;
    }
    double seconds = bench_now() - start;
    long faults = minor_faults() - faults_before;
    for (size_t slot = 0; slot < live; slot++)
        free(blocks[slot]);
    struct bench_memory peak = bench_peak_memory();
    printf("mode=%s steps=%ld ops_per_sec=%.0f faults_per_op=%.3f top_rss_mb=%.1f checksum=%lu\n", mode,
           steps, (double)steps / seconds, (double)faults / (double)steps, peak.resident_mb, checksum);
    return 0;
}
