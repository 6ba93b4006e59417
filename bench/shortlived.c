/* bench/shortlived.c: short-lived small blocks in one thread, in the
 * manner of glibc's benchtests (bench-malloc-simple): a round allocates
 * -c blocks of -s bytes, writes the first byte of each, and frees them
 * all in the order allocated; rounds repeat. -m says where the loop runs:
 * in a process of one thread (main), in the main thread while a second
 * thread exists and waits (threaded: glibc then leaves its single-thread
 * fast path), or in a second thread (thread: glibc's thread arena).
 * Reports alloc/free operations per second and nanoseconds a pair. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static size_t block_size = 64;
static int blocks_a_round = 100;
static long rounds = 100000;
static unsigned long checksum;
static double seconds;

static void *run_rounds(void *unused)
{
    (void)unused;
    unsigned char **blocks = malloc((size_t)blocks_a_round * sizeof *blocks);
    unsigned long sum = 0;
    double start = bench_now();
    for (long r = 0; r < rounds; r++) {
        for (int i = 0; i < blocks_a_round; i++) {
            blocks[i] = malloc(block_size);
            blocks[i][0] = (unsigned char)i;
        }
        for (int i = 0; i < blocks_a_round; i++) {
            sum += blocks[i][0];
            free(blocks[i]);
        }
    }
    seconds = bench_now() - start;
    checksum = sum;
    free(blocks);
    return NULL;
}

static pthread_mutex_t idle_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_done = PTHREAD_COND_INITIALIZER;
static int measured;

static void *wait_idle(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&idle_lock);
    while (!measured)
        pthread_cond_wait(&idle_done, &idle_lock);
    pthread_mutex_unlock(&idle_lock);
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = "main";
    const struct bench_flag flags[] = {
        BENCH_SIZE_FLAG("-s", "bytes", &block_size, 1, "bytes a block (default 64)"),
        BENCH_INT_FLAG("-c", "blocks", &blocks_a_round, 1, "blocks a round, all allocated, then all freed (default 100)"),
        BENCH_LONG_FLAG("-n", "rounds", &rounds, 1, "rounds (default 100000)"),
        BENCH_STRING_FLAG("-m", "main|threaded|thread", &mode,
                          "the main thread alone, the main thread beside a waiting one, or a second thread "
                          "(default main)"),
    };
    const struct bench_command_line command_line = {"shortlived", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    int where = bench_choice(&command_line, "-m", mode, "main|threaded|thread");
    pthread_t other;
    if (where == 0) {
        run_rounds(NULL);
    } else {
        pthread_create(&other, NULL, where == 1 ? wait_idle : run_rounds, NULL);
        if (where == 1) {
            run_rounds(NULL);
            pthread_mutex_lock(&idle_lock);
            measured = 1;
            pthread_cond_signal(&idle_done);
            pthread_mutex_unlock(&idle_lock);
        }
        pthread_join(other, NULL);
    }
    double pairs = (double)rounds * blocks_a_round;
    struct bench_memory peak = bench_peak_memory();
    printf("mode=%s size=%zu blocks=%d ops_per_sec=%.0f ns_per_pair=%.2f top_rss_mb=%.1f checksum=%lu\n", mode,
           block_size, blocks_a_round, 2.0 * pairs / seconds, seconds * 1e9 / pairs, peak.resident_mb, checksum);
    return 0;
}
