/* purge.c: when free slices go back to the OS. A heap's free slices stay
 * resident ("dirty") so that new pages reuse them without page faults; a
 * slice that has stayed free through a whole PURGE_DELAY_NS (a two-step
 * generation: aging_mask marks what was dirty at the last check) is purged
 * with madvise, in batches, never one system call per free. */
#include "internal.h"

void purge_slices(struct segment *segment, uint64_t slices)
{
    while (slices) {
        unsigned first = (unsigned)__builtin_ctzll(slices);
        uint64_t shifted = slices >> first;
        unsigned length = shifted == ~(uint64_t)0 ? 64 - first
                                                  : (unsigned)__builtin_ctzll(~shifted);
        os_purge((char *)segment + (size_t)first * SLICE_SIZE, (size_t)length * SLICE_SIZE);
        slices &= length == 64 ? 0 : ~((((uint64_t)1 << length) - 1) << first);
    }
}

void segment_purge_dirty(struct segment *segment)
{
    purge_slices(segment, segment->dirty_mask);
    segment->dirty_mask = 0;
    segment->aging_mask = 0;
}

void heap_purge_dirty(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next)
        segment_purge_dirty(s);
    heap->dirty_slices = 0;
}

static void heap_purge_aged(struct heap *heap)
{
    for (struct segment *s = heap->segments; s != NULL; s = s->next) {
        uint64_t aged = s->dirty_mask & s->aging_mask;
        if (aged) {
            purge_slices(s, aged);
            s->dirty_mask &= ~aged;
            heap->dirty_slices -= (size_t)__builtin_popcountll(aged);
        }
        s->aging_mask = s->dirty_mask;
    }
}

void heap_maybe_purge(struct heap *heap)
{
    if (heap->dirty_slices == 0)
        return;
    if (heap->dirty_slices > HEAP_DIRTY_LIMIT) {
        heap_purge_dirty(heap);
        return;
    }
    uint64_t now = os_now_ns();
    if (now - heap->purge_epoch < PURGE_DELAY_NS)
        return;
    heap_purge_aged(heap);
    heap->purge_epoch = now;
}
