/* layout.h: how strata's memory is laid out, shared by the core and by the
 * thread heaps above them: the geometry of segments, slices and pages, the
 * encoding of free blocks, the structures of segments and pages, and the
 * pure lookups from a pointer to its segment and page. It declares no
 * function of any layer; the thread heap's structure (its bins, pages and
 * remote stack) is heap.h's. */
#ifndef STRATA_LAYOUT_H
#define STRATA_LAYOUT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "options.h"
#include "os.h"
#include "platform.h"
#include "report.h"
#include "sizeclass.h"

/* ---- Geometry -----------------------------------------------------------
 * A segment is SEGMENT_SIZE bytes aligned to SEGMENT_SIZE, cut into slices of
 * SLICE_SIZE; slice 0 holds the segment header (and in the secure flavour
 * slices 1..STATE_SLICES its block states, below). A page is a run of
 * slices carved into blocks of one size class. */
#define SEGMENT_SHIFT 22
#define SEGMENT_SIZE ((size_t)1 << SEGMENT_SHIFT)
#define SEGMENT_MASK (SEGMENT_SIZE - 1)
#define SLICE_SHIFT 16
#define SLICE_SIZE ((size_t)1 << SLICE_SHIFT)
#define SLICES_PER_SEGMENT (SEGMENT_SIZE / SLICE_SIZE)
/* The span of a transparent huge page on x86-64 and arm64 with 4 KiB
 * pages: a segment holds whole ones, aligned as it is. */
#define HUGE_RANGE_SIZE ((size_t)2 << 20)
#define SLICES_PER_HUGE_RANGE (HUGE_RANGE_SIZE / SLICE_SIZE)
#define HUGE_RANGES_PER_SEGMENT (SEGMENT_SIZE / HUGE_RANGE_SIZE)
_Static_assert(SEGMENT_SIZE % HUGE_RANGE_SIZE == 0 && HUGE_RANGES_PER_SEGMENT <= 8,
               "a segment holds whole huge pages, a bit each in a byte");

_Static_assert(SLICES_PER_SEGMENT == 64, "a segment's slices are the bits of one uint64_t mask");
_Static_assert(SMALL_MAX * 4 <= (SLICES_PER_SEGMENT - 1) * SLICE_SIZE,
               "a page of the largest class (4 blocks) fits beside the header");

/* Free slices stay resident for reuse until they have been unused for
 * between one and two purge delays (STRATA_PURGE_DELAY_MS, 10 ms by
 * default); past HEAP_DIRTY_LIMIT slices a heap purges at once. A heap
 * holding PURGER_WANTED_SLICES free slices (4 MiB) asks for the purger
 * thread (STRATA_BACKGROUND_PURGE=2). */
#define HEAP_DIRTY_LIMIT 512
/* With the purger thread running, a heap past its limit hands the purge
 * to it and goes on (purge_policy.c), up to this many free slices (256
 * MiB, above the most stretched limit): then it purges itself. */
#define HANDED_DIRTY_MAX (8 * HEAP_DIRTY_LIMIT)
/* A heap whose purged slices its pages take back within the longest delay
 * (the option's << PURGE_STRETCH_MAX) of their purge, PURGE_RETAKEN_MIN of
 * them and an eighth of what it purged lately, doubles its delay, up to
 * that longest; PURGE_CALM_CHECKS purge checks in a row that purged and
 * saw nothing taken back halve it again (purge_policy.c). */
#define PURGE_STRETCH_MAX 5
/* The dirty limit stretches with the delay, by at most this many doublings
 * (128 MiB of free slices). */
#define PURGE_LIMIT_STRETCH_MAX 2
#define PURGE_RETAKEN_MIN 4
#define PURGE_CALM_CHECKS 8
#define PURGER_WANTED_SLICES 64
/* A heap parked at thread exit keeps up to this many free slices (1 MiB)
 * resident for the next thread; one holding more purges them all first, so
 * that what a program frees before its threads exit goes back at once. */
#define PARK_DIRTY_SLICES 16
/* Empty, purged segments kept mapped process-wide to avoid mmap churn. */
#define SEGMENT_CACHE_MAX 4

/* Owner word of a segment: a heap pointer, optionally tagged in checked mode
 * so that the inline local-free comparison never matches, and while the
 * heap is parked (its thread gone, no other yet) so that no thread keeps
 * its blocks in a bin, where they would hold its pages when no thread of
 * its own will ever flush them; or OWNER_ABANDONED once its heap is given
 * up. */
