/* heap_private.h: what the thread heap's files share and nothing else may
 * call: the pool's operations, the page lists behind the bins, the free to
 * a block's owner and the bins' flush of everything. Included by the files
 * listed below alone (tests/test_layers.py holds them to it); the other
 * layers see the heaps through core.h.
 *
 * The files, bottom to top (each calls only the ones before it):
 *   heap.c          the pool of heaps, the heap each thread holds, walks
 *   heap_check.c    heap_check and its parts
 *   purge_policy.c  when a heap's free slices go back to the OS
 *   pages.c         a heap's pages: lists, frees into them, medium blocks
 *   remote.c        a block freed to the heap that owns it, from any thread
 *   bins.c          the bins the inline paths use: refill, flush, adapt
 *   lifecycle.c     a heap given to a thread, parked, retired, trimmed */
#ifndef STRATA_HEAP_PRIVATE_H
#define STRATA_HEAP_PRIVATE_H

#include "core.h"

/* ---- heap.c: the pool of heaps ------------------------------------------- */
/* A heap from the pool (one never used, or one given up), not yet live;
 * NULL without memory. */
struct heap *heap_pool_take(void);
/* A heap given up, empty, back to the pool. */
void heap_pool_put(struct heap *heap);
/* An exited thread's heap, kept whole, onto the parked list (newest first). */
void heap_parked_push(struct heap *heap);
/* The newest parked heap, off the list; NULL when none is parked. */
struct heap *heap_parked_pop(void);
/* Takes off the parked list every heap parked for a purge delay by `now`
 * (every one with `all`), as a list through next_free, with their number
 * in *count; they count as being given up until heap_parked_retired. */
struct heap *heap_parked_take(bool all, uint64_t now, unsigned *count);
/* Whether any heap is parked now. */
bool heap_parked_any(void);
/* The `count` heaps of heap_parked_take are given up; with `wait`, returns
 * only once no other thread is giving any up either. */
void heap_parked_retired(unsigned count, bool wait);
/* The heap becomes the calling thread's: thread_heap, and the exit key
 * that gives it back at the thread's exit. */
void heap_bind_thread(struct heap *heap);
/* The calling thread, exiting, holds no heap from now. */
void heap_unbind_thread(void);

/* A bin's limit before it grows (layout.h, BIN_BYTES). */
static inline uint32_t bin_base_limit(unsigned class_index)
{
    size_t limit = BIN_BYTES / class_size[class_index];
    return (uint32_t)(limit < BIN_MIN_BLOCKS ? BIN_MIN_BLOCKS : limit > BIN_BASE_MAX_BLOCKS ? BIN_BASE_MAX_BLOCKS : limit);
}

/* ---- heap_check.c (heap_check itself: checkers.h) ------------------------- */
/* heap_check's work, for a caller that holds the heap's lock already. */
const char *heap_check_locked(const struct heap *heap);

/* ---- purge_policy.c ------------------------------------------------------- */
/* The purger's purge of one heap (heap lock held): its aged free slices,
 * unless the owner checked lately. */
void heap_purge_idle(struct heap *heap);

/* ---- pages.c: a heap's pages ------------------------------------------------ */
/* Takes a page off its class's available list. */
static inline void list_remove(struct heap *heap, struct page *page)
{
    strata_assert(page->listed && page->in_use);
    if (page->prev)
        page->prev->next = page->next;
    else
        heap->available[page->class_index] = page->next;
    if (page->next)
        page->next->prev = page->prev;
    page->next = page->prev = NULL;
    page->listed = 0;
}

/* A new page of the class from the heap's segments, its first blocks
 * carved; NULL when an adopted segment's pages are listed instead (exited
 * threads' segments are adopted first), or when no memory is to be had
 * (heap lock held). */
STRATA_NOINLINE struct page *heap_page_new_carved(struct heap *heap, unsigned class_index);

/* ---- remote.c: frees to a block's owner -------------------------------- */
/* A validated block that is not free, to whichever heap owns it: the
 * caller's own page (under its lock, which the caller must not hold), the
 * owner's remote list, or an exited thread's abandoned segment. */
void free_to_owner(struct page *page, struct block *block);

/* ---- bins.c --------------------------------------------------------------- */
/* Every block of every bin back to its page (the heap's thread exits or
 * trims; heap lock held). */
void bins_flush_all(struct heap *heap);

#endif /* STRATA_HEAP_PRIVATE_H */
