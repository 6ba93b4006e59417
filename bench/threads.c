/* bench/threads.c: the VT-malloc thread benchmark from the AOLserver list,
 * 2006. 16000 blocks of random size 16..16384 are split over T threads;
 * each thread replaces random blocks of its share (free + malloc, writing
 * into each block: one byte a page, or with -w ends only its two ends, as
 * programs that allocate buffers and use part of them do). Reports alloc/free operations per second, peak (Top)
 * and final (Low: everything freed, threads exited) resident and virtual
 * memory. Runs on whatever malloc the process has:
 * bench/run.py chooses it with LD_PRELOAD. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

static size_t total_blocks = 16000;
static long total_replacements = 4000000;
static int thread_count = 1;
static int write_ends_only;

struct worker {
    pthread_t thread;
    unsigned long long rng;
    size_t blocks;
    long replacements;
};

static void touch(unsigned char *p, size_t size)
{
    /* Write the head, one byte per page and the tail: the block is really
     * used, but the measure stays the allocator's, not memset's. */
    memset(p, 0x5a, size < 16 ? size : 16);
    if (!write_ends_only)
        for (size_t i = 4096; i < size; i += 4096)
            p[i] = 1;
    p[size - 1] = 2;
}

static size_t random_size(unsigned long long *rng)
{
    return 16 + (size_t)(bench_random(rng) % (16384 - 16 + 1));
}

static void *run_worker(void *arg)
{
    struct worker *w = arg;
    unsigned long long rng = w->rng; /* a local, as loops.c's (a shared line) */
    unsigned char **blocks = malloc(w->blocks * sizeof *blocks);
    for (size_t i = 0; i < w->blocks; i++) {
        size_t size = random_size(&rng);
        blocks[i] = malloc(size);
        touch(blocks[i], size);
    }
    for (long r = 0; r < w->replacements; r++) {
        size_t i = (size_t)(bench_random(&rng) % w->blocks);
        free(blocks[i]);
        size_t size = random_size(&rng);
        blocks[i] = malloc(size);
        touch(blocks[i], size);
    }
    for (size_t i = 0; i < w->blocks; i++)
        free(blocks[i]);
    free(blocks);
    w->rng = rng;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *written = "pages";
    const struct bench_flag flags[] = {
        BENCH_INT_FLAG("-t", "threads", &thread_count, 1, "threads sharing the blocks (default 1)"),
        BENCH_SIZE_FLAG("-n", "blocks", &total_blocks, 1, "blocks live at once, split over the threads (default 16000)"),
        BENCH_LONG_FLAG("-r", "replacements", &total_replacements, 0,
                        "blocks freed and allocated again, over all threads (default 4000000)"),
        BENCH_STRING_FLAG("-w", "pages|ends", &written,
                          "write one byte a page of each block, or only its two ends (default pages)"),
    };
    const struct bench_command_line command_line = {"threads", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    write_ends_only = bench_choice(&command_line, "-w", written, "pages|ends");
    if (total_blocks < (size_t)thread_count)
        bench_usage_error(&command_line, "-n %zu: fewer blocks than threads (-t %d)", total_blocks, thread_count);
    struct worker *workers = calloc((size_t)thread_count, sizeof *workers);
    double start = bench_now();
    for (int t = 0; t < thread_count; t++) {
        workers[t].rng = 0x9e3779b97f4a7c15ull * (unsigned long long)(t + 1);
        workers[t].blocks = total_blocks / (size_t)thread_count;
        workers[t].replacements = total_replacements / thread_count;
        pthread_create(&workers[t].thread, NULL, run_worker, &workers[t]);
    }
    for (int t = 0; t < thread_count; t++)
        pthread_join(workers[t].thread, NULL);
    double seconds = bench_now() - start;
    free(workers);

    double ops = 2.0 * (double)(total_blocks + (size_t)total_replacements);
    struct bench_memory top = bench_peak_memory();
    struct bench_memory low = bench_current_memory();
    printf("threads=%d ops_per_sec=%.0f top_rss_mb=%.1f top_vm_mb=%.1f low_rss_mb=%.1f low_vm_mb=%.1f\n",
           thread_count, ops / seconds, top.resident_mb, top.virtual_mb, low.resident_mb,
           low.virtual_mb);
    return 0;
}
