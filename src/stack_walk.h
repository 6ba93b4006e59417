/* stack_walk.h: the heap profiler's call stacks (stack_walk.c), walked by
 * the unwind tables (.eh_frame) the way libgcc's unwinder walks them, but
 * with each return address's rule for its caller's frame kept in a cache
 * once found, so that a sample's walk is a few loads a frame. */
#ifndef STRATA_STACK_WALK_H
#define STRATA_STACK_WALK_H

#include <stddef.h>
#include <stdint.h>

/* The return addresses of the calling thread's stack, innermost first
 * (stack_walk's own into its caller first), into frames[0..max);
 * frames whose address lies in [skip_start, skip_end) are left out while
 * they are innermost. Returns how many, or -1 when a frame's rule is one
 * the walk does not follow (a signal frame, a rule by expression): the
 * caller then asks libgcc's unwinder. Never allocates, never locks but
 * the C library's lock-free lookup of the object holding an address. */
int stack_walk(uintptr_t *frames, int max, uintptr_t skip_start, uintptr_t skip_end);

#endif /* STRATA_STACK_WALK_H */
