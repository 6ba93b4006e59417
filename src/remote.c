/* remote.c: a block freed to the heap that owns it, from whichever thread
 * frees it. The owner's own thread returns it to its page at once; another
 * thread pushes it onto the owner's remote list with one compare-and-swap,
 * and the owner collects the list when a bin refill finds its current page
 * empty, and as its thread starts, exits or trims; the purger thread
 * collects it when the owner has not for a purge delay (an idle thread's:
 * purge_policy.c). Either does it under the heap's lock, like everything
 * behind the bins. A block of an exited thread's segment goes back to that
 * abandoned segment (segment.c). A heap being given up closes its remote
 * list, so that pushes from then on find the segment's new owner word
 * instead.
 * Invariants: a block on a remote list is tagged BLOCK_REMOTE in its link
 * (layout.h) and counted as used in its page until the owner collects it;
 * a closed list (REMOTE_CLOSED) takes no push. */
#include "heap_private.h"

void free_to_owner(struct page *page, struct block *block)
{
    struct segment *segment = segment_of(block);
    struct heap *self = thread_heap;
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    for (;;) {
        if (owner == self->owner_word) { /* checked mode's local free, a medium block, or a bad one */
            if (unlikely(!page_carved(page, block)))
                report_fatal("free of a block that was never allocated", block);
            /* Read before the free: it may release the page and its segment. */
            long size = (long)page->block_size;
            os_lock_take(&self->lock);
            page_free_block(self, page, block);
            os_lock_give(&self->lock);
            counters_bytes_out(-size);
            return;
        }
        if (owner == OWNER_ABANDONED) {
            if (abandoned_free_block(page, block))
                return;
            owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
            continue;
        }
        struct heap *heap = (struct heap *)(owner & ~OWNER_TAGS);
        struct block *old = atomic_load_explicit(&heap->remote, memory_order_relaxed);
        do {
            if (old == REMOTE_CLOSED)
                break;
            if (unlikely(old == block)) /* the same thread's last remote free */
                report_fatal("double free", block);
            block_set_next_tagged(block, old, BLOCK_REMOTE);
        } while (!atomic_compare_exchange_weak_explicit(&heap->remote, &old, block,
                                                        memory_order_seq_cst, /* against a sleeping purger (purge.c) */
                                                        memory_order_relaxed));
        if (old != REMOTE_CLOSED) {
            purger_ask(); /* to collect it, should the owner stay idle */
            return;
        }
        /* The owner is exiting: its segments are marked abandoned before its
         * list closes, so the owner word has changed by now. */
        owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    }
}

void heap_collect_remote(struct heap *heap)
{
    struct block *list = atomic_exchange_explicit(&heap->remote, NULL, memory_order_acquire);
    strata_assert(list != REMOTE_CLOSED);
    long returned = 0;
    while (list != NULL) {
        struct block *next = block_next_tagged(list, BLOCK_REMOTE);
        struct segment *segment = segment_of(list);
        struct page *page = page_of(segment, list);
        if (atomic_load_explicit(&segment->owner, memory_order_relaxed) == heap->owner_word) {
            /* Only the owner knows how far its page is carved. */
            if (unlikely(!page_carved(page, list)))
                report_fatal("free of a block that was never allocated", list);
            returned += (long)page->block_size;
            page_free_block(heap, page, list);
        } else {
            block_take(list); /* it leaves this list to be freed again elsewhere */
            free_to_owner(page, list); /* a stale push into a recycled heap */
        }
        list = next;
    }
    counters_bytes_out(-returned);
}
