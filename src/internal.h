/* internal.h: strata's internal types, constants and prototypes (grouped by
 * the file that defines them), plus the inline allocation and free fast
 * paths. Never included by the public header. */
#ifndef STRATA_INTERNAL_H
#define STRATA_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include "platform.h"

/* ---- Layout constants ---------------------------------------------------
 * A segment is SEGMENT_SIZE bytes aligned to SEGMENT_SIZE, cut into slices of
 * SLICE_SIZE; slice 0 holds the segment header. A page is a run of slices
 * carved into blocks of one size class. */
#define SEGMENT_SHIFT 22
#define SEGMENT_SIZE ((size_t)1 << SEGMENT_SHIFT)
#define SEGMENT_MASK (SEGMENT_SIZE - 1)
#define SLICE_SHIFT 16
#define SLICE_SIZE ((size_t)1 << SLICE_SHIFT)
#define SLICES_PER_SEGMENT (SEGMENT_SIZE / SLICE_SIZE)

#define CLASS_COUNT 96                    /* 8..64 by 8, then 8 per doubling */
#define SMALL_MAX ((size_t)128 * 1024)   /* largest class; above: mapped */
#define DIRECT_MAX ((size_t)1024)         /* sizes served by the direct table */
#define DIRECT_COUNT (DIRECT_MAX / 8 + 1)

/* Free slices stay resident for reuse until they have been unused for
 * between one and two purge delays (STRATA_PURGE_DELAY_MS, 10 ms by
 * default: purge_delay_ns); past HEAP_DIRTY_LIMIT slices a heap purges at
 * once. A heap holding PURGER_WANTED_SLICES free slices starts the purger
 * thread (STRATA_BACKGROUND_PURGE=2). */
#define HEAP_DIRTY_LIMIT 512
#define PURGER_WANTED_SLICES 64
/* Empty, purged segments kept mapped process-wide to avoid mmap churn. */
#define SEGMENT_CACHE_MAX 4

/* Owner word of a segment: a heap pointer, optionally tagged in checked mode
 * so that the inline local-free comparison never matches, or
 * OWNER_ABANDONED once its heap's thread has exited. */
#define OWNER_CHECK_TAG ((uintptr_t)1)
#define OWNER_ABANDONED ((uintptr_t)2)
#define OWNER_NONE ((uintptr_t)3) /* the empty heap's word: matches no segment */

/* class_of_slice of a slice that holds no page: its bin never has room, so a
 * free there takes the slow path, which reports it. */
#define CLASS_NONE CLASS_COUNT
/* A thread's cache keeps at most this many bytes of free blocks per class,
 * and at least BIN_MIN_BLOCKS blocks. */
#define BIN_BYTES ((size_t)32 * 1024)
#define BIN_MIN_BLOCKS 4
#define BIN_MAX_BLOCKS 256

/* The remote-free list of a heap whose thread is gone. */
#define REMOTE_CLOSED ((struct block *)(uintptr_t)1)

struct block {
    struct block *next;
};

struct heap;

struct page {
    struct block *free;       /* blocks ready to hand out */
    uint32_t used;            /* blocks handed out and not yet freed locally */
    uint32_t capacity;        /* blocks carved so far */
    uint32_t reserved;        /* blocks that fit in the page */
    uint32_t block_size;
    uint8_t class_index;
    uint8_t slice_count;
    uint8_t in_use;           /* 1 while the page holds a size class */
    uint8_t listed;           /* 1 while on its class's available list */
    uint8_t fresh;            /* 1 when taken from purged or new slices */
    char *start;
    struct page *next, *prev; /* available list of its class */
};

struct segment {
    _Atomic uintptr_t owner;     /* heap | tag, or OWNER_ABANDONED */
    uint64_t free_mask;          /* slices not in a page */
    uint64_t dirty_mask;         /* free slices that may still be resident */
    uint64_t aging_mask;         /* dirty since the heap's last purge check */
    struct segment *next, *prev; /* owner heap's list, or the cache */
    uint32_t pages_in_use;
    /* The owner's line and this one are all that a local free reads. */
    _Alignas(64) uint8_t class_of_slice[SLICES_PER_SEGMENT];
    uint8_t page_of_slice[SLICES_PER_SEGMENT]; /* first slice of its page */
    _Alignas(64) struct page pages[SLICES_PER_SEGMENT]; /* valid at first slices */
};

