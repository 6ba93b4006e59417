/* free.c: every free the inline path does not finish (into the caller's own
 * bin): blocks of other threads and of exited ones (heap_free_block), large
 * blocks, pointers strata did not allocate, and checked mode, which
 * validates every pointer first and trusts a freed block's key. A pointer
 * that is not 8-aligned is refused in every mode. */
#include <stdatomic.h>

#include "core.h"

static _Atomic bool foreign_warned;

static void check_block(const void *p)
{
    struct segment *segment = segment_of(p);
    struct page *page = page_of(segment, p);
    if (!page->in_use)
        report_fatal("free of a pointer into memory that is not allocated", p);
    /* reserved, not capacity: the owner may be carving this page meanwhile. */
    size_t offset = (size_t)((const char *)p - page->start);
    if (offset % page->block_size != 0 || offset / page->block_size >= page->reserved)
        report_fatal("free of a pointer that is not the start of a block", p);
    if (page->block_size >= 16) {
        if (block_key_found(p)) /* a free block's key: checked mode trusts it */
            report_fatal("double free", p);
    }
}

void free_slow(void *p)
{
    if (p == NULL)
        return;
    if (is_segment_pointer(p)) {
        if (unlikely(((uintptr_t)p & 7) != 0))
            report_fatal("free of a pointer that is not the start of a block", p);
        if (unlikely(strata_options.check))
            check_block(p);
        heap_free_block(p);
        return;
    }
    if (large_free(p))
        return;
    if (large_was_freed(p))
        report_fatal("double free", p);
    config_init(); /* a first call may be this free: the options decide */
    if (strata_options.check)
        report_fatal("free of a pointer strata did not allocate", p);
    if (!atomic_exchange(&foreign_warned, true))
        report_warning("free of a pointer strata did not allocate, ignored", p);
}
