/* bench/memtime.c: zsh's mem-test. Resident memory is sampled every
 * 2 ms by a thread that reads /proc/self/statm (without allocating) through
 * a run that allocates a large working set of small blocks, holds it, frees
 * it and then goes on with light work; or (-m large) of 10 MB blocks, each
 * written whole, freed, after which the program makes no call at all, as
 * one that freed its big buffers and waits for input. Prints a summary line
 * (resident at start, at peak, 100 ms after the free and at the end) and
 * the samples. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

#define MAX_SAMPLES 20000

static double sample_ms[MAX_SAMPLES];
static double sample_mb[MAX_SAMPLES];
static _Atomic int sample_count;
static _Atomic int stop;
static double origin;

static double resident_mb_now(int fd)
{
    char text[128];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0)
        return 0;
    text[n] = '\0';
    unsigned long size = 0, resident = 0;
    sscanf(text, "%lu %lu", &size, &resident);
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

static void *sampler(void *arg)
{
    int fd = *(int *)arg;
    struct timespec pause = {0, 2000000};
    while (!atomic_load(&stop)) {
        int i = atomic_load(&sample_count);
        if (i < MAX_SAMPLES) {
            sample_ms[i] = (bench_now() - origin) * 1000.0;
            sample_mb[i] = resident_mb_now(fd);
            atomic_store(&sample_count, i + 1);
        }
        nanosleep(&pause, NULL);
    }
    return NULL;
}

/* Light allocation work for `ms` milliseconds: what a program does after
 * its burst, and the calls an allocator may purge on. */
static void light_work(double ms, unsigned long long *rng)
{
    double end = bench_now() + ms / 1000.0;
    void *held[64] = {0};
    struct timespec pause = {0, 1000000};
    while (bench_now() < end) {
        for (int i = 0; i < 64; i++) {
            free(held[i]);
            held[i] = malloc(16 + bench_random(rng) % 256);
        }
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < 64; i++)
        free(held[i]);
}

static double resident_at(double ms)
{
    int n = atomic_load(&sample_count);
    for (int i = 0; i < n; i++)
        if (sample_ms[i] >= ms)
            return sample_mb[i];
    return n ? sample_mb[n - 1] : 0;
}

int main(int argc, char **argv)
{
    size_t working_mb = 500;
    int quiet = 0;
    const char *mode = "small";
    const struct bench_flag flags[] = {
        BENCH_SIZE_FLAG("-w", "working_set_mb", &working_mb, 1, "MB of blocks allocated, held and freed (default 500)"),
        BENCH_STRING_FLAG("-m", "small|large", &mode,
                          "blocks of 16..1024 bytes and light work after, or of 10 MB and no call after (default small)"),
        BENCH_SWITCH_FLAG("-q", &quiet, "print the summary line only, not the samples"),
    };
    const struct bench_command_line command_line = {"memtime", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    int large = bench_choice(&command_line, "-m", mode, "small|large") == 1;
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0) {
        perror("memtime: /proc/self/statm");
        return 1;
    }
    unsigned long long rng = 12345;
    origin = bench_now();
    pthread_t thread;
    pthread_create(&thread, NULL, sampler, &fd);

    light_work(50, &rng);
    double start_mb = resident_mb_now(fd);
    /* The pointer array comes from mmap, so only the blocks are measured. */
    size_t capacity = working_mb * 1048576 / 16;
    void **blocks = mmap(NULL, capacity * sizeof *blocks, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t count = 0, bytes = 0;
    double burst_ms = (bench_now() - origin) * 1000.0;
    while (bytes < working_mb * 1048576 && count < capacity) {
        size_t size = large ? (size_t)10 << 20 : 16 + (size_t)(bench_random(&rng) % 1009);
        blocks[count] = malloc(size);
        memset(blocks[count], 1, large ? size : size < 64 ? size : 64);
        bytes += size;
        count++;
    }
    struct timespec hold = {0, 50000000};
    if (large)
        nanosleep(&hold, NULL);
    else
        light_work(50, &rng);
    double peak_mb = resident_mb_now(fd);
    double free_ms = (bench_now() - origin) * 1000.0;
    for (size_t i = 0; i < count; i++)
        free(blocks[i]);
    double freed_ms = (bench_now() - origin) * 1000.0;
    munmap(blocks, capacity * sizeof *blocks);
    struct timespec after = {0, 300000000};
    if (large)
        nanosleep(&after, NULL);
    else
        light_work(300, &rng);
    double end_mb = resident_mb_now(fd);
    atomic_store(&stop, 1);
    pthread_join(thread, NULL);

    /* How long after the last free until resident memory is back within
     * 5 MB of the start (-1: not in this run). */
    double settle_ms = -1;
    for (int i = 0; i < atomic_load(&sample_count); i++)
        if (sample_ms[i] >= freed_ms && sample_mb[i] <= start_mb + 5) {
            settle_ms = sample_ms[i] - freed_ms;
            break;
        }
    printf("summary=1 working_mb=%zu start_rss_mb=%.1f peak_rss_mb=%.1f after_100ms_rss_mb=%.1f "
           "end_rss_mb=%.1f burst_ms=%.0f free_ms=%.0f free_loop_ms=%.0f settle_ms=%.0f\n",
           working_mb, start_mb, peak_mb, resident_at(free_ms + 100), end_mb, burst_ms, free_ms,
           freed_ms - free_ms, settle_ms);
    if (!quiet)
        for (int i = 0; i < atomic_load(&sample_count); i++)
            printf("t_ms=%.1f rss_mb=%.1f\n", sample_ms[i], sample_mb[i]);
    close(fd);
    return 0;
}
