/* counters.h: the bytes strata has handed out (live blocks and thread
 * caches, large blocks), kept by every allocating layer and read by the
 * statistics. A thread with a heap gathers its changes and publishes them
 * in batches, so the slow paths share no cache line. */
#ifndef STRATA_COUNTERS_H
#define STRATA_COUNTERS_H

/* Adds `delta` bytes to what is handed out (negative: given back). */
void counters_bytes_out(long delta);
/* The calling thread batches from now on (it has a heap). */
void counters_thread_begin(void);
/* Publishes the calling thread's batch; it publishes at once from now on. */
void counters_thread_end(void);
/* The total published now: what is handed out, give or take each
 * thread's unpublished batch (up to PUBLISH_BYTES a thread). */
long counters_total(void);
/* The highest total published so far. */
long counters_peak(void);

#endif /* STRATA_COUNTERS_H */