#define OWNER_CHECK_TAG ((uintptr_t)1)
#define OWNER_PARKED_TAG ((uintptr_t)4)
_Static_assert(CACHE_LINE > 4, "a heap's address leaves the tags' bits and OWNER_ABANDONED's clear");
#define OWNER_TAGS (OWNER_CHECK_TAG | OWNER_PARKED_TAG)
#define OWNER_ABANDONED ((uintptr_t)2)
#define OWNER_NONE ((uintptr_t)3) /* the empty heap's word: matches no segment */

/* The class of a slice that holds no page. */
#define CLASS_NONE CLASS_COUNT
/* Medium blocks, above SMALL_MAX and up to MEDIUM_MAX: each is a page of its
 * own, of just enough slices, taken from the heap's segments like any page
 * and given back to them when freed, so that a loop of medium blocks makes
 * no system call and faults no page once its slices are resident. Their
 * slices are of class CLASS_MEDIUM, whose multiplier and key are 0: every
 * free of one leaves the inline path for free_segment_slow.
 * The block lies MEDIUM_HEAD bytes into its page: the word before it is its
 * guard, and the MEDIUM_TAIL bytes after its usable size (the size asked,
 * rounded up to 16: page->block_size) begin with its canary, both keyed by
 * its address (block_guards.h, medium_guards_set). Every free of the block
 * and every growth in place checks both (segment.c), so that a write just
 * before it or past its end is reported, as glibc's chunk headers have it
 * reported; only the OS pages the block and its two words reach are
 * touched and charged, so a size of whole slices, which takes one slice
 * more, costs a page of memory, not a slice. */
#define CLASS_MEDIUM (CLASS_COUNT + 1)
#define MEDIUM_HEAD 16
#define MEDIUM_TAIL 16
#define MEDIUM_MAX_SLICES 60
#define MEDIUM_MAX ((size_t)MEDIUM_MAX_SLICES * SLICE_SIZE - MEDIUM_HEAD - MEDIUM_TAIL)
_Static_assert(MEDIUM_MAX_SLICES < SLICES_PER_SEGMENT, "a medium page fits a segment beside its header");
/* (The secure flavour, whose block states leave pages 47 slices, makes no
 * medium page: page_new_medium asserts it.) */
/* A page is carved into its free list about this many bytes at a time, or
 * PAGE_CARVE_MIN_BLOCKS blocks (what a bin refill wants at least, heap.h)
 * up to PAGE_CARVE_MAX_BYTES, or one block (segment.c, carve_bytes): what
 * is carved counts against the memory limit (os.h), so bigger blocks are
 * carved a few at a time. */
#define PAGE_CARVE_BYTES 4096
#define PAGE_CARVE_MIN_BLOCKS 4
/* A small page's blocks start after a lead whose last word is the guard of
 * the page's first block (block_guards.h, guard_set), so that every block,
 * the first included, has its guard word in its own page (the word below a
 * page lies in whatever is below it: a closed or purged slice, another
 * page's block, the segment's header). For a class whose slot is a power
 * of two, up to PAGE_LEAD_SLOT_MAX bytes the lead is a slot, so its blocks
 * are aligned to their size (api.c, aligned allocations), and above, the
 * same PAGE_LEAD_SLOT_MAX bytes, so they are aligned to an OS page: an
 * aligned request of up to 128 KiB takes such a class rather than a
 * mapping of its own (posix_memalign(4096, 8192) and its free, 120 ns
 * through the mapping cache). Their lead's OS page is resident for the
 * guard word alone (a slot lead above 4 KiB for every class made the
 * partly written threads table's peak 95.7 against 92.3 MB; for the
 * powers of two alone it costs no block, a page of 8 KiB blocks holding
 * 7 after either lead). PAGE_LEAD_BIG bytes for the rest above 4 KiB
 * that no lead puts beside their guard (the 4112-byte class: 64-aligned,
 * the first block's guard and head in one OS page). For any other slot
 * that is a multiple of 32 bytes,
 * PAGE_LEAD_IN_LINE bytes: every block then starts 16 or 48 bytes into a
 * cache line, beside its guard word, so that a free, which reads both,
 * fetches one cold line and not two (a block at a line's start has its
 * guard in the line before: the threads table's last-level read misses
 * 2.20 M -> 1.42 M a million replacements). The other slots (16-byte
 * multiples that are not 32-byte ones) start blocks at every offset in a
 * line whatever the lead, and keep a slot's. The slice keeps the lead
 * (struct slice, lead). */
#define PAGE_LEAD_SLOT_MAX 4096u
#define PAGE_LEAD_BIG 64u
#define PAGE_LEAD_IN_LINE 16u
#define PAGE_CARVE_MAX_BYTES 16384

