/* init.c: the process's start-up, thread exit, fork handling and the
 * purger thread, in one place above the layers they set up. Start-up runs
 * as a constructor while the process has one thread (or at the first call
 * before it), so a fork can never catch it half done; fork takes every lock
 * in the lock order (core.h) and the child re-creates them; the purger
 * thread gives back what heaps leave idle and retires the heaps exited
 * threads parked, and ends when the program's last thread has ended. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>

#include "bins.h"
#include "init.h"
#include "sampled_blocks.h"
#include "zero_size.h"

static struct once init_once;
static STRATA_TLS bool init_running_here;

static void fork_prepare(void)
{
    heap_lock_all();
    segment_lock_all();
    large_lock_all();
    zero_size_lock_all();
    profile_lock_all();
    sampled_blocks_lock_all();
}

static void fork_parent(void)
{
    sampled_blocks_unlock_all();
    profile_unlock_all();
    zero_size_unlock_all();
    large_unlock_all();
    segment_unlock_all();
    heap_unlock_all();
}

static _Atomic bool purger_running;
/* With STRATA_PURGE_DELAY_MS=0 the purger still sleeps between rounds. */
#define PURGER_MIN_PERIOD_NS ((uint64_t)1000000)
/* While no thread holds a heap, the purger looks this often whether the
 * threads that never allocated have ended too (their exits ring nothing). */
#define PURGER_ALONE_POLL_NS ((uint64_t)50000000)
/* With nothing to give back, the purger sleeps until work rings its bell
 * (purge.c), waking this often all the same. */
#define PURGER_IDLE_SLEEP_NS ((uint64_t)3600 * 1000000000)
/* The purger's stack: its work is shallow, and a default stack is 8 MiB
 * of address space, which an address-space limit (ulimit -v) counts. */
#define PURGER_STACK_BYTES ((size_t)256 << 10)

static void fork_child(void)
{
    /* The thread did not survive the fork; the child starts its own. */
    if (atomic_load(&purger_running)) {
        atomic_store(&purger_running, false);
        atomic_store(&purger_request, PURGER_REQUESTED);
    }
    heap_fork_child();
    heap_purges_fork_child();
    segment_fork_child();
    large_fork_child();
    zero_size_fork_child();
    profile_fork_child();
    sampled_blocks_fork_child();
}

/* A thread with a heap exits: a parked heap needs the purger, which may be
 * started here, outside every lock. */
static void thread_exit(void *heap)
{
    profile_thread_exit();
    sampled_blocks_thread_exit();
    if (STRATA_SECURE_BUILD)
        quarantine_drain(heap);
    if (heap_thread_exit(heap))
        purger_start();
    /* The last thread holding a heap: the purger looks whether it is alone. */
    if (heap_threads_holding() == 0 && atomic_load_explicit(&purger_running, memory_order_relaxed))
        purger_ring();
}

/* STRATA_PROFILE_SIGNAL: the handler only asks (a dump takes locks and
 * writes files); the purger, rung, writes it. */
static void profile_signal_caught(int signal)
{
    (void)signal;
    profile_ask_dump();
    purger_ring();
}

static void profile_signal_init(void)
{
    if (!profile_on || strata_options.profile_signal == 0)
        return;
    if (!os_catch_signal((int)strata_options.profile_signal, profile_signal_caught)) {
        report_warning("STRATA_PROFILE_SIGNAL: not a signal that can be caught; no profile on request", NULL);
        return;
    }
    purger_ask(); /* started at the first allocation that can */
}

void strata_init(void)
{
    /* A call from within (pthread_atfork may allocate) goes on: the
     * thread-exit key exists by then. */
    if (!once_begin(&init_once, &init_running_here))
        return;
    config_init();
    profile_init();
    profile_signal_init();
    heap_threads_init(thread_exit);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    stats_init();
    once_end(&init_once, &init_running_here);
}

__attribute__((constructor)) static void strata_init_at_load(void)
{
    strata_init();
}

/* One round's giving back (every purge delay): the idle owners' remote
 * frees and empty current pages, the aged free slices of every heap whose
 * lock is free and of the abandoned segments, the heaps exited threads
 * parked that long, expired cached large mappings. Whether any work is
 * left for a later round: free slices not yet purged, remote frees, parked
 * heaps, cached mappings, or a heap too busy to look at. */
static void reclaim_idle(struct heap *heap, void *work_left)
{
    heap_reclaim_idle(heap);
    /* Sequentially consistent: against a remote push's (purge.c). */
    *(bool *)work_left |= heap->dirty_slices != 0 || heap->parked_at != 0 ||
                          heap_remote_pending(heap);
}

static bool purge_round(void)
{
    bool work_left = false;
    work_left |= heap_for_each_live(reclaim_idle, &work_left, true) != 0;
    work_left |= heap_retire_parked(false);
    work_left |= abandoned_purge_aged(false);
    work_left |= large_cache_expire_now() != 0;
    work_left |= sampled_blocks_expire_now(false) != 0;
    return work_left;
}

/* The thread that ends the process once the purger was its last: it waits
 * for the purger to end, and then, the last thread, lets the C library end
 * the process (status 0, the exit handlers) on its default-sized stack. */
static void *finisher_main(void *purger)
{
    os_name_thread(os_program_name()); /* not the purger's name it was given */
    pthread_join(*(pthread_t *)purger, NULL);
    return NULL;
}

