/* bins.h: the small-block engine, one interface: each thread's bins of free
 * blocks in front of its pages, and the way a freed block goes home. Its
 * inline calls are all that the allocation and free fast paths (alloc.h)
 * and the secure flavour's hand-out use; its out-of-line calls (bins.c)
 * refill and flush bins, free a block from any thread to where it belongs
 * (the caller's bin, its owner's page, the owner's remote list, an
 * abandoned segment) and collect remote lists. No other file touches a
 * bin or a remote list (tests/test_layers.py holds them to that), so
 * another engine swaps in behind these calls. */
#ifndef STRATA_BINS_H
#define STRATA_BINS_H

#include "core.h"
#include "heap.h"
#include "profile.h"

/* A freed block that bin_push_guarded's checks did not let by: with
 * `guard` (the caller asked for the guard word's check), the heap
 * profiler's sample, freed here (its record released, then the block freed
 * through heap_free_validated), else a misuse reported: the guard word below
 * the block overwritten, or a double free. Returns only from a sample's
 * free. */
STRATA_NOINLINE STRATA_COLD void free_unchecked_block(void *p, bool guard);

/* small_guard_broken's answer settled, for the paths that free another
 * heap's block: after it, the guard word is intact. */
static inline void small_guard_check(void *p)
{
    if (unlikely(small_guard_broken(p)))
        release_sample_or_report_guard(p);
}

/* ---- the inline paths ----------------------------------------------------
 * An allocation pops its class's bin, a free pushes onto it; each makes
 * exactly the checks its comment lists and leaves for bins.c (through the
 * caller's slow path) on anything else. */

/* The bin's newest block leaves it, the bin's word becoming `word`.
 * Checks: block_next's (the block's link word agrees with its check word:
 * a write after free or a double free that reached the list is reported
 * before its link is followed). */
static STRATA_ALWAYS_INLINE void bin_unlink(struct bin *bin, struct block *block, uint64_t word)
{
    bin->head = block_next(block);
    block_take(block);
    __atomic_store_n(&bin->word, word, __ATOMIC_RELAXED);
}

/* A block from the calling thread's bin of the class, or NULL when the bin
 * is empty or the class's sample countdown is spent (heap.h: the slow path
 * samples or, the profiler off, starts it again). Checks, in one branch:
 * the bin is not empty and the word's countdown, one pop less, is not
 * negative (a user-space address less one never is, NULL less one is);
 * then bin_unlink's. */
static STRATA_ALWAYS_INLINE void *bin_pop(unsigned class_index)
{
    struct bin *bin = &thread_heap->bins[class_index];
    struct block *block = bin->head;
    uint64_t word = bin->word + BIN_POP_STEP;
    if (likely(((int64_t)((uintptr_t)block - 1) | (int64_t)word) >= 0)) {
        bin_unlink(bin, block, word);
        return block;
    }
    return NULL;
}

/* The slow path's allocation of the class counts as a pop: whether it is
 * the one the class's sample countdown picked (the countdown at 0: drawn
 * again here, and the caller samples the allocation or, with the heap
 * profiler off or unable, makes it with bin_pop_uncounted), else the
 * countdown goes down one (a refill's block). */
static inline bool bin_countdown_take(struct heap *heap, unsigned class_index)
{
    struct bin *bin = &heap->bins[class_index];
    int32_t countdown = bin_countdown(bin);
    if (countdown > 0) {
        bin_set_countdown(bin, countdown - 1);
        return false;
    }
    bin_set_countdown(bin, profile_next_pops(class_size[class_index]));
    return true;
}

/* A block from the heap's bin of the class without a count against its
 * sample countdown (bin_countdown_take's caller), or NULL when the bin is
 * empty. Checks: bin_unlink's. */
static inline void *bin_pop_uncounted(struct heap *heap, unsigned class_index)
{
    struct bin *bin = &heap->bins[class_index];
    struct block *block = bin->head;
    if (block != NULL)
        bin_unlink(bin, block, bin->word + 1); /* room + 1 */
    return block;
}

