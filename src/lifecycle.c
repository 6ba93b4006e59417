/* lifecycle.c: a thread heap's life. A thread's first allocation gives it
 * a heap: the newest one an exited thread parked, whole, else a fresh one
 * from the pool (a thread that frees before it allocates takes the parked
 * heap of a block it frees, else a fresh one). At the thread's exit the heap is parked for the next
 * thread, or given up at once (without a purger thread or a purge delay);
 * one left parked for a purge delay is retired by the purger. A trim
 * returns what the calling thread's heap caches.
 * Invariants: a heap is live from its acquisition until it is given up,
 * parked or not, and only a live heap is seen by the purger and the
 * statistics; a parked heap has empty bins and its remote frees collected
 * (when it was parked), so what it holds is counted in its pages, and its
 * owner word, in it and in its segments, carries OWNER_PARKED_TAG; a heap
 * given up owns no segment, and its remote stack is closed. */
#include <pthread.h>

#include "bins.h"
#include "checkers.h"
#include "heap_private.h"

/* A parked heap, the newest or `wanted` (NULL when it is no longer
 * parked), now the calling thread's: its segments, pages and resident free
 * slices serve the thread from its first allocation. Its bins start as a
 * new thread's (bins_forget_use, `draining` or not), and what other
 * threads freed to it meanwhile is collected. */
static struct heap *heap_unpark(const struct heap *wanted, bool draining)
{
    struct heap *heap = heap_parked_pop(wanted);
    if (heap == NULL)
        return NULL;
    os_lock_take(&heap->lock);
    strata_assert(heap->live && heap->parked_at != 0);
    heap->parked_at = 0;
    heap->next_free = NULL;
    atomic_store_explicit(&heap->idle, false, memory_order_relaxed);
    heap->owner_word &= ~OWNER_PARKED_TAG;
    segments_set_owner(heap->segments, heap->owner_word);
    os_lock_give(&heap->lock);
    bins_forget_use(heap, draining);
    heap_bind_thread(heap);
    os_lock_take(&heap->lock);
    heap_collect_remote(heap);
    os_lock_give(&heap->lock);
    return heap;
}

struct heap *heap_acquire_freeing(uintptr_t owner)
{
    strata_assert(thread_heap == &heap_empty);
    if (owner & OWNER_PARKED_TAG) {
        struct heap *heap = heap_unpark((const struct heap *)(owner & ~OWNER_TAGS), true);
        if (heap != NULL)
            return heap;
    }
    return heap_acquire(false);
}

struct heap *heap_acquire(bool take_parked)
{
    strata_assert(thread_heap == &heap_empty);
    strata_assert_cmp(class_size[CLASS_COUNT - 1], ==, SMALL_MAX); /* configured */
    struct heap *heap = take_parked ? heap_unpark(NULL, false) : NULL;
    if (heap != NULL)
        return heap;
    heap = heap_pool_take();
    if (heap == NULL)
        return NULL;
    strata_assert(!heap->live);
    for (size_t c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        heap->available[c] = NULL;
        heap->populate_whole[c] = 0;
        heap->pages_since_probe[c] = 0;
        heap->touch_probe[c] = NULL;
    }
    heap->segments = NULL;
    heap->dirty_slices = 0;
    heap->refills = 0;
    /* A thread's purge delay starts as the option's: what the heap's last
     * thread taught it is not this one's (purge_policy.c). */
    heap->purge_stretch = 0;
    heap->purge_calm_checks = 0;
    heap->slices_purged = heap->slices_retaken = 0;
    strata_assert(atomic_load(&heap->purge_handoff) == PURGE_NOT_HANDED);
    atomic_store_explicit(&heap->idle, false, memory_order_relaxed);
    heap->purge_epoch = os_now_ns();
    heap->next_free = NULL;
    heap->owner_word = (uintptr_t)heap | (strata_options.check ? OWNER_CHECK_TAG : 0);
    bins_init(heap);
    /* Live (visible to the purger and statistics) only once initialised. */
    os_lock_take(&heap->lock);
    heap->live = true;
    heap->parked_at = 0;
    os_lock_give(&heap->lock);
    if (strata_options.purger_at_start)
        purger_ask();
    heap_bind_thread(heap);
    return heap;
}

