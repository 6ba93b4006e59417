/* test_exit.c: memory comes back when threads exit. An exited thread's heap
 * is parked whole for the next thread to start, and is retired within the
 * purge delay when none does (or at once, with no purger thread or a delay
 * of 0; this test runs both ways): a thread that frees everything leaves
 * nothing behind; a thread that exits holding blocks leaves them to
 * whoever frees them later, and the memory goes back once they are; thread
 * churn reuses heaps instead of leaking them, and the segments of exited
 * threads serve the threads that come next. */
#include <limits.h>
#include <pthread.h>
#include <sys/resource.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
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

/* What strata maps, short of the segment map's leaves (layout.h): a page
 * each, mapped when segments first reach a 4 GiB range of addresses and
 * kept for good, so where a thread's segments land (the kernel's choice)
 * decides how many there are; they hold no memory of the program's. */
static size_t mapped_bytes(void)
{
    size_t leaves = 0;
    for (size_t i = 0; i < SEGMENT_MAP_ROOT; i++)
        leaves += atomic_load_explicit(&segment_map_root[i], memory_order_relaxed) != NULL;
    return os_mapped_bytes() - leaves * segment_map_leaf_bytes();
}

static size_t run_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_create(&t, NULL, fn, NULL);
    pthread_join(t, NULL);
    return mapped_bytes();
}

static struct heap *seen_heap;
static void *note_heap(void *arg)
{
    strata_free(strata_malloc(100));
    seen_heap = thread_heap;
    return arg;
}

/* Writes `arg` blocks of 1000 bytes and frees them, counting this thread's
 * page faults meanwhile. */
static long write_faults;
static void *write_and_free(void *arg)
{
    static unsigned char *blocks[8192];
    size_t count = (size_t)(uintptr_t)arg;
    struct rusage before, after;
    getrusage(RUSAGE_THREAD, &before);
    for (size_t i = 0; i < count; i++) {
        blocks[i] = strata_malloc(1000);
        memset(blocks[i], (int)i, 1000);
    }
    getrusage(RUSAGE_THREAD, &after);
    for (size_t i = 0; i < count; i++)
        strata_free(blocks[i]);
    write_faults = after.ru_minflt - before.ru_minflt;
    return NULL;
}

static void run_thread_with(void *(*fn)(void *), size_t arg)
{
    pthread_t t;
    pthread_create(&t, NULL, fn, (void *)(uintptr_t)arg);
    pthread_join(t, NULL);
}

static size_t live_heaps(void)
{
    struct strata_stats stats;
    strata_stats_get(&stats);
    return stats.live_heaps;
}

/* A measure once it has come down to `bound` with no call of this thread,
 * or after five seconds (the purge delay is 10 ms; the machine may be
 * busy, and a sanitizer slows the purger down tenfold). */
static size_t awaited(size_t (*measure)(void), size_t bound)
{
    for (int i = 0; i < 500 && measure() > bound; i++)
        os_sleep_ns(10 * 1000 * 1000);
    return measure();
}

static size_t mapped_awaited(size_t bound)
{
    return awaited(mapped_bytes, bound);
}

/* Whether exited threads' heaps are parked for the next thread (or, with
 * no purger thread or a delay of 0, given up at once). */
static bool heaps_park(void)
{
    return strata_options.purge_delay_ns != 0 && strata_options.background_purge != BACKGROUND_PURGE_NEVER;
}

/* What may stay mapped beyond the start: the purged segment cache. */
#define SLACK ((SEGMENT_CACHE_MAX + 1) * SEGMENT_SIZE)

/* Other heaps' segments that the calling thread's quarantine (the secure
 * flavour's: freed blocks held back from reuse, up to 256 KiB) holds
 * blocks of: each stays until its blocks leave the quarantine, pushed out
 * by the thread's later frees. Blocks of two classes freed last may lie
 * in two segments. */
static size_t quarantine_pinned(void)
{
    const struct heap *heap = thread_heap;
    const struct quarantine *q = &heap->quarantine;
    const struct segment *seen[QUARANTINE_SLOTS] = {0};
    size_t count = 0;
    for (uint32_t i = 0; i < q->count; i++) {
        const struct segment *s = segment_of(q->block[(q->head + i) & (QUARANTINE_SLOTS - 1)]);
        bool known = atomic_load_explicit(&s->owner, memory_order_relaxed) == heap->owner_word;
        for (size_t k = 0; k < count && !known; k++)
            known = seen[k] == s;
        if (!known)
            seen[count++] = s;
    }
    return count * SEGMENT_SIZE;
}

