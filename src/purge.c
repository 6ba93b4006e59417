/* purge.c: when free slices go back to the OS. A heap's free slices stay
 * resident ("dirty") so that new pages reuse them without page faults; a
 * slice that has stayed free through a whole purge delay (a two-step
 * generation: aging_mask marks what was dirty at the last check) is purged
 * with madvise, in batches, never one system call per free. */
#include <pthread.h>
#include <time.h>

#include "internal.h"
#include "strata.h"

uint64_t purge_delay_ns = 10 * 1000 * 1000;

void purge_slices(struct segment *segment, uint64_t slices)
{
    while (slices) {
        unsigned first = (unsigned)__builtin_ctzll(slices);
        uint64_t shifted = slices >> first;
        unsigned length = shifted == ~(uint64_t)0 ? 64 - first
                                                  : (unsigned)__builtin_ctzll(~shifted);
        os_purge((char *)segment + (size_t)first * SLICE_SIZE, (size_t)length * SLICE_SIZE);
        slices &= length == 64 ? 0 : ~((((uint64_t)1 << length) - 1) << first);
    }
}

void segment_purge_dirty(struct segment *segment)
{
    purge_slices(segment, segment->dirty_mask);
    segment->dirty_mask = 0;
    segment->aging_mask = 0;
}

void heap_purge_dirty(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next)
        segment_purge_dirty(s);
    heap->dirty_slices = 0;
}

void heap_purge_aged(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        uint64_t aged = s->dirty_mask & s->aging_mask;
        if (aged) {
            purge_slices(s, aged);
            s->dirty_mask &= ~aged;
            heap->dirty_slices -= (size_t)__builtin_popcountll(aged);
        }
        s->aging_mask = s->dirty_mask;
    }
}

static _Atomic int purger_state; /* 0 none, 1 wanted, 2 running */

void heap_maybe_purge(struct heap *heap)
{
    if (heap->dirty_slices == 0)
        return;
    if (heap->dirty_slices >= PURGER_WANTED_SLICES && strata_options.background_purge == 2) {
        int none = 0;
        atomic_compare_exchange_strong(&purger_state, &none, 1);
    }
    if (heap->dirty_slices > HEAP_DIRTY_LIMIT || purge_delay_ns == 0) {
        heap_purge_dirty(heap);
        return;
    }
    uint64_t now = os_now_ns();
    if (now - heap->purge_epoch < purge_delay_ns)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}

/* The purger thread: every purge delay, the aged free slices of every heap
 * whose lock is free go back, and so do expired cached large mappings. It
 * lets a program that frees a working set and then goes quiet shrink. */
static void purge_one(struct heap *heap, void *arg)
{
    (void)arg;
    /* A heap whose owner checked lately purges itself: leave it alone, so
     * the purger's madvise never interrupts a busy thread. */
    uint64_t now = os_now_ns();
    if (heap->dirty_slices == 0 || now - heap->purge_epoch < 2 * purge_delay_ns)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}

static void *purger_main(void *arg)
{
    (void)arg;
    uint64_t delay = purge_delay_ns ? purge_delay_ns : 1000000;
    struct timespec pause = {(time_t)(delay / 1000000000u), (long)(delay % 1000000000u)};
    for (;;) {
        nanosleep(&pause, NULL);
        heap_for_each_live(purge_one, NULL, true);
        large_cache_expire_now();
    }
    return NULL;
}

void purger_start_if_wanted(void)
{
    int state = atomic_load_explicit(&purger_state, memory_order_relaxed);
    if (likely(state >= 2) || (state == 0 && strata_options.background_purge != 1))
        return;
    if (strata_options.background_purge == 0 ||
        !atomic_compare_exchange_strong(&purger_state, &state, 2))
        return;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    if (pthread_create(&thread, &attr, purger_main, NULL) != 0)
        atomic_store(&purger_state, 3); /* no thread to be had: calls purge */
    else if (strata_options.verbose)
        report_warning("purger thread started", NULL);
    pthread_attr_destroy(&attr);
}

void purger_fork_child(void)
{
    /* The thread did not survive the fork; the child starts its own. */
    if (atomic_load(&purger_state) == 2)
        atomic_store(&purger_state, 1);
}

static void purge_all_one(struct heap *heap, void *arg)
{
    (void)arg;
    heap_purge_dirty(heap);
}

STRATA_EXPORT void strata_trim(void)
{
    strata_init();
    heap_trim_own();
    heap_for_each_live(purge_all_one, NULL, true);
    segment_cache_release();
    large_cache_release();
}