/* A thread's cache of free blocks of one class, in front of the pages. */
struct bin {
    struct block *head;
    uint32_t count;
    uint32_t limit; /* 0 in checked mode: every call goes to the pages */
};

struct heap {
    struct bin bins[CLASS_COUNT + 1];  /* the last is CLASS_NONE's, never room */
    struct page *current[CLASS_COUNT]; /* the page bins refill from */
    struct page *available[CLASS_COUNT]; /* pages with free blocks */
    /* Blocks freed by other threads: on a line of its own, which those
     * threads write, so the owner's other fields do not bounce with it. */
    _Alignas(64) _Atomic(struct block *) remote;
    _Alignas(64) struct segment *segments;
    size_t dirty_slices;
    uint64_t purge_epoch;                /* time of the last purge check */
    struct heap *next_free;              /* the heap pool's free list */
    struct heap *next_live, *prev_live;  /* heaps with a thread (pool_lock) */
    uintptr_t owner_word;                /* what this heap writes as owner */
    long unpublished;                    /* stats_bytes_out not yet published */
    /* Guards the heap's segments (their list, slice masks, dirty counts):
     * held by the owner while it takes or releases a page, and by the purger
     * and statistics from other threads. Bins and page free lists are the
     * owner's alone and never need it. */
    pthread_mutex_t lock;
};

/* ---- os.c: every system call ------------------------------------------ */
/* The page size, read once (inline: large realloc asks it at every step). */
extern size_t os_page_bytes;
size_t os_page_size_slow(void);
static inline size_t os_page_size(void)
{
    size_t bytes = os_page_bytes;
    return likely(bytes != 0) ? bytes : os_page_size_slow();
}
/* Maps `size` bytes (page multiple) of fresh zeroed memory; NULL on failure. */
void *os_map(size_t size);
/* Maps `size` bytes aligned to `alignment` (power of two >= page size). */
void *os_map_aligned(size_t size, size_t alignment);
void os_unmap(void *addr, size_t size);
/* Gives the pages back to the OS; their contents read as zero afterwards. */
void os_purge(void *addr, size_t size);
/* Asks for transparent huge pages on the range, or for none. */
void os_huge_pages(void *addr, size_t size, bool wanted);
/* Faults the pages in now, in one call rather than one trap per page. */
void os_populate(void *addr, size_t size);
/* Resizes a mapping, moving it if needed; NULL on failure. */
void *os_remap(void *addr, size_t old_size, size_t new_size);
void os_write_stderr(const char *text, size_t length);
_Noreturn void os_abort(void);
/* Number of os_map/os_map_aligned calls so far (for white-box tests). */
size_t os_map_count(void);
/* Bytes strata holds mapped now (resident or not). */
size_t os_mapped_bytes(void);
/* Bytes given back with madvise or munmap so far. */
size_t os_purged_bytes(void);
/* Monotonic time in nanoseconds (a vDSO call, no system call). */
uint64_t os_now_ns(void);

/* ---- options.c -------------------------------------------------------- */
struct options {
    long purge_delay_ms;   /* STRATA_PURGE_DELAY_MS */
    long background_purge; /* STRATA_BACKGROUND_PURGE: 0 never, 1 always, 2 auto */
    long limit_mb;         /* STRATA_LIMIT_MB, 0: none */
    bool check;            /* STRATA_CHECK: validate every free, abort on misuse */
    bool verbose;          /* STRATA_VERBOSE */
    bool show_stats;       /* STRATA_SHOW_STATS */
    bool thp;              /* STRATA_THP */
};
extern struct options strata_options;
void options_init(void);
size_t options_count(void);
/* The i-th option's name, value in force and documentation line. */
const char *options_describe(size_t i, long *value, const char **doc);

/* ---- report.c --------------------------------------------------------- */
_Noreturn void report_fatal(const char *what, const void *address);
void report_warning(const char *what, const void *address);

/* ---- sizeclass.c ------------------------------------------------------ */
extern uint32_t class_size[CLASS_COUNT];
extern uint8_t class_of_direct[DIRECT_COUNT];
void sizeclass_init(void);
size_t class_slices(unsigned class_index);