/* A free block onto a bin's list, counted; whether the bin is now past its
 * limit (its room below 0, the biased room's top bit clear: the caller
 * flushes it). The one check: the block is not free already (its two
 * words are not a free block's: block_is_free), which reports a double
 * free at the free that makes it, whichever list holds the block (this
 * bin, a page's free list, a remote list, another thread's bin), since
 * every hand-out clears the check word; and, with `guard`, the guard word
 * below it (layout.h, small_guard_broken: a write before its start, or
 * the heap profiler's mark of a sample). Both go to one call
 * (free_unchecked_block), which tells them apart and frees a sample
 * itself, the bin left as it was (false: not past its limit), so that the
 * free sets up no frame on the path that reports nothing (the call is its
 * tail). The word is tested as computed: read back after its atomic store,
 * it would be loaded again. */
static STRATA_ALWAYS_INLINE bool bin_push_guarded(struct bin *bin, struct block *block, bool guard)
{
    if (unlikely(guard && small_guard_broken(block)) || unlikely(block_is_free(block))) {
        free_unchecked_block(block, guard); /* a sample's free returns: the bin as it was */
        return false;
    }
    block_set_next(block, bin->head);
    bin->head = block;
    uint64_t word = bin->word - 1;
    __atomic_store_n(&bin->word, word, __ATOMIC_RELAXED);
    return (int32_t)(uint32_t)word >= 0;
}

/* bin_push for a block whose guard word the caller has checked or has
 * none to check. */
static STRATA_ALWAYS_INLINE bool bin_push(struct bin *bin, struct block *block)
{
    return bin_push_guarded(bin, block, false);
}

/* The entry of p's slot in the calling heap's own_segments (heap.h): the
 * header of a segment the heap owns, or the empty entry's all-zero header;
 * never NULL. */
static STRATA_ALWAYS_INLINE uintptr_t own_segment_entry(const struct heap *heap, const void *p)
{
    /* The slot's byte offset taken from the address by one mask: indexed
     * by own_segment_slot, GCC adds the array's offset in an instruction
     * of its own before an atomic load (one more a free). */
    size_t byte = ((uint32_t)(uintptr_t)p >> (SEGMENT_SHIFT - 3)) & ((OWN_SEGMENT_SLOTS - 1) * sizeof(uintptr_t));
    return atomic_load_explicit((const _Atomic uintptr_t *)((const char *)heap->own_segments + byte),
                                memory_order_relaxed);
}

/* Whether p lies in the segment whose header is `entry`: p's bits above
 * SEGMENT_SHIFT are the entry's. For the empty entry, p lies beside its
 * all-zero header, whose slices carve nothing (bin_push_in_segment refuses
 * p). */
static STRATA_ALWAYS_INLINE bool own_segment_entry_holds(uintptr_t entry, const void *p)
{
    return ((entry ^ (uintptr_t)p) >> SEGMENT_SHIFT) == 0;
}

/* The slice of p, in a segment the calling heap owns, when p starts a
 * block its page has carved (the key of its offset below the slice's
 * carved key, which the owner reads plainly: it is its one writer); NULL
 * otherwise. */
static STRATA_ALWAYS_INLINE const struct slice *own_carved_slice(const struct segment *segment, const void *p)
{
    uint32_t offset = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    const struct slice *slice = &segment->slices[offset >> SLICE_SHIFT];
    return likely(slice_holds_block(slice, offset)) ? slice : NULL;
}

/* A block of one of the calling heap's own segments into its bin: the bin,
 * its count raised, with *full set when it is past its limit (the caller
 * flushes it), or NULL when p is not a block the page has carved (the
 * caller's slow path reports it). Checks: the pointer is the start of a
 * block the page has carved (the key of its offset below the slice's
 * carved key: anything else never reaches a list); bin_push_guarded's
 * (the guard word below it, and a free block's two words). */
static STRATA_ALWAYS_INLINE struct bin *bin_push_in_segment(struct heap *heap, struct segment *segment, void *p,
                                                            bool *full)
{
    const struct slice *slice = own_carved_slice(segment, p);
    if (likely(slice != NULL)) {
        struct bin *bin = &heap->bins[slice_class(slice)];
        *full = bin_push_guarded(bin, p, true);
        if (bin == NULL)
            __builtin_unreachable(); /* the caller's test of it folds away */
        return bin;
    }
    return NULL;
}

