/* init.c: the process's start-up, thread exit, fork handling and the
 * purger thread, in one place above the layers they set up. Start-up runs
 * as a constructor while the process has one thread (or at the first call
 * before it), so a fork can never catch it half done; fork takes every lock
 * in the lock order (core.h) and the child re-creates them; the purger
 * thread gives back what heaps leave idle and retires the heaps exited
 * threads parked. */
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
/* The purger calls no user code: a small stack is plenty. */
#define PURGER_STACK_BYTES ((size_t)64 * 1024)

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
 * in between (and only samples under STRATA_BACKGROUND_PURGE=0). */
static void *purger_main(void *arg)
{
    (void)arg;
    bool purging = strata_options.background_purge != BACKGROUND_PURGE_NEVER;
    uint64_t delay = strata_options.purge_delay_ns > PURGER_MIN_PERIOD_NS ? strata_options.purge_delay_ns
                                                                          : PURGER_MIN_PERIOD_NS;
    uint64_t sample = strata_options.sample_ns;
    uint64_t period = sample != 0 && (sample < delay || !purging) ? sample : delay;
    uint64_t next_purge = os_now_ns() + delay;
    if (sample != 0)
        stats_sample();
    for (;;) {
        os_sleep_ns(period);
        if (sample != 0)
            stats_sample();
        uint64_t now = os_now_ns();
        if (!purging || now + period / 2 < next_purge)
            continue;
        next_purge = now + delay;
        heap_for_each_live(heap_purge_idle, NULL, true);
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
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, PURGER_STACK_BYTES);
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