static inline unsigned size_class(size_t size)
{
    if (size <= 64)
        return size <= 8 ? 0 : (unsigned)((size - 1) >> 3);
    unsigned top = 63 - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
    unsigned step_shift = top - 3;
    unsigned within = (unsigned)(((size - 1) >> step_shift) & 7);
    return 8 + (top - 6) * 8 + within;
}

/* ---- segment.c: segments, the segment map, pages ----------------------- */
#define SEGMENT_MAP_LENGTH ((size_t)1 << (47 - SEGMENT_SHIFT))
/* A byte per SEGMENT_SIZE region of the 47-bit address space, in .bss: its
 * untouched pages cost no memory, and it is valid before initialisation. */
extern _Atomic(uint8_t) segment_map[SEGMENT_MAP_LENGTH];

static inline struct segment *segment_of(const void *p)
{
    return (struct segment *)((uintptr_t)p & ~(uintptr_t)SEGMENT_MASK);
}

static inline bool is_segment_pointer(const void *p)
{
    uintptr_t index = (uintptr_t)p >> SEGMENT_SHIFT;
    return index < SEGMENT_MAP_LENGTH &&
           atomic_load_explicit(&segment_map[index], memory_order_relaxed);
}

static inline unsigned slice_of(const void *p)
{
    return (unsigned)(((uintptr_t)p & SEGMENT_MASK) >> SLICE_SHIFT);
}

static inline struct page *page_of(struct segment *segment, const void *p)
{
    return &segment->pages[segment->page_of_slice[slice_of(p)]];
}

struct page *page_new(struct heap *heap, unsigned class_index);
void page_release(struct heap *heap, struct page *page);
/* Carves more blocks into the page's free list; false when it is full. */
bool page_extend(struct page *page);
void segment_release_to_os(struct segment *segment);
/* Releases an emptied page of an abandoned segment (caller holds the
 * abandoned lock); true when the segment is now empty and unmapped. */
bool abandoned_page_release(struct page *page);
void heap_segments_abandon(struct heap *heap);
/* Segments of exited threads that still hold blocks (abandoned lock). */
extern struct segment *abandoned_segments;
/* Bytes handed out of pages (live blocks and thread caches) and of large
 * blocks, kept by the slow paths; its highest value is the stats' peak. */
void stats_bytes_out(long delta);
void stats_init(void);
/* Publishes what an exiting heap gathered. */
void stats_heap_retire(struct heap *heap);
/* Live large blocks and their usable bytes; adds cached mappings to *cached. */
void large_stats(size_t *blocks, size_t *bytes, size_t *cached);

void segment_fork_child(void);
/* Unmaps every cached empty segment now. */
void segment_cache_release(void);
void segment_lock_all(void);
void segment_unlock_all(void);

/* ---- purge.c: giving free slices back to the OS ------------------------ */
void purge_slices(struct segment *segment, uint64_t slices);
void segment_purge_dirty(struct segment *segment);
extern uint64_t purge_delay_ns;
/* Purges every dirty slice of the heap now. */
void heap_purge_dirty(struct heap *heap);
/* Purges the slices that have stayed free since the last check, when one
 * delay has passed since it, or everything past the dirty limit. */
void heap_maybe_purge(struct heap *heap);
/* Purges the slices that have stayed free since the last check (heap lock
 * held); the purger thread's step for one heap. */
void heap_purge_aged(struct heap *heap);
/* Starts the purger thread if a heap asked for it; call with no lock held. */
void purger_start_if_wanted(void);
void purger_fork_child(void);

/* ---- heap.c: thread heaps --------------------------------------------- */
extern struct heap heap_empty;
extern struct page page_empty;
extern STRATA_TLS struct heap *thread_heap;

void *heap_alloc_slow(struct heap *heap, size_t size);
/* Takes the block for a class whose bin is empty: refills the bin. */
void *heap_bin_refill(struct heap *heap, unsigned class_index);
/* Returns half of a full bin's blocks to their pages. */
void heap_bin_flush(struct heap *heap, struct bin *bin);
/* Returns a block to its page, in the heap that owns it. */
void page_free_block(struct heap *heap, struct page *page, struct block *block);
/* Allocates a block of the class from the calling thread's heap. */
void *heap_alloc_class(unsigned class_index);
void heap_collect_remote(struct heap *heap);
/* Counts broken invariants of a heap (bins, pages, segments): 0 when sound.
 * Call it from the heap's own thread; it takes the heap's lock. */
