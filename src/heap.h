/* heap.h: the thread heaps: the structure of a heap (its bins in front,
 * its pages and remote stack behind, its segments), each thread's heap, and
 * what the heaps' files (heap_private.h lists them) give the layers above:
 * the pool of heaps, a heap's life (given to a thread, parked, retired,
 * trimmed), medium blocks, the purge policy and the debug build's checks.
 * The small-block engine that works on the bins, the inline paths
 * included, is bins.h's. Included by segment.c (whose segments a heap
 * lists) and the files above the heaps. */
#ifndef STRATA_HEAP_H
#define STRATA_HEAP_H

#include "layout.h"
#include "os.h"

/* A thread's bin of a class starts with room for about BIN_BYTES of
 * blocks (at least BIN_MIN_BLOCKS, at most BIN_BASE_MAX_BLOCKS): 64 KiB,
 * what two bins held when the classes below 4 KiB were twice as many
 * (sizeclass.c), so that a class's frees and allocations reach the slow
 * paths no more often than each half of it did (the server table took
 * 1.095x the time with 32). A class
 * whose blocks swing between the bin and its pages (a refill after a flush)
 * grows its bin by half, up to BIN_MAX_BLOCKS and BIN_GROWN_MAX_BYTES of
 * blocks (one class of large blocks swinging took half the budget:
 * redis-server's 16 KiB buffers grew their bin to 211 blocks of 18432
 * bytes, 3.9 MB, and its peak 2.5 MB), while the heap's growth stays
 * within its budget (bins_growth_budget): a BIN_GROWTH_SHARE-th of the
 * thread's share of what the program holds, between HEAP_BIN_GROWTH_MIN and
 * HEAP_BIN_GROWTH_BYTES, so that a program holding little keeps little in
 * its caches; a class neither refilled nor flushed for a purge delay shrinks
 * back by half, its excess blocks going to the pages. */
#define BIN_BYTES ((size_t)64 * 1024)
#define BIN_MIN_BLOCKS PAGE_CARVE_MIN_BLOCKS
#define BIN_BASE_MAX_BLOCKS 256
#define BIN_MAX_BLOCKS 1024
#define BIN_GROWN_MAX_BYTES ((size_t)1 << 20)
#define HEAP_BIN_GROWTH_BYTES ((size_t)8 << 20)
#define HEAP_BIN_GROWTH_MIN ((size_t)256 << 10)
#define BIN_GROWTH_SHARE 4
/* The owner looks at the clock for the shrinking every this many refills
 * and flushes. */
#define BIN_AGE_EVERY 64
/* Flushes without a refill between them after which a class drains. */
#define BIN_DRAIN_FLUSHES 4
/* A draining bin of other heaps' blocks (a consumer thread's) keeps about
 * this many bytes of them, at least BIN_MIN_BLOCKS, at most
 * BIN_PASS_MAX_BLOCKS, passing them on in runs of a page each. */
#define BIN_PASS_BYTES ((size_t)16 * 1024)
#define BIN_PASS_MAX_BLOCKS 64

/* The remote stack of a heap given up. */
#define REMOTE_CLOSED ((struct page *)(uintptr_t)1)

/* A thread's cache of free blocks of one class, in front of the pages.
 * Its count, its limit (the heap's bin_limit: 0 in checked mode and while
 * its class drains, when every free goes to the pages) and the class's
 * sample countdown share one word, so that the inline paths keep all
 * three with the one add they make:
 *   bits 0-31   BIN_ROOM_BIAS + limit - count: the room left, biased so
 *               that a push past the limit (room -1, which the pusher
 *               flushes) never borrows from the bits above;
 *   bits 32-63  the heap profiler's countdown for the class, signed: the
 *               pops left before one is sampled; BIN_COUNTDOWN_OFF, a
 *               slow call every 2^31 pops, while it is off.
 * A pop adds BIN_POP_STEP (room + 1, countdown - 1), a push takes 1 off.
 * Invariant: the list holds `count` <= `limit` blocks of pages the heap
 * owns (limit + 1 between a push and its flush). */
