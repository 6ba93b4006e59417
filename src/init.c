/* init.c: the process's start-up, fork handling and the purger thread, in
 * one place above the layers they set up. Start-up runs as a constructor
 * while the process has one thread (or at the first call before it), so a
 * fork can never catch it half done; fork takes every lock in the lock order
 * (core.h) and the child re-creates them; the purger thread gives back what
 * heaps leave idle. */
#include <pthread.h>
#include <stdatomic.h>

#include "core.h"

static _Atomic int init_state; /* 0 none, 1 running, 2 done */
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

void strata_init(void)
{
    if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == 2))
        return;
    int expected = 0;
    if (!atomic_compare_exchange_strong(&init_state, &expected, 1)) {
        /* Another thread initialises; a recursive call from our own
         * initialisation (pthread_atfork may allocate) may go on: the
         * thread-exit key exists by then. */
        while (!init_running_here && atomic_load(&init_state) != 2)
            os_yield();
        return;
    }
    init_running_here = true;
    config_init();
    heap_threads_init();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    stats_init();
    init_running_here = false;
    atomic_store_explicit(&init_state, 2, memory_order_release);
}

__attribute__((constructor)) static void strata_init_at_load(void)
{
    strata_init();
}

/* Every purge delay, the aged free slices of every heap whose lock is free
 * go back, and so do expired cached large mappings: a program that frees a
 * working set and then goes quiet shrinks. */
static void *purger_main(void *arg)
{
    (void)arg;
    uint64_t delay = strata_options.purge_delay_ns ? strata_options.purge_delay_ns : 1000000;
    for (;;) {
        os_sleep_ns(delay);
        heap_for_each_live(heap_purge_idle, NULL, true);
        large_cache_expire_now();
    }
    return NULL;
}

void purger_start(void)
{
    int requested = PURGER_REQUESTED;
    if (strata_options.background_purge == BACKGROUND_PURGE_NEVER ||
        !atomic_compare_exchange_strong(&purger_request, &requested, PURGER_TAKEN))
        return;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    /* Without a thread to be had, the heaps' own calls purge. */
    if (pthread_create(&thread, &attr, purger_main, NULL) == 0) {
        atomic_store(&purger_running, true);
        if (strata_options.verbose)
            report_warning("purger thread started", NULL);
    }
    pthread_attr_destroy(&attr);
}
