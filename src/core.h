/* core.h: the general allocator's layer map and lock order, and the
 * interface of its layers below the thread heaps (purge.c, segment.c,
 * large.c) and of the free paths and statistics (free.c, stats.c), grouped
 * by the file that defines them, in layer order. The thread heaps' own
 * interface is heap.h's, the engine's bins.h's, start-up's init.h's.
 * Included by the core's files and the white-box tests only; the arenas
 * see the base layer's headers (os.h, report.h, options.h), the contexts
 * and the override api.h.
 *
 * The layer map, bottom to top: a file calls only the files of its own
 * layer or a lower one. It is the one map: tests/test_layers.py reads the
 * lines below (layer number, name, objects) and checks the object files and
 * the README's design table against them.
 *   0 os: os.c
 *   1 base: report.c options.c sizeclass.c counters.c instrument.c stack_walk.c profile.c
 *   2 segments and pages: purge.c segment.c
 *   3 large blocks and thread heaps: large.c sampled_blocks.c zero_size.c heap.c purge_policy.c pages.c bins.c heap_check.c lifecycle.c
 *   4 free paths: free.c
 *   5 statistics: stats.c
 *   6 start-up and fork: init.c
 *   7 API: alloc.c secure.c api.c override.c operator_new.c
 *   8 arenas and contexts: arena.c context.c
 * (What each file holds: its opening comment, and the README's table.)
 *
 * Lock order (a lock may be taken while holding only locks above it):
 *   1. the heap pool lock (heap.c): the pool's free and parked lists
 *   2. a heap's lock (a futex word, os.h): everything behind its bins (its
 *      pages, remote stack, segments and slice masks); a thread holds one at
 *      a time, except fork_prepare, which takes every heap's in turn
 *   3. the segment cache lock (segment.c)
 *   4. the abandoned lock (segment.c): the abandoned segments and their pages
 *   5. the large lock (large.c): the registry and the mapping cache
 *   6. the zero-size lock (zero_size.c): which of its slots are handed out
 *   7. the profile lock (profile.c): the heap profiler's records, taken with
 *      no other held; its dump writes its files under it
 *   8. the sampled-blocks lock (sampled_blocks.c): the sampled blocks'
 *      slots, taken with no other held
 * No system call runs under locks 1, 3, 4, 5 or 6, which every thread may
 * want: a thread maps, remaps, purges and unmaps only under its own heap's
 * lock, or under none. */
#ifndef STRATA_CORE_H
#define STRATA_CORE_H

#include "counters.h"
#include "layout.h"
#include "options.h"
#include "os.h"
#include "profile.h"
#include "report.h"

/* The mask of slices [first, first + length). */
static inline uint64_t slice_run(unsigned first, size_t length)
{
    return (length == 64 ? ~(uint64_t)0 : (((uint64_t)1 << length) - 1)) << first;
}

/* ---- purge.c: giving free slices back to the OS ------------------------ */
/* What a purge of the segment's free `slices` may cover (purge_slices):
 * they and its free slices that are closed already, those not dirty
 * (segment.c, page_open). Under the lock that guards the masks. */
static inline uint64_t purge_cover(const struct segment *segment, uint64_t slices)
{
    return (segment->free_mask & ~segment->dirty_mask) | slices;
}
/* Purges the slices, free ones, and takes back their charges (os.h).
 * `cover` holds them and may hold free slices that are closed already
 * (purged, or never used): a call covers a whole run of it, so that slices
 * freed one by one between purged ones go back in one call, not one each. */
void purge_slices(struct segment *segment, uint64_t slices, uint64_t cover);
/* purge_slices with the charges taken back already: the masks' lock need
 * not be held if no one else can take the slices meanwhile. */
void purge_runs(struct segment *segment, uint64_t slices, uint64_t cover);
/* The runs of `cover` that hold a slice of `slices`: what purge_slices
 * calls cover. */
uint64_t purge_reach(uint64_t cover, uint64_t slices);
/* Takes back the charges of the free slices, which are going away. */
void slices_uncharge(struct segment *segment, uint64_t slices);
/* Purges the segment's dirty slices and clears its dirty and aging masks. */
void segment_purge_dirty(struct segment *segment);
/* Whether the purger thread should start: asked for by a heap holding
 * PURGER_WANTED_SLICES free, a parked heap, a cached large mapping, a
 * block freed to another thread (or by the first heap, with
 * STRATA_BACKGROUND_PURGE=1), taken by init.c's purger_start. */