struct bin {
    struct block *head;
    uint64_t word;
};
#define BIN_ROOM_BIAS ((uint32_t)1 << 31)
#define BIN_POP_STEP ((uint64_t)1 - ((uint64_t)1 << 32))
#define BIN_COUNTDOWN_OFF INT32_MAX

/* The secure flavour's quarantine (free.c): blocks the thread freed, oldest
 * first from `head`, each with its slot's size, freed for real once more
 * than STRATA_QUARANTINE_BLOCKS or STRATA_QUARANTINE_KB wait. Every block
 * in it is zero (block_guards.h) and counted as used in its page.
 * `count` and `bytes` are read by statistics from other threads. A block
 * of the heap's own carved pages keeps its class, which sends it straight
 * to its bin when it leaves (bins.h, bin_free_own); any other keeps
 * CLASS_NONE and is freed as any block is. One slot in the default
 * flavour, never used. */
#define QUARANTINE_SLOTS (secure_has(SECURE_QUARANTINE) ? QUARANTINE_MAX_BLOCKS : 1)
struct quarantine {
    uint32_t head, count;
    size_t bytes;
    void *block[QUARANTINE_SLOTS];
    uint32_t slot[QUARANTINE_SLOTS];
    uint8_t own_class[QUARANTINE_SLOTS];
};

/* What a bin did: its last refill or flush, whether it did either since
 * the heap last aged its bins, and whether it was refilled since then (the
 * thread allocates blocks of the class). */
enum { BIN_REFILLED = 1, BIN_FLUSHED = 2, BIN_ACTIVE = 4, BIN_REFILLED_LATELY = 8 };

/* Entries of a heap's own_segments, by the segment's base's bits above
 * SEGMENT_SHIFT: 64 segments of 4 MiB, 256 MiB, without two sharing one.
 * (One per header colour, 16, covered 64 MiB: the threads table holds 150
 * MiB, and a third of its time went to frees that missed the entry and
 * took the out-of-line path.) */
#define OWN_SEGMENT_SLOTS 64
static inline unsigned own_segment_slot(uintptr_t address)
{
    return ((uint32_t)address >> SEGMENT_SHIFT) & (OWN_SEGMENT_SLOTS - 1);
}

