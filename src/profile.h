/* profile.h: the heap profiler (profile.c). With STRATA_PROFILE set, one
 * allocation in about every STRATA_PROFILE_SAMPLE bytes is sampled: its
 * call stack and size are recorded, and the records add up, scaled by the
 * chance each had, to estimates of the bytes and blocks each stack holds
 * now, held at the peak and allocated since start. The gaps between
 * samples are drawn from an exponential distribution (in pops of a class
 * for the bins, in bytes for the blocks off them), so that every byte has
 * the same chance. A sampled block of a bin's size is, in the default
 * flavour, the bin's block where it lies, its guard word marked with its
 * record (profile_sample_mark); in the secure flavour, a slot of the
 * sampled blocks' region (sampled_blocks.h); a larger one is a large
 * block, which keeps its sample's record. Only slow paths ever see one. */
#ifndef STRATA_PROFILE_H
#define STRATA_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

struct profile_stack;
struct stack_start;

/* A sample's record, kept by its block: its stack's entry, the size asked
 * and the bytes whose chance of a sample it had (profile_sample_take's). */
struct profile_sample {
    struct profile_stack *stack;
    size_t size, chance_bytes;
};

/* Whether the profiler samples (STRATA_PROFILE set), fixed at start-up. */
extern STRATA_INTERNAL bool profile_on;

/* Start-up, after the options: reads STRATA_PROFILE, STRATA_PROFILE_SAMPLE
 * and STRATA_PROFILE_SEED. */
void profile_init(void);
/* Allocations of blocks of `block_size` bytes (a class's) to let by before
 * the next is sampled, drawn afresh; INT32_MAX, with the profiler off. */
int32_t profile_next_pops(size_t block_size);
/* Whether an allocation of `size` bytes off the bins (a medium or large
 * block) is to be sampled: the thread's countdown of such bytes spent
 * (drawn again then). Only with the profiler on. */
bool profile_big_due(size_t size);
/* A sample of an allocation of `size` bytes whose chance of a sample was
 * that of `chance_bytes` bytes (a class's block size, or the size): its
 * call stack, walked from `start` (stack_walk.h: taken in the allocation's
 * slow path, so that the frames below it are not walked), recorded in
 * *sample and counted. False when none
 * may be taken (within the profiler's own work, as its dump's writes, or
 * without memory for a new stack's entry): the allocation then goes
 * unsampled. Takes no lock unless the stack is new or the thread's log of
 * events is full (one in 64). */
bool profile_sample_take(size_t size, size_t chance_bytes, const struct stack_start *start,
                         struct profile_sample *sample);
/* The sampled block was freed (or reallocated: a realloc is a free and an
 * allocation, the new block unsampled): its figures are taken back. */
void profile_sample_release(const struct profile_sample *sample);
/* A copy of the sample in the profiler's memory, for a block that keeps a
 * pointer to its record (a large block's registry entry); NULL without
 * memory (the caller releases the sample: its block goes unsampled). */
struct profile_sample *profile_sample_keep(const struct profile_sample *sample);
/* The kept record's block was freed or reallocated: the sample released,
 * the copy's memory freed. */
void profile_sample_drop(struct profile_sample *kept);
/* A sample of a bin's block (the default flavour's), kept where the bin
 * gave it: a record kept for it and its guard word marked with the
 * record's address (layout.h, small_guard_mark); false without memory for
 * a record (the caller releases the sample). */
bool profile_sample_mark(void *block, const struct profile_sample *sample);
/* Whether `address` is the place of a kept record (any: one read of a
 * guard word that another thread may mark or unmark meanwhile, as
 * heap_check's, cannot also read the record). */
bool profile_kept_record_at(uintptr_t address);
/* The block's free or reallocation: when its guard word is its sample's
 * mark, the sample is released and the guard word written back (true);
 * false, doing nothing, otherwise. */
bool profile_sample_unmark(void *block);
/* Allocations of the calling thread go unsampled from begin to end (what
 * the C library allocates on strata's behalf, as for the purger thread);
 * begin returns what end restores, so that the two nest. */
bool profile_unsampled_begin(void);
void profile_unsampled_end(bool was_unsampled);
/* The calling thread has a heap (whose exit hook calls
 * profile_thread_exit): it may keep a log of events from now on. */
void profile_thread_begin(void);
/* The calling thread exits: its log of events is added up and freed for
 * another thread; its later events are added up at once. */
void profile_thread_exit(void);
/* Writes the profile to `path` (the gperftools heap profile text, with the
 * process's mappings for symbols; `path`.folded, the folded stacks by
 * address for flame graphs); 0, or an errno value. */
int profile_dump(const char *path);
/* The exit's dump to STRATA_PROFILE's path (a forked child's to
 * path.PID), once; a path that cannot be written is reported, and the
 * program's exit goes on. */
void profile_dump_at_exit(void);

/* STRATA_PROFILE_SIGNAL's handler (init.c's) asks for a dump, safely in
 * a signal handler; the purger thread then writes it with
 * profile_dump_if_asked, to the exit's path with .dumpN (N = 1, 2, ...). */
void profile_ask_dump(void);
void profile_dump_if_asked(void);

/* fork: the profiler's lock held across it (init.c's handlers). */
void profile_lock_all(void);
void profile_unlock_all(void);
void profile_fork_child(void);

#endif /* STRATA_PROFILE_H */
