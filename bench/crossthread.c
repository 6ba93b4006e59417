/* bench/crossthread.c: producers and consumers; every block is freed by
 * another thread than the one that allocated it. Each producer allocates
 * blocks of 16..4096 bytes, writes them and passes them through a ring to
 * its consumers (one a producer by default: pairs; with -c, one producer
 * feeds several, each consumer taking whichever batch is next), which
 * check and free them. Reports operations per second and Top/Low resident
 * and virtual memory, like bench/threads. */
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

/* Batch number b of a group goes through ring slot b % BATCHES, on that
 * slot's lap b / BATCHES: the slot's turn is 2 * lap while the producer
 * may fill it and 2 * lap + 1 while a consumer may empty it, so that with
 * several consumers a batch is emptied once, and a slot refilled only
 * once the batch before is emptied. */
struct batch {
    _Atomic long turn;
    unsigned char *blocks[BATCH];
};

struct group {
    pthread_t producer, *consumers;
    struct batch ring[BATCHES];
    long batches;
    _Atomic long next_batch; /* the next a consumer takes */
    unsigned long long rng;
    _Atomic long bad;
};

static void wait_for_turn(struct batch *batch, long turn)
{
    while (atomic_load_explicit(&batch->turn, memory_order_acquire) != turn)
        sched_yield(); /* the other side is a ring behind */
}

static void *produce(void *arg)
{
    struct group *group = arg;
    /* A local: the group's line is the consumers' too (next_batch), and a
     * store to it at every block would bounce it between the threads. */
    unsigned long long rng = group->rng;
    for (long b = 0; b < group->batches; b++) {
        struct batch *batch = &group->ring[b % BATCHES];
        wait_for_turn(batch, 2 * (b / BATCHES));
        for (int i = 0; i < BATCH; i++) {
            size_t size = 16 + (size_t)(bench_random(&rng) % (4096 - 16 + 1));
            unsigned char *p = malloc(size);
            p[0] = (unsigned char)size;
            p[size - 1] = (unsigned char)(size >> 4);
            memcpy(p + 1, &size, sizeof size);
            batch->blocks[i] = p;
        }
        atomic_store_explicit(&batch->turn, 2 * (b / BATCHES) + 1, memory_order_release);
    }
    group->rng = rng;
    return NULL;
}

static void *consume(void *arg)
{
    struct group *group = arg;
    for (;;) {
        long b = atomic_fetch_add(&group->next_batch, 1);
        if (b >= group->batches)
            return NULL;
        struct batch *batch = &group->ring[b % BATCHES];
        wait_for_turn(batch, 2 * (b / BATCHES) + 1);
        for (int i = 0; i < BATCH; i++) {
            unsigned char *p = batch->blocks[i];
            size_t size = 0;
            memcpy(&size, p + 1, sizeof size);
            if (size < 16 || size > 4096 || p[0] != (unsigned char)size ||
                p[size - 1] != (unsigned char)(size >> 4))
                atomic_fetch_add(&group->bad, 1);
            free(p);
        }
        atomic_store_explicit(&batch->turn, 2 * (b / BATCHES) + 2, memory_order_release);
    }
}

int main(int argc, char **argv)
{
    int producers = 1, consumers = 1;
    long total = 2000000;
    const struct bench_flag flags[] = {
        BENCH_INT_FLAG("-p", "producers", &producers, 1,
                       "producers, each with its own consumers and ring (default 1)"),
        BENCH_INT_FLAG("-c", "consumers", &consumers, 1,
                       "consumers a producer, each taking whichever batch is next; 1: pairs (default 1)"),
        BENCH_LONG_FLAG("-n", "blocks", &total, BATCH,
                        "blocks over all producers, at least 256 each, in whole batches of 256 (default 2000000)"),
    };
    const struct bench_command_line command_line = {"crossthread", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    if (total < (long)producers * BATCH)
        bench_usage_error(&command_line, "-n %ld: fewer than %d blocks a producer (-p %d)", total, BATCH, producers);
    struct group *all = calloc((size_t)producers, sizeof *all);
    long batches = total / producers / BATCH;
    double start = bench_now();
    for (int i = 0; i < producers; i++) {
        all[i].batches = batches;
        all[i].rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(i + 7);
        all[i].consumers = calloc((size_t)consumers, sizeof *all[i].consumers);
        for (int c = 0; c < consumers; c++)
            pthread_create(&all[i].consumers[c], NULL, consume, &all[i]);
        pthread_create(&all[i].producer, NULL, produce, &all[i]);
    }
    long bad = 0;
    for (int i = 0; i < producers; i++) {
        pthread_join(all[i].producer, NULL);
        for (int c = 0; c < consumers; c++)
            pthread_join(all[i].consumers[c], NULL);
        free(all[i].consumers);
        bad += atomic_load(&all[i].bad);
    }
    double seconds = bench_now() - start;
    free(all);
    struct bench_memory top = bench_peak_memory();
    struct bench_memory low = bench_current_memory();
    printf("producers=%d consumers=%d threads=%d ops_per_sec=%.0f top_rss_mb=%.1f top_vm_mb=%.1f low_rss_mb=%.1f "
           "low_vm_mb=%.1f bad_blocks=%ld\n",
           producers, consumers, producers * (1 + consumers),
           2.0 * (double)(batches * BATCH * producers) / seconds, top.resident_mb, top.virtual_mb, low.resident_mb,
           low.virtual_mb, bad);
    return bad != 0;
}
