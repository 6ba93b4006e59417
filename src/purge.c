/* purge.c: giving a segment's free slices back to the OS, and the request
 * for the purger thread that gives back what idle threads and caches keep. A heap's free
 * slices stay resident ("dirty") so that new pages reuse them without page
 * faults; when the heap's policy (heap_maybe_purge) decides they have been
 * unused long enough, they go back here with madvise, a run of adjacent
 * slices per call, never one system call per free. A run reaches over the
 * free slices between them that are closed already, so that slices freed
 * in a scattered order (a program freeing its blocks in another order than
 * it made them) go back with one call where they touch. In the secure flavour
 * the OS pages of block states (layout.h) that belong to such a run alone
 * go back with it. */
#include "core.h"

_Atomic int purger_request = PURGER_IDLE;
_Atomic bool purges_handed;
_Atomic uint32_t purger_bell;
_Atomic bool purger_sleeping;

void purger_ring(void)
{
    atomic_fetch_add_explicit(&purger_bell, 1, memory_order_release);
    os_wake(&purger_bell);
}

void purger_wake(void)
{
    /* Sequentially consistent, against the purger's announcement that it
     * sleeps and its last look for work (init.c): one of the two sees the
     * other. On x86 the load is a plain one. */
    if (unlikely(atomic_load_explicit(&purger_sleeping, memory_order_seq_cst)) &&
        atomic_exchange_explicit(&purger_sleeping, false, memory_order_seq_cst))
        purger_ring();
}

void purger_ask(void)
{
    int idle = PURGER_IDLE;
    int request = atomic_load_explicit(&purger_request, memory_order_relaxed);
    if (request == PURGER_IDLE)
        atomic_compare_exchange_strong(&purger_request, &idle, PURGER_REQUESTED);
    else if (request == PURGER_TAKEN)
        purger_wake();
}

/* The secure flavour: the OS pages of block states that belong to slices
 * [first, first + length) alone go back with them. Those states are all 0
 * (the slices hold no page), which is what a purged page reads back as. */
static void purge_states(struct segment *segment, unsigned first, unsigned length)
{
    uintptr_t page = os_page_size();
    char *region = segment_base(segment) + SLICE_SIZE;
    for (unsigned shift = STATE_SHIFT_MIN; shift <= STATE_SHIFT_MAX; shift++) {
        uintptr_t array = state_array_offset(shift);
        uintptr_t from = array + (((uintptr_t)first * SLICE_SIZE) >> shift) * sizeof(uint16_t);
        uintptr_t to = array + (((uintptr_t)(first + length) * SLICE_SIZE) >> shift) * sizeof(uint16_t);
        from = (from + page - 1) & ~(page - 1);
        to &= ~(page - 1);
        if (from < to)
            os_purge(region + from, to - from, to - from);
    }
}

void slices_uncharge(struct segment *segment, uint64_t slices)
{
    if (!os_limited())
        return;
    size_t kib = 0;
    for (uint64_t rest = slices; rest != 0; rest &= rest - 1) {
        unsigned k = (unsigned)__builtin_ctzll(rest);
        kib += segment->charged_kib[k];
        segment->charged_kib[k] = 0;
    }
    os_uncharge(kib * 1024);
}

/* The run of `cover`'s bits that holds bit k. */
static uint64_t run_around(uint64_t cover, unsigned k)
{
    unsigned first = k, end = k + 1;
    while (first > 0 && (cover >> (first - 1)) & 1)
        first--;
    while (end < 64 && (cover >> end) & 1)
        end++;
    return slice_run(first, end - first);
}

uint64_t purge_reach(uint64_t cover, uint64_t slices)
{
    uint64_t reach = 0;
    for (uint64_t rest = slices; rest != 0; rest &= ~reach)
        reach |= run_around(cover, (unsigned)__builtin_ctzll(rest));
    return reach;
}

void purge_slices(struct segment *segment, uint64_t slices, uint64_t cover)
{
    slices_uncharge(segment, slices); /* purged, they no longer count (os.h) */
    purge_runs(segment, slices, cover);
}

void purge_runs(struct segment *segment, uint64_t slices, uint64_t cover)
{
    strata_assert((slices & ~cover) == 0);
    while (slices) {
        uint64_t run = run_around(cover, (unsigned)__builtin_ctzll(slices));
        unsigned first = (unsigned)__builtin_ctzll(run);
        unsigned length = (unsigned)__builtin_popcountll(run);
        strata_assert_cmp(first + length, <=, SLICES_PER_SEGMENT);
        strata_assert(first != 0); /* slice 0 is the header's */
        char *start = segment_base(segment) + (size_t)first * SLICE_SIZE;
        os_purge(start, (size_t)length * SLICE_SIZE, (size_t)__builtin_popcountll(run & slices) * SLICE_SIZE);
        /* Closed until a page takes them again (segment.c, page_open); left
         * open if the system refuses (too many mappings): only that
         * protection is lost, and opening them again is harmless. */
        if (slices_closed())
            (void)os_close(start, (size_t)length * SLICE_SIZE);
        if (STRATA_SECURE_BUILD)
            purge_states(segment, first, length);
        slices &= ~run;
    }
}

void segment_purge_dirty(struct segment *segment)
{
    strata_assert((segment->dirty_mask & ~segment->free_mask) == 0);
    purge_slices(segment, segment->dirty_mask, purge_cover(segment, segment->dirty_mask));
    segment->dirty_mask = 0;
    segment->aging_mask = 0;
}