/* A free block, on any list (a bin, a page's free list, a remote list):
 * its first word is the link to the next, encoded with one secret; its
 * second checks the first against the block's own address with another.
 * Only block_set_next writes them, and block_next follows a link only when
 * the two agree, which a write after free (or a forged link) cannot arrange
 * without the secrets: it is reported before its pointer is used. Handing
 * a block out clears the second word (block_take), so a free that finds a
 * free block's two words is a double free, reported at that free (bins.h,
 * bin_push), and a list that reaches a block twice reports it too.
 * Whatever a program writes into its blocks passes for a free block only
 * if its first two words xor to the block's address xor the second
 * secret: never, but by a chance of 2^-64. (With one secret, or none in
 * the check, a program that wrote a byte of the first word, or a small
 * number into the second, would pass now and then.) */
struct block {
    uintptr_t link;
    uintptr_t check;
};

/* (The secrets, block_secret, are made at start-up: options.h.) */

/* The link, unchecked. */
static inline struct block *block_link(const struct block *b)
{
    return (struct block *)(b->link ^ block_secret.link);
}

/* 0 for a free block. Grouped as block_set_next groups its words, so that
 * a free's test and its new check word share the address's xor with the
 * secret. */
static inline uintptr_t block_tag(const struct block *b)
{
    return (b->link ^ b->check) ^ ((uintptr_t)b ^ block_secret.check);
}

/* Free on any list: a bin, a page's free list, a page's remote list. */
static inline bool block_is_free(const struct block *b)
{
    return block_tag(b) == 0;
}

static inline bool is_segment_pointer(const void *p);

/* The next block of a list. The secure flavour also follows no link out of
 * strata's segments, should the secrets ever leak. */
static inline struct block *block_next(const struct block *b)
{
    if (unlikely(block_tag(b) != 0))
        report_fatal("double free or write after free", b);
    struct block *next = block_link(b);
    if (STRATA_SECURE_BUILD && unlikely(next != NULL && !is_segment_pointer(next)))
        report_fatal("a free list's link leads out of strata's memory (a forged link)", b);
    return next;
}

static inline void block_set_next(struct block *b, const struct block *next)
{
    uintptr_t link = (uintptr_t)next ^ block_secret.link;
    b->link = link;
    b->check = link ^ ((uintptr_t)b ^ block_secret.check);
}

/* The block leaves the free lists for its caller. */
static inline void block_take(struct block *b)
{
    b->check = 0;
}

/* The default flavour's guard word before a small block: the last word of
 * the slot below it (SMALL_GUARD_BYTES, which no block's usable size
 * covers), its address keyed with a secret. The carve writes it (segment.c,
 * guard_set) and nothing but the heap profiler (a sample's mark, below,
 * written back at its free) writes it again while the page is in use, so
 * a write below a block's start (an underflow, or an overflow of the block
 * below past its usable size) changes it, and the block's free reports it.
 * A page's first block's lies in the page's lead (page_lead). The secure
 * flavour keys its own (block_guards.h). */
static inline uintptr_t small_guard_word(const void *p)
{
    return (uintptr_t)p ^ block_secret.guard;
}

/* The guard word below p as it is, read by the thread that holds the
 * block (no other writes it meanwhile), and written. The write is atomic
 * (a plain move): a sample's mark is written and written back by
 * whichever thread allocates or frees the block while its page's owner
 * may read every guard word (segment.c, heap_check's guard_word_sound,
 * which reads with acquire what is written with release, to see the
 * record a mark names). */
static inline uintptr_t small_guard_read(const void *p)
{
    uintptr_t word;
    memcpy(&word, (const char *)p - sizeof word, sizeof word);
    return word;
}

static inline void small_guard_write(void *p, uintptr_t word)
{
    __atomic_store_n((uintptr_t *)((char *)p - sizeof word), word, __ATOMIC_RELEASE);
}

static inline bool small_guard_intact(const void *p)
{
    return small_guard_read(p) == small_guard_word(p);
}

/* A block the heap profiler samples keeps its guard word's place for a
 * mark: its record's address keyed with a secret of its own (profile.c,
 * profile_sample_mark), so that the free's guard check, which fails, sends
 * it to the slow path that releases the record and writes the guard word
 * back (release_sample_or_report_guard); the inline paths know nothing of
 * samples. small_guard_named is the address a guard word would name were
 * it a mark; small_guard_marked, the word below p's. */
static inline uintptr_t small_guard_mark(const void *record)
{
    return (uintptr_t)record ^ block_secret.sampled;
}

static inline uintptr_t small_guard_named(uintptr_t word)
{
    return word ^ block_secret.sampled;
}

