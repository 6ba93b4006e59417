/* bench/workloads.c: three program shapes, each a mode, reporting operations
 * per second and the peak resident memory.
 * - server: 2 worker threads share 40000 slots of live blocks of 8..1000
 *   bytes; each step frees the block in a random slot (most likely another
 *   thread's) and puts a new one there; a worker exits after 200000 steps
 *   and a new one takes its place, inheriting the slots' blocks.
 * - churn: generations of 2 threads; each thread allocates 20000 blocks of
 *   16..2000 bytes, frees four in five soon after and leaves the rest to the
 *   next generation, which frees them (blocks of mixed lifetimes handed from
 *   thread to thread).
 * - leak: one thread allocates short-lived blocks of 16..512 bytes and
 *   never frees one in a thousand (a program that leaks a little as it goes). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define SERVER_SLOTS 40000
#define SERVER_WORKERS 2
#define SERVER_STEPS 200000
#define CHURN_BLOCKS 20000
#define CHURN_THREADS 2

static _Atomic(unsigned char *) slots[SERVER_SLOTS];

struct worker {
    pthread_t thread;
    unsigned long long rng;
    long steps;
    unsigned char **inherited, **handed; /* churn: blocks from the last generation, for the next */
    size_t inherited_count, handed_count;
};

static unsigned char *new_block(unsigned long long *rng, size_t low, size_t high)
{
    size_t size = low + (size_t)(bench_random(rng) % (high - low + 1));
    unsigned char *p = malloc(size);
    p[0] = (unsigned char)size;
    p[size - 1] = 1;
    return p;
}

static void *server_worker(void *arg)
{
    struct worker *w = arg;
    /* The thread's state in locals: the workers lie side by side, and a
     * store to one's random state at every step would bounce their shared
     * cache line between the threads (a cost of the harness's, not of the
     * allocator's). */
    unsigned long long rng = w->rng;
    for (long i = 0; i < w->steps; i++) {
        size_t slot = (size_t)(bench_random(&rng) % SERVER_SLOTS);
        unsigned char *old = atomic_exchange(&slots[slot], new_block(&rng, 8, 1000));
        free(old);
    }
    w->rng = rng;
    return NULL;
}

static void *churn_worker(void *arg)
{
    struct worker *w = arg;
    for (size_t i = 0; i < w->inherited_count; i++)
        free(w->inherited[i]);
    unsigned char *recent[8] = {0};
    unsigned long long rng = w->rng; /* locals, as server_worker's */
    size_t handed_count = 0;
    for (size_t i = 0; i < CHURN_BLOCKS; i++) {
        unsigned char *p = new_block(&rng, 16, 2000);
        if (bench_random(&rng) % 5 == 0) {
            w->handed[handed_count++] = p;
        } else {
            free(recent[i % 8]);
            recent[i % 8] = p;
        }
    }
    for (size_t i = 0; i < 8; i++)
        free(recent[i]);
    w->rng = rng;
    w->handed_count = handed_count;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = "server";
    long rounds = 0;
    const struct bench_flag flags[] = {
        BENCH_STRING_FLAG("-m", "server|churn|leak", &mode, "the program shape (default server)"),
        BENCH_LONG_FLAG("-n", "rounds", &rounds, 0,
                        "generations (server, churn) or allocations (leak); 0: 20, 200 or 4000000 (default 0)"),
    };
    const struct bench_command_line command_line = {"workloads", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    bench_choice(&command_line, "-m", mode, "server|churn|leak");
    double start = bench_now();
    double ops = 0;
    if (strcmp(mode, "server") == 0) {
        if (rounds <= 0)
            rounds = 20; /* generations of workers */
        unsigned long long rng = 1;
        for (size_t i = 0; i < SERVER_SLOTS; i++)
            atomic_store(&slots[i], new_block(&rng, 8, 1000));
        struct worker workers[SERVER_WORKERS];
        for (long g = 0; g < rounds; g++) {
            for (int t = 0; t < SERVER_WORKERS; t++) {
                workers[t] = (struct worker){.rng = (unsigned long long)(g * SERVER_WORKERS + t + 2), .steps = SERVER_STEPS};
                pthread_create(&workers[t].thread, NULL, server_worker, &workers[t]);
            }
            for (int t = 0; t < SERVER_WORKERS; t++)
                pthread_join(workers[t].thread, NULL);
        }
        for (size_t i = 0; i < SERVER_SLOTS; i++)
            free(atomic_load(&slots[i]));
        ops = 2.0 * (double)rounds * SERVER_WORKERS * SERVER_STEPS;
    } else if (strcmp(mode, "churn") == 0) {
        if (rounds <= 0)
            rounds = 200; /* generations */
        struct worker workers[CHURN_THREADS];
        unsigned char **lists[2][CHURN_THREADS];
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < CHURN_THREADS; t++)
                lists[k][t] = malloc(CHURN_BLOCKS * sizeof(unsigned char *));
        size_t counts[CHURN_THREADS] = {0};
        for (long g = 0; g < rounds; g++) {
            for (int t = 0; t < CHURN_THREADS; t++) {
                /* Each thread inherits the blocks its neighbour handed on. */
                int from = (t + 1) % CHURN_THREADS;
                workers[t] = (struct worker){.rng = (unsigned long long)(g * CHURN_THREADS + t + 7),
                                             .inherited = lists[g % 2][from], .inherited_count = counts[from],
                                             .handed = lists[(g + 1) % 2][t]};
            }
            for (int t = 0; t < CHURN_THREADS; t++)
                pthread_create(&workers[t].thread, NULL, churn_worker, &workers[t]);
            for (int t = 0; t < CHURN_THREADS; t++) {
                pthread_join(workers[t].thread, NULL);
                counts[t] = workers[t].handed_count;
            }
        }
        for (int t = 0; t < CHURN_THREADS; t++)
            for (size_t i = 0; i < counts[t]; i++)
                free(lists[rounds % 2][t][i]);
        for (int k = 0; k < 2; k++)
            for (int t = 0; t < CHURN_THREADS; t++)
                free(lists[k][t]);
        ops = 2.0 * (double)rounds * CHURN_THREADS * CHURN_BLOCKS;
    } else { /* leak: bench_choice let no other mode through */
        if (rounds <= 0)
            rounds = 4000000; /* allocations */
        unsigned long long rng = 3;
        unsigned char *recent[32] = {0};
        unsigned long leaked = 0;
        for (long i = 0; i < rounds; i++) {
            unsigned char *p = new_block(&rng, 16, 512);
            if (i % 1000 == 0) {
                leaked += p[0]; /* never freed */
                continue;
            }
            free(recent[i % 32]);
            recent[i % 32] = p;
        }
        for (int i = 0; i < 32; i++)
            free(recent[i]);
        ops = 2.0 * (double)rounds;
        if (leaked == 0)
            return 1;
    }
    double seconds = bench_now() - start;
    struct bench_memory peak = bench_peak_memory();
    printf("mode=%s ops_per_sec=%.0f top_rss_mb=%.1f\n", mode, ops / seconds, peak.resident_mb);
    return 0;
}
