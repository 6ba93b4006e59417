/* heap.c: the heaps themselves. Every heap comes from a pool, mapped in
 * chunks and never unmapped: a heap a thread gave up goes back to it, and a
 * heap an exited thread parked (lifecycle.c) waits on its parked list for
 * the next thread. Also the heap each thread holds (thread_heap, the empty
 * heap before its first allocation), the list of every heap, walked without
 * a lock by the purger and the statistics, and the locks fork takes.
 * Invariants: a heap is on at most one of the pool's lists (free or
 * parked), and on neither while a thread holds it; a heap, once made, stays
 * mapped and on the list of every heap, so a late remote free can always
 * reach the heap it read from a segment; `retiring` counts the heaps taken
 * off the parked list and not yet given up (pool lock); `threads_holding`
 * counts the threads whose thread_heap is not the empty heap. */
#include <pthread.h>

#include "heap_private.h"

struct page page_empty;
/* Every heap's own_segment_empty (heap.h). */
static const struct segment segment_none;
struct heap heap_empty = {
    .own_segments = {[0 ... OWN_SEGMENT_SLOTS - 1] = (uintptr_t)&segment_none},
    .own_segment_empty = (uintptr_t)&segment_none,
    .current = {[0 ... CLASS_COUNT - 1] = &page_empty},
    .owner_word = OWNER_NONE,
};
STRATA_TLS struct heap *thread_heap = &heap_empty;

/* The pool: heaps of exited threads, and heaps never used yet. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap *pool_free;
/* Heaps of exited threads kept whole (segments, resident free slices,
 * pages), newest first, for the next thread to take (pool lock). */
static struct heap *pool_parked;
/* Every heap ever made, newest first; pushed once (under the pool lock),
 * never unlinked, walked without a lock. */
static _Atomic(struct heap *) all_heaps;
static pthread_key_t exit_key;

/* Heaps are carved from mappings of this size, a cache line apart. */
#define HEAP_POOL_CHUNK ((size_t)64 * 1024)
/* A program's first two threads' heaps share one mapping, in the secure
 * flavour too (its quarantine ring is most of a heap). */
_Static_assert(2 * ((sizeof(struct heap) + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1)) <= HEAP_POOL_CHUNK,
               "a heap-pool chunk holds two heaps");

void heap_threads_init(void (*on_thread_exit)(void *))
{
    if (pthread_key_create(&exit_key, on_thread_exit) != 0)
        report_fatal("cannot create the thread-exit key", NULL);
}

/* Maps a chunk of heaps (outside the pool lock) and adds them to the pool. */
static bool pool_grow(void)
{
    size_t size = (sizeof(struct heap) + CACHE_LINE - 1) & ~(size_t)(CACHE_LINE - 1);
    char *chunk = os_reserve(HEAP_POOL_CHUNK); /* strata's own: not charged */
    if (chunk == NULL)
        return false;
    struct heap *first = NULL, *last = NULL;
    for (size_t at = 0; at + size <= HEAP_POOL_CHUNK; at += size) {
        struct heap *heap = (struct heap *)(chunk + at);
        os_lock_init(&heap->lock);
        heap->own_segment_empty = (uintptr_t)&segment_none;
        heap->next_free = first;
        if (first == NULL)
            last = heap;
        first = heap;
    }
    /* Onto the list of every heap under the pool lock, so that the list
     * fork_prepare locks (holding the pool lock) is the one it unlocks. */
    pthread_mutex_lock(&pool_lock);
    for (struct heap *heap = first; heap != NULL; heap = heap->next_free) {
        atomic_store_explicit(&heap->next_all, atomic_load_explicit(&all_heaps, memory_order_relaxed),
                              memory_order_relaxed);
        atomic_store_explicit(&all_heaps, heap, memory_order_release);
    }
    last->next_free = pool_free;
    pool_free = first;
    pthread_mutex_unlock(&pool_lock);
    return true;
}

struct heap *heap_pool_take(void)
{
    for (;;) {
        pthread_mutex_lock(&pool_lock);
        struct heap *heap = pool_free;
        if (heap != NULL)
            pool_free = heap->next_free;
        pthread_mutex_unlock(&pool_lock);
        if (heap != NULL || !pool_grow())
            return heap;
    }
}

void heap_pool_put(struct heap *heap)
{
    pthread_mutex_lock(&pool_lock);
    heap->next_free = pool_free;
    pool_free = heap;
    pthread_mutex_unlock(&pool_lock);
}

void heap_parked_push(struct heap *heap)
{
    pthread_mutex_lock(&pool_lock);
    heap->next_free = pool_parked;
    pool_parked = heap;
    pthread_mutex_unlock(&pool_lock);
}

struct heap *heap_parked_pop(const struct heap *wanted)
{
    pthread_mutex_lock(&pool_lock);
    struct heap **at = &pool_parked;
    while (wanted != NULL && *at != NULL && *at != wanted)
        at = &(*at)->next_free;
    struct heap *heap = *at;
    if (heap != NULL)
        *at = heap->next_free;
    pthread_mutex_unlock(&pool_lock);
    return heap;
}

