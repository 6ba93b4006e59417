/* test_stress.c: threads hand blocks to each other through shared slots;
 * every block carries a pattern that its freer verifies. Threads are
 * created and destroyed round after round (their heaps are abandoned with
 * live blocks that later threads free), and at the end resident memory must
 * come back near where it started. STRESS_SCALE multiplies the work. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

#define THREADS 8
#define SLOTS 2048

static _Atomic(unsigned char *) slots[SLOTS];
static _Atomic long bad_blocks;
static _Atomic long blocks_checked;
static _Atomic long broken_heaps;
static long ops_per_thread = 30000;

struct header {
    size_t size;
    uint64_t seed;
};

static unsigned char *make_block(unsigned long long *rng)
{
    unsigned long long r = check_random(rng);
    size_t size;
    if (r % 1000 == 0)
        size = 140000 + r % 300000; /* mapped directly */
    else if (r % 50 == 0)
        size = 2048 + r % 60000;
    else
        size = 16 + r % 2000;
    unsigned char *p = strata_malloc(size);
    if (p == NULL)
        return NULL;
    struct header h = {size, check_random(rng)};
    memcpy(p, &h, sizeof h);
    for (size_t i = sizeof h; i < size; i++)
        p[i] = (unsigned char)(h.seed + i * 7);
    return p;
}

static void check_and_free(unsigned char *p)
{
    struct header h;
    memcpy(&h, p, sizeof h);
    int ok = strata_usable_size(p) >= h.size;
    for (size_t i = sizeof h; ok && i < h.size; i++)
        ok = p[i] == (unsigned char)(h.seed + i * 7);
    if (!ok)
        atomic_fetch_add(&bad_blocks, 1);
    atomic_fetch_add(&blocks_checked, 1);
    strata_free(p);
}

static void *worker(void *arg)
{
    unsigned long long rng = (unsigned long long)(uintptr_t)arg * 0x9e3779b97f4a7c15ull + 1;
    for (long i = 0; i < ops_per_thread; i++) {
        unsigned char *mine = make_block(&rng);
        if (mine == NULL) {
            atomic_fetch_add(&bad_blocks, 1);
            continue;
        }
        unsigned char *theirs = atomic_exchange(&slots[check_random(&rng) % SLOTS], mine);
        if (theirs != NULL)
            check_and_free(theirs);
    }
    const char *broken = heap_check(thread_heap);
    if (broken != NULL) {
        fprintf(stderr, "heap_check: %s\n", broken);
        atomic_fetch_add(&broken_heaps, 1);
    }
    return NULL;
}

static void drain(void)
{
    for (size_t i = 0; i < SLOTS; i++) {
        unsigned char *p = atomic_exchange(&slots[i], NULL);
        if (p != NULL)
            check_and_free(p);
    }
}

/* Seven rounds of THREADS threads, the blocks of exited threads freed by
 * later ones and by this thread: every block intact, every heap sound, and
 * the memory back once all are freed. */
static void test_handoff(void)
{
    const char *scale = getenv("STRESS_SCALE");
    if (scale != NULL && atof(scale) > 0)
        ops_per_thread = (long)(ops_per_thread * atof(scale));
    size_t start = resident_bytes();
    size_t start_mapped = os_mapped_bytes();
    for (int round = 0; round < 6; round++) {
        pthread_t threads[THREADS];
        for (uintptr_t t = 0; t < THREADS; t++)
            pthread_create(&threads[t], NULL, worker, (void *)(round * THREADS + t + 1));
        for (int t = 0; t < THREADS; t++)
            pthread_join(threads[t], NULL);
        if (round == 2)
            drain(); /* the main thread frees blocks of exited threads */
    }
    /* Threads that only free what dead threads left behind. */
    pthread_t threads[THREADS];
    for (uintptr_t t = 0; t < THREADS; t++)
        pthread_create(&threads[t], NULL, worker, (void *)(1000 + t));
    for (int t = 0; t < THREADS; t++)
        pthread_join(threads[t], NULL);
    drain();
    /* The exited threads' heaps go back within the purge delay (the purger
     * retires them), and so do the heap profiler's free sampled slots
     * (within the delay as it stretched: run profiled, the slots of
     * blocks freed here are taken again soon); wait up to two seconds for
     * a busy machine. */
    for (int i = 0; i < 200 && (os_mapped_bytes() > start_mapped + (SEGMENT_CACHE_MAX + 2) * SEGMENT_SIZE ||
                                (resident_is_meaningful() && resident_bytes() >= start + 8 * 1024 * 1024));
         i++)
        os_sleep_ns(10 * 1000 * 1000);
    size_t end = resident_bytes();
    size_t end_mapped = os_mapped_bytes();

    CHECK_CMP(atomic_load(&bad_blocks), ==, 0);
    CHECK_CMP(atomic_load(&broken_heaps), ==, 0);
    CHECK_CMP(atomic_load(&blocks_checked), >, ops_per_thread * THREADS * 6);
    printf("resident at start %zu KiB, after all threads and frees %zu KiB\n",
           start / 1024, end / 1024);
    printf("strata's mappings at start %zu KiB, at the end %zu KiB\n", start_mapped / 1024,
           end_mapped / 1024);
    /* What strata still maps: the main heap's segment, the purged segment
     * cache and the heap pool, not the blocks of dead threads. */
    CHECK_CMP(end_mapped, <=, start_mapped + (SEGMENT_CACHE_MAX + 2) * SEGMENT_SIZE);
    if (resident_is_meaningful())
        CHECK_CMP(end, <, start + 8 * 1024 * 1024);
}

static const struct check_test tests[] = {
    {"handoff", test_handoff},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
