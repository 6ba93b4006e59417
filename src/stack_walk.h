/* stack_walk.h: the heap profiler's call stacks (stack_walk.c), walked by
 * the unwind tables (.eh_frame) the way libgcc's unwinder walks them, but
 * with each return address's rule for its caller's frame kept in a cache
 * once found, so that a sample's walk is a few loads a frame. */
#ifndef STRATA_STACK_WALK_H
#define STRATA_STACK_WALK_H

#include <stdbool.h>
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

/* The stack words a walk read (each frame's return address, and its
 * saved frame pointer where the rule restores one), so that a caller can
 * tell a later walk from the same start would find the same frames: the
 * walk is a function of its start and of these words alone (the rules
 * are the unwind tables', fixed for an address). `complete` false: more
 * words than fit, or a walk that gave up. */
#define STACK_READS_MAX 16
struct stack_reads {
    uint32_t count;
    bool complete;
    /* Whether the walk used the start's frame pointer (a frame's CFA
     * taken from rbp before any rule restored rbp from the stack): where
     * it did not, a start that differs in rbp alone walks the same (code
     * built without frame pointers keeps any value there). */
    bool start_bp_used;
    uintptr_t at[STACK_READS_MAX];
    uintptr_t value[STACK_READS_MAX];
};

/* Whether every word `reads` names still holds what the walk read, for a
 * start equal to the walk's (its pc and sp; its rbp where start_bp_used),
 * taken by the calling thread, whose stack the words lie in. Read in the
 * walk's order and no further than the first that differs: each word's
 * address follows from the start and the words before it, so a walk
 * from here would read each of them too (never a word past the stack a
 * walk now would follow, were the memory there since given to another
 * stack of the thread's, a coroutine's). */
static inline bool stack_reads_unchanged(const struct stack_reads *reads)
{
    for (uint32_t i = 0; i < reads->count; i++)
        if (*(const uintptr_t *)reads->at[i] != reads->value[i])
            return false;
    return true;
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
 * caller first. -1 also for a start of pc 0. With `reads`, the stack
 * words it read, for stack_reads_unchanged. */
int stack_walk_from(const struct stack_start *start, uintptr_t *frames, int max, uintptr_t skip_start,
                    uintptr_t skip_end, struct stack_reads *reads);

#endif /* STRATA_STACK_WALK_H */
