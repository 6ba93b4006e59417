/* test_exit.c: memory comes back when threads exit. A thread that frees
 * everything leaves nothing behind; a thread that exits holding blocks
 * leaves them to whoever frees them later, and the memory goes back once
 * they are; thread churn reuses heaps instead of leaking them, and the
 * segments of exited threads are adopted by the threads that come next. */
#include <pthread.h>

#include "check.h"
#include "checkers.h"
#include "core.h"
#include "strata.h"

#define BLOCKS 20000

static void *held[BLOCKS];

static void *allocate_and_keep(void *arg)
{
    for (size_t i = 0; i < BLOCKS; i++) {
        held[i] = strata_malloc(1000 + i % 64);
        memset(held[i], (int)i, 1000);
    }
    return arg;
}

static void *allocate_and_free(void *arg)
{
    void *local[256];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 256; i++)
            local[i] = strata_malloc((size_t)(i * 97 % 20000) + 1);
        for (int i = 0; i < 256; i++)
            strata_free(local[i]);
    }
    return arg;
}

/* Each thread leaves one block of the many it used alive when it exits. */
#define CHURN_THREADS 600
static unsigned char *survivors[CHURN_THREADS];
static _Atomic int churn_broken;
static int churn_index;

static void *allocate_keep_one(void *arg)
{
    unsigned char *local[200];
    unsigned long long rng = (unsigned long long)churn_index * 7919 + 1;
    for (int i = 0; i < 200; i++) {
        size_t n = 16 + (size_t)(check_random(&rng) % 4000);
        local[i] = strata_malloc(n);
        memset(local[i], churn_index & 0xff, 16);
    }
    for (int i = 1; i < 200; i++)
        strata_free(local[i]);
    survivors[churn_index] = local[0];
    if (heap_check(thread_heap) != NULL)
        atomic_fetch_add(&churn_broken, 1);
    return arg;
}

static size_t run_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_create(&t, NULL, fn, NULL);
    pthread_join(t, NULL);
    return os_mapped_bytes();
}

int main(void)
{
    strata_free(strata_malloc(1)); /* the main heap exists from here */
    size_t base_mapped = os_mapped_bytes();
    size_t base_resident = resident_bytes();
    size_t slack = (SEGMENT_CACHE_MAX + 1) * SEGMENT_SIZE; /* the purged segment cache */

    /* A thread that frees what it allocated leaves no mapping behind. */
    CHECK(run_thread(allocate_and_free) <= base_mapped + slack);

    /* A thread exits holding 20 MB: the blocks stay valid after its exit. */
    size_t with_orphans = run_thread(allocate_and_keep);
    CHECK(with_orphans >= base_mapped + (size_t)BLOCKS * 1000);
    int intact = 1;
    for (size_t i = 0; i < BLOCKS; i++)
        intact &= ((unsigned char *)held[i])[999] == (unsigned char)i;
    CHECK(intact);
    /* The main thread frees them: the abandoned segments go back. */
    for (size_t i = 0; i < BLOCKS; i++)
        strata_free(held[i]);
    CHECK(os_mapped_bytes() <= base_mapped + slack);
    int resident_ok = resident_is_meaningful();
    if (resident_ok)
        CHECK(resident_bytes() <= base_resident + 2 * 1024 * 1024);
    printf("resident: %zu KiB at start, %zu KiB after the orphans were freed\n",
           base_resident / 1024, resident_bytes() / 1024);

    /* 300 threads come and go: heaps are reused, nothing accumulates. */
    for (int i = 0; i < 300; i++)
        run_thread(allocate_and_free);
    CHECK(os_mapped_bytes() <= base_mapped + slack + 64 * 1024);
    if (resident_ok)
        CHECK(resident_bytes() <= base_resident + 2 * 1024 * 1024);

    /* 600 threads each exit with one small block alive: the next threads
     * adopt the segments they leave, so what stays mapped is bounded by the
     * live blocks plus a constant, not a segment per thread (2.4 GB). */
    size_t peak = 0;
    for (churn_index = 0; churn_index < CHURN_THREADS; churn_index++) {
        size_t mapped = run_thread(allocate_keep_one);
        peak = mapped > peak ? mapped : peak;
    }
    printf("thread churn with survivors: %zu MiB mapped at most\n", peak >> 20);
    CHECK(peak <= base_mapped + slack + 16 * SEGMENT_SIZE);
    CHECK(atomic_load(&churn_broken) == 0);
    int survived = 1;
    for (int i = 0; i < CHURN_THREADS; i++) {
        survived &= survivors[i][0] == (unsigned char)(i & 0xff) && survivors[i][15] == (unsigned char)(i & 0xff);
        strata_free(survivors[i]);
    }
    CHECK(survived);
    struct strata_stats stats;
    strata_stats_get(&stats);
    CHECK(stats.abandoned_segments == 0);
    CHECK(os_mapped_bytes() <= base_mapped + slack + 64 * 1024);
    return check_finish();
}