struct heap {
    struct bin bins[CLASS_COUNT];
    uint32_t bin_limit[CLASS_COUNT]; /* each bin's (struct bin) */
    /* Segments of this heap that its owner's inline free met lately, one
     * per slot (own_segment_slot of the base indexes it): each entry the
     * segment's header, or own_segment_empty. A pointer whose bits above
     * SEGMENT_SHIFT are an entry's lies in a segment the heap owns, whose
     * header is the entry, with no segment map look-up, owner check or
     * header colour to work out (bins.h, bin_push_own_segment). Written by
     * the owner's inline free when the full checks have passed (never in
     * checked mode, whose owner word is tagged), cleared when a segment
     * leaves the heap (segment.c, under the heap's lock, by the owner or
     * the purger) and when the heap is given up or made. */
    _Atomic uintptr_t own_segments[OWN_SEGMENT_SLOTS];
    /* The entry naming no segment: an all-zero header, whose slices carve
     * nothing, so that a pointer beside it (within SEGMENT_SIZE) matches it
     * and is still refused by the slice's check. Set when the heap's memory
     * is made (heap.c), never changed: the segments layer clears entries
     * without naming the symbol above it. */
    uintptr_t own_segment_empty;
    struct page *current[CLASS_COUNT]; /* the page bins refill from */
    struct page *available[CLASS_COUNT]; /* pages with free blocks */
    /* Invariant: bin_growth is the sum over classes of (limit - base limit)
     * times the class size, at most HEAP_BIN_GROWTH_BYTES. */
    size_t bin_growth;
    uint64_t bins_aged_at;        /* when the owner last aged its bins */
    uint32_t bin_events;          /* refills and flushes since it looked at the clock */
    uint8_t bin_use[CLASS_COUNT]; /* BIN_* of each class since then */
    /* Flushes of each class's bin since its last refill; past
     * BIN_DRAIN_FLUSHES the class is draining (bins.c): its limit is kept
     * here and the bin's is 0, so frees go to the pages, or the pass limit
     * (bin_pass_limit: the flushes were mostly other heaps' blocks, which
     * the bin passes on in runs), until the next refill. A heap starts
     * with every class passing. 0 in drained_limit: not draining. */
    uint8_t bin_flushes[CLASS_COUNT];
    uint32_t bin_drained_limit[CLASS_COUNT];
    /* Pages written whole (pages.c), for classes over an OS page: whether
     * the class's new pages populate their carves whole; the new pages
     * since the last one carved heads-only; that page (a probe, looked at
     * when spent; NULL once looked at). Heap lock. */
    uint8_t populate_whole[CLASS_COUNT];
    uint8_t pages_since_probe[CLASS_COUNT];
    struct page *touch_probe[CLASS_COUNT];
    /* The stack of pages whose remote lists hold blocks other threads
     * freed (bins.h): on a line of its own, which those threads write, so
     * the owner's other fields do not bounce with it. */
    _Alignas(CACHE_LINE) _Atomic(struct page *) remote;
    /* The owner took no refill or flush for a whole purger round (set by
     * the purger, cleared by the owner's next refill or flush, both under
     * the heap lock): another thread's refill may then take free blocks
     * from its available pages (bins.c), which it does not allocate from
     * meanwhile. On a line of its own, read by those refills' scans. */
    _Alignas(CACHE_LINE) _Atomic bool idle;
    _Alignas(CACHE_LINE) struct segment *segments;
    /* The owner's refills and flushes, and their count when the purger
     * last looked: unchanged, the owner has been idle for a round and the
     * purger takes back what others freed to it (heap lock). */
    uint64_t slow_calls, slow_calls_seen;
    size_t dirty_slices;
    uint64_t purge_epoch;                /* time of the last purge check */
    /* The purge delay's stretch (purge_policy.c): the heap waits the
     * option's delay << purge_stretch. Slices its purges gave back and
     * slices its pages took back within purge_retake_window() of their
     * purge (core.h), both halved at each purge check; purge checks in a
     * row that purged and saw nothing taken back. */
    uint8_t purge_stretch;
    uint8_t purge_calm_checks;
    uint32_t slices_purged, slices_retaken;
    /* A purge past the dirty limit handed to the purger thread
     * (purge_policy.c; enum purge_handoff): set by the owner, taken and
     * ended by the purger, both under the heap's lock; read without it by
     * the purger's scan. */
    _Atomic int purge_handoff;
    uint64_t refills;                    /* debug build: refills since the last full check */
    struct heap *next_free;              /* the heap pool's free list (pool lock) */
    _Atomic(struct heap *) next_all;     /* every heap ever made; never unlinked */
    bool live;                           /* a thread owns it, or it is parked (heap lock) */
    /* When its thread exited, leaving it whole for the next thread; 0 while
     * a thread owns it (heap lock). */
    uint64_t parked_at;
    uintptr_t owner_word;                /* what this heap writes as owner */
    struct quarantine quarantine;        /* the owner's alone (secure flavour) */
    /* Guards everything behind the bins: the heap's segments (their list,
     * slice masks, dirty counts), its pages (free lists, current and
     * available pages), the collection of its remote stack, and `live`:
     * held by the owner on its slow paths (refill, flush, page taken or
     * released), and by the purger and statistics from other threads. Bins
     * are the owner's alone and never need it. */
    struct os_lock lock;
};

/* A bin's figures from its word (struct bin). Other threads read them
 * (statistics) as the owner writes: approximate while it runs. */
static inline uint32_t bin_limit(const struct heap *heap, const struct bin *bin)
{
    return __atomic_load_n(&heap->bin_limit[bin - heap->bins], __ATOMIC_RELAXED);
}

