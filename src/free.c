/* free.c: every way a block comes back but the inline one (into the owner's
 * bin). Another thread pushes the block onto the owner heap's remote list
 * with one compare-and-swap; a block of an abandoned segment (its thread has
 * exited) is freed under the one abandoned lock. Checked mode validates
 * every pointer first and marks freed blocks with a canary. */
#include <pthread.h>

#include "internal.h"

static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool foreign_warned;

#define CANARY_KEY ((uintptr_t)0x9e3779b97f4a7c15u)

static inline uintptr_t canary_of(const void *p)
{
    return (uintptr_t)p ^ CANARY_KEY;
}

void free_abandoned(struct page *page, struct block *block)
{
    pthread_mutex_lock(&abandoned_lock);
    if (unlikely(!page->in_use || page->free == block)) {
        pthread_mutex_unlock(&abandoned_lock);
        report_fatal("double free", block);
    }
    block->next = page->free;
    page->free = block;
    stats_bytes_out(-(long)page->block_size);
    if (--page->used == 0)
        abandoned_page_release(page);
    pthread_mutex_unlock(&abandoned_lock);
}

void free_redispatch(void *p)
{
    struct segment *segment = segment_of(p);
    struct page *page = page_of(segment, p);
    struct block *block = p;
    struct heap *self = thread_heap;
    uintptr_t owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    for (;;) {
        if (owner == self->owner_word) { /* checked mode's local free */
            page_free_block(self, page, block);
            stats_bytes_out(-(long)page->block_size);
            return;
        }
        if (owner == OWNER_ABANDONED) {
            free_abandoned(page, block);
            return;
        }
        struct heap *heap = (struct heap *)(owner & ~OWNER_CHECK_TAG);
        struct block *old = atomic_load_explicit(&heap->remote, memory_order_relaxed);
        do {
            if (old == REMOTE_CLOSED)
                break;
            block->next = old;
        } while (!atomic_compare_exchange_weak_explicit(&heap->remote, &old, block,
                                                        memory_order_release,
                                                        memory_order_relaxed));
        if (old != REMOTE_CLOSED)
            return;
        /* The owner is exiting: its segments are marked abandoned before its
         * list closes, so the owner word has changed by now. */
        owner = atomic_load_explicit(&segment->owner, memory_order_acquire);
    }
}

void free_collected(struct heap *heap, struct block *block)
{
    struct segment *segment = segment_of(block);
    if (atomic_load_explicit(&segment->owner, memory_order_relaxed) == heap->owner_word) {
        struct page *page = page_of(segment, block);
        stats_bytes_out(-(long)page->block_size);
        page_free_block(heap, page, block);
    }
    else
        free_redispatch(block); /* a stale push into a recycled heap */
}

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
        uintptr_t *words = (uintptr_t *)p;
        if (words[1] == canary_of(p))
            report_fatal("double free", p);
        words[1] = canary_of(p);
    }
}

void free_slow(void *p)
{
    if (p == NULL)
        return;
    if (is_segment_pointer(p)) {
        if (unlikely(strata_options.check))
            check_block(p);
        free_redispatch(p);
        return;
    }
    if (large_free(p))
        return;
    strata_init(); /* a first call may be this free: the options decide */
    if (strata_options.check)
        report_fatal("free of a pointer strata did not allocate", p);
    if (!atomic_exchange(&foreign_warned, true))
        report_warning("free of a pointer strata did not allocate, ignored", p);
}

void free_lock_all(void)
{
    pthread_mutex_lock(&abandoned_lock);
}

void free_unlock_all(void)
{
    pthread_mutex_unlock(&abandoned_lock);
}

void free_fork_child(void)
{
    pthread_mutex_init(&abandoned_lock, NULL);
}