/* ---- thread exit ------------------------------------------------------------ */
/* A thread's exit parks its heap whole: bins flushed and remote frees
 * collected, so that what it holds is counted in its pages, but its
 * segments, pages and resident free slices kept for the next thread to
 * start (heap_unpark), which then faults in nothing and maps nothing.
 * Other threads' frees of its blocks push onto its pages' remote lists meanwhile,
 * as to a running owner's. One that stays parked for the purge delay is
 * retired by the purger (heap_retire_parked), as if its thread had just
 * exited without parking: its empty segments go back to the OS and the
 * others to the abandoned list. Without a purger thread to do that
 * (STRATA_BACKGROUND_PURGE=0) or with a purge delay of 0, exit retires the
 * heap at once. */

/* The current pages with no block in use go back to their segments (heap
 * lock held). */
static void current_release_empty(struct heap *heap)
{
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        struct page *page = heap->current[c];
        if (page->in_use && page->used == 0) {
            heap->current[c] = &page_empty;
            page_release(heap, page);
        }
    }
}

/* The debug build's checkpoint of a whole heap, named by `what` (heap lock
 * held). */
static void debug_checkpoint(struct heap *heap, const char *what)
{
    if (!STRATA_DEBUG_BUILD)
        return;
    const char *broken = heap_check_locked(heap);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, what, "%s", broken);
}

/* Gives up a heap no thread owns (a parked one, or the exiting thread's):
 * its segments leave it, and it goes back to the pool empty. */
static void heap_abandon(struct heap *heap)
{
    strata_assert(heap->live);
    /* Not live first, waiting for a purger or statistics call that may hold
     * the lock: from here on only this thread looks. The lock stays held,
     * as for any work behind the bins. */
    os_lock_take(&heap->lock);
    heap_purge_handed_wait(heap); /* strata_trim's retirement runs beside the purger */
    heap->live = false;
    debug_checkpoint(heap, "heap_check as a heap is given up");
    bins_flush_all(heap);
    heap_collect_remote(heap);
    current_release_empty(heap);
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        heap->current[c] = &page_empty;
        for (struct page *page = heap->available[c]; page != NULL; page = page->next)
            page->listed = 0;
        heap->available[c] = NULL;
    }
    heap_segments_abandon(heap);
    strata_assert(heap->segments == NULL && heap->dirty_slices == 0);
    /* From here every free of this heap's blocks takes the abandoned path;
     * closing the list sends late remote frees there too. */
    heap_remote_close(heap);
    os_lock_give(&heap->lock);
    heap_pool_put(heap);
}

static void heap_park(struct heap *heap)
{
    os_lock_take(&heap->lock);
    debug_checkpoint(heap, "heap_check at thread exit");
    bins_flush_all(heap);
    heap_collect_remote(heap);
    current_release_empty(heap);
    if (heap->dirty_slices > PARK_DIRTY_SLICES) {
        heap_purge_handed_wait(heap); /* what the thread freed is back when it has exited */
        heap_purge_dirty(heap);
    }
    heap->parked_at = os_now_ns();
    heap->owner_word |= OWNER_PARKED_TAG;
    segments_set_owner(heap->segments, heap->owner_word);
    os_lock_give(&heap->lock);
    heap_parked_push(heap);
}

bool heap_thread_exit(struct heap *heap)
{
    if (heap == NULL || heap == &heap_empty)
        return false;
    heap_unbind_thread();
    bool park = purger_gives_back_later();
    if (park)
        heap_park(heap);
    else
        heap_abandon(heap);
    counters_thread_end();
    if (park) /* the purger retires it if no thread comes for it */
        purger_ask();
    return park;
}

bool heap_retire_parked(bool all)
{
    unsigned count;
    struct heap *retired = heap_parked_take(all, os_now_ns(), &count);
    while (retired != NULL) {
        struct heap *next = retired->next_free;
        heap_abandon(retired);
        retired = next;
    }
    heap_parked_retired(count, all);
    return heap_parked_any();
}