static inline uint32_t bin_count(const struct heap *heap, const struct bin *bin)
{
    uint32_t room_biased = (uint32_t)__atomic_load_n(&bin->word, __ATOMIC_RELAXED);
    return bin_limit(heap, bin) - (room_biased - BIN_ROOM_BIAS);
}

/* The class's sample countdown, in pops (negative: spent). */
static inline int32_t bin_countdown(const struct bin *bin)
{
    return (int32_t)(uint32_t)(__atomic_load_n(&bin->word, __ATOMIC_RELAXED) >> 32);
}

/* The bin's count and limit set (the owner's, or under its heap's lock
 * with the owner gone), its countdown kept. */
static inline void bin_set(struct heap *heap, struct bin *bin, uint32_t count, uint32_t limit)
{
    __atomic_store_n(&heap->bin_limit[bin - heap->bins], limit, __ATOMIC_RELAXED);
    uint64_t countdown = bin->word & ~(uint64_t)UINT32_MAX;
    __atomic_store_n(&bin->word, countdown | (uint32_t)(BIN_ROOM_BIAS + limit - count), __ATOMIC_RELAXED);
}

static inline void bin_set_count(struct heap *heap, struct bin *bin, uint32_t count)
{
    bin_set(heap, bin, count, heap->bin_limit[bin - heap->bins]);
}

static inline void bin_set_limit(struct heap *heap, struct bin *bin, uint32_t limit)
{
    bin_set(heap, bin, bin_count(heap, bin), limit);
}

static inline void bin_set_countdown(struct bin *bin, int32_t pops)
{
    uint64_t room = bin->word & UINT32_MAX;
    __atomic_store_n(&bin->word, ((uint64_t)(uint32_t)pops << 32) | room, __ATOMIC_RELAXED);
}

/* Every entry of the heap's own segments names none (a heap made, or given
 * up). */
static inline void heap_own_segments_clear(struct heap *heap)
{
    for (unsigned k = 0; k < OWN_SEGMENT_SLOTS; k++)
        atomic_store_explicit(&heap->own_segments[k], heap->own_segment_empty, memory_order_relaxed);
}

/* The calling thread's heap, or &heap_empty before its first allocation
 * (heap.c). */
extern STRATA_INTERNAL struct heap heap_empty;
extern STRATA_INTERNAL STRATA_TLS struct heap *thread_heap;

/* ---- what the thread heaps' files give the layers above (the engine's
 * bins, remote frees and free decision: bins.h) ------------------------ */
/* heap.c: the pool of heaps */
extern STRATA_INTERNAL struct page page_empty;
/* Creates the thread-exit key (start-up, before any heap), whose destructor
 * init.c gives. */
void heap_threads_init(void (*on_thread_exit)(void *));
/* How many threads hold a heap now (in a forked child: the forking thread
 * alone, if it held one). */
unsigned heap_threads_holding(void);
/* Calls fn on every heap with a thread, holding its lock (with `try_only`,
 * skipping heaps whose lock is busy); returns how many it skipped. Takes
 * no process-wide lock. */
unsigned heap_for_each_live(void (*fn)(struct heap *, void *), void *arg, bool try_only);
/* A heap other than `self` whose thread lives (a parked heap is kept
 * whole for the next thread, or retired), flagged idle, with an available
 * page of the class, returned with its lock held; NULL when the first few
 * heaps flagged idle have none or are busy (their locks are only tried:
 * the caller holds its own). */
struct heap *heap_idle_with_page(const struct heap *self, unsigned class_index);
void heap_lock_all(void);
void heap_unlock_all(void);
void heap_fork_child(void);

/* heap_check.c (heap_check itself: checkers.h) */
/* The debug build's check of the whole heap every DEBUG_FULL_CHECK_EVERY
 * refills (bins.c checks the bin and the page at each); takes the heap's
 * lock. */
void heap_debug_refill(struct heap *heap);

/* purge_policy.c */
/* Purges the slices that have stayed free since the last check, once the
 * heap's delay (the option's, stretched: purge_policy.c) has passed since
 * it, or everything past the dirty limit; asks for the purger thread when
 * the heap holds enough (heap lock held). */