static inline uintptr_t small_guard_marked(const void *p)
{
    return small_guard_named(small_guard_read(p));
}

/* A count its owner alone changes and statistics read from other threads
 * (a bin's count, a page's used blocks): the owner writes it with this,
 * readers load it relaxed, so that no one reads a torn value and the
 * figures are approximate only while the owner runs. A plain store on the
 * machines strata runs on. */
static STRATA_ALWAYS_INLINE void counter_set(uint32_t *counter, uint32_t value)
{
    __atomic_store_n(counter, value, __ATOMIC_RELAXED);
}

struct heap;

/* Invariants (page_check): used <= capacity <= reserved; the free list holds
 * capacity - used blocks, each the start of a carved block of the page. */
struct page {
    struct block *free;       /* blocks ready to hand out */
    uint32_t used;            /* blocks handed out and not yet freed locally */
    uint32_t capacity;        /* blocks carved so far */
    uint16_t reserved;        /* blocks that fit in the page (at most 4096) */
    /* 1: each carve populates its blocks whole, not only their heads
     * (pages.c, "pages written whole"). */
    uint8_t populate_whole;
    uint32_t block_size;
    uint8_t class_index;
    uint8_t slice_count;
    uint8_t in_use;           /* 1 while the page holds a size class */
    uint8_t listed;           /* 1 while on its class's available list */
    /* Bytes from the start that may be resident, a multiple of the OS
     * page (PAGE_TOUCHED_ALL: all, the page's slices having come dirty):
     * the carve makes what it writes past them resident in one call
     * (segment.c, carve_populate). */
    uint32_t touched;
    char *start;
    struct page *next, *prev; /* available list of its class */
    /* Blocks other threads freed (bins.c, remote frees; their list's word
     * is the segment's, page_remote_word): the oldest, written by the free
     * that found the list empty, so the owner splices the list whole; and
     * the link in the owner's stack of pages with such blocks, which the
     * page joins when its list goes from empty. */
    struct block *remote_tail;
    struct page *remote_next;
};
#define PAGE_TOUCHED_ALL UINT32_MAX

/* The bytes a block of the page gives its program (what the statistics
 * count as allocated): a small block's slot short of its guard word, a
 * medium block's usable size. */
static inline size_t page_usable(const struct page *page)
{
    return page->class_index == CLASS_MEDIUM ? page->block_size : class_usable(page->class_index);
}

/* The lead of a small page of `block_size` blocks (PAGE_LEAD_SLOT_MAX). */
static inline uint32_t page_lead(size_t block_size)
{
    bool power_of_two = (block_size & (block_size - 1)) == 0;
    if (block_size % 32 == 0 && !power_of_two)
        return PAGE_LEAD_IN_LINE;
    if (block_size <= PAGE_LEAD_SLOT_MAX)
        return (uint32_t)block_size;
    return power_of_two ? PAGE_LEAD_SLOT_MAX : PAGE_LEAD_BIG;
}

/* Whether every block of class c is aligned to `alignment` (a power of
 * two): its size and its pages' lead are multiples of it. */
static inline bool class_aligned(unsigned c, size_t alignment)
{
    size_t low_bits = alignment - 1;
    return (class_size[c] & low_bits) == 0 && (page_lead(class_size[c]) & low_bits) == 0;
}

/* The first class from c on whose blocks are all aligned to `alignment` (a
 * power of two), or CLASS_COUNT when none is. No lead is a multiple of
 * more than PAGE_LEAD_SLOT_MAX, so no class has a larger alignment; below
 * it, every doubling of the classes holds a power of two, which has it, so
 * the scan ends within a doubling (a walk of every class with two
 * divisions each took 400 instructions). */
static inline unsigned class_aligned_from(unsigned c, size_t alignment)
{
    if (alignment > PAGE_LEAD_SLOT_MAX)
        return CLASS_COUNT;
    for (; c < CLASS_COUNT; c++)
        if (class_aligned(c, alignment))
            return c;
    return CLASS_COUNT;
}

/* Where a page's blocks begin: a small page's after its lead, a medium
 * page's at its start (its one block lies MEDIUM_HEAD bytes in, within its
 * block_size). */
static inline char *page_blocks(const struct page *page)
{
    return page->class_index == CLASS_MEDIUM ? page->start : page->start + page_lead(page->block_size);
}
_Static_assert(SLICE_SIZE / 16 <= UINT16_MAX, "a one-slice page's count of 16-byte blocks fits reserved");

