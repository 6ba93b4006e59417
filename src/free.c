/* free.c: every free the inline path does not finish (into the caller's own
 * bin): blocks of other threads and of exited ones (heap_free_block), large
 * blocks, pointers strata did not allocate, pointers that are not a block's
 * start, and checked mode, which sends every free here. Whatever reaches a
 * free list is the start of a block of a page in use, in every mode.
 * The secure flavour's quarantine is here too: the blocks a thread freed
 * wait in it before they are freed for real (heap.h, struct quarantine). */
#include "bins.h"
#include "block_guards.h"
#include "core.h"

/* A pointer into a segment must be the start of a block of a page in use
 * (that it was carved, heap_free_block asks its page's owner): its page, or
 * a report. Reads only what the page's owner does not change while one of
 * its blocks is out. */
struct page *free_segment_page(void *p)
{
    struct segment *segment = segment_of(p);
    const struct slice *slice = &segment->slices[slice_of(p)];
    unsigned class_index = slice->class_index; /* not the carved key: the owner's */
    if (class_index == CLASS_NONE) /* a medium block freed twice lands here too */
        report_fatal("free of a pointer into memory that is not allocated (a double free?)", p);
    uint32_t in_page = slice_page_offset(slice, (uint32_t)((uintptr_t)p & SEGMENT_MASK));
    struct page *page = &segment->pages[slice->page_slice];
    /* A medium page's one block starts the page; a small page's blocks are
     * where their keys say. */
    if (class_index == CLASS_MEDIUM ? in_page != 0 : !slice_block_start(slice, page, in_page))
        report_fatal("free of a pointer that is not the start of a block", p);
    return page;
}

void free_any(void *p)
{
    if (p == NULL)
        return;
    if (is_segment_pointer(p)) {
        heap_free_block(free_segment_page(p), p);
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
 * it goes where any free of it would. */
static void quarantine_release(void *p, size_t slot)
{
    if (secure_has(SECURE_ZERO) && unlikely(!zero_intact(p, 0, zeroed_first_line(slot))))
        report_fatal("write after free (a freed block changed while it waited in the quarantine)", p);
    heap_free_validated(p);
}

static void quarantine_release_oldest(struct quarantine *q)
{
    uint32_t at = q->head;
    q->head = (q->head + 1) & (QUARANTINE_SLOTS - 1);
    counter_set(&q->count, q->count - 1);
    __atomic_store_n(&q->bytes, q->bytes - q->slot[at], __ATOMIC_RELAXED);
    quarantine_release(q->block[at], q->slot[at]);
}

void quarantine_put(struct heap *heap, void *p, size_t slot)
{
    struct quarantine *q = &heap->quarantine;
    size_t max_blocks = (size_t)strata_options.quarantine_blocks;
    size_t max_bytes = (size_t)strata_options.quarantine_kb << 10;
    if (!secure_has(SECURE_QUARANTINE) || heap == &heap_empty || max_blocks == 0 || slot > max_bytes) {
        quarantine_release(p, slot);
        return;
    }
    while (q->count >= max_blocks || q->bytes + slot > max_bytes)
        quarantine_release_oldest(q);
    uint32_t at = (q->head + q->count) & (QUARANTINE_SLOTS - 1);
    q->block[at] = p;
    q->slot[at] = (uint32_t)slot;
    counter_set(&q->count, q->count + 1);
    __atomic_store_n(&q->bytes, q->bytes + slot, __ATOMIC_RELAXED);
}

void quarantine_drain(struct heap *heap)
{
    while (heap->quarantine.count != 0)
        quarantine_release_oldest(&heap->quarantine);
}
