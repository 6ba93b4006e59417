/* purge_policy.c: when a heap's free slices go back to the OS. A slice
 * freed stays resident for reuse until it has been free for between one and
 * two of the heap's purge delays: its owner's slow paths purge the aged ones
 * as they pass, the purger thread those of heaps whose owners have gone
 * quiet, and a heap past its limit of free slices (HEAP_DIRTY_LIMIT,
 * stretched too) purges all of them at once. A heap that holds enough asks
 * for the purger thread.
 * The delay is the option's (STRATA_PURGE_DELAY_MS), stretched while the
 * heap's pages take back what its purges gave back soon after (a program
 * whose phases free and rebuild the same memory a little slower than the
 * delay would otherwise fault it all in again at each phase), and shrunk
 * again once its purges stick (layout.h, PURGE_STRETCH_MAX).
 * Invariants (heap_check, segment_check): a heap's dirty_slices counts the
 * dirty slices of its segments; a segment's aging_mask, the slices dirty at
 * the heap's last check and dirty still, is a subset of its dirty_mask; its
 * purged_mask a subset of its free slices that are not dirty.
 * Every function here runs under the heap's lock. */
#include "heap_private.h"

/* The heap's purge delay now. */
static uint64_t heap_purge_delay(const struct heap *heap)
{
    return strata_options.purge_delay_ns << heap->purge_stretch;
}

/* The free slices past which the heap purges them all at once: the limit,
 * stretched with the delay up to PURGE_LIMIT_STRETCH_MAX doublings (a
 * program whose phases free more than the limit and build it again). */
static size_t heap_dirty_limit(const struct heap *heap)
{
    unsigned stretch = heap->purge_stretch;
    return (size_t)HEAP_DIRTY_LIMIT << (stretch < PURGE_LIMIT_STRETCH_MAX ? stretch : PURGE_LIMIT_STRETCH_MAX);
}

/* At each purge check: a stretch when enough of what the heap purged lately
 * came back soon (counted by segment.c's slices_claim), a shrink after
 * PURGE_CALM_CHECKS checks that purged and saw none come back. */
static void purge_delay_adapt(struct heap *heap, uint32_t purged_now)
{
    uint32_t retaken = heap->slices_retaken;
    if (retaken >= PURGE_RETAKEN_MIN && retaken >= heap->slices_purged / 8) {
        if (heap->purge_stretch < PURGE_STRETCH_MAX)
            heap->purge_stretch++;
        heap->purge_calm_checks = 0;
        retaken = 0; /* one doubling for what came back */
    } else if (retaken == 0 && purged_now != 0 && ++heap->purge_calm_checks >= PURGE_CALM_CHECKS) {
        if (heap->purge_stretch > 0)
            heap->purge_stretch--;
        heap->purge_calm_checks = 0;
    }
    heap->slices_purged = heap->slices_purged / 2 + purged_now;
    heap->slices_retaken = retaken / 2;
}

/* The slices are being purged now: a page that takes one back soon counts
 * (segment.c, slices_claim). Returns how many. */
static unsigned slices_mark_purged(struct segment *segment, uint64_t slices, uint64_t now)
{
    if (slices == 0)
        return 0;
    segment->purged_mask |= slices;
    segment->purged_at = now;
    return (unsigned)__builtin_popcountll(slices);
}

void heap_purge_dirty(struct heap *heap)
{
    uint64_t now = os_now_ns();
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        heap->slices_purged += slices_mark_purged(s, s->dirty_mask, now);
        segment_purge_dirty(s);
    }
    heap->dirty_slices = 0;
    heap_release_empty_segments(heap);
}

/* Purges the slices that have stayed free since the last check: a two-step
 * generation, aging_mask marking what was dirty then. */
static void heap_purge_aged(struct heap *heap, uint64_t now)
{
    uint32_t purged = 0;
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        uint64_t aged = s->dirty_mask & s->aging_mask;
        if (aged) {
            purge_slices(s, aged, purge_cover(s, aged));
            s->dirty_mask &= ~aged;
            unsigned count = slices_mark_purged(s, aged, now);
            strata_assert_cmp(heap->dirty_slices, >=, (size_t)count);
            heap->dirty_slices -= count;
            purged += count;
        }
        s->aging_mask = s->dirty_mask;
    }
    purge_delay_adapt(heap, purged);
    heap->purge_epoch = now;
    heap_release_empty_segments(heap);
}

