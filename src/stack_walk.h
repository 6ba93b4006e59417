/* stack_walk.h: the heap profiler's call stacks (stack_walk.c), walked by
 * the unwind tables (.eh_frame) the way libgcc's unwinder walks them, but
 * with each return address's rule for its caller's frame kept in a cache
 * once found, so that a sample's walk is a few loads a frame. */
#ifndef STRATA_STACK_WALK_H
#define STRATA_STACK_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* Where a walk may start: an address inside a function, with the stack
 * and frame pointers there (stack_start_here's); pc 0: nowhere. */
struct stack_start {
    uintptr_t pc, sp, bp;
};

/* The calling function's registers at this point, for a walk that a
 * function it calls makes later: the frames between are never walked
 * (the heap profiler's, a third of a sample's walk). Its frames above
 * stay as they are meanwhile: the calls made since write below the
 * stack pointer taken. On machines the walk does not know, pc 0. */
static STRATA_ALWAYS_INLINE void stack_start_here(struct stack_start *start)
{
#if defined(__x86_64__)
    __asm__ volatile("lea 0(%%rip), %0\n\t"
                     "mov %%rsp, %1\n\t"
                     "mov %%rbp, %2"
                     : "=r"(start->pc), "=r"(start->sp), "=r"(start->bp));
#else
    start->pc = start->sp = start->bp = 0;
#endif
}

/* The return addresses of the calling thread's stack, innermost first
 * (stack_walk's own into its caller first), into frames[0..max);
 * frames whose address lies in [skip_start, skip_end) are left out while
 * they are innermost. Returns how many, or -1 when a frame's rule is one
 * the walk does not follow (a signal frame, a rule by expression): the
 * caller then asks libgcc's unwinder. Never allocates, never locks but
 * the C library's lock-free lookup of the object holding an address. */
int stack_walk(uintptr_t *frames, int max, uintptr_t skip_start, uintptr_t skip_end);
/* The same walk from `start`, taken by a function still running that
 * called (directly or not) the caller: its return address into its own
 * caller first. -1 also for a start of pc 0. */
int stack_walk_from(const struct stack_start *start, uintptr_t *frames, int max, uintptr_t skip_start,
                    uintptr_t skip_end);

#endif /* STRATA_STACK_WALK_H */