/* ---- the purger's step ------------------------------------------------------- */
void heap_reclaim_idle(struct heap *heap)
{
    /* An owner that took no slow path for a whole round may sleep for
     * long: what other threads freed to it, and its empty current pages,
     * go back to its segments now, and to the OS at once, since the
     * program freed them a round ago at least, unless its phases have
     * been taking back what its purges gave (purge_policy.c). (A busy
     * owner does both itself.) */
    if (heap->slow_calls == heap->slow_calls_seen) {
        if (!atomic_load_explicit(&heap->idle, memory_order_relaxed))
            atomic_store_explicit(&heap->idle, true, memory_order_relaxed);
        size_t dirty = heap->dirty_slices;
        heap_collect_remote(heap);
        current_release_empty(heap);
        if (heap->dirty_slices > dirty)
            heap_purge_released_idle(heap);
    }
    heap->slow_calls_seen = heap->slow_calls;
    heap_purge_idle(heap);
}

void heap_trim_own(void)
{
    struct heap *heap = thread_heap;
    if (heap == &heap_empty)
        return;
    os_lock_take(&heap->lock);
    bins_flush_all(heap);
    heap_collect_remote(heap);
    current_release_empty(heap);
    heap_purge_handed_wait(heap); /* back when the trim returns */
    heap_purge_dirty(heap);
    os_lock_give(&heap->lock);
}

/* ---- purges handed to the purger ------------------------------------------ */
/* The segments a handed purge takes slices of at a time (the purger's
 * stack holds their list); a heap with more goes in several steps. */
#define PURGE_TAKEN_SEGMENTS 32
/* Steps of one handed purge at most: what an owner dirtying slices as
 * fast as they go leaves is handed again at the purge's end
 * (heap_purge_handed_end), after the purger's other work. */
#define PURGE_HANDED_STEPS 4

/* The heap's handed purge: its dirty slices taken out under its lock,
 * purged outside it, given back under it. */
static void heap_purge_handed(struct heap *heap)
{
    struct purge_taken taken[PURGE_TAKEN_SEGMENTS];
    os_lock_take(&heap->lock);
    int handed = PURGE_HANDED;
    if (!heap->live || !atomic_compare_exchange_strong(&heap->purge_handoff, &handed, PURGE_TAKEN)) {
        os_lock_give(&heap->lock);
        return;
    }
    for (unsigned step = 0; step < PURGE_HANDED_STEPS; step++) {
        unsigned count = heap_purge_take(heap, taken, PURGE_TAKEN_SEGMENTS);
        if (count == 0)
            break;
        os_lock_give(&heap->lock);
        for (unsigned i = 0; i < count; i++)
            purge_runs(taken[i].segment, taken[i].slices, taken[i].segment->taken_mask);
        os_lock_take(&heap->lock);
        heap_purge_give_back(heap, taken, count);
        if (count < PURGE_TAKEN_SEGMENTS)
            break;
    }
    heap_purge_handed_end(heap);
    os_lock_give(&heap->lock);
}

void heap_purges_handed(void)
{
    if (!atomic_load_explicit(&purges_handed, memory_order_relaxed) ||
        !atomic_exchange_explicit(&purges_handed, false, memory_order_acquire))
        return;
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        if (atomic_load_explicit(&h->purge_handoff, memory_order_relaxed) == PURGE_HANDED)
            heap_purge_handed(h);
}

void heap_purges_fork_child(void)
{
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h)) {
        if (atomic_load_explicit(&h->purge_handoff, memory_order_relaxed) == PURGE_TAKEN) {
            /* Purged or not, the slices count as closed: a page that takes
             * them opens them first, and one not purged yet is only
             * resident longer. */
            for (struct segment *s = h->segments; s != NULL; s = s->next) {
                s->free_mask |= s->taken_mask;
                s->taken_mask = 0;
            }
        }
        atomic_store_explicit(&h->purge_handoff, PURGE_NOT_HANDED, memory_order_relaxed);
    }
}
