/* zero_size.h: the secure flavour's blocks of size 0 (zero_size.c), each a
 * slot of an inaccessible region: a touch through the pointer faults. */
#ifndef STRATA_ZERO_SIZE_H
#define STRATA_ZERO_SIZE_H

#include <stdbool.h>
#include <stddef.h>

/* The slots' spacing: what malloc(0)'s pointers are aligned to. */
#define ZERO_SIZE_SLOT 16

/* A block of size 0, or NULL when the region cannot be had or is full (the
 * caller hands out an ordinary block instead). */
void *zero_size_alloc(void);
/* Whether p points into the region (so free, realloc and usable size take
 * it here). */
bool zero_size_holds(const void *p);
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
