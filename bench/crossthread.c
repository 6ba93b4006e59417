/* bench/crossthread.c: producer/consumer pairs; every block is freed by
 * another thread than the one that allocated it. Each producer allocates
 * blocks of 16..4096 bytes, writes them and passes them through a ring to
 * its consumer, which checks and frees them. Reports operations per second
 * and Top/Low resident and virtual memory, like bench/threads. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#include <sched.h>

/* Blocks travel in batches, so the measure is the allocator's remote free,
 * not a cache line bouncing per block. */
#define BATCHES 8
#define BATCH 256

struct batch {
    _Atomic int full;
    unsigned char *blocks[BATCH];
};

struct pair {
    pthread_t producer, consumer;
    struct batch ring[BATCHES];
    long blocks; /* a multiple of BATCH */
    unsigned long long rng;
    _Atomic long bad;
};

static void *produce(void *arg)
{
    struct pair *pair = arg;
    for (long b = 0; b < pair->blocks / BATCH; b++) {
        struct batch *batch = &pair->ring[b % BATCHES];
        while (atomic_load_explicit(&batch->full, memory_order_acquire))
            sched_yield(); /* the consumer is a ring behind */
        for (int i = 0; i < BATCH; i++) {
            size_t size = 16 + (size_t)(bench_random(&pair->rng) % (4096 - 16 + 1));
            unsigned char *p = malloc(size);
            p[0] = (unsigned char)size;
            p[size - 1] = (unsigned char)(size >> 4);
            memcpy(p + 1, &size, sizeof size);
            batch->blocks[i] = p;
        }
        atomic_store_explicit(&batch->full, 1, memory_order_release);
    }
    return NULL;
}

static void *consume(void *arg)
{
    struct pair *pair = arg;
    for (long b = 0; b < pair->blocks / BATCH; b++) {
        struct batch *batch = &pair->ring[b % BATCHES];
        while (!atomic_load_explicit(&batch->full, memory_order_acquire))
            sched_yield();
        for (int i = 0; i < BATCH; i++) {
            unsigned char *p = batch->blocks[i];
            size_t size = 0;
            memcpy(&size, p + 1, sizeof size);
            if (size < 16 || size > 4096 || p[0] != (unsigned char)size ||
                p[size - 1] != (unsigned char)(size >> 4))
                atomic_fetch_add(&pair->bad, 1);
            free(p);
        }
        atomic_store_explicit(&batch->full, 0, memory_order_release);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int pairs = 1;
    long total = 2000000;
    const struct bench_flag flags[] = {
        BENCH_INT_FLAG("-p", "pairs", &pairs, 1, "producer/consumer pairs, two threads each (default 1)"),
        BENCH_LONG_FLAG("-n", "blocks", &total, BATCH,
                        "blocks over all pairs, at least 256 a pair, in whole batches of 256 (default 2000000)"),
    };
    const struct bench_command_line command_line = {"crossthread", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    if (total < (long)pairs * BATCH)
        bench_usage_error(&command_line, "-n %ld: fewer than %d blocks a pair (-p %d)", total, BATCH, pairs);
    struct pair *all = calloc((size_t)pairs, sizeof *all);
    double start = bench_now();
    for (int i = 0; i < pairs; i++) {
        all[i].blocks = total / pairs / BATCH * BATCH;
        all[i].rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 7);
        pthread_create(&all[i].consumer, NULL, consume, &all[i]);
        pthread_create(&all[i].producer, NULL, produce, &all[i]);
    }
    long bad = 0;
    for (int i = 0; i < pairs; i++) {
        pthread_join(all[i].producer, NULL);
        pthread_join(all[i].consumer, NULL);
        bad += atomic_load(&all[i].bad);
    }
    double seconds = bench_now() - start;
    free(all);
    struct bench_memory top = bench_peak_memory();
    struct bench_memory low = bench_current_memory();
    printf("pairs=%d threads=%d ops_per_sec=%.0f top_rss_mb=%.1f top_vm_mb=%.1f low_rss_mb=%.1f "
           "low_vm_mb=%.1f bad_blocks=%ld\n",
           pairs, 2 * pairs, 2.0 * (double)(total / pairs / BATCH * BATCH * pairs) / seconds, top.resident_mb, top.virtual_mb,
           low.resident_mb, low.virtual_mb, bad);
    return bad != 0;
}
