/* free.c: every free the inline path does not finish (into the caller's own
 * bin): blocks of other threads and of exited ones (heap_free_block), large
 * blocks, pointers strata did not allocate, pointers that are not a block's
 * start, and checked mode, which sends every free here. Whatever reaches a
 * free list is the start of a block of a page in use, in every mode. */
#include "core.h"

/* A pointer into a segment must be the start of a block of a page in use
 * (that it was carved, heap_free_block asks its page's owner). Reads only
 * what the page's owner does not change while one of its blocks is out. */
void free_segment_slow(void *p)
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
    if (class_index == CLASS_MEDIUM ? in_page != 0
                                    : block_key(slice->multiplier, in_page) >= page->reserved * class_block_key[class_index])
        report_fatal("free of a pointer that is not the start of a block", p);
    heap_free_block(page, p);
}

void free_slow(void *p)
{
    if (p == NULL)
        return;
    if (is_segment_pointer(p)) {
        free_segment_slow(p);
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
