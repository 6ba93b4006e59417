/* heap_private.h: what the thread heap's files share and nothing else may
 * call: the pool's operations, the page lists behind the bins and the
 * checkers' parts. Included by the files listed below alone
 * (tests/test_layers.py holds them to it); the other layers see the heaps
 * through heap.h and the engine through bins.h.
 *
 * The files, bottom to top (each calls only the ones before it):
 *   heap.c          the pool of heaps, the heap each thread holds, walks
 *   purge_policy.c  when a heap's free slices go back to the OS
 *   pages.c         a heap's pages: lists, frees into them, medium blocks
 *   bins.c          the small-block engine (bins.h): bins, remote frees
 *   heap_check.c    heap_check, made of the files' own checkers
 *   lifecycle.c     a heap given to a thread, parked, retired, trimmed */
#ifndef STRATA_HEAP_PRIVATE_H
#define STRATA_HEAP_PRIVATE_H

#include "core.h"
#include "heap.h"

/* ---- heap.c: the pool of heaps ------------------------------------------- */
/* A heap from the pool (one never used, or one given up), not yet live;
 * NULL without memory. */
struct heap *heap_pool_take(void);
/* A heap given up, empty, back to the pool. */
void heap_pool_put(struct heap *heap);
/* An exited thread's heap, kept whole, onto the parked list (newest first). */
void heap_parked_push(struct heap *heap);
/* The newest parked heap, or `wanted` when not NULL, off the list; NULL
 * when none is parked (`wanted` is not: taken or retired meanwhile). */
struct heap *heap_parked_pop(const struct heap *wanted);
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
/* Every heap ever made, from the newest: heap_first, then heap_next of
 * each until NULL (no lock: the list only grows). */
struct heap *heap_first(void);
struct heap *heap_next(struct heap *heap);

/* ---- purge_policy.c ------------------------------------------------------- */
/* The purger's purge of slices an idle owner's pages gave back (heap lock
 * held): at once, unless the heap's delay is stretched. */
void heap_purge_released_idle(struct heap *heap);
/* The purger's purge of one heap (heap lock held): its aged free slices,
 * unless the owner checked lately. */
void heap_purge_idle(struct heap *heap);
/* A heap past its dirty limit hands the purge of all its free slices to
 * the purger thread, if it runs, and goes on: its thread never waits on
 * madvise (design.md, "Giving memory back"). Past HANDED_DIRTY_MAX free
 * slices, a purger that has not come yet (a thread starved of a core) is
 * not waited for. Whether it was handed (heap lock held). */
bool heap_purge_hand(struct heap *heap);
/* A purge handed to the purger (heap_maybe_purge), in two steps under the
 * heap's lock with the purge between them outside it: heap_purge_take
 * takes the dirty slices of up to `max` segments out of their free masks
 * into `taken` and returns how many segments; heap_purge_give_back puts
 * them back, purged and closed. */
struct purge_taken {
    struct segment *segment;
    uint64_t slices; /* the dirty ones, which the purge gives back */
    uint64_t purged; /* the segment's purged_mask's share of taken_mask */
};
unsigned heap_purge_take(struct heap *heap, struct purge_taken *taken, unsigned max);
void heap_purge_give_back(struct heap *heap, const struct purge_taken *taken, unsigned count);
/* The end of a handed purge, by the purger (heap lock held): handed again
 * at once if the owner went past the limit meanwhile (the purge taken, the
 * owner's frees could not hand it, and an owner done freeing never comes
 * back to). */
void heap_purge_handed_end(struct heap *heap);
/* Waits until the purger no longer holds slices of the heap outside its
 * lock (heap lock held, given up meanwhile); a purge handed and not yet
 * taken is the caller's to make. */
void heap_purge_handed_wait(struct heap *heap);

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
/* The class's current page is spent (every block carved and handed out):
 * the class learns from it whether its pages are written whole (pages.c,
 * "pages written whole"). */
void heap_page_spent(struct heap *heap, struct page *page);

/* The checkers' shared parts (checkers.h: a checker returns NULL or a line
 * naming the broken invariant). */
/* The line, formatted into the calling thread's buffer. */
const char *heap_broken(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* The length of a free list, up to bound + 1; *broken names a block whose
 * words are not a free block's (the walk stops there). */
size_t free_list_length(const struct block *block, size_t bound, const struct block **broken);
/* Whether p is the start of a block the page has carved. */
bool page_contains(const struct page *page, const void *p);
/* The secure flavour: a free block's state says it is free (layout.h). */
const char *free_block_state_check(const struct block *b, size_t slot);
/* One page's counts and free list. */
const char *page_check(const struct page *page);

/* ---- heap_check.c (heap_check itself: checkers.h) ------------------------- */
/* heap_check's work, for a caller that holds the heap's lock already. */
const char *heap_check_locked(const struct heap *heap);

#endif /* STRATA_HEAP_PRIVATE_H */