/* What strata maps and this process keeps resident before any test starts
 * a thread, which each test's memory must come back to. Every test asks
 * for it first, so that whichever tests run, it is measured once, before
 * the first of them. */
struct baseline {
    size_t mapped, resident;
};

static struct baseline baseline(void)
{
    static struct baseline base;
    static bool measured;
    if (!measured) {
        strata_free(strata_malloc(1)); /* the main heap exists from here */
        base.mapped = mapped_bytes();
        base.resident = resident_bytes();
        measured = true;
        printf("exited threads' heaps are %s\n", heaps_park() ? "parked for the next thread" : "given up at once");
    }
    return base;
}

/* A thread that frees what it allocated leaves no mapping behind: at once
 * without a purger, within the purge delay with one. */
static void test_freed_thread_unmaps(void)
{
    struct baseline base = baseline();
    size_t after_exit = run_thread(allocate_and_free);
    if (!heaps_park())
        CHECK_CMP(after_exit, <=, base.mapped + SLACK);
    CHECK_CMP(mapped_awaited(base.mapped + SLACK), <=, base.mapped + SLACK);
}

/* The next thread takes the last one's heap, and the statistics count only
 * heaps with a thread. */
static void test_heap_reused(void)
{
    baseline();
    run_thread(note_heap);
    struct heap *first = seen_heap;
    CHECK_CMP(live_heaps(), ==, 1);
    size_t mapped_before = mapped_bytes();
    run_thread(note_heap);
    CHECK_CMP(seen_heap, ==, first);
    if (heaps_park()) /* parked with its segment: nothing new mapped */
        CHECK_CMP(mapped_bytes(), ==, mapped_before);
}

/* Parked, a heap keeps up to 1 MiB of its free memory resident: a thread
 * that starts within the purge delay and writes 0.5 MB faults nothing in
 * (three tries, in case this machine is too busy to start one in time).
 * Under a sanitizer the thread's faults are mostly the sanitizer's own
 * (ThreadSanitizer's, as the thread first takes its heap's lock): they
 * say nothing of strata's memory. */
static void test_parked_heap_resident(void)
{
    baseline();
    if (!heaps_park()) {
        printf("no heap is parked to start on\n");
        return;
    }
    if (!resident_is_meaningful())
        return;
    long least = LONG_MAX;
    for (int i = 0; i < 3 && least > 16; i++) {
        run_thread_with(write_and_free, 512);
        run_thread_with(write_and_free, 512);
        least = write_faults < least ? write_faults : least;
    }
    printf("a thread writing 0.5 MB on an exited thread's heap: %ld page faults\n", least);
    CHECK_CMP(least, <=, 16);
}

/* More than that goes back as the thread exits, parked or not. */
static void test_exit_returns_resident(void)
{
    struct baseline base = baseline();
    run_thread_with(write_and_free, 8192);
    if (resident_is_meaningful())
        CHECK_CMP(resident_bytes(), <=, base.resident + 2 * 1024 * 1024);
}

/* The blocks of other heaps that the calling thread's bins hold. */
static size_t foreign_binned(void)
{
    size_t n = 0;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        const struct block *b = thread_heap->bins[c].head;
        for (uint32_t i = 0; i < bin_count(thread_heap, &thread_heap->bins[c]) && b != NULL; i++, b = block_link(b))
            n += atomic_load(&segment_of(b)->owner) != thread_heap->owner_word;
    }
    return n;
}

/* A thread exits holding 20 MB: the blocks stay valid after its exit, and
 * once this thread frees them the memory goes back, the parked heap's once
 * the purger has retired it. This thread's bins keep none of a parked
 * heap's blocks, which would hold its pages. */