/* A medium block's usable size for `size` bytes asked, the bytes of its
 * page it reaches (its guard and canary included), its slices, and the
 * block itself (layout.h, CLASS_MEDIUM). */
static inline size_t medium_usable(size_t size)
{
    return (size + 15) & ~(size_t)15;
}

static inline size_t medium_reach(size_t usable)
{
    return MEDIUM_HEAD + usable + MEDIUM_TAIL;
}

static inline size_t medium_slices(size_t usable)
{
    return (medium_reach(usable) + SLICE_SIZE - 1) / SLICE_SIZE;
}

static inline char *medium_block(const struct page *page)
{
    return page->start + MEDIUM_HEAD;
}

/* A page holds at most 4096 blocks (64 KiB of 16-byte ones): the count
 * fits, and user addresses are below 2^47. */
#define PAGE_REMOTE_SHIFT 48
#define PAGE_REMOTE_BLOCKS(v) ((uint32_t)((v) >> PAGE_REMOTE_SHIFT))
#define PAGE_REMOTE_HEAD(v) ((struct block *)((v) & (((uintptr_t)1 << PAGE_REMOTE_SHIFT) - 1)))

/* What a free needs of the slice it points into, four slices to a line. A
 * slice in no page has class CLASS_NONE, first block 0 (in the header's
 * page slot, never in use), multiplier 0 and carved key 0. */
struct slice {
    uint64_t multiplier; /* its class's (sizeclass.h) */
    /* The key of the first block the page has not carved (capacity block
     * keys) in the slices that carving has reached, 0 in those above: a
     * pointer whose key is below it is a block the page has handed out or
     * holds free. Written by the page's owner only, read by any thread
     * freeing a block of the page (slice_holds_block_any_thread). */
    uint32_t carved_key;
    /* Its page's first block (the page's start plus page_lead, less than a
     * slice past it) as an offset in the segment, shifted 8 bits, above its
     * class: one word, read once by a free for both (slice_first_block,
     * slice_class). */
    uint32_t placement;
};
_Static_assert(SEGMENT_SIZE <= (size_t)1 << 24 && PAGE_LEAD_SLOT_MAX < SLICE_SIZE,
               "a first block's offset fits 24 bits and lies in its page's first slice");

/* The placement of every slice of the page at `page_slice` of the class:
 * its first block after the lead a small page has (none otherwise). */
static inline uint32_t slice_placement(unsigned class_index, unsigned page_slice)
{
    uint32_t first_block = ((uint32_t)page_slice << SLICE_SHIFT) +
                           (class_index < CLASS_COUNT ? page_lead(class_size[class_index]) : 0);
    return first_block << 8 | class_index;
}

static inline unsigned slice_class(const struct slice *slice)
{
    return slice->placement & 0xffu;
}

static inline uint32_t slice_first_block(const struct slice *slice)
{
    return slice->placement >> 8;
}

/* The index of the first slice of the slice's page (of its page record). */
static inline unsigned slice_page_index(const struct slice *slice)
{
    return slice_first_block(slice) >> SLICE_SHIFT;
}

/* The offset in its page of a pointer at `offset` in the segment, in this
 * slice. */
static inline uint32_t slice_page_offset(const struct slice *slice, uint32_t offset)
{
    return offset - slice_first_block(slice);
}

/* The key of the pointer at `offset` in the segment, in this slice: i
 * times the class's block key for the page's block i, else no multiple of
 * it (sizeclass.h; an offset in the lead is far above any). */
static inline uint64_t slice_block_key(const struct slice *slice, uint32_t offset)
{
    return block_key(slice->multiplier, slice_page_offset(slice, offset));
}

/* Whether `in_page`, an offset in a page of the slice's small class, is the
 * start of one of the blocks the page holds, carved or not. */
static inline bool slice_block_start(const struct slice *slice, const struct page *page, uint32_t in_page)
{
    return block_key(slice->multiplier, in_page) < page->reserved * class_block_key[slice_class(slice)];
}

/* Whether the pointer at `offset` in the segment, in this slice, is the
 * start of a block its page has carved (asked by the page's owner, the
 * key's one writer). */
static inline bool slice_holds_block(const struct slice *slice, uint32_t offset)
{
    return slice_block_key(slice, offset) < slice->carved_key;
}

/* Whether a freed small block's guard word (small_guard_word) is
 * overwritten: every small block has one in its page. The default
 * flavour's; the secure flavour checks its own. */
static STRATA_ALWAYS_INLINE bool small_guard_broken(const void *p)
{
    return SMALL_GUARD_BYTES != 0 && !small_guard_intact(p);
}