/* The owner's inline free: a block of one of the calling heap's own
 * segments into its bin; the bin, its count raised, with *full set when it
 * is past its limit (the caller flushes it), or NULL when p is not in one
 * of the heap's own segments or not a block its page has carved (the
 * caller's slow path decides). Checks: p lies in its slot's entry's
 * segment (own_segment_entry_holds), which only a segment the heap owns,
 * or the empty one, ever is: that proves p a pointer into the segment,
 * with neither the segment map's look-up, the owner word's load nor the
 * header's colour (one branch: an entry is never NULL, so its match is the
 * segment's test); bin_push_in_segment's. */
static STRATA_ALWAYS_INLINE struct bin *bin_push_own_segment(struct heap *heap, void *p, bool *full)
{
    uintptr_t entry = own_segment_entry(heap, p);
    if (likely(own_segment_entry_holds(entry, p)))
        return bin_push_in_segment(heap, (struct segment *)entry, p, full);
    return NULL;
}

/* The usable size of p when it is a live block the calling heap's own
 * segment has carved, 0 otherwise (the caller's full look-up then answers
 * or reports). malloc_usable_size's fast path: redis and sqlite3 ask it at
 * every allocation and free. Checks: bin_push_own_segment's test of the
 * slot's entry (p lies in a segment the heap owns, with no segment map
 * look-up); the start of a block the page has carved (the owner reads its
 * carved key plainly); the block is not free (its two words). */
static STRATA_ALWAYS_INLINE size_t own_block_usable_size(const struct heap *heap, const void *p)
{
    uintptr_t entry = own_segment_entry(heap, p);
    if (unlikely(!own_segment_entry_holds(entry, p)))
        return 0;
    const struct slice *slice = own_carved_slice((const struct segment *)entry, p);
    if (unlikely(slice == NULL || block_is_free(p)))
        return 0;
    return class_usable(slice_class(slice));
}

/* bin_push_own (below) for a segment whose owner word the caller has read
 * as the heap's own. */
static STRATA_ALWAYS_INLINE struct bin *bin_push_owned(struct heap *heap, struct segment *segment, void *p,
                                                      bool *full)
{
    atomic_store_explicit(&heap->own_segments[own_segment_slot((uintptr_t)p)], (uintptr_t)segment,
                          memory_order_relaxed);
    return bin_push_in_segment(heap, segment, p, full);
}

/* The local-or-elsewhere decision of every free, made here once: a block
 * of the calling heap's own pages goes into its bin; the bin, its count
 * raised, with *full set when it is past its limit (the caller flushes
 * it), or NULL when the block is not the heap's to take inline (the
 * caller's slow path then frees it through heap_free_block, or reports it).
 * Checks, for a pointer the caller knows lies in a segment: the segment's
 * owner word is the heap's own (never in checked mode, whose word is
 * tagged), and the segment then joins the heap's own_segments;
 * bin_push_in_segment's (only the owner carves, so only the owner reads
 * the carved key inline). */
static STRATA_ALWAYS_INLINE struct bin *bin_push_own(struct heap *heap, void *p, bool *full)
{
    struct segment *segment = segment_of(p);
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_relaxed);
    if (likely(owner == (uintptr_t)heap))
        return bin_push_owned(heap, segment, p, full);
    return NULL;
}

/* The slice of p when p is another heap's carved small block (`owner`,
 * the segment's owner word, is not the heap's): its carved key covers p
 * (slice_holds_block_any_thread), which also says its class is a small
 * one (a medium page's slices, and a slice in no page, have key 0);
 * NULL otherwise. Its guard word is the caller's to check: the push that
 * keeps it (bin_keep_foreign with `guard`), or small_guard_check. */