/* The purger, alone: the process ends with it (see purger_main). */
static void *purger_end(void)
{
    static pthread_t self;
    self = pthread_self();
    pthread_attr_t attr;
    pthread_t finisher;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* Without a thread to be had, the exit handlers run on this stack. */
    if (pthread_create(&finisher, &attr, finisher_main, &self) != 0)
        pthread_detach(self);
    pthread_attr_destroy(&attr);
    return NULL;
}

/* Every purge delay a round gives back what idle threads and caches keep
 * (purge_round): a program that frees a working set and then goes quiet
 * shrinks. A round that leaves no work puts the purger to sleep until work
 * for it rings its bell (purger_wake: a free slice, a cached mapping, a
 * remote free, a parked heap), so that an idle process has no thread
 * waking it a hundred times a second. With STRATA_SAMPLE_MS the same
 * thread samples the memory in between (and only samples under
 * STRATA_BACKGROUND_PURGE=0), and never sleeps for long.
 * A library's thread must never keep a process alive: POSIX ends a process
 * when its last thread ends. So once the program's threads have all ended
 * (the last thread holding a heap rings at its exit; threads that never
 * allocated ring nothing, so while no thread holds a heap the purger looks
 * every PURGER_ALONE_POLL_NS), the purger ends, and a thread of a default
 * stack it leaves behind (purger_end) ends the process as the program's
 * last thread would have. */
static void *purger_main(void *arg)
{
    (void)arg;
    os_name_thread("strata-purger");
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
        /* A purge handed over while the purger was looking (its ring then
         * read into `rung` already) is never slept on. */
        if (wake > now && !atomic_load_explicit(&purges_handed, memory_order_acquire))
            os_wait_ns(&purger_bell, rung, wake - now < PURGER_IDLE_SLEEP_NS ? wake - now : PURGER_IDLE_SLEEP_NS);
        now = os_now_ns();
        uint32_t bell = atomic_load_explicit(&purger_bell, memory_order_acquire);
        profile_dump_if_asked();
        heap_purges_handed(); /* at once: their heaps are past their limit */
        if (bell != rung) { /* a thread's exit, or work while it slept */
            rung = bell;
            next_alone_check = now;
            if (next_round == UINT64_MAX)
                next_round = next_purge = now;
        }
        if (now >= next_alone_check) {
            next_alone_check = UINT64_MAX;
            if (heap_threads_holding() == 0) {
                if (os_live_threads() == 1)
                    return purger_end();
                next_alone_check = now + PURGER_ALONE_POLL_NS;
            }
        }
        if (next_round == UINT64_MAX) /* asleep, and still nothing to do */
            continue;
        if (now < next_round)
            continue;
        next_round = now + period;
        if (sample != 0)
            stats_sample();
        if (!purging || now + period / 2 < next_purge)
            continue;
        next_purge = now + delay;
        /* Said before the round looks for work, so that work made meanwhile
         * either shows in the round or finds it said, and rings. */
        uint32_t before = atomic_load_explicit(&purger_bell, memory_order_acquire);
        atomic_store_explicit(&purger_sleeping, true, memory_order_seq_cst);
        if (purge_round() || sample != 0) {
            atomic_store_explicit(&purger_sleeping, false, memory_order_relaxed);
        } else {
            next_round = UINT64_MAX;
            rung = before; /* a ring since then ends the sleep at once */
        }
    }
    return NULL;
}

void purger_start(void)
{
    int requested = PURGER_REQUESTED;
    bool profile_signal = profile_on && strata_options.profile_signal != 0;
    if ((strata_options.background_purge == BACKGROUND_PURGE_NEVER && strata_options.sample_ns == 0 &&
         !profile_signal) ||
        !atomic_compare_exchange_strong(&purger_request, &requested, PURGER_TAKEN))
        return;
    pthread_attr_t attr;
    pthread_t thread;
    pthread_attr_init(&attr);
    /* Joinable: the thread that ends the process after it waits for it
     * (purger_end). A small stack, but never below what the C library
     * needs of one. */
    size_t stack = PURGER_STACK_BYTES;
    if (pthread_attr_setstacksize(&attr, stack) != 0)
        pthread_attr_getstacksize(&attr, &stack);
    /* Running before it is created, so that a fork meanwhile restarts it in
     * the child. */
    atomic_store(&purger_running, true);
    /* What the C library allocates for the thread (its TLS vector) is
     * strata's, not the program's: the heap profiler leaves it out. */
    bool was_unsampled = profile_unsampled_begin();
    /* Every signal blocked in the thread (it inherits the mask it is
     * created with): a signal sent to the process goes to one of the
     * program's threads, as the program expects, never to strata's (where
     * it would neither interrupt the program's blocking call nor run its
     * handler at once: Python's signal tests failed now and then). */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int created = pthread_create(&thread, &attr, purger_main, NULL);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    profile_unsampled_end(was_unsampled);
    if (created == 0) {
        if (strata_options.verbose)
            report_warning("purger thread started", NULL);
    } else {
        /* No thread to be had now (memory, the address-space limit): the
         * heaps' own calls purge meanwhile, and the next request tries
         * again. */
        atomic_store(&purger_running, false);
        atomic_store(&purger_request, PURGER_IDLE);
    }
    pthread_attr_destroy(&attr);
}