/* The same, asked by any thread: by one the program handed the block, the
 * key's store by the carve is relaxed, as is this load, and the hand-out
 * orders them. (The owner's inline free reads the key plainly: an atomic
 * load costs it three instructions of address arithmetic.) */
static inline bool slice_holds_block_any_thread(const struct slice *slice, uint32_t offset)
{
    return slice_block_key(slice, offset) < __atomic_load_n(&slice->carved_key, __ATOMIC_RELAXED);
}

/* Invariants (segment_check): a slice is either in free_mask, in
 * taken_mask, or covered by exactly one in-use page, whose slices name it
 * and its class; slice 0 is
 * the header's (slices 0..STATE_SLICES in the secure flavour); dirty_mask
 * is a subset of free_mask and aging_mask of dirty_mask; pages_in_use
 * counts the in-use pages; a slice's charge covers what its page has
 * carved (all of a medium page), and the header's slices and free slices
 * not dirty have none; a page's touched bytes are all, or whole OS pages
 * within its slices; a segment is in the segment map exactly while it is
 * owned or abandoned. */
struct segment {
    _Atomic uintptr_t owner;     /* heap | tag, or OWNER_ABANDONED */
    uint64_t free_mask;          /* slices not in a page */
    uint64_t dirty_mask;         /* free slices that may still be resident */
    uint64_t aging_mask;         /* dirty since the heap's last purge check */
    /* Free slices the purge policy gave back since a page last took them,
     * and when it last did (purge_policy.c: memory taken back soon after its
     * purge stretches the heap's delay). A subset of free_mask. */
    uint64_t purged_mask;
    uint64_t purged_at;
    /* Free slices the purger took out of free_mask to purge them outside
     * the heap's lock (purge_policy.c, a purge handed over): no page takes
     * them and the segment stays until they come back, closed. */
    uint64_t taken_mask;
    struct segment *next, *prev; /* owner heap's list, the abandoned list, or the cache */
    uint32_t pages_in_use;
    /* Slices its pages have taken, and of those the ones of pages whose
     * carves are made resident whole (blocks of an OS page or less, or of
     * a class the heap writes whole: pages.c): whether the heap's next
     * segment is dense (segment.c, "dense segments"; counted with
     * STRATA_THP=2 only, 0 otherwise). */
    uint16_t slices_taken, slices_taken_whole;
    /* A dense segment's huge ranges not made resident yet, a bit each
     * (their slices free and closed), and of those the ones never
     * touched. */
    uint8_t dense_pending, dense_fresh;
    uint32_t purging;            /* abandoned: purges running outside the lock */
    /* The secure flavour's OS pages of block states opened (segment.c,
     * "closed slices"), a bit each; a page of the region may be open with
     * its bit clear, never closed with it set. */
    uint64_t states_open[4];
    /* One line of these is all of the header a local free reads (the owner
     * word too, when the segment is not among the heap's own segments). */
    _Alignas(CACHE_LINE) struct slice slices[SLICES_PER_SEGMENT];
    _Alignas(CACHE_LINE) struct page pages[SLICES_PER_SEGMENT]; /* valid at first slices */
    /* Each page's remote list (bins.c): the newest block's address, with
     * the list's count in the top 16 bits. Apart from the pages, whose
     * lines their owner writes at every refill, so that the other threads'
     * compare-and-swaps do not take those lines from it. */
    _Alignas(CACHE_LINE) _Atomic uintptr_t page_remote[SLICES_PER_SEGMENT];
    /* KiB of each slice charged against the memory limit (segment.c): a
     * prefix of the slice; 0 for a slice free and purged. */
    uint8_t charged_kib[SLICES_PER_SEGMENT];
};

_Static_assert(sizeof(struct segment) <= SLICE_SIZE, "the segment header fits in slice 0");

/* ---- The segment map and pointer lookups --------------------------------
 * A byte per SEGMENT_SIZE region of the 47-bit address space says whether a
 * segment is there. The bytes lie in leaves, one per 4 GiB of address space
 * (SEGMENT_MAP_LEAF bytes, indexed by the low 32 bits of an address, which
 * a 32-bit shift takes without a mask), mapped as segments first appear in
 * their range and never unmapped; a root in .bss points at them (NULL: no
 * segment in that range), so the map is valid before initialisation
 * (segment.c). A flat map was 32 MiB of .bss: address space every process
 * reserved at start, which an address-space limit (ulimit -v) counts; the
 * root is 256 KiB. */