static STRATA_ALWAYS_INLINE const struct slice *foreign_carved_slice(const struct heap *self,
                                                                     struct segment *segment, void *p,
                                                                     uintptr_t owner)
{
    uint32_t offset = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    const struct slice *slice = &segment->slices[offset >> SLICE_SHIFT];
    /* The slice's address made opaque, so that it is computed once: GCC
     * forms it again for the carved key's atomic load (three instructions
     * more a foreign free). */
    __asm__("" : "+r"(slice));
    if (unlikely(owner == self->owner_word || !slice_holds_block_any_thread(slice, offset)))
        return NULL;
    return slice;
}

/* Another heap's carved small block of class class_index into the
 * caller's bin, if the bin may keep it (bin_push_foreign, below); with
 * `guard`, its guard word checked by the push (bin_push_guarded: a sample
 * is then freed by free_unchecked_block, which the free's path reaches as
 * a tail call, so that it sets up no frame). A bin that may not keep it
 * leaves it unchecked, for heap_free_block. */
static STRATA_ALWAYS_INLINE struct bin *bin_keep_foreign(struct heap *self, unsigned class_index, void *p,
                                                        uintptr_t owner, bool guard, bool *full)
{
    /* A live heap's word has neither bit (heaps are aligned): one test
     * lets its blocks by. A given-up heap's block never stays; a parked
     * heap's only where this thread will hand it out again: kept in the bin
     * of a class the thread does not allocate, it would hold the heap's
     * page, and so its segment, for as long as the thread lives (its blocks
     * go to the heap's remote list instead, which the purger collects). */
    if (self->bin_limit[class_index] == 0)
        return NULL;
    if (unlikely(owner & (OWNER_ABANDONED | OWNER_PARKED_TAG)) &&
        (owner == OWNER_ABANDONED || !(self->bin_use[class_index] & BIN_REFILLED_LATELY)))
        return NULL;
    struct bin *bin = &self->bins[class_index];
    *full = bin_push_guarded(bin, p, guard);
    return bin;
}

/* Another live heap's carved small block, freed by the calling thread,
 * kept in the caller's bin of its class, where it stays counted as used in
 * its page: the caller hands it out again while it is warm in its cache,
 * or gives it to its owner when the bin overflows. The bin, its count
 * raised, with *full set when it is past its limit (the caller flushes
 * it), or NULL, doing nothing, when the block is not one to keep: not
 * another heap's carved small block (`owner` is the segment's owner word,
 * loaded with acquire), or the bin may not keep it: an exited thread's
 * block (given up, or parked where the caller does not allocate the
 * class), or checked mode and a heapless thread (no room in their bins).
 * Neither reads the page's record, whose line its owner writes at every
 * refill and flush (on the server workload that read was a cross-core miss
 * at every other free). The slice's carved key is as safe to read there as
 * for the owner: the carve that covered a block happened before its
 * hand-out, which happened before the program passed it to this thread; a
 * stale key can only be lower, and sends a pointer to the full check.
 * Checks: foreign_carved_slice's; bin_push_guarded's (the guard word
 * below the block, and its two words, whose read reports a second free of
 * it whichever list holds it: a miss where the program left the block
 * cold, docs/design.md, issue 35's section). heap_free_block calls its
 * two parts itself, to send a block the bin may not keep to its owner. */
static STRATA_ALWAYS_INLINE struct bin *bin_push_foreign(struct heap *self, struct segment *segment, void *p,
                                                        uintptr_t owner, bool *full)
{
    const struct slice *slice = foreign_carved_slice(self, segment, p, owner);
    return slice != NULL ? bin_keep_foreign(self, slice_class(slice), p, owner, true, full) : NULL;
}

/* ---- bins.c: refills, flushes and frees from anywhere -------------------- */
/* A new heap's bins, empty at their base limits, and its remote list. */
void bins_init(struct heap *heap);
/* Each class's bin as a new thread's (the bins empty, as a parked heap's
 * are): nothing learned of its use, passing other heaps' blocks on at its
 * pass limit or, `draining`, sending every free to the pages, until the
 * class's first refill. What the heap's last thread allocated is not what
 * its next one will: kept, its marks would have the next thread keep
 * parked heaps' blocks of classes it never allocates, holding their pages
 * past the heaps' retirement. */