enum purger_request { PURGER_IDLE, PURGER_REQUESTED, PURGER_TAKEN };
extern STRATA_INTERNAL _Atomic int purger_request;
/* Set when a heap hands its purge to the purger (purge_policy.c), taken
 * by the purger before it looks for the heaps that did. */
extern STRATA_INTERNAL _Atomic bool purges_handed;
/* Asks for the purger thread (purger_request) once, and wakes it if it
 * sleeps for want of work. */
void purger_ask(void);
/* The purger sleeps on this word; ringing it (purger_ring) wakes it for a
 * round at once. */
extern STRATA_INTERNAL _Atomic uint32_t purger_bell;
void purger_ring(void);
/* Set by the purger while it sleeps with nothing to give back: work for it
 * (a free slice, a cached mapping, a remote free, a parked heap) wakes it
 * with purger_wake (a plain load while it is awake). */
extern STRATA_INTERNAL _Atomic bool purger_sleeping;
void purger_wake(void);
/* Whether this process closes a segment's free slices (segment.c, "closed
 * slices"): CLOSED_SLICES, but in the default flavour not with huge pages
 * asked for (STRATA_THP), which need a whole 2 MiB range of one
 * protection at its first touch; the secure flavour keeps them closed. */
static inline bool slices_closed(void)
{
    return CLOSED_SLICES && (STRATA_SECURE_BUILD || !strata_options.thp);
}
/* The longest purge delay (the option's << PURGE_STRETCH_MAX): memory
 * taken back within it of going back to the OS stretches the delay of the
 * heap (purge_policy.c) or of the large-block cache (large.c) that gave it. */
static inline uint64_t purge_retake_window(void)
{
    return strata_options.purge_delay_ns << PURGE_STRETCH_MAX;
}

/* ---- segment.c: segments, the segment map, pages, abandoned segments --- */
/* The page of a pointer into a segment that is the start of one of its
 * blocks (a free's first check, from whichever thread); anything else is
 * reported. */
struct page *free_segment_page(void *p);
/* The guard word below the small block at p is not its own: the mark of
 * the heap profiler's sample (layout.h, small_guard_mark), whose record is
 * released and the guard word written back, or else an overwrite,
 * reported (with the block below, whose overflow it likely is). */
void release_sample_or_report_guard(void *p);
/* Slices a page of the class spans. */
size_t class_slices(unsigned class_index);
/* A page of the class from the heap's segments, or (with `may_map`) a new
 * segment's (heap lock held); NULL when there is no room (or memory). */
struct page *page_new(struct heap *heap, unsigned class_index, bool may_map);
/* A medium page (layout.h, CLASS_MEDIUM) of just enough slices for `size`,
 * its one block handed out; NULL without memory (heap lock held). */
struct page *page_new_medium(struct heap *heap, size_t size);
/* Grows a medium page in place to hold `size`, when the slices after it
 * are free; false if they are not (heap lock held, the page's owner). */
bool page_grow_medium(struct heap *heap, struct page *page, size_t size);
/* Of a medium page's OS pages up to its block's first `length` bytes,
 * which the caller is about to write whole, those not yet touched: their
 * start in *from and their bytes (0: all may be resident), counted as
 * touched from now, the caller populating them, outside the lock (heap
 * lock held, the page's owner). */
size_t page_medium_claim(struct page *page, size_t length, char **from);
/* Gives an empty page's slices back to its segment (heap lock held, or the
 * heap's thread exiting); the segment stays, even when it empties. */
void page_release(struct heap *heap, struct page *page);
/* Every segment of the list names `owner_word` as its owner from now (a
 * heap parked or taken again: heap lock held). */
void segments_set_owner(struct segment *list, uintptr_t owner_word);
/* Empty segments whose slices have all been purged go back to the cache or
 * the OS, all but the heap's last (heap lock held). */
void heap_release_empty_segments(struct heap *heap);
/* Carves more blocks into the page's free list; false when it is full. */
bool page_extend(struct page *page);
/* An emptied page that stays its class's current page starts again from
 * its first block: nothing carved, so that its blocks are handed out in
 * address order again rather than in the order they were freed (heap lock
 * held; no block of the page out, in a bin or on its remote list). Its
 * free list is checked first. Not in checked mode, whose hand-outs check
 * each block a page's list gives back (a write after free there is found
 * when the block is handed out again, where carving would write over it). */