#define SEGMENT_MAP_ROOT_SHIFT 32
#define SEGMENT_MAP_LEAF ((size_t)1 << (SEGMENT_MAP_ROOT_SHIFT - SEGMENT_SHIFT))
#define SEGMENT_MAP_ROOT ((size_t)1 << (47 - SEGMENT_MAP_ROOT_SHIFT))
extern STRATA_INTERNAL _Atomic(_Atomic(uint8_t) *) segment_map_root[SEGMENT_MAP_ROOT];

/* Where the byte of the region at `address` lives in its leaf. */
static inline uint32_t segment_map_index(uintptr_t address)
{
    return (uint32_t)address >> SEGMENT_SHIFT;
}

/* A segment's header sits in slice 0 at one of SEGMENT_COLORS offsets,
 * chosen by the segment's address. At one offset in every segment, the
 * header lines each free reads (the owner, the slices) would all fall in the
 * same cache sets, SEGMENT_SIZE apart, and evict each other once a program
 * uses more segments than the caches have ways: on the threads table the
 * owner load was a fifth of free's time. The stride, an odd number of lines,
 * gives each colour its own L1 and L2 sets. */
#define SEGMENT_COLORS 16
#define SEGMENT_COLOR_STRIDE ((uintptr_t)57 * CACHE_LINE)
/* The secure flavour keeps the segment's first OS page inaccessible, so that
 * a linear overflow out of the memory below the segment faults before it
 * reaches the header (segment.c); the headers start after it. */
#define SEGMENT_GUARD_BYTES ((uintptr_t)4096)
#define SEGMENT_HEADER_BASE (secure_has(SECURE_META_GUARD) ? SEGMENT_GUARD_BYTES : 0)
_Static_assert(SEGMENT_GUARD_BYTES + (SEGMENT_COLORS - 1) * SEGMENT_COLOR_STRIDE + sizeof(struct segment) <= SLICE_SIZE,
               "every colour's header fits in slice 0, after the guard page");

/* The colour of the segment holding `address`. Its bits are below bit 32:
 * taken from an address's low half, as the segment map's index is, so the
 * inline free shifts once for both. */
static inline unsigned segment_colour(uintptr_t address)
{
    return ((uint32_t)address >> SEGMENT_SHIFT) & (SEGMENT_COLORS - 1);
}

static inline uintptr_t segment_header_offset(uintptr_t address)
{
    return SEGMENT_HEADER_BASE + segment_colour(address) * SEGMENT_COLOR_STRIDE;
}
_Static_assert(SEGMENT_SHIFT + 4 <= 32 && SEGMENT_COLORS <= 16, "the colour is in an address's low half");

/* The segment (its header) of a pointer into it. */
static inline struct segment *segment_of(const void *p)
{
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)SEGMENT_MASK;
    return (struct segment *)(base + segment_header_offset((uintptr_t)p));
}

/* The word of a page's remote list. */
static inline _Atomic uintptr_t *page_remote_word(const struct page *page)
{
    struct segment *segment = segment_of(page);
    return &segment->page_remote[page - segment->pages];
}

/* The first byte of the segment's memory, where slice 0 begins. */
static inline char *segment_base(const struct segment *segment)
{
    return (char *)((uintptr_t)segment & ~(uintptr_t)SEGMENT_MASK);
}

/* The header of the segment mapped at `base`. */
static inline struct segment *segment_at(void *base)
{
    return (struct segment *)((char *)base + segment_header_offset((uintptr_t)base));
}

static inline bool is_segment_pointer(const void *p)
{
    uintptr_t root = (uintptr_t)p >> SEGMENT_MAP_ROOT_SHIFT;
    if (root >= SEGMENT_MAP_ROOT)
        return false;
    _Atomic(uint8_t) *leaf = atomic_load_explicit(&segment_map_root[root], memory_order_acquire);
    return leaf != NULL &&
           atomic_load_explicit(&leaf[segment_map_index((uintptr_t)p)], memory_order_relaxed);
}

static inline unsigned slice_of(const void *p)
{
    return (unsigned)(((uintptr_t)p & SEGMENT_MASK) >> SLICE_SHIFT);
}

static inline struct page *page_of(struct segment *segment, const void *p)
{
    return &segment->pages[slice_page_index(&segment->slices[slice_of(p)])];
}

/* The block below a carved small block p in its page, whose slot holds
 * p's guard word, or NULL for the page's first block (its guard lies in
 * the lead). */
static inline const void *small_block_below(const void *p)
{
    const struct slice *slice = &segment_of(p)->slices[slice_of(p)];
    uint32_t offset = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    return slice_page_offset(slice, offset) == 0 ? NULL : (const char *)p - class_size[slice_class(slice)];
}