void bins_forget_use(struct heap *heap, bool draining);
/* Takes a block of a class whose bin is empty, refilling the bin; NULL
 * when no memory is to be had (errno untouched). */
STRATA_NOINLINE void *heap_bin_refill(struct heap *heap, unsigned class_index);
/* Returns half of a full bin's blocks to their pages. */
STRATA_NOINLINE void heap_bin_flush(struct heap *heap, struct bin *bin);
/* Frees a pointer into a segment from whichever thread calls: another
 * live heap's carved small block into the caller's bin when the bin may
 * keep it (not the caller's own, a medium block, checked mode, an exited
 * thread's, or a parked one's of a class the caller does not allocate),
 * else to its owner's remote list or its abandoned segment, the segment's
 * owner word, the block's slice and its carving read once (a consumer
 * thread's every free); anything else is validated (free_segment_page,
 * which reports what is not a block's start) and freed to its own page,
 * its owner or its abandoned segment. */
STRATA_NOINLINE void heap_free_block(void *p);
/* Frees a block the caller validated (the start of a block handed out)
 * wherever it belongs: the calling thread's bin (flushed when full) or
 * heap_free_block. */
void heap_free_validated(void *p);
/* A block the caller has shown to be a carved block of one of the calling
 * heap's own pages, of class class_index (the secure flavour's quarantine,
 * which checked it at its free and keeps it counted as used, so that its
 * page stays the heap's): into its bin, flushed when full. Checks:
 * bin_push's. */
static STRATA_ALWAYS_INLINE void bin_free_own(struct heap *heap, unsigned class_index, void *p)
{
    struct bin *bin = &heap->bins[class_index];
    if (unlikely(bin_push(bin, p)))
        heap_bin_flush(heap, bin);
}

/* Every block of every bin back to its page (the heap's thread exits or
 * trims; heap lock held). */
void bins_flush_all(struct heap *heap);
/* How far a heap's bins may grow past their base limits now, in bytes
 * (heap.h): a BIN_GROWTH_SHARE-th of what the program holds over the
 * threads holding a heap, between HEAP_BIN_GROWTH_MIN and
 * HEAP_BIN_GROWTH_BYTES. */
size_t bins_growth_budget(void);
/* Blocks the heap's bin of the class holds now (approximate while its
 * owner runs: statistics). */
uint32_t bin_cached_blocks(const struct heap *heap, unsigned class_index);
/* The bins' invariants (heap_check's part: heap lock held); NULL when
 * sound, else the first broken one (checkers.h). */
const char *bins_check(const struct heap *heap);

/* ---- bins.c: remote frees -------------------------------------------------
 * A block another thread frees to a heap goes onto its page's remote list
 * with one compare-and-swap of the page's word (the newest block and the
 * count); the free that finds the list empty also pushes the page onto the
 * heap's stack, a second compare-and-swap. The owner takes the stack when a
 * refill finds its current page empty and no other page of the class with
 * a free block, and as its thread starts, exits or trims, and each page's
 * list whole: its count off the page's used blocks,
 * the list spliced onto the page's free list by its oldest block, with no
 * walk of the blocks between; the purger takes an idle owner's. */
/* The remote lists' blocks go back to their pages (heap lock held: the
 * owner, or the purger for an idle one); cheap when the stack is empty. */
STRATA_NOINLINE void heap_collect_remote(struct heap *heap);
/* Whether pages wait on the heap's stack (sequentially consistent: the
 * purger's last look before it sleeps, against a push's wake-up). */
bool heap_remote_pending(const struct heap *heap);
/* Calls fn on the page of every block on the remote lists of the pages on
 * the heap's stack (heap lock held: statistics). */
void heap_remote_for_each(const struct heap *heap, void (*fn)(const struct page *, void *), void *arg);
/* A heap being given up closes its stack: pushes from then on find the
 * segment's new owner word, and blocks pushed meanwhile are freed there
 * (heap lock held, the heap's segments abandoned already). */
void heap_remote_close(struct heap *heap);

#endif /* STRATA_BINS_H */
