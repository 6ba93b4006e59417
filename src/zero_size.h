/* zero_size.h: the secure flavour's blocks of size 0 (zero_size.c), each a
 * slot of an inaccessible region: a touch through the pointer faults. */
#ifndef STRATA_ZERO_SIZE_H
#define STRATA_ZERO_SIZE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* The slots' spacing: what malloc(0)'s pointers are aligned to. */
#define ZERO_SIZE_SLOT 16
/* 16 Mi slots, 256 MiB of address space that no page backs. */
#define ZERO_SIZE_SLOTS ((size_t)1 << 24)
#define ZERO_SIZE_REGION (ZERO_SIZE_SLOTS * ZERO_SIZE_SLOT)

/* The region's base: 0 until the first zero-size request. */
extern STRATA_INTERNAL _Atomic uintptr_t zero_size_region;

/* A block of size 0, or NULL when the region cannot be had or is full (the
 * caller hands out an ordinary block instead). */
void *zero_size_alloc(void);
/* Whether p points into the region (so free, realloc and usable size take
 * it here): inline, as every secure free asks it first. */
static inline bool zero_size_holds(const void *p)
{
    uintptr_t base = atomic_load_explicit(&zero_size_region, memory_order_acquire);
    return base != 0 && (uintptr_t)p - base < ZERO_SIZE_REGION;
}
/* Takes back the block at p, which zero_size_holds; a double free, or a
 * pointer that is not a slot's start, is reported. */
void zero_size_free(void *p);
/* Reports p, which zero_size_holds, unless it is a block handed out. */
void zero_size_check_live(const void *p);
/* fork: the lock held across it, and a child's made free again. */
void zero_size_lock_all(void);
void zero_size_unlock_all(void);
void zero_size_fork_child(void);

#endif /* STRATA_ZERO_SIZE_H */
