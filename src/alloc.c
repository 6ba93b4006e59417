/* alloc.c: the out-of-line paths behind the inline allocation and free
 * (alloc.h): a thread's first heap, bin refills and flushes, large blocks,
 * the purger's start; and the one policy for running out of memory (the
 * memory limit, the address-space limit or the OS refusing a map): an
 * allocation that fails gives back what the caches hold (strata_trim) and
 * tries once more. */
#include <errno.h>

#include "alloc.h"
#include "block_guards.h"
#include "core.h"
#include "init.h"
#include "instrument.h"
#include "sampled_blocks.h"
#include "stack_walk.h"
#include "strata.h"

static void purge_all(struct heap *heap, void *unused)
{
    (void)unused;
    heap_purge_dirty(heap);
}

STRATA_EXPORT int strata_profile_dump(const char *path)
{
    return profile_dump(path);
}

STRATA_EXPORT void strata_trim(void)
{
    strata_init();
    if (STRATA_SECURE_BUILD && thread_heap != &heap_empty)
        quarantine_drain(thread_heap);
    heap_trim_own();
    heap_retire_parked(true);
    heap_for_each_live(purge_all, NULL, true);
    abandoned_purge_aged(true);
    segment_cache_release();
    large_cache_release();
    sampled_blocks_expire_now(true);
}

/* Sizes no mapping can ever meet fail at once, without a trim. */
#define IMPOSSIBLE_SIZE ((size_t)PTRDIFF_MAX / 2)

/* Whether a failed allocation of `size` is worth a second try: whatever
 * refused it (the memory limit, the address-space limit, the OS refusing a
 * map), what the caches keep mapped for reuse may be what it lacks. A
 * failure is rare, so the trim's cost does not matter. */
static bool trim_for_retry(size_t size)
{
    if (size >= IMPOSSIBLE_SIZE)
        return false;
    strata_trim();
    return true;
}

/* Under Valgrind, strata handing out a block means memcheck does not see
 * it (Valgrind's own malloc would have run instead): said once. */
static void valgrind_blind_warning(void)
{
    static _Atomic bool said;
    if (!atomic_exchange(&said, true))
        report_warning("running under Valgrind, which does not see the blocks strata hands out: run it with "
                       "--soname-synonyms=somalloc=libstrata.so* to have it replace malloc",
                       NULL);
}

/* The calling thread's heap, made at its first allocation; NULL (errno
 * ENOMEM) without memory. */
static struct heap *calling_heap(void)
{
    struct heap *heap = thread_heap;
    if (unlikely(heap == &heap_empty)) {
        strata_init();
        if (unlikely(instrument_valgrind))
            valgrind_blind_warning();
        heap = heap_acquire(true);
        if (heap == NULL)
            errno = ENOMEM;
    }
    return heap;
}

/* An allocation the heap profiler samples (profile.h): a slot of the
 * sampled blocks' region (sampled_blocks.h) or, larger, a large block of
 * its own, whose free and realloc release its record; NULL when the
 * profiler is off or takes no sample now (the caller allocates as ever).
 * In the secure flavour a slot is zeroed at its free and checked zero at
 * its reuse, as its small blocks are, and secure.c puts its canary and
 * size word at the block's end, as at any large block's; its blocks above
 * the slots' sizes are large blocks as ever (a guard page after each). */
static STRATA_NOINLINE void *alloc_sampled(size_t size, size_t chance_bytes, size_t alignment, bool zero,
                                           const struct stack_start *start)
{
    if (!profile_on)
        return NULL;
    struct profile_sample sample;
    if (!profile_sample_take(size, chance_bytes, start, &sample))
        return NULL;
    /* The secure flavour's blocks read as zero, and its tail (a canary and
     * the size) lies past the size. */
    zero = zero || secure_has(SECURE_ZERO);
    void *p = sampled_block_alloc(size + SECURE_TAIL_LARGE, alignment, zero, &sample);
    if (p != NULL)
        return p;
    p = large_alloc(size + SECURE_TAIL_LARGE, alignment, zero);
    if (p == NULL) {
        profile_sample_release(&sample);
        return NULL;
    }
    struct profile_sample *kept = profile_sample_keep(&sample);
    if (kept != NULL)
        large_attach_sample(p, kept);
    else
        profile_sample_release(&sample);
    return p;
}

/* Whether the heap profiler's samples of the bins' sizes stay where the
 * bin gives them, marked in their guard words (profile.h,
 * profile_sample_mark): the default flavour's. The secure flavour's blocks
 * keep no such word; its samples are slots (alloc_sampled). */
#define SAMPLES_IN_PLACE (!STRATA_SECURE_BUILD && SMALL_GUARD_BYTES != 0)

/* A bin's block sampled where it is (SAMPLES_IN_PLACE), or left unsampled
 * when no sample is taken or no record is to be had. */
static STRATA_NOINLINE void *sample_in_place(void *block, size_t size, unsigned class_index,
                                             const struct stack_start *start)
{
    struct profile_sample sample;
    if (profile_sample_take(size, class_size[class_index], start, &sample) && !profile_sample_mark(block, &sample))
        profile_sample_release(&sample);
    return block;
}

/* A block of the class for a request of `size` bytes (the heap profiler's
 * figure for a sample) when the bin has none to give inline. */