/* ---- The secure flavour's block states ----------------------------------
 * Whether each small block is handed out, and where its canary sits, kept
 * apart from the blocks (secure.c): a free reads no word of its block but
 * a canary within its first 64 bytes, so freeing a block the caches lost
 * costs stores into it, as in the default flavour, and what a program
 * writes into its blocks never reaches them. A state is 16 bits: 0 while the block is free or was never handed out, else 1 + the
 * bytes from its usable end (where its canary is) to its slot's end.
 * They fill slices 1..STATE_SLICES of each segment, after the guard page
 * (SECURE_META_GUARD, on 4 KiB OS pages) and the header: a linear overflow
 * out of the segment below meets the guard first, and one out of a block
 * of this segment runs away from them.
 * Blocks of a class of 2^h..2^(h+1)-1 bytes keep theirs in array h, indexed
 * by the block's offset in the segment >> h: two starts of blocks of the
 * class are at least 2^h apart, so none share one, and a page's states are
 * as dense as its blocks (2 bytes for each). Arrays 4..17 (the classes'
 * 16..SMALL_MAX), of 2^(22-h) states each, lie end to end: array h starts
 * 2^20 - 2^(24-h) bytes into the region, which ends 64 bytes short of 1 MiB. */
#define STATE_REGION_SLICES 16
#define STATE_SLICES (STRATA_SECURE_BUILD ? STATE_REGION_SLICES : 0)
#define STATE_REGION_BYTES ((uintptr_t)STATE_REGION_SLICES * SLICE_SIZE)
_Static_assert(STATE_REGION_BYTES == (uintptr_t)1 << 20 && SEGMENT_SHIFT == 22 && SMALL_MAX == (size_t)1 << 17,
               "arrays 4..17 of 2^(22-h) states fill the region");
_Static_assert(SMALL_MAX * 4 <= (SLICES_PER_SEGMENT - 1 - STATE_REGION_SLICES) * SLICE_SIZE,
               "a page of the largest class fits beside the header and the states");

#define STATE_SHIFT_MIN 4  /* the 16-byte class's */
#define STATE_SHIFT_MAX 17 /* SMALL_MAX's */

/* Where array `shift` starts in the region, which starts at slice 1. */
static STRATA_ALWAYS_INLINE uintptr_t state_array_offset(unsigned shift)
{
    return STATE_REGION_BYTES - ((uintptr_t)1 << (24 - shift));
}

/* The state of the block at p, of a slot of `slot` bytes (a class size). */
static STRATA_ALWAYS_INLINE uint16_t *block_state(const void *p, size_t slot)
{
    unsigned shift = 63 - (unsigned)__builtin_clzll((unsigned long long)slot);
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)SEGMENT_MASK;
    uintptr_t array = base + SLICE_SIZE + state_array_offset(shift);
    return (uint16_t *)array + (((uintptr_t)p & SEGMENT_MASK) >> shift);
}

/* Whether a block start of the page is one it has carved: its owner, or
 * anyone while no owner can carve, may ask. */
static inline bool page_carved(const struct page *page, const void *p)
{
    return (size_t)((const char *)p - page_blocks(page)) < (size_t)page->capacity * page->block_size;
}

/* For a thread that does not own the page: true only when the block has
 * surely been carved (the owner's carving may be ahead of what it sees,
 * never behind). */
static inline bool page_surely_carved(const struct page *page, const void *p)
{
    uint32_t capacity = __atomic_load_n(&page->capacity, __ATOMIC_RELAXED);
    return (size_t)((const char *)p - page_blocks(page)) < (size_t)capacity * page->block_size;
}

/* The usable size of a block in a segment, 0 when p starts no block its
 * page has carved (inline: realloc asks it at every step of a string grown
 * in place, and redis at every allocation and free). A small block's is
 * its slice's class's size short of the guard word, p's key checked as a
 * free checks it: the slice's line, which its free reads too, and no page
 * header; a medium block's, or none, is its page's. */
static inline size_t small_usable_size(const void *p)
{
    struct segment *segment = segment_of(p);
    const struct slice *slice = &segment->slices[slice_of(p)];
    unsigned class_index = slice_class(slice);
    if (likely(class_index < CLASS_COUNT)) {
        if (unlikely(!slice_holds_block_any_thread(slice, (uint32_t)((uintptr_t)p & SEGMENT_MASK))))
            return 0; /* inside a block, or in the lead */
        return class_usable(class_index);
    }
    struct page *page = page_of(segment, p);
    if (class_index != CLASS_MEDIUM || !page->in_use || (const char *)p != medium_block(page))
        return 0; /* a free slice, or inside a medium block */
    return page->block_size;
}

#endif /* STRATA_LAYOUT_H */
