/* bench/lifetimes.c: blocks of random lifetimes, freed by whichever thread
 * reaches their time; threads come and go. A shared clock advances one
 * tick a step. At each tick the thread that holds it frees the blocks due
 * then, whoever allocated them, and allocates one block of 24..4096 bytes
 * (sizes spread evenly over their logarithm) that is due between 1 and
 * 65535 ticks later (also spread over the logarithm: most short-lived, a
 * few living through many threads). A thread holds 64 ticks at a time and
 * exits after its steps; a new one takes its place, so many blocks are
 * freed after the thread that made them has gone. Reports alloc/free
 * operations per second, the blocks live on average and the peak resident
 * memory. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define WHEEL (1L << 16) /* ticks; a lifetime is shorter */
#define TICKS_HELD 64
#define SMALLEST 24
#define LARGEST 4096

/* A live block starts with its link in its bucket's list and its tick,
 * then its size in two bytes; its last byte is checked at the free. */
struct block {
    struct block *next;
    long due;
};

/* The blocks due at ticks that are equal modulo WHEEL. `drained` is the
 * last tick whose blocks were taken: a block due at a tick already
 * drained is freed at once rather than a turn of the wheel late. */
struct bucket {
    _Atomic(struct block *) head;
    _Atomic long drained;
};

static struct bucket wheel[WHEEL];
static _Atomic long clock_ticks;
/* Blocks allocated less those freed, added to by each thread after each
 * run of ticks it held, and the sum of its readings then. */
static _Atomic long live_blocks, live_block_readings, live_block_samples, bad_blocks;

struct worker {
    pthread_t thread;
    unsigned long long rng;
    long steps;
    long allocations, frees;
};

/* A number between low and high spread evenly over its logarithm. */
static long log_spread(unsigned long long *rng, long low, long high)
{
    long top = low;
    int doublings = 0;
    while (top * 2 <= high) {
        top *= 2;
        doublings++;
    }
    long from = low << (bench_random(rng) % (unsigned long long)(doublings + 1));
    long to = from * 2 - 1 < high ? from * 2 - 1 : high;
    return from + (long)(bench_random(rng) % (unsigned long long)(to - from + 1));
}

/* A thread's running state, kept on its own stack: the workers lie side
 * by side, and stores to one's counts and random state at every step would
 * bounce their shared cache line between the threads (a cost of the
 * harness's, not of the allocator's). */
struct tally {
    unsigned long long rng;
    long allocations, frees;
};

static void free_block(struct tally *w, struct block *b)
{
    unsigned char *bytes = (unsigned char *)b;
    size_t size = (size_t)bytes[sizeof *b] | (size_t)bytes[sizeof *b + 1] << 8;
    if (size < SMALLEST || size > LARGEST || bytes[size - 1] != (unsigned char)(size * 7))
        atomic_fetch_add(&bad_blocks, 1);
    free(b);
    w->frees++;
}

static void *run_worker(void *arg)
{
    struct worker *worker = arg;
    struct tally tally = {.rng = worker->rng}, *w = &tally;
    for (long done = 0; done < worker->steps; done += TICKS_HELD) {
        long first = atomic_fetch_add_explicit(&clock_ticks, TICKS_HELD, memory_order_relaxed);
        long balance = w->allocations - w->frees;
        for (long tick = first; tick < first + TICKS_HELD; tick++) {
            struct bucket *now = &wheel[tick % WHEEL];
            atomic_store_explicit(&now->drained, tick, memory_order_release);
            struct block *due = atomic_exchange_explicit(&now->head, NULL, memory_order_acquire);
            while (due != NULL) {
                struct block *next = due->next;
                free_block(w, due);
                due = next;
            }
            size_t size = (size_t)log_spread(&w->rng, SMALLEST, LARGEST);
            struct block *b = malloc(size);
            unsigned char *bytes = (unsigned char *)b;
            w->allocations++;
            b->due = tick + log_spread(&w->rng, 1, WHEEL - 1);
            bytes[sizeof *b] = (unsigned char)size;
            bytes[sizeof *b + 1] = (unsigned char)(size >> 8);
            bytes[size - 1] = (unsigned char)(size * 7);
            struct bucket *then = &wheel[b->due % WHEEL];
            if (atomic_load_explicit(&then->drained, memory_order_acquire) >= b->due) {
                free_block(w, b); /* another thread is past its time already */
                continue;
            }
            b->next = atomic_load_explicit(&then->head, memory_order_relaxed);
            while (!atomic_compare_exchange_weak_explicit(&then->head, &b->next, b, memory_order_release,
                                                          memory_order_relaxed))
                ;
        }
        long live = atomic_fetch_add_explicit(&live_blocks, w->allocations - w->frees - balance,
                                              memory_order_relaxed);
        atomic_fetch_add_explicit(&live_block_readings, live, memory_order_relaxed);
        atomic_fetch_add_explicit(&live_block_samples, 1, memory_order_relaxed);
    }
    worker->rng = tally.rng;
    worker->allocations = tally.allocations;
    worker->frees = tally.frees;
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = 2;
    long steps = 200000, started = 40;
    const struct bench_flag flags[] = {
        BENCH_INT_FLAG("-t", "threads", &threads, 1, "threads running at once (default 2)"),
        BENCH_LONG_FLAG("-n", "steps", &steps, TICKS_HELD,
                        "a thread's steps (an allocation and the frees due) before a new one replaces it, "
                        "in whole runs of 64 (default 200000)"),
        BENCH_LONG_FLAG("-g", "threads", &started, 1, "threads started over the run, at least -t (default 40)"),
    };
    const struct bench_command_line command_line = {"lifetimes", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    if (started < threads)
        bench_usage_error(&command_line, "-g %ld: fewer threads started than run at once (-t %d)", started, threads);
    for (long i = 0; i < WHEEL; i++)
        atomic_store(&wheel[i].drained, -1);
    struct worker *running = calloc((size_t)threads, sizeof *running);
    long allocations = 0, frees = 0;
    double start = bench_now();
    /* Threads are replaced one at a time, the oldest first, so that the
     * others go on meanwhile. */
    for (long n = 0; n < started + threads; n++) {
        struct worker *w = &running[n % threads];
        if (n >= threads) {
            pthread_join(w->thread, NULL);
            allocations += w->allocations;
            frees += w->frees;
        }
        if (n < started) {
            *w = (struct worker){.rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(n + 3), .steps = steps};
            pthread_create(&w->thread, NULL, run_worker, w);
        }
    }
    double seconds = bench_now() - start;
    struct tally main_thread = {0};
    for (long i = 0; i < WHEEL; i++)
        for (struct block *b = atomic_exchange(&wheel[i].head, NULL), *next; b != NULL; b = next) {
            next = b->next;
            free_block(&main_thread, b);
        }
    struct bench_memory peak = bench_peak_memory();
    long samples = atomic_load(&live_block_samples);
    printf("threads=%d started=%ld ops_per_sec=%.0f live_blocks=%.0f top_rss_mb=%.1f bad_blocks=%ld\n", threads,
           started, (double)(allocations + frees) / seconds,
           samples > 0 ? (double)atomic_load(&live_block_readings) / (double)samples : 0.0, peak.resident_mb,
           atomic_load(&bad_blocks));
    free(running);
    return atomic_load(&bad_blocks) != 0 || allocations != frees + main_thread.frees;
}