static void test_orphans(void)
{
    struct baseline base = baseline();
    size_t with_orphans = run_thread(allocate_and_keep);
    CHECK_CMP(with_orphans, >=, base.mapped + (size_t)BLOCKS * 1000);
    int intact = 1;
    for (size_t i = 0; i < BLOCKS; i++)
        intact &= ((unsigned char *)held[i])[999] == (unsigned char)i;
    CHECK(intact);
    for (size_t i = 0; i < BLOCKS; i++)
        strata_free(held[i]);
    CHECK_CMP(foreign_binned(), ==, 0);
    size_t bound = base.mapped + SLACK + quarantine_pinned();
    if (!heaps_park())
        CHECK_CMP(mapped_bytes(), <=, bound);
    CHECK_CMP(mapped_awaited(bound), <=, bound);
    /* The mapped bound allows one segment beyond the cache: the purger may
     * still be releasing the last of the parked heap's, resident. */
    if (resident_is_meaningful())
        CHECK_CMP(awaited(resident_bytes, base.resident + 2 * 1024 * 1024), <=, base.resident + 2 * 1024 * 1024);
    printf("resident: %zu KiB at start, %zu KiB after the orphans were freed\n",
           base.resident / 1024, resident_bytes() / 1024);
}

/* A thread hands HANDED blocks to the next, which frees them before it
 * allocates. */
#define HANDED 256
static void *handed[HANDED];
static struct heap *freer_heap;
static size_t freer_binned, freer_mapped_before, freer_mapped_after;

static void *allocate_handed(void *arg)
{
    for (size_t i = 0; i < HANDED; i++) {
        handed[i] = strata_malloc(64);
        memset(handed[i], (int)i, 64);
    }
    seen_heap = thread_heap;
    return arg;
}

static void *free_handed_then_allocate(void *arg)
{
    for (size_t i = 0; i < HANDED; i++)
        strata_free(handed[i]);
    freer_heap = thread_heap;
    freer_binned = 0;
    if (thread_heap != &heap_empty)
        for (unsigned c = 0; c < CLASS_COUNT; c++)
            freer_binned += bin_count(thread_heap, &thread_heap->bins[c]);
    freer_mapped_before = mapped_bytes();
    for (size_t i = 0; i < HANDED; i++)
        handed[i] = strata_malloc(64);
    freer_mapped_after = mapped_bytes();
    for (size_t i = 0; i < HANDED; i++)
        strata_free(handed[i]);
    return arg;
}

/* The thread that frees what an exited thread handed it takes the exited
 * thread's parked heap at its 64th free (not a fresh one): the frees go to
 * the heap's pages, its bins keeping none (they would hold the pages for
 * as long as the thread lives), and its allocations take that memory
 * again, mapping nothing. Three tries, in case the purger retires the heap
 * first on a busy machine. The secure flavour's frees take no heap. */
static void test_freer_takes_parked_heap(void)
{
    struct baseline base = baseline();
    bool took = false;
    for (int i = 0; i < 3 && !took; i++) {
        run_thread(allocate_handed);
        run_thread(free_handed_then_allocate);
        took = freer_heap == seen_heap && freer_binned == 0 && freer_mapped_after == freer_mapped_before;
    }
    printf("the freeing thread's heap: %s, %zu blocks in its bins, %zu KiB mapped by its allocations\n",
           freer_heap == &heap_empty ? "none"
           : freer_heap == seen_heap ? "the exited thread's"
                                     : "another",
           freer_binned, (freer_mapped_after - freer_mapped_before) / 1024);
    if (TEST_SECURE)
        CHECK(freer_heap == &heap_empty);
    else if (heaps_park())
        CHECK(took);
    CHECK_CMP(mapped_awaited(base.mapped + SLACK), <=, base.mapped + SLACK);
}

/* The free slices of the abandoned segments that are not yet purged. */
static void count_abandoned_dirty(const struct segment *s, void *arg)
{
    *(size_t *)arg += (size_t)__builtin_popcountll(s->dirty_mask);
}

static size_t abandoned_dirty(void)
{
    size_t slices = 0;
    abandoned_for_each(count_abandoned_dirty, &slices);
    return slices;
}

static size_t abandoned_dirty_awaited(void)
{
    for (int i = 0; i < 500 && abandoned_dirty() != 0; i++)
        os_sleep_ns(10 * 1000 * 1000);
    return abandoned_dirty();
}

