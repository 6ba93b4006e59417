/* init.h: start-up and the purger thread's start (init.c), for the files
 * above it: the allocation paths, which set the process up at their first
 * call and start the purger once a heap asked for it. */
#ifndef STRATA_INIT_H
#define STRATA_INIT_H

#include "core.h"

/* Sets the process up (options, thread-exit key, fork handlers); cheap once
 * done. Runs as a constructor at load, or at the first call before it. */
void strata_init(void);
/* Starts the purger thread once a heap asked (purger_request); call with
 * no lock held. */
STRATA_NOINLINE void purger_start(void);
/* One load, on the slow paths above init.c (and every secure free), that
 * starts the purger once a heap asked. */
static inline void purger_start_if_wanted(void)
{
    if (unlikely(atomic_load_explicit(&purger_request, memory_order_relaxed) == PURGER_REQUESTED))
        purger_start();
}

#endif /* STRATA_INIT_H */
