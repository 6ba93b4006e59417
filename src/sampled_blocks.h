/* sampled_blocks.h: the heap profiler's sampled blocks of the bins' sizes
 * in the secure flavour, and of the few sizes between the default
 * flavour's largest bin request and SAMPLED_BLOCK_MAX (the default
 * flavour's bin blocks are sampled in place: profile.h,
 * profile_sample_mark) (sampled_blocks.c): each a slot of whole pages in
 * one region of address space, so that free, realloc and usable size find it by an address
 * compare in their slow paths, and a sample costs no system call once the
 * region has slots to reuse. */
#ifndef STRATA_SAMPLED_BLOCKS_H
#define STRATA_SAMPLED_BLOCKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"
#include "profile.h"

/* Address space for the slots (no page backs it until a slot is carved),
 * and the largest block a slot holds: a bin's largest class. Larger
 * sampled blocks are large blocks (large.c keeps their records). */
#define SAMPLED_REGION ((size_t)4 << 30)
#define SAMPLED_BLOCK_MAX ((size_t)128 << 10)

/* The region's base: 0 until the first sample. */
extern STRATA_INTERNAL _Atomic uintptr_t sampled_region;

/* Whether p points into the region (free, realloc and usable size of a
 * pointer outside the segments ask first). */
static inline bool sampled_blocks_hold(const void *p)
{
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_acquire);
    return base != 0 && (uintptr_t)p - base < SAMPLED_REGION;
}
/* A block of `size` bytes (zeroed with `zero`) whose free releases
 * `sample` (kept in the block's header); NULL when no slot serves it (a size above SAMPLED_BLOCK_MAX,
 * an alignment above 64, the region not to be had or full, the memory
 * limit): the caller makes it a large block. */
void *sampled_block_alloc(size_t size, size_t alignment, bool zero, const struct profile_sample *sample);
/* Frees the block at p, which sampled_blocks_hold, and releases its
 * sample; a double free, a pointer that is not a block's start, or an
 * overwritten header is reported. */
void sampled_block_free(void *p);
/* The usable size of the live block at p, which sampled_blocks_hold;
 * reported, as sampled_block_free does, if it is none. */
size_t sampled_block_usable_size(const void *p);
/* The purger's round (`all`: strata_trim's): the pages of slots free for
 * a purge delay (or of every free slot) go back to the OS; returns 0 once
 * the slots are quiet (none resident, none freed for a purge delay), else
 * work for a later round. */
size_t sampled_blocks_expire_now(bool all);
/* The live sampled blocks and the bytes they hold, added to the totals. */
void sampled_blocks_stats(size_t *blocks, size_t *bytes);
/* The calling thread exits: its cache of freed slots goes to the lists
 * (where the purger reaches them); later frees go there at once. */
void sampled_blocks_thread_exit(void);
/* fork: the lock held across it. */
void sampled_blocks_lock_all(void);
void sampled_blocks_unlock_all(void);
void sampled_blocks_fork_child(void);

#endif /* STRATA_SAMPLED_BLOCKS_H */
