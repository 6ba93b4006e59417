/* counters.c: the bytes handed out of pages and large mappings, and their
 * peak (the statistics' allocated_peak). Every allocating layer adds to it;
 * a thread with a heap gathers its changes and publishes them a mebibyte at
 * a time, so the peak is exact to that much a thread and the slow paths
 * share no cache line. Invariant: the published total plus every thread's
 * batch is what is handed out now. */
#include <stdatomic.h>
#include <stdbool.h>

#include "counters.h"
#include "platform.h"

#define PUBLISH_BYTES (1L << 20)

static _Atomic long bytes_out;
static _Atomic long bytes_out_peak;
static STRATA_TLS long thread_batch;
static STRATA_TLS bool thread_batching;

static void publish(long delta)
{
    long now = atomic_fetch_add_explicit(&bytes_out, delta, memory_order_relaxed) + delta;
    long peak = atomic_load_explicit(&bytes_out_peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&bytes_out_peak, &peak, now,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed))
        ;
}

void counters_bytes_out(long delta)
{
    if (!thread_batching) {
        publish(delta);
        return;
    }
    long batch = thread_batch + delta;
    if (batch >= PUBLISH_BYTES || batch <= -PUBLISH_BYTES) {
        publish(batch);
        batch = 0;
    }
    thread_batch = batch;
}

void counters_thread_begin(void)
{
    thread_batching = true;
}

void counters_thread_end(void)
{
    publish(thread_batch);
    thread_batch = 0;
    thread_batching = false;
}

long counters_total(void)
{
    return atomic_load_explicit(&bytes_out, memory_order_relaxed);
}

long counters_peak(void)
{
    return atomic_load_explicit(&bytes_out_peak, memory_order_relaxed);
}