void heap_maybe_purge(struct heap *heap);
/* Purges every dirty slice of the heap now (heap lock held). */
void heap_purge_dirty(struct heap *heap);
/* Where a heap's purge past its dirty limit is: made by the owner (not
 * handed), handed to the purger thread and not yet taken, or taken: the
 * purger purges the heap's slices outside its lock. */
enum purge_handoff { PURGE_NOT_HANDED, PURGE_HANDED, PURGE_TAKEN };

/* pages.c: a heap's pages */
/* Returns a block to its page, in the heap that owns it (heap lock held). */
void page_free_block(struct heap *heap, struct page *page, struct block *block);
/* A run of `count` carved small blocks of the page, first..last, linked
 * to each other as a list (last's link is rewritten), joins its free list
 * with one update of the page (heap lock held): a bin's flush of blocks
 * that follow each other in the bin. */
void page_free_run(struct heap *heap, struct page *page, struct block *first, struct block *last, uint32_t count);
/* A page's remote list of `count` blocks, from `list` to `tail`, taken
 * whole, joins its free list (heap lock held). */
void page_take_remote(struct heap *heap, struct page *page, struct block *list, struct block *tail, uint32_t count);
/* A medium block of at least `size` bytes (`zero`: zeroed) from the heap's
 * segments; NULL without memory (errno untouched). */
void *heap_medium_alloc(struct heap *heap, size_t size, bool zero);
/* The first `length` bytes of a medium block the calling thread has just
 * allocated, which it is about to write whole (a realloc's copy), made
 * resident in one call where they may not be yet. */
void heap_medium_populate(void *block, size_t length);
/* Grows the calling thread's own medium block in place to `size` (at most
 * MEDIUM_MAX), the pages it grows into made resident (a program grows a
 * block to write it); false when it is another heap's or has no room
 * after it. */
bool heap_medium_grow(void *block, size_t size);

/* lifecycle.c: a heap given to a thread, parked, retired, trimmed */
/* Gives the calling thread a heap (start-up done): with `take_parked`, the
 * newest one an exited thread parked, else a fresh one; NULL without
 * memory. (An allocation takes a parked one.) */
STRATA_NOINLINE struct heap *heap_acquire(bool take_parked);
/* Gives a heap to a thread that frees others' blocks without allocating
 * (alloc.c, FREES_BEFORE_HEAP), `owner` being the owner word of the
 * block it frees now: the exited thread's heap that owns the block, if
 * it is still parked, its classes draining until the thread refills them,
 * so that the frees of its blocks go to its pages, whose memory the
 * thread's allocations then take again (a thread freeing what the thread
 * before it handed it), and its bins keep none for as long as it lives;
 * else a fresh one, whose bins pass other live heaps' blocks on in runs
 * (a consumer). NULL without memory. */
STRATA_NOINLINE struct heap *heap_acquire_freeing(uintptr_t owner);
/* The calling thread's exit (its key's destructor, given the heap): parks
 * the heap for the next thread, or gives it up at once without a purger or
 * purge delay. True when parked: the purger must then run to retire it. */
bool heap_thread_exit(struct heap *heap);
/* Gives up the heaps of exited threads parked for longer than the purge
 * delay (`all`: every one), as their threads' exits would have without a
 * purger; whether heaps are still parked. Call with no lock held. */
bool heap_retire_parked(bool all);
/* Returns the caller's cached blocks and empty pages, then purges. */
void heap_trim_own(void);
/* The purger's purges handed to it by heaps past their dirty limit (no
 * lock held). */
void heap_purges_handed(void);
/* In a fork's child: slices the parent's purger had taken out of a heap's
 * segments go back to them, closed, and no purge stays handed. */
void heap_purges_fork_child(void);
/* The purger's step for one heap (heap lock held): the remote frees and
 * empty current pages of an owner idle since the last step go back to its
 * segments, then its aged free slices to the OS (heap_purge_idle). */
void heap_reclaim_idle(struct heap *heap);

#endif /* STRATA_HEAP_H */
