/* bench/loops.c: every thread runs its own malloc/free loop of random small
 * sizes (8..512 bytes), each block written at its start and freed a few
 * steps later (a ring of 16 live blocks a thread), as parsers, formatters
 * and request handlers allocate scratch space. Reports alloc/free
 * operations per second over all threads and the peak resident memory. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define RING 16

static long steps_per_thread = 20000000;

struct worker {
    pthread_t thread;
    unsigned long long rng;
    unsigned long checksum;
};

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    /* The thread's state in locals: the workers lie side by side, and a
     * store to one's random state at every step would bounce their shared
     * cache line between the threads (a cost of the harness's, not of the
     * allocator's). */
    unsigned long long rng = w->rng;
    unsigned char *ring[RING] = {0};
    unsigned long checksum = 0;
    for (long i = 0; i < steps_per_thread; i++) {
        unsigned slot = (unsigned)(i % RING);
        if (ring[slot] != NULL) {
            checksum += ring[slot][0];
            free(ring[slot]);
        }
        size_t size = 8 + (size_t)(bench_random(&rng) % (512 - 8 + 1));
        ring[slot] = malloc(size);
        ring[slot][0] = (unsigned char)size;
    }
    for (unsigned slot = 0; slot < RING; slot++)
        free(ring[slot]);
    w->rng = rng;
    w->checksum = checksum;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 1;
    const struct bench_flag flags[] = {
        BENCH_INT_FLAG("-t", "threads", &threads, 1, "threads, each running its own loop (default 1)"),
        BENCH_LONG_FLAG("-n", "steps", &steps_per_thread, 1, "a free and an allocation each, a thread (default 20000000)"),
    };
    const struct bench_command_line command_line = {"loops", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    struct worker *workers = calloc((size_t)threads, sizeof *workers);
    double start = bench_now();
    for (int t = 0; t < threads; t++) {
        workers[t].rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(t + 1);
        pthread_create(&workers[t].thread, NULL, run_worker, &workers[t]);
    }
    unsigned long checksum = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        checksum += workers[t].checksum;
    }
    double seconds = bench_now() - start;
    struct bench_memory peak = bench_peak_memory();
    printf("threads=%d ops_per_sec=%.0f top_rss_mb=%.1f checksum=%lu\n", threads,
           2.0 * (double)steps_per_thread * threads / seconds, peak.resident_mb, checksum);
    free(workers);
    return 0;
}
