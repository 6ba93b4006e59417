/* init.c: the process's start-up, thread exit, fork handling and the
 * purger thread, in one place above the layers they set up. Start-up runs
 * as a constructor while the process has one thread (or at the first call
 * before it), so a fork can never catch it half done; fork takes every lock
 * in the lock order (core.h) and the child re-creates them; the purger
 * thread gives back what heaps leave idle and retires the heaps exited
 * threads parked, and ends when the program's last thread has ended. */
#include <pthread.h>
#include <stdatomic.h>

#include "core.h"

static struct once init_once;
static STRATA_TLS bool init_running_here;

static void fork_prepare(void)
{
    heap_lock_all();
    segment_lock_all();
    large_lock_all();
}

static void fork_parent(void)
{
    large_unlock_all();
    segment_unlock_all();
    heap_unlock_all();
}

static _Atomic bool purger_running;
/* With STRATA_PURGE_DELAY_MS=0 the purger still sleeps between rounds. */
#define PURGER_MIN_PERIOD_NS ((uint64_t)1000000)
/* Rung when the last thread holding a heap exits: the purger wakes to see
 * whether it is the last thread left. */
static _Atomic uint32_t purger_bell;
/* While no thread holds a heap, the purger looks this often whether the
 * threads that never allocated have ended too (their exits ring nothing). */
#define PURGER_ALONE_POLL_NS ((uint64_t)50000000)

static void fork_child(void)
{
    /* The thread did not survive the fork; the child starts its own. */
    if (atomic_load(&purger_running)) {
        atomic_store(&purger_running, false);
        atomic_store(&purger_request, PURGER_REQUESTED);
    }
    heap_fork_child();
    segment_fork_child();
    large_fork_child();
}

/* A thread with a heap exits: a parked heap needs the purger, which may be
 * started here, outside every lock. */
static void thread_exit(void *heap)
{
    if (STRATA_SECURE_BUILD)
        quarantine_drain(heap);
    if (heap_thread_exit(heap))
        purger_start();
    if (heap_threads_holding() == 0 && atomic_load_explicit(&purger_running, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&purger_bell, 1, memory_order_release);
        os_wake(&purger_bell);
    }
}

void strata_init(void)
{
    /* A call from within (pthread_atfork may allocate) goes on: the
     * thread-exit key exists by then. */
    if (!once_begin(&init_once, &init_running_here))
        return;
    config_init();
    heap_threads_init(thread_exit);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    stats_init();
    once_end(&init_once, &init_running_here);
}

__attribute__((constructor)) static void strata_init_at_load(void)
{
    strata_init();
}

/* Every purge delay, the aged free slices of every heap whose lock is free
 * go back, so do the heaps exited threads parked that long, and expired
 * cached large mappings: a program that frees a working set and then goes
 * quiet shrinks. With STRATA_SAMPLE_MS the same thread samples the memory
 * in between (and only samples under STRATA_BACKGROUND_PURGE=0).
 * A library's thread must never keep a process alive: POSIX ends a process
 * when its last thread ends. So once the program's threads have all ended
 * (the last thread holding a heap rings at its exit; threads that never
 * allocated ring nothing, so while no thread holds a heap the purger looks
 * every PURGER_ALONE_POLL_NS), the purger returns: it is then the
 * process's last thread, and the C library ends the process with status
 * 0, running its exit handlers on this thread's stack, as it would have on
 * the program's last thread. */
static void *purger_main(void *arg)
{
    (void)arg;
    bool purging = strata_options.background_purge != BACKGROUND_PURGE_NEVER;
    uint64_t delay = strata_options.purge_delay_ns > PURGER_MIN_PERIOD_NS ? strata_options.purge_delay_ns
                                                                          : PURGER_MIN_PERIOD_NS;
    uint64_t sample = strata_options.sample_ns;
    uint64_t period = sample != 0 && (sample < delay || !purging) ? sample : delay;
    uint64_t now = os_now_ns();
    uint64_t next_round = now + period, next_purge = now + delay, next_alone_check = now;
    uint32_t rung = atomic_load_explicit(&purger_bell, memory_order_acquire);
    if (sample != 0)
        stats_sample();
    for (;;) {
        uint64_t wake = next_round < next_alone_check ? next_round : next_alone_check;
        if (wake > now)
            os_wait_ns(&purger_bell, rung, wake - now);
        now = os_now_ns();
        uint32_t bell = atomic_load_explicit(&purger_bell, memory_order_acquire);
        if (bell != rung || now >= next_alone_check) {
            rung = bell;
            next_alone_check = UINT64_MAX;
            if (heap_threads_holding() == 0) {
                if (os_live_threads() == 1)
                    return NULL;
                next_alone_check = now + PURGER_ALONE_POLL_NS;
            }
        }
        if (now < next_round)
            continue;
        next_round = now + period;
        if (sample != 0)
            stats_sample();
        if (!purging || now + period / 2 < next_purge)
            continue;
        next_purge = now + delay;
        heap_for_each_live(heap_reclaim_idle, NULL, true);
        heap_retire_parked(false);
        large_cache_expire_now();
    }
    return NULL;
}

void purger_start(void)
{
    int requested = PURGER_REQUESTED;
    if ((strata_options.background_purge == BACKGROUND_PURGE_NEVER && strata_options.sample_ns == 0) ||
        !atomic_compare_exchange_strong(&purger_request, &requested, PURGER_TAKEN))
        return;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    /* The default stack: as the last thread the purger runs the program's
     * exit handlers (purger_main). */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Running before it is created, so that a fork meanwhile restarts it in
     * the child; without a thread to be had, the heaps' own calls purge. */
    atomic_store(&purger_running, true);
    if (pthread_create(&thread, &attr, purger_main, NULL) == 0) {
        if (strata_options.verbose)
            report_warning("purger thread started", NULL);
    } else {
        atomic_store(&purger_running, false);
    }
    pthread_attr_destroy(&attr);
}