/* Heaps taken off the parked list and being given up (pool lock): a trim
 * waits for them, so that it returns with their memory back. */
static unsigned retiring;

struct heap *heap_parked_take(bool all, uint64_t now, unsigned *count)
{
    struct heap *taken = NULL;
    *count = 0;
    pthread_mutex_lock(&pool_lock);
    for (struct heap **at = &pool_parked; *at != NULL;) {
        struct heap *heap = *at;
        if (all || now - heap->parked_at >= strata_options.purge_delay_ns) {
            *at = heap->next_free;
            heap->next_free = taken;
            taken = heap;
            (*count)++;
        } else {
            at = &heap->next_free;
        }
    }
    retiring += *count;
    pthread_mutex_unlock(&pool_lock);
    return taken;
}

bool heap_parked_any(void)
{
    pthread_mutex_lock(&pool_lock);
    bool any = pool_parked != NULL;
    pthread_mutex_unlock(&pool_lock);
    return any;
}

void heap_parked_retired(unsigned count, bool wait)
{
    pthread_mutex_lock(&pool_lock);
    retiring -= count;
    pthread_mutex_unlock(&pool_lock);
    /* The purger may be giving some up right now. */
    for (bool busy = wait; busy;) {
        pthread_mutex_lock(&pool_lock);
        busy = retiring != 0;
        pthread_mutex_unlock(&pool_lock);
        if (busy)
            os_yield();
    }
}

/* Threads that hold a heap now (the purger watches it fall to 0). */
static _Atomic unsigned threads_holding;

void heap_bind_thread(struct heap *heap)
{
    counters_thread_begin();
    profile_thread_begin();
    thread_heap = heap;
    pthread_setspecific(exit_key, heap);
    atomic_fetch_add_explicit(&threads_holding, 1, memory_order_relaxed);
}

void heap_unbind_thread(void)
{
    thread_heap = &heap_empty;
    atomic_fetch_sub_explicit(&threads_holding, 1, memory_order_release);
}

unsigned heap_threads_holding(void)
{
    return atomic_load_explicit(&threads_holding, memory_order_acquire);
}

/* ---- walks over every heap, and fork -------------------------------------- */
struct heap *heap_first(void)
{
    return atomic_load_explicit(&all_heaps, memory_order_acquire);
}

struct heap *heap_next(struct heap *heap)
{
    return atomic_load_explicit(&heap->next_all, memory_order_relaxed);
}

void heap_lock_all(void)
{
    /* No purger or statistics call is then inside a heap, and no owner is
     * between two slice-mask updates. */
    pthread_mutex_lock(&pool_lock);
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        os_lock_take(&h->lock);
}

void heap_unlock_all(void)
{
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        os_lock_give(&h->lock);
    pthread_mutex_unlock(&pool_lock);
}

void heap_fork_child(void)
{
    /* The forking thread held every lock; the others' threads are gone,
     * the purger with any heap it was giving up (lost to the child). */
    pthread_mutex_init(&pool_lock, NULL);
    retiring = 0;
    /* The forking thread is the child's one thread; the heaps of the
     * others stay as they were, held by no thread here. */
    atomic_store_explicit(&threads_holding, thread_heap != &heap_empty, memory_order_relaxed);
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h))
        os_lock_init(&h->lock);
}

/* How many heaps a refill's scan for an idle one reads, and how many
 * idle heaps' locks it tries: a refill that finds no free block of its
 * own costs a page's carving already, and a program of many threads
 * pays no long walk. */
#define IDLE_SCAN_HEAPS 64
#define IDLE_SCAN_TRIES 4

struct heap *heap_idle_with_page(const struct heap *self, unsigned class_index)
{
    unsigned read = 0, tried = 0;
    for (struct heap *h = heap_first(); h != NULL && read < IDLE_SCAN_HEAPS && tried < IDLE_SCAN_TRIES;
         h = heap_next(h), read++) {
        if (h == self || !atomic_load_explicit(&h->idle, memory_order_relaxed))
            continue;
        tried++;
        if (!os_lock_try(&h->lock))
            continue;
        if (h->live && h->parked_at == 0 && atomic_load_explicit(&h->idle, memory_order_relaxed) &&
            h->available[class_index] != NULL)
            return h;
        os_lock_give(&h->lock);
    }
    return NULL;
}

unsigned heap_for_each_live(void (*fn)(struct heap *, void *), void *arg, bool try_only)
{
    unsigned skipped = 0;
    for (struct heap *h = heap_first(); h != NULL; h = heap_next(h)) {
        if (try_only) {
            if (!os_lock_try(&h->lock)) {
                skipped++;
                continue;
            }
        } else {
            os_lock_take(&h->lock);
        }
        if (h->live)
            fn(h, arg);
        os_lock_give(&h->lock);
    }
    return skipped;
}