static STRATA_NOINLINE void *alloc_class_slow(unsigned class_index, size_t size)
{
    struct heap *heap = calling_heap();
    if (unlikely(heap == NULL))
        return NULL;
    /* The stack is walked from here: the frames below are strata's. */
    struct stack_start start;
    bool sample = false;
    if (unlikely(bin_countdown_take(heap, class_index))) {
        stack_start_here(&start);
        void *block = NULL;
        if (SAMPLES_IN_PLACE) {
            sample = profile_on;
        } else {
            /* As aligned as the class's blocks (an aligned allocation's). */
            size_t alignment = class_size[class_index] & -class_size[class_index];
            block = alloc_sampled(size, class_size[class_index], alignment, false, &start);
        }
        if (block == NULL)
            block = bin_pop_uncounted(heap, class_index);
        if (block != NULL)
            return sample ? sample_in_place(block, size, class_index, &start) : block;
    }
    void *block = heap_bin_refill(heap, class_index);
    if (STRATA_DEBUG_BUILD)
        heap_debug_refill(heap);
    purger_start_if_wanted();
    if (unlikely(block == NULL) && trim_for_retry(class_size[class_index]))
        block = heap_bin_refill(heap, class_index);
    if (unlikely(block == NULL))
        errno = ENOMEM;
    else if (sample)
        block = sample_in_place(block, size, class_index, &start);
    return block;
}

void *alloc_class(unsigned class_index, size_t size)
{
    void *block = bin_pop(class_index);
    return likely(block != NULL) ? block : alloc_class_slow(class_index, size);
}

void *alloc_large(size_t size, size_t alignment, bool zero)
{
    strata_init();
    void *p = large_alloc(size, alignment, zero);
    if (unlikely(p == NULL) && errno == ENOMEM && trim_for_retry(size))
        p = large_alloc(size, alignment, zero);
    purger_start_if_wanted(); /* a cached mapping's split tail asks for it */
    return p;
}

void *alloc_big(size_t size, bool zero)
{
    if (unlikely(profile_on) && profile_big_due(size)) {
        struct stack_start start;
        stack_start_here(&start);
        void *sampled = alloc_sampled(size, size, 0, zero, &start);
        if (sampled != NULL)
            return sampled;
    }
    if (size > MEDIUM_MAX)
        return alloc_large(size, 0, zero);
    struct heap *heap = calling_heap();
    if (unlikely(heap == NULL))
        return NULL;
    void *block = heap_medium_alloc(heap, size, zero);
    if (unlikely(block == NULL) && trim_for_retry(size))
        block = heap_medium_alloc(heap, size, zero);
    if (unlikely(block == NULL))
        errno = ENOMEM;
    return block;
}

void *alloc_slow(size_t size)
{
    if (unlikely(size > SMALL_REQUEST_MAX))
        return alloc_big(size, false);
    return alloc_class_slow(request_class(size), size);
}

void *realloc_large(void *p, size_t size)
{
    void *q = large_realloc(p, size);
    if (unlikely(q == NULL) && errno == ENOMEM && trim_for_retry(size))
        q = large_realloc(p, size);
    return q;
}

void free_slow(void *p)
{
    free_any(p);
    purger_start_if_wanted();
}

/* Frees by a thread without a heap before it takes one. */
#define FREES_BEFORE_HEAP 64
static STRATA_TLS uint32_t frees_without_heap;

void free_segment_slow(void *p)
{
    /* A thread that frees others' blocks without allocating takes a heap
     * of its own at its FREES_BEFORE_HEAP-th free (heap_acquire_freeing):
     * the parked heap of an exited thread whose block it frees then, so
     * that its frees of that thread's blocks go to their pages and its
     * allocations take that memory again, or else a fresh one, so that the
     * blocks it frees pass through its bins to their owners in runs of a
     * page each, one compare-and-swap a run (bins.c: a class it does not
     * allocate keeps at most BIN_PASS_BYTES of them); without memory for a
     * heap, each block goes on its own. Then the purger a free
     * before this one asked for, started before this free (a tail call
     * then frees: no second call layer on the path of every other
     * thread's block), from a thread with a heap only: creating the purger
     * allocates. */
    if (unlikely(thread_heap == &heap_empty) && ++frees_without_heap >= FREES_BEFORE_HEAP)
        (void)heap_acquire_freeing(atomic_load_explicit(&segment_of(p)->owner, memory_order_relaxed));
    if (unlikely(atomic_load_explicit(&purger_request, memory_order_relaxed) == PURGER_REQUESTED) &&
        thread_heap != &heap_empty)
        purger_start();
    heap_free_block(p);
}

void free_elsewhere(void *p)
{
    if (unlikely(!is_segment_pointer(p))) {
        free_slow(p);
        return;
    }
    /* The owner word read once for both cases: the heap's own block into
     * its bin, or another live heap's kept in the caller's bin (bins.h),
     * unless the purger waits to be started (free_segment_slow's work). */
    struct heap *heap = thread_heap;
    struct segment *segment = segment_of(p);
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    bool full;
    struct bin *bin = NULL;
    if (likely(owner == (uintptr_t)heap))
        bin = bin_push_owned(heap, segment, p, &full);
    else if (likely(atomic_load_explicit(&purger_request, memory_order_relaxed) != PURGER_REQUESTED))
        bin = bin_push_foreign(heap, segment, p, owner, &full);
    if (bin == NULL)
        free_segment_slow(p);
    else if (unlikely(full))
        free_bin_full(heap, bin);
}

void free_bin_full(struct heap *heap, struct bin *bin)
{
    heap_bin_flush(heap, bin);
    purger_start_if_wanted();
}