size_t heap_check(struct heap *heap);
void heap_fork_child(void);
/* Calls fn on every heap with a thread, holding pool_lock and (with
 * `try_only`, if free) the heap's lock; skips busy heaps when `try_only`. */
void heap_for_each_live(void (*fn)(struct heap *, void *), void *arg, bool try_only);
/* Returns the caller's cached blocks and empty pages, then purges. */
void heap_trim_own(void);
void heap_lock_all(void);
void heap_unlock_all(void);
void strata_init(void);

/* ---- free.c ----------------------------------------------------------- */
void free_slow(void *p);
/* Frees a block already validated, from whichever thread calls it. */
void free_redispatch(void *p);
/* Frees a block taken from `heap`'s remote list. */
void free_collected(struct heap *heap, struct block *block);
void free_abandoned(struct page *page, struct block *block);
void free_fork_child(void);
void free_lock_all(void);
void free_unlock_all(void);

/* ---- large.c: blocks mapped directly ------------------------------------ */
void *large_alloc(size_t size, size_t alignment);
/* A zeroed large block (calloc). */
void *large_calloc(size_t size);
/* Frees `p` if it is a live large block; false if it is not one. */
bool large_free(void *p);
/* Usable size of a live large block, 0 if `p` is not one. */
size_t large_usable_size(const void *p);
/* Resizes a live large block with mremap; NULL with errno set on failure. */
void *large_realloc(void *p, size_t size);
void large_fork_child(void);
/* Unmaps every cached large mapping now. */
void large_cache_release(void);
/* Unmaps the cached large mappings unused for two purge delays. */
void large_cache_expire_now(void);
void large_lock_all(void);
void large_unlock_all(void);

/* context.c (white-box checks for the tests) */
/* The first broken invariant in p's subtree, or NULL when it is sound. */
const char *ctx_check(const void *p);
size_t ctx_pool_chunks(const void *pool); /* live chunks carved from it */
size_t ctx_pool_used(const void *pool);   /* bytes below its cursor */

/* ---- inline fast paths ------------------------------------------------- */
/* The usable size of a block in a segment, 0 when its page holds no class
 * (inline: realloc asks it at every step of a string grown in place). */
static inline size_t small_usable_size(const void *p)
{
    struct page *page = page_of(segment_of(p), p);
    return page->in_use ? page->block_size : 0;
}

static inline void *block_pop(struct page *page)
{
    struct block *block = page->free;
    page->free = block->next;
    page->used++;
    return block;
}

/* A block from the thread's bin for `size` (at most SMALL_MAX), or NULL
 * when the bin is empty; never calls out, so callers stay leaf functions. */
static inline void *bin_try_pop(size_t size)
{
    struct heap *heap = thread_heap;
    unsigned c = size <= DIRECT_MAX ? class_of_direct[(size + 7) >> 3] : size_class(size);
    struct bin *bin = &heap->bins[c];
    struct block *block = bin->head;
    if (likely(block != NULL)) {
        bin->head = block->next;
        bin->count--;
    }
    return block;
}

static inline void *alloc_inline(size_t size)
{
    if (likely(size <= SMALL_MAX)) {
        void *block = bin_try_pop(size);
        if (likely(block != NULL))
            return block;
    }
    return heap_alloc_slow(thread_heap, size);
}

static inline void free_inline(void *p)
{
    if (likely(is_segment_pointer(p))) {
        struct segment *segment = segment_of(p);
        struct heap *heap = thread_heap;
        if (likely(atomic_load_explicit(&segment->owner, memory_order_relaxed) ==
                   (uintptr_t)heap)) {
            struct bin *bin = &heap->bins[segment->class_of_slice[slice_of(p)]];
            struct block *block = p;
            if (unlikely(block == bin->head))
                report_fatal("double free", p);
            block->next = bin->head;
            bin->head = block;
            if (likely(++bin->count <= bin->limit))
                return;
            heap_bin_flush(heap, bin);
            return;
        }
    }
    free_slow(p);
}

#endif /* STRATA_INTERNAL_H */