bool heap_purge_hand(struct heap *heap)
{
    if (!purger_gives_back_later() ||
        atomic_load_explicit(&purger_request, memory_order_relaxed) != PURGER_TAKEN ||
        heap->dirty_slices > HANDED_DIRTY_MAX)
        return false;
    if (atomic_load_explicit(&heap->purge_handoff, memory_order_relaxed) == PURGE_NOT_HANDED) {
        atomic_store_explicit(&heap->purge_handoff, PURGE_HANDED, memory_order_relaxed);
        atomic_store_explicit(&purges_handed, true, memory_order_release);
        purger_ring();
    }
    return true;
}

void heap_maybe_purge(struct heap *heap)
{
    if (heap->dirty_slices == 0)
        return;
    if (heap->dirty_slices >= PURGER_WANTED_SLICES &&
        strata_options.background_purge == BACKGROUND_PURGE_AUTO)
        purger_ask();
    uint64_t delay = heap_purge_delay(heap);
    if (heap->dirty_slices > heap_dirty_limit(heap) || delay == 0) {
        if (delay == 0 || !heap_purge_hand(heap))
            heap_purge_dirty(heap);
        return;
    }
    uint64_t now = os_now_ns();
    if (now - heap->purge_epoch < delay)
        return;
    heap_purge_aged(heap, now);
}

void heap_purge_released_idle(struct heap *heap)
{
    /* Stretched, the heap's phases come back for what they freed: its
     * slices age as any, and go at the next check that finds them aged. */
    if (heap->purge_stretch == 0)
        heap_purge_dirty(heap);
}

void heap_purge_idle(struct heap *heap)
{
    /* A heap whose owner checked lately purges itself: leave it alone, so
     * the purger's madvise never interrupts a busy thread. One that has
     * not checked for two delays has had every dirty slice free for one at
     * least (a page released a delay after the last check checks again):
     * all of them go. */
    uint64_t now = os_now_ns();
    if (heap->dirty_slices == 0 || now - heap->purge_epoch < 2 * heap_purge_delay(heap))
        return;
    for (struct segment *s = heap->segments; s != NULL; s = s->next)
        s->aging_mask = s->dirty_mask;
    heap_purge_aged(heap, now);
}

/* ---- a purge handed to the purger ---------------------------------------- */
unsigned heap_purge_take(struct heap *heap, struct purge_taken *taken, unsigned max)
{
    unsigned count = 0;
    for (struct segment *s = heap->segments; s != NULL && count < max; s = s->next) {
        uint64_t slices = s->dirty_mask;
        if (slices == 0)
            continue;
        strata_assert_cmp(s->taken_mask, ==, 0);
        /* The closed free slices between them go too, so that no page takes
         * them while a call reaches over them. */
        uint64_t cover = purge_reach(purge_cover(s, slices), slices);
        slices_uncharge(s, slices);
        unsigned dirty = (unsigned)__builtin_popcountll(slices);
        strata_assert_cmp(heap->dirty_slices, >=, (size_t)dirty);
        heap->dirty_slices -= dirty;
        taken[count++] = (struct purge_taken){s, slices, s->purged_mask & cover};
        s->purged_mask &= ~cover;
        s->dirty_mask = 0;
        s->aging_mask = 0;
        s->free_mask &= ~cover;
        s->taken_mask = cover;
    }
    return count;
}

void heap_purge_give_back(struct heap *heap, const struct purge_taken *taken, unsigned count)
{
    uint64_t now = os_now_ns();
    for (unsigned i = 0; i < count; i++) {
        struct segment *s = taken[i].segment;
        s->free_mask |= s->taken_mask;
        s->taken_mask = 0;
        s->purged_mask |= taken[i].purged;
        heap->slices_purged += slices_mark_purged(s, taken[i].slices, now);
    }
    heap_release_empty_segments(heap);
}

void heap_purge_handed_end(struct heap *heap)
{
    if (heap->dirty_slices > heap_dirty_limit(heap)) {
        /* No ring: the purger, the caller, looks at the flag before it
         * waits. */
        atomic_store_explicit(&heap->purge_handoff, PURGE_HANDED, memory_order_relaxed);
        atomic_store_explicit(&purges_handed, true, memory_order_release);
    } else {
        atomic_store_explicit(&heap->purge_handoff, PURGE_NOT_HANDED, memory_order_release);
    }
}

void heap_purge_handed_wait(struct heap *heap)
{
    int handed = PURGE_HANDED;
    atomic_compare_exchange_strong(&heap->purge_handoff, &handed, PURGE_NOT_HANDED);
    while (atomic_load_explicit(&heap->purge_handoff, memory_order_acquire) == PURGE_TAKEN) {
        os_lock_give(&heap->lock);
        os_yield();
        os_lock_take(&heap->lock);
    }
}
