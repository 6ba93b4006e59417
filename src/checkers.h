/* checkers.h: the invariant checkers. The tests call them after each step
 * and the debug build (STRATA_DEBUG) at its checkpoints; each returns NULL
 * when sound, else a line naming the first broken invariant, with values. */
#ifndef STRATA_CHECKERS_H
#define STRATA_CHECKERS_H

#include <stddef.h>

struct heap;
struct strata_arena;

/* The calling thread's heap, or another heap whose thread is quiet: its
 * bins, available lists, segments and pages. Takes the heap's lock. */
const char *heap_check(struct heap *heap);
/* p's subtree of contexts: links, parents, sizes, pools, limits. */
const char *ctx_check(const void *p);
/* The arena's chunk stack, cache, big blocks, marks and counts. */
const char *arena_check(const struct strata_arena *a);

/* Pool internals the context tests read. */
size_t ctx_pool_chunks(const void *pool); /* live chunks carved from it */
size_t ctx_pool_used(const void *pool);   /* bytes below its cursor */

#endif /* STRATA_CHECKERS_H */