void page_restart(struct page *page);
/* An exiting heap's segments: empty ones go back, the others are abandoned
 * to the frees of other threads. */
void heap_segments_abandon(struct heap *heap);
/* Frees a block of an abandoned segment; its page and segment go back when
 * they empty. Reports a double free of the page's last freed block. False
 * when a heap has adopted the segment since the caller read its owner: the
 * caller frees the block again, to that heap. */
bool abandoned_free_block(struct page *page, struct block *block);
/* Moves an abandoned segment (none with a purge in flight) to the heap,
 * which then owns its pages and blocks, and its free slices not yet
 * purged; NULL when there is none (heap lock held). The caller lists its
 * pages (heap_adopt_pages). */
struct segment *abandoned_adopt(struct heap *heap);
/* The purger's round: purges the abandoned segments' free slices that
 * were not purged at the last round (`all`: every one), releasing the
 * segments that are then empty; whether slices are left for a later round.
 * Call with no lock held. */
bool abandoned_purge_aged(bool all);
/* Calls fn on every abandoned segment, under the abandoned lock. */
void abandoned_for_each(void (*fn)(const struct segment *, void *), void *arg);
/* Unmaps every cached empty segment now. */
void segment_cache_release(void);
/* Bytes each leaf of the segment map (layout.h) is mapped with: mapped
 * when segments first reach its range of addresses, kept for good. */
size_t segment_map_leaf_bytes(void);
const char *segment_check(const struct segment *segment, uintptr_t owner_word);
void segment_lock_all(void);
void segment_unlock_all(void);
void segment_fork_child(void);

/* ---- large.c: blocks mapped directly ------------------------------------ */
/* A large block of `size` bytes (`zero`: zeroed, as calloc's); NULL with
 * errno = ENOMEM when no memory is to be had. */
void *large_alloc(size_t size, size_t alignment, bool zero);
/* Frees `p` if it is a live large block; false if it is not one. */
bool large_free(void *p);
/* The heap profiler's record of a large block just allocated for a sample
 * (profile_sample_keep's copy, alloc.c): dropped (profile_sample_drop)
 * when the block is freed or reallocated. */
void large_attach_sample(void *p, struct profile_sample *sample);
/* Whether `p` is one of the large blocks freed last (its address not
 * taken again since): a second free of it is a double free. */
bool large_was_freed(const void *p);
/* Usable size of a live large block, 0 if `p` is not one. */
size_t large_usable_size(const void *p);
/* Resizes a live large block with mremap; NULL with errno set on failure. */
void *large_realloc(void *p, size_t size);
/* Unmaps every cached large mapping now. */
void large_cache_release(void);
/* Unmaps the cached large mappings unused for two purge delays; how many
 * are still cached. */
size_t large_cache_expire_now(void);
/* Live large blocks and their usable bytes; adds cached mappings to *cached. */
void large_stats(size_t *blocks, size_t *bytes, size_t *cached);
void large_lock_all(void);
void large_unlock_all(void);
void large_fork_child(void);

/* ---- free.c ----------------------------------------------------------- */
/* Every free the inline path does not finish, of a pointer anywhere (NULL,
 * a segment's block, a large block, a foreign pointer): alloc.c's
 * free_slow. (free_segment_slow takes a segment's blocks, other threads'
 * ones, checked mode's and medium ones, to heap_free_block itself.) */
void free_any(void *p);
/* The secure flavour: a validated block of `slot` bytes, zeroed, that the
 * thread (heap) freed waits in its quarantine, and the oldest blocks leave
 * it for real frees (checked first) once it holds too many; at once when
 * the thread has no heap. own_class: the block's class when it is a carved
 * block of the heap's own pages, else CLASS_NONE. */
void quarantine_put(struct heap *heap, void *p, size_t slot, unsigned own_class);
/* Every block in the heap's quarantine is freed for real (its thread exits,
 * or trims). */
void quarantine_drain(struct heap *heap);

/* ---- stats.c ---------------------------------------------------------- */
/* Prints the statistics at exit when STRATA_SHOW_STATS asks, appends
 * them to STRATA_STATS_FILE when it names one. */
void stats_init(void);
/* Appends one sample (time, resident and allocated memory) to
 * STRATA_STATS_FILE: the purger thread's, every STRATA_SAMPLE_MS. */
void stats_sample(void);

#endif /* STRATA_CORE_H */