/* An exited thread's heap given up with its blocks alive (at once without
 * a purger; by strata_trim with one): the pages its blocks' frees empty
 * stay resident for a heap to adopt while a purger is there to give them
 * back later, which it does within a few purge delays; without one they go
 * back at once. Then the last free releases the segment. */
static void test_abandoned_pages_age(void)
{
    struct baseline base = baseline();
    size_t dirty_before = abandoned_dirty_awaited();
    run_thread(allocate_and_keep);
    strata_trim(); /* a parked heap is given up */
    /* The first block stays: its segment holds pages the frees empty,
     * last (the purger may have given back what they emptied first). */
    for (size_t i = BLOCKS - 1; i > 0; i--)
        strata_free(held[i]);
    size_t dirty = abandoned_dirty();
    printf("abandoned segments' free slices not yet purged: %zu before, %zu after the frees\n", dirty_before,
           dirty);
    CHECK_CMP(dirty_before, ==, 0);
    if (purger_gives_back_later())
        CHECK_CMP(dirty, >, 0);
    else
        CHECK_CMP(dirty, ==, 0);
    CHECK_CMP(abandoned_dirty_awaited(), ==, 0);
    strata_free(held[0]);
    size_t bound = base.mapped + SLACK + quarantine_pinned();
    CHECK_CMP(mapped_awaited(bound), <=, bound);
}

/* strata_trim gives back a parked heap's memory at once. */
static void test_trim_parked(void)
{
    struct baseline base = baseline();
    run_thread(allocate_and_keep);
    for (size_t i = 0; i < BLOCKS; i++)
        strata_free(held[i]);
    strata_trim();
    CHECK_CMP(mapped_bytes(), <=, base.mapped + SLACK);
}

/* 300 threads come and go: heaps are reused, nothing accumulates. */
static void test_thread_churn(void)
{
    struct baseline base = baseline();
    for (int i = 0; i < 300; i++)
        run_thread(allocate_and_free);
    CHECK_CMP(mapped_bytes(), <=, base.mapped + SLACK + 64 * 1024 + quarantine_pinned());
    if (resident_is_meaningful()) /* the last one's heap, parked, within the delay */
        CHECK_CMP(awaited(resident_bytes, base.resident + 2 * 1024 * 1024), <=, base.resident + 2 * 1024 * 1024);
}

/* 600 threads each exit with one small block alive: the next threads adopt
 * the segments they leave, so what stays mapped is bounded by the live
 * blocks plus a constant, not a segment per thread (2.4 GB). */
static void test_churn_with_survivors(void)
{
    struct baseline base = baseline();
    size_t peak = 0;
    for (churn_index = 0; churn_index < CHURN_THREADS; churn_index++) {
        size_t mapped = run_thread(allocate_keep_one);
        peak = mapped > peak ? mapped : peak;
    }
    printf("thread churn with survivors: %zu MiB mapped at most\n", peak >> 20);
    CHECK_CMP(peak, <=, base.mapped + SLACK + 16 * SEGMENT_SIZE);
    CHECK_CMP(atomic_load(&churn_broken), ==, 0);
    int survived = 1;
    for (int i = 0; i < CHURN_THREADS; i++) {
        survived &= survivors[i][0] == (unsigned char)(i & 0xff) && survivors[i][15] == (unsigned char)(i & 0xff);
        strata_free(survivors[i]);
    }
    CHECK(survived);
    size_t pinned = quarantine_pinned();
    size_t bound = base.mapped + SLACK + 64 * 1024 + pinned;
    CHECK_CMP(mapped_awaited(bound), <=, bound);
    struct strata_stats stats;
    strata_stats_get(&stats);
    CHECK_CMP(stats.abandoned_segments, <=, pinned / SEGMENT_SIZE);
}

static const struct check_test tests[] = {
    {"freed_thread_unmaps", test_freed_thread_unmaps},
    {"heap_reused", test_heap_reused},
    {"parked_heap_resident", test_parked_heap_resident},
    {"exit_returns_resident", test_exit_returns_resident},
    {"orphans", test_orphans},
    {"trim_parked", test_trim_parked},
    {"freer_takes_parked_heap", test_freer_takes_parked_heap},
    {"abandoned_pages_age", test_abandoned_pages_age},
    {"thread_churn", test_thread_churn},
    {"churn_with_survivors", test_churn_with_survivors},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
