/* free.c: every free the inline path does not finish (into the caller's own
 * bin): blocks of other threads and of exited ones (heap_free_block), large
 * blocks, pointers strata did not allocate, pointers that are not a block's
 * start (segment.c's free_segment_page tells them), and checked mode, which
 * sends every free here. Whatever reaches a free list is the start of a
 * block of a page in use, in every mode.
 * The secure flavour's quarantine is here too: the blocks a thread freed
 * wait in it before they are freed for real (heap.h, struct quarantine). */
#include "bins.h"
#include "block_guards.h"
#include "core.h"

void free_any(void *p)
{
    if (p == NULL)
        return;
    if (is_segment_pointer(p)) {
        heap_free_block(p);
        return;
    }
    if (large_free(p))
        return;
    if (large_was_freed(p))
        report_fatal("double free", p);
    /* glibc stops such a free too (its chunk header is nonsense); ld.so's
     * own early allocations are never freed through malloc's free. */
    report_fatal("free of a pointer strata did not allocate", p);
}

/* ---- the secure flavour's quarantine -------------------------------------- */
/* A block leaves the quarantine: the first line its free zeroed must still
 * be zero (a write after free there is reported; the rest of the slot is
 * checked at its next hand-out), before a free list writes into it; then
 * it goes where any free of it would: a block of the heap's own pages
 * straight into its bin. */
static void quarantine_release(struct heap *heap, void *p, size_t slot, unsigned own_class)
{
    if (secure_has(SECURE_ZERO) && unlikely(!zero_intact(p, 0, zeroed_first_line(slot))))
        report_fatal("write after free (a freed block changed while it waited in the quarantine)", p);
    if (likely(own_class < CLASS_COUNT))
        bin_free_own(heap, own_class, p);
    else
        heap_free_validated(p);
}

static void quarantine_release_oldest(struct heap *heap)
{
    struct quarantine *q = &heap->quarantine;
    uint32_t at = q->head;
    q->head = (at + 1) & (QUARANTINE_SLOTS - 1);
    counter_set(&q->count, q->count - 1);
    __atomic_store_n(&q->bytes, q->bytes - q->slot[at], __ATOMIC_RELAXED);
    quarantine_release(heap, q->block[at], q->slot[at], q->own_class[at]);
}

/* The quarantine's entry `at` holds the block p now. */
static inline void quarantine_enter(struct quarantine *q, uint32_t at, void *p, size_t slot, unsigned own_class)
{
    q->block[at] = p;
    q->slot[at] = (uint32_t)slot;
    q->own_class[at] = (uint8_t)own_class;
}

void quarantine_put(struct heap *heap, void *p, size_t slot, unsigned own_class)
{
    struct quarantine *q = &heap->quarantine;
    uint32_t max_blocks = (uint32_t)strata_options.quarantine_blocks;
    size_t max_bytes = (size_t)strata_options.quarantine_kb << 10;
    if (!secure_has(SECURE_QUARANTINE) || unlikely(heap == &heap_empty || max_blocks == 0 || slot > max_bytes)) {
        quarantine_release(heap, p, slot, own_class);
        return;
    }
    /* Full (the steady state): the oldest leaves, its entry becomes the
     * newest's, and the count stays. */
    size_t bytes = q->bytes + slot;
    uint32_t count = q->count;
    if (likely(count >= max_blocks)) {
        uint32_t at = q->head, newest = (at + count) & (QUARANTINE_SLOTS - 1);
        void *oldest = q->block[at];
        size_t oldest_slot = q->slot[at];
        unsigned oldest_class = q->own_class[at];
        quarantine_enter(q, newest, p, slot, own_class);
        q->head = (at + 1) & (QUARANTINE_SLOTS - 1);
        bytes -= oldest_slot;
        __atomic_store_n(&q->bytes, bytes, __ATOMIC_RELAXED);
        quarantine_release(heap, oldest, oldest_slot, oldest_class);
        if (likely(bytes <= max_bytes))
            return;
        /* Past the bytes' bound: the newest stays, older ones leave. */
        while (q->bytes > max_bytes && q->count > 1)
            quarantine_release_oldest(heap);
        return;
    }
    while (q->count != 0 && q->bytes + slot > max_bytes)
        quarantine_release_oldest(heap);
    quarantine_enter(q, (q->head + q->count) & (QUARANTINE_SLOTS - 1), p, slot, own_class);
    counter_set(&q->count, q->count + 1);
    __atomic_store_n(&q->bytes, q->bytes + slot, __ATOMIC_RELAXED);
}

void quarantine_drain(struct heap *heap)
{
    while (heap->quarantine.count != 0)
        quarantine_release_oldest(heap);
}
