/* purge_policy.c: when a heap's free slices go back to the OS. A slice
 * freed stays resident for reuse until it has been free for between one and
 * two purge delays (STRATA_PURGE_DELAY_MS): its owner's slow paths purge the
 * aged ones as they pass, the purger thread those of heaps whose owners have
 * gone quiet, and a heap past HEAP_DIRTY_LIMIT free slices purges all of
 * them at once. A heap that holds enough asks for the purger thread.
 * Invariants (heap_check, segment_check): a heap's dirty_slices counts the
 * dirty slices of its segments; a segment's aging_mask, the slices dirty at
 * the heap's last check and dirty still, is a subset of its dirty_mask.
 * Every function here runs under the heap's lock. */
#include "heap_private.h"

void heap_purge_dirty(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next)
        segment_purge_dirty(s);
    heap->dirty_slices = 0;
    heap_release_empty_segments(heap);
}

/* Purges the slices that have stayed free since the last check: a two-step
 * generation, aging_mask marking what was dirty then. */
static void heap_purge_aged(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        uint64_t aged = s->dirty_mask & s->aging_mask;
        if (aged) {
            purge_slices(s, aged);
            s->dirty_mask &= ~aged;
            strata_assert_cmp(heap->dirty_slices, >=, (size_t)__builtin_popcountll(aged));
            heap->dirty_slices -= (size_t)__builtin_popcountll(aged);
        }
        s->aging_mask = s->dirty_mask;
    }
    heap_release_empty_segments(heap);
}

void heap_maybe_purge(struct heap *heap)
{
    if (heap->dirty_slices == 0)
        return;
    if (heap->dirty_slices >= PURGER_WANTED_SLICES &&
        strata_options.background_purge == BACKGROUND_PURGE_AUTO)
        purger_ask();
    uint64_t delay = strata_options.purge_delay_ns;
    if (heap->dirty_slices > HEAP_DIRTY_LIMIT || delay == 0) {
        heap_purge_dirty(heap);
        return;
    }
    uint64_t now = os_now_ns();
    if (now - heap->purge_epoch < delay)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}

void heap_purge_idle(struct heap *heap)
{
    /* A heap whose owner checked lately purges itself: leave it alone, so
     * the purger's madvise never interrupts a busy thread. */
    uint64_t now = os_now_ns();
    if (heap->dirty_slices == 0 || now - heap->purge_epoch < 2 * strata_options.purge_delay_ns)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}
