/* segment.c: segments (SEGMENT_SIZE-aligned regions owned by one heap), the
 * process-wide segment map that tells a strata pointer from any other, pages
 * carved from runs of free slices, the cache of empty segments, the
 * segments of exited threads (abandoned), and the page of a pointer a free
 * is given (free_segment_page). Invariants (layout.h, checked by
 * segment_check): a slice is either in free_mask or covered by exactly one
 * in-use page (or is the header's: slice 0, and the secure flavour's block
 * states); dirty_mask is a subset of free_mask; a segment is in the map
 * exactly while it is owned or abandoned; an abandoned segment is on the
 * abandoned list until its last page empties and no purge of it runs. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "block_guards.h"
#include "core.h"
#include "heap.h"

_Atomic(_Atomic(uint8_t) *) segment_map_root[SEGMENT_MAP_ROOT];

/* The cache of empty segments: cache_count of them on the list, and
 * cache_reserved more being purged by their releasers outside the lock. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment *cache_head;
static size_t cache_count, cache_reserved;
/* Segments of exited threads that still hold blocks, and their pages. */
static pthread_mutex_t abandoned_lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment *abandoned_segments;

/* Slice 0 holds the header; the secure flavour's block states the next
 * STATE_SLICES (layout.h). */
#define HEADER_SLICES ((((uint64_t)1 << STATE_SLICES) << 1) - 1)
#define ALL_DATA_SLICES (~HEADER_SLICES)

/* ---- slices and the segment map ----------------------------------------- */
/* Maps the leaf of the segment map that covers `base`, unless it is there;
 * false without memory. Two threads may race to map one: the loser's goes. */
size_t segment_map_leaf_bytes(void)
{
    return SEGMENT_MAP_LEAF > os_page_size() ? SEGMENT_MAP_LEAF : os_page_size();
}

static bool map_leaf_ready(const void *base)
{
    _Atomic(_Atomic(uint8_t) *) *root = &segment_map_root[(uintptr_t)base >> SEGMENT_MAP_ROOT_SHIFT];
    _Atomic(uint8_t) *leaf = atomic_load_explicit(root, memory_order_acquire);
    if (leaf != NULL)
        return true;
    size_t bytes = segment_map_leaf_bytes();
    _Atomic(uint8_t) *fresh = os_reserve(bytes); /* strata's own: not charged */
    if (fresh == NULL)
        return false;
    if (!atomic_compare_exchange_strong_explicit(root, &leaf, fresh, memory_order_release,
                                                 memory_order_acquire))
        os_unreserve(fresh, bytes);
    return true;
}

/* A segment enters or leaves the map (its leaf mapped: map_leaf_ready). */
static void map_set(struct segment *segment, uint8_t value)
{
    _Atomic(uint8_t) *leaf = atomic_load_explicit(&segment_map_root[(uintptr_t)segment >> SEGMENT_MAP_ROOT_SHIFT],
                                                  memory_order_acquire);
    strata_assert(leaf != NULL);
    atomic_store_explicit(&leaf[segment_map_index((uintptr_t)segment)], value, memory_order_release);
}

/* Slices [first, first + count) belong to the page at `page_slice`, of the
 * class, with nothing carved yet. */
static void slices_name(struct segment *segment, unsigned first, unsigned count,
                        unsigned class_index, unsigned page_slice)
{
    for (unsigned k = first; k < first + count; k++)
        segment->slices[k] = (struct slice){
            .multiplier = class_multiplier[class_index],
            .placement = slice_placement(class_index, page_slice)};
}

/* The page has carved its blocks up to page->capacity: the slices that
 * carving has reached learn the new carved key. */
static void slices_carved(struct page *page)
{
    struct segment *segment = segment_of(page->start);
    uint32_t start = (uint32_t)((uintptr_t)page->start & SEGMENT_MASK);
    uint32_t end = start + page_lead(page->block_size) + page->capacity * page->block_size;
    uint32_t key = page->capacity * class_block_key[page->class_index];
    for (uint32_t k = start >> SLICE_SHIFT; k << SLICE_SHIFT < end; k++)
        __atomic_store_n(&segment->slices[k].carved_key, key, __ATOMIC_RELAXED);
}

/* ---- segment lists, new segments ---------------------------------------- */
/* A segment list (a heap's, or the abandoned one), doubly linked. */
static void segment_push(struct segment **head, struct segment *segment)
{
    segment->prev = NULL;
    segment->next = *head;
    if (*head)
        (*head)->prev = segment;
    *head = segment;
}

static void segment_unlink(struct segment **head, struct segment *segment)
{
    if (segment->prev)
        segment->prev->next = segment->next;
    else
        *head = segment->next;
    if (segment->next)
        segment->next->prev = segment->prev;
    segment->next = segment->prev = NULL;
}

/* ---- closed slices (slices_closed) ---------------------------------------
 * A segment's free slices once purged (purge.c), or never used, and in the
 * secure flavour the block states no page has used yet, are inaccessible:
 * a write far from a block (1 MiB past its end, or before its start)
 * faults unless it lands in another page in use, or in free slices not yet
 * given back. A page taken from such slices, or a medium page grown into
 * them, opens them; the OS pages of a page's states open the first time a
 * page needs them and stay open (shared with other pages' states; a
 * given-back page's are all 0). The last OS page of the states stays open
 * for the guard word there. Slices freed and taken again before the purge
 * (a program's churn) make no system call. */
#define STATES_OPEN_BITS (8 * sizeof(((struct segment *)0)->states_open))
_Static_assert(STATE_REGION_BYTES / 4096 <= STATES_OPEN_BITS, "a bit for each OS page of the states");

/* ---- dense segments (STRATA_THP=2) ---------------------------------------
 * A TLB entry covers an OS page of 4 KiB: a program whose blocks spread
 * over more than the TLB reaches misses on most of its loads, and in a
 * virtual machine each miss walks two page tables (the threads table's
 * user time: 0.46 s with 4 KiB pages, 0.10 s with huge ones). A huge page
 * needs its 2 MiB of one protection when it is faulted in, and the
 * default keeps the free slices closed, so segments ask for none. With
 * STRATA_THP=2, a heap holding DENSE_SEGMENT_AFTER segments or more whose
 * newest one went at least 3/4 to pages of classes written whole (blocks
 * of an OS page or less, or a class the heap has learned the program
 * writes whole, pages.c), which it would make resident as it fills them
 * anyway, gets its next segment's ranges as huge pages: the first before
 * the header's first touch, each further one when a page first reaches
 * it (a fault of 2 MiB, where populating it a carve at a time costs 3x
 * here), the range's free slices open and dirty, as freed slices are, so
 * that pages take them first and the purge policy gives back (and closes)
 * what they leave. The trade, the user's: until then those free slices
 * do not stop a far write (docs/safety.md). A purge inside a huge page
 * splits it: the resident size falls at once, the kernel frees the memory
 * when it splits the page itself (under memory pressure). Not in the
 * secure flavour, nor under a memory limit (a page charges what it
 * carves), nor where the kernel offers no huge pages (its ranges would
 * only be resident sooner). */
#define DENSE_SEGMENT_QUARTERS 3
#define DENSE_SEGMENT_SAMPLE 32 /* slices taken before a segment says */
/* Segments a heap holds before its next may be dense: a dense segment's
 * range holds resident what its pages have not taken yet, then at most
 * a ninth of the heap (the server workload's heaps, of one or two
 * segments each, made dense after their first: peak 30.5 -> 34.1 MB). */
#define DENSE_SEGMENT_AFTER 4

/* The page just taken from the segment: counted for the heap's next
 * (heap_wants_dense_segment, the counts' one reader: with STRATA_THP=2
 * only). */
static void segment_note_page(struct heap *heap, struct segment *segment, size_t length, unsigned class_index)
{
    if (!strata_options.thp_dense)
        return;
    if (segment->slices_taken >= UINT16_MAX - SLICES_PER_SEGMENT) {
        segment->slices_taken /= 2;
        segment->slices_taken_whole /= 2;
    }
    segment->slices_taken += (uint16_t)length;
    if (class_index < CLASS_COUNT && (class_size[class_index] <= os_page_size() || heap->populate_whole[class_index]))
        segment->slices_taken_whole += (uint16_t)length;
}

/* Whether the heap's next segment is dense: its newest one (the head of
 * its list) went mostly to pages written whole, and it holds enough. */
static bool heap_wants_dense_segment(const struct heap *heap)
{
    const struct segment *last = heap->segments;
    if (STRATA_SECURE_BUILD || !strata_options.thp_dense || os_limited() || last == NULL ||
        last->slices_taken < DENSE_SEGMENT_SAMPLE || !os_huge_pages_offered())
        return false;
    unsigned held = 0;
    for (const struct segment *s = last; s != NULL && held < DENSE_SEGMENT_AFTER; s = s->next)
        held++;
    return held == DENSE_SEGMENT_AFTER &&
           (uint32_t)last->slices_taken_whole * 4 >= (uint32_t)last->slices_taken * DENSE_SEGMENT_QUARTERS;
}

/* The data slices of huge range r (not the header's). */
static uint64_t range_data_slices(unsigned r)
{
    uint64_t range = ((uint64_t)1 << SLICES_PER_HUGE_RANGE) - 1;
    return (range << (r * SLICES_PER_HUGE_RANGE)) & ALL_DATA_SLICES;
}

/* Huge range r of the segment at `base` resident, as one huge page where
 * the kernel gives it, its data slices opened first where `closed`.
 * `fresh`: nothing in the range was ever touched, so a fault takes a huge
 * page at once; a range whose page tables outlived a purge is collapsed
 * into one. False when the slices cannot be opened, nothing else done. */
static bool range_make_dense(char *base, unsigned r, bool fresh, bool closed)
{
    char *start = base + (size_t)r * HUGE_RANGE_SIZE;
    uint64_t slices = range_data_slices(r);
    char *data = base + (size_t)__builtin_ctzll(slices) * SLICE_SIZE;
    size_t data_bytes = (size_t)__builtin_popcountll(slices) * SLICE_SIZE;
    if (closed && !os_open(data, data_bytes))
        return false;
    if (fresh) {
        os_huge_pages(start, HUGE_RANGE_SIZE, true);
        os_populate(start, HUGE_RANGE_SIZE);
        os_huge_pages(start, HUGE_RANGE_SIZE, false);
    } else if (!os_huge_collapse(start, HUGE_RANGE_SIZE, false)) {
        os_populate(data, data_bytes);
    }
    return true;
}

/* Range r made dense: its free slices, resident and open, are dirty, as a
 * freed page's are. */
static void range_dirty(struct heap *heap, struct segment *segment, unsigned r)
{
    uint64_t slices = range_data_slices(r) & segment->free_mask & ~segment->dirty_mask;
    segment->dirty_mask |= slices;
    heap->dirty_slices += (size_t)__builtin_popcountll(slices);
}

/* The pending ranges a run of slices about to be taken reaches made dense
 * first (their slices all free and closed until then). */
static void dense_ranges_take(struct heap *heap, struct segment *segment, uint64_t run)
{
    for (unsigned r = 0; r < HUGE_RANGES_PER_SEGMENT; r++) {
        uint8_t bit = (uint8_t)(1u << r);
        if (!(segment->dense_pending & bit) || !(run & range_data_slices(r)))
            continue;
        bool fresh = (segment->dense_fresh & bit) != 0;
        segment->dense_pending &= (uint8_t)~bit;
        segment->dense_fresh &= (uint8_t)~bit;
        if (range_make_dense(segment_base(segment), r, fresh, slices_closed()))
            range_dirty(heap, segment, r);
    }
}

/* Opens what a page of `length` free slices from slice `first` of the
 * class needs: the pending dense ranges they reach (made resident whole),
 * those slices when any is closed (not dirty), and its block states' OS
 * pages not yet opened; false when the system refuses. */
static bool page_open(struct heap *heap, struct segment *segment, unsigned first, size_t length,
                      unsigned class_index)
{
    if (unlikely(segment->dense_pending != 0))
        dense_ranges_take(heap, segment, slice_run(first, length));
    if (!slices_closed())
        return true;
    bool closed = (slice_run(first, length) & ~segment->dirty_mask) != 0;
    char *start = segment_base(segment) + (size_t)first * SLICE_SIZE;
    size_t bytes = length * SLICE_SIZE;
    if (STRATA_SECURE_BUILD && class_index < CLASS_COUNT) {
        size_t slot = class_size[class_index];
        uintptr_t os_page = os_page_size();
        uintptr_t region = (uintptr_t)segment_base(segment) + SLICE_SIZE;
        size_t from = ((uintptr_t)block_state(start, slot) - region) / os_page;
        size_t to = ((uintptr_t)(block_state(start + bytes - 1, slot) + 1) - region + os_page - 1) / os_page;
        bool all_open = true;
        for (size_t k = from; k < to && all_open; k++)
            all_open = (segment->states_open[k / 64] >> (k % 64)) & 1;
        if (!all_open) {
            if (!os_open((void *)(region + from * os_page), (to - from) * os_page))
                return false;
            for (size_t k = from; k < to; k++)
                segment->states_open[k / 64] |= (uint64_t)1 << (k % 64);
        }
    }
    return !closed || os_open(start, bytes);
}

static struct segment *segment_new(struct heap *heap)
{
    bool dense = heap_wants_dense_segment(heap), fresh = false;
    pthread_mutex_lock(&cache_lock);
    struct segment *segment = cache_head;
    if (segment != NULL) {
        cache_head = segment->next;
        cache_count--;
    }
    pthread_mutex_unlock(&cache_lock);
    strata_assert(segment == NULL || (segment->dirty_mask == 0 && segment->pages_in_use == 0));
    if (segment == NULL) {
        /* Address space: its slices are charged as pages take them. */
        char *base = os_reserve_aligned(SEGMENT_SIZE, SEGMENT_SIZE);
        if (base == NULL)
            return NULL;
        if (!map_leaf_ready(base)) {
            os_unreserve(base, SEGMENT_SIZE);
            return NULL;
        }
        fresh = true;
        /* 64 KiB slices are purged one by one: huge pages would be split
         * (or keep whole 2 MiB resident), so they are opt-in; a block's
         * pages the program never writes become resident with them. The
         * refusal is said only where the kernel would give them unasked:
         * the advice takes the address space's lock for writing and
         * splits the mapping, and other threads' faults wait on it. */
        if (strata_options.thp || os_huge_pages_unasked())
            os_huge_pages(base, SEGMENT_SIZE, strata_options.thp);
        /* The secure flavour's guard page before the header (layout.h):
         * kept while the segment is mapped, cached or not. */
        if (secure_has(SECURE_META_GUARD) && os_page_size() == SEGMENT_GUARD_BYTES &&
            !os_protect(base, SEGMENT_GUARD_BYTES, false)) {
            os_unreserve(base, SEGMENT_SIZE);
            return NULL;
        }
        /* A dense segment's first range before the header's first touch,
         * its slices left open. */
        size_t pages_from = dense ? HUGE_RANGE_SIZE : (size_t)(1 + STATE_SLICES) * SLICE_SIZE;
        if (dense)
            range_make_dense(base, 0, true, false);
        if (slices_closed() &&
            ((STRATA_SECURE_BUILD && !os_close(base + SLICE_SIZE, STATE_REGION_BYTES - os_page_size())) ||
             !os_close(base + pages_from, SEGMENT_SIZE - pages_from))) {
            os_unreserve(base, SEGMENT_SIZE);
            return NULL;
        }
        segment = segment_at(base);
    } else if (dense) {
        dense = range_make_dense(segment_base(segment), 0, false, slices_closed());
    }
    strata_assert(segment == segment_of(segment));
    memset(segment, 0, sizeof *segment);
    slices_name(segment, 0, SLICES_PER_SEGMENT, CLASS_NONE, 0);
    segment->free_mask = ALL_DATA_SLICES;
    if (dense) {
        /* The first range now, the others when pages first reach them: a
         * heap holds at most about a range resident that its pages have
         * not taken. */
        range_dirty(heap, segment, 0);
        segment->dense_pending = (uint8_t)(((1u << HUGE_RANGES_PER_SEGMENT) - 1) & ~1u);
        segment->dense_fresh = fresh ? segment->dense_pending : 0;
    }
    atomic_store_explicit(&segment->owner, heap->owner_word, memory_order_relaxed);
    segment_push(&heap->segments, segment);
    map_set(segment, 1);
    return segment;
}

/* ---- the memory limit's charges (os.h) ---------------------------------- */
/* Each slice's charge is a prefix of it, in KiB: what pages have carved
 * there, or a medium page holds, rounded up to OS pages. A free slice keeps
 * its charge until it is purged (purge.c), since its memory stays resident
 * until then; a new page on it charges only what it carves past that. */

/* Charges the segment's slices so that [start, start + bytes), from a
 * slice's start, is covered; false, charging nothing, past the limit. The
 * range covers its slices whole but the last, whose charge only grows. */
static bool prefix_charge(struct segment *segment, const char *start, size_t bytes)
{
    if (!os_limited())
        return true;
    size_t page = os_page_size();
    uintptr_t from = (uintptr_t)start & SEGMENT_MASK;
    uintptr_t to = (from + bytes + page - 1) & ~(uintptr_t)(page - 1);
    strata_assert((from & (SLICE_SIZE - 1)) == 0 && to <= SEGMENT_SIZE);
    unsigned first = (unsigned)(from >> SLICE_SHIFT), last = (unsigned)((to - 1) >> SLICE_SHIFT);
    uint8_t last_kib = (uint8_t)((to - ((uintptr_t)last << SLICE_SHIFT)) / 1024);
    size_t more = 0;
    for (unsigned k = first; k <= last; k++) {
        uint8_t wanted = k < last ? SLICE_SIZE / 1024 : last_kib;
        more += wanted > segment->charged_kib[k] ? (size_t)(wanted - segment->charged_kib[k]) * 1024 : 0;
    }
    if (more != 0 && !os_charge(more))
        return false;
    for (unsigned k = first; k < last; k++)
        segment->charged_kib[k] = SLICE_SIZE / 1024;
    if (last_kib > segment->charged_kib[last])
        segment->charged_kib[last] = last_kib;
    return true;
}

/* How many blocks of `size` a page carves at once: an OS page of them, or
 * PAGE_CARVE_MIN_BLOCKS for a bin to hold. Under a memory limit no more than
 * PAGE_CARVE_MAX_BYTES of them, or one: a page charges only what it has
 * carved, and blocks carved but never handed out are what a tight limit
 * loses (layout.h). */
static size_t carve_count(size_t size)
{
    size_t count = PAGE_CARVE_BYTES / size;
    if (likely(count >= PAGE_CARVE_MIN_BLOCKS))
        return count;
    if (!os_limited() || PAGE_CARVE_MIN_BLOCKS * size <= PAGE_CARVE_MAX_BYTES)
        return PAGE_CARVE_MIN_BLOCKS;
    count = PAGE_CARVE_MAX_BYTES / size;
    return count != 0 ? count : 1;
}

/* ---- pages taken from runs of free slices ------------------------------- */
static uint64_t runs_of(uint64_t mask, size_t length)
{
    for (size_t i = 1; i < length; i++)
        mask &= mask >> 1;
    return mask;
}

/* A page is one slice for classes up to 8 KiB, and at least enough
 * slices for 4 blocks above: small pages return to the segment sooner
 * when a class shrinks, which kept Top resident 2% lower in the threads
 * benchmark than 8-block pages did. Of that many slices and up to three
 * more, the count whose tail past the last block (never carved) spans
 * the fewest whole 4 KiB pages a slice (10240-byte blocks: 6 a slice
 * leave 4 KiB, 19 in 3 slices 2 KiB; 13312: 3 pages of 16 in 1 slice, 2
 * of 64 in 4). */
#define PAGE_TAIL_UNIT 4096

static size_t page_tail_units(size_t size, size_t slices)
{
    size_t bytes = slices * SLICE_SIZE;
    return (bytes - bytes / size * size) / PAGE_TAIL_UNIT;
}

size_t class_slices(unsigned class_index)
{
    size_t size = class_size[class_index];
    if (size <= SLICE_SIZE / 8)
        return 1;
    size_t least = (size * 4 + page_lead(size) + SLICE_SIZE - 1) / SLICE_SIZE, best = least;
    for (size_t slices = least + 1; slices <= least + 3; slices++)
        if (page_tail_units(size, slices) * best < page_tail_units(size, best) * slices)
            best = slices;
    return best;
}

/* The run of free slices leaves the segment's free, dirty, aging and purged
 * masks, and the heap's count of dirty slices (its charges stay: os.h);
 * purged slices taken back soon count for the heap's purge policy. */
static void slices_claim(struct heap *heap, struct segment *segment, uint64_t run)
{
    heap->dirty_slices -= (size_t)__builtin_popcountll(segment->dirty_mask & run);
    segment->free_mask &= ~run;
    segment->dirty_mask &= ~run;
    segment->aging_mask &= ~run;
    uint64_t retaken = segment->purged_mask & run;
    if (unlikely(retaken != 0)) {
        segment->purged_mask &= ~run;
        if (os_now_ns() - segment->purged_at < purge_retake_window())
            heap->slices_retaken += (uint32_t)__builtin_popcountll(retaken);
    }
}

/* Takes a run of `length` free slices from the heap's segments (resident
 * ones first), or from a new segment with `may_map` when what the page
 * charges first fits under the memory limit, for a page of the class, and
 * names them. Heap lock held. */
static struct page *page_take(struct heap *heap, size_t length, unsigned class_index, bool may_map)
{
    struct segment *segment = NULL;
    uint64_t starts = 0;
    /* Reuse slices that are still resident, in any segment, before touching
     * purged ones: otherwise free slices pile up unused in later segments
     * while the first ones fault fresh pages in. */
    if (heap->dirty_slices >= length) {
        for (segment = heap->segments; segment != NULL; segment = segment->next) {
            starts = runs_of(segment->dirty_mask, length);
            if (starts)
                break;
        }
    }
    if (segment == NULL) {
        for (segment = heap->segments; segment != NULL; segment = segment->next) {
            starts = runs_of(segment->free_mask, length);
            if (starts)
                break;
        }
    }
    if (segment == NULL) {
        /* No new segment at the limit, where its page could not be carved. */
        if (!may_map || (os_limited() && !os_charge_room(class_index == CLASS_MEDIUM
                                                             ? length * SLICE_SIZE
                                                             : carve_count(class_size[class_index]) *
                                                                   class_size[class_index])))
            return NULL;
        segment = segment_new(heap);
        if (segment == NULL)
            return NULL;
        starts = runs_of(segment->free_mask, length);
    }
    strata_assert(starts != 0);
    unsigned first = (unsigned)__builtin_ctzll(starts);
    strata_assert_cmp(first + length, <=, SLICES_PER_SEGMENT);
    if (!page_open(heap, segment, first, length, class_index))
        return NULL;
    uint64_t run = slice_run(first, length);
    bool resident = (segment->dirty_mask & run) != 0;
    slices_claim(heap, segment, run);
    segment_note_page(heap, segment, length, class_index);
    segment->pages_in_use++;
    slices_name(segment, first, (unsigned)length, class_index, first);
    strata_assert((segment->free_mask & HEADER_SLICES) == 0 && (run & HEADER_SLICES) == 0);

    struct page *page = &segment->pages[first];
    memset(page, 0, sizeof *page);
    page->start = segment_base(segment) + (size_t)first * SLICE_SIZE;
    page->class_index = (uint8_t)class_index;
    page->slice_count = (uint8_t)length;
    page->in_use = 1;
    page->touched = resident ? PAGE_TOUCHED_ALL : 0;
    return page;
}

struct page *page_new(struct heap *heap, unsigned class_index, bool may_map)
{
    size_t length = class_slices(class_index);
    struct page *page = page_take(heap, length, class_index, may_map);
    if (page == NULL)
        return NULL;
    page->block_size = class_size[class_index];
    page->reserved = (uint16_t)((length * SLICE_SIZE - page_lead(page->block_size)) / page->block_size);
    strata_assert_cmp(page->reserved, >=, PAGE_CARVE_MIN_BLOCKS);
    return page;
}

/* ---- medium pages ------------------------------------------------------- */
/* Under a memory limit, the part of a medium page's last slice beyond the
 * OS pages its block reaches (`reach` bytes from the page's start) goes
 * back when a smaller page left it charged, resident: a block of whole
 * slices, which takes one slice more for its canary, would otherwise
 * hold that slice's charge for a page's use. */
static void medium_tail_uncharge(struct segment *segment, const char *start, size_t reach, size_t length)
{
    if (!os_limited())
        return;
    size_t page = os_page_size();
    unsigned last = slice_of(start) + (unsigned)length - 1;
    char *last_start = segment_base(segment) + (size_t)last * SLICE_SIZE;
    size_t kept = ((size_t)(start + reach - last_start) + page - 1) & ~(page - 1);
    size_t charged = (size_t)segment->charged_kib[last] * 1024;
    if (charged <= kept)
        return;
    os_purge(last_start + kept, charged - kept, charged - kept);
    os_uncharge(charged - kept);
    segment->charged_kib[last] = (uint8_t)(kept / 1024);
}

struct page *page_new_medium(struct heap *heap, size_t size)
{
    strata_assert(size > SMALL_REQUEST_MAX && size <= MEDIUM_MAX);
    strata_assert(!STRATA_SECURE_BUILD); /* its pages have 47 slices: it maps blocks above SMALL_MAX */
    size_t usable = medium_usable(size);
    size_t length = medium_slices(usable);
    struct page *page = page_take(heap, length, CLASS_MEDIUM, true);
    if (page == NULL)
        return NULL;
    struct segment *segment = segment_of(page->start);
    size_t reach = medium_reach(usable);
    if (!prefix_charge(segment, page->start, reach)) {
        page_release(heap, page);
        return NULL;
    }
    medium_tail_uncharge(segment, page->start, reach, length);
    page->block_size = (uint32_t)usable;
    page->reserved = page->capacity = 1;
    counter_set(&page->used, 1);
    medium_guards_set(page);
    return page;
}

bool page_grow_medium(struct heap *heap, struct page *page, size_t size)
{
    strata_assert(page->class_index == CLASS_MEDIUM && size <= MEDIUM_MAX);
    medium_guards_check(page); /* what the block's writes did, before it moves its canary */
    struct segment *segment = segment_of(page->start);
    unsigned first = slice_of(page->start);
    size_t usable = medium_usable(size);
    size_t length = medium_slices(usable);
    if (first + length > SLICES_PER_SEGMENT)
        return false;
    /* The slices it grows into, none when its slack holds the growth. */
    unsigned end = first + page->slice_count;
    size_t added = length > page->slice_count ? length - page->slice_count : 0;
    uint64_t run = added != 0 ? slice_run(end, added) : 0; /* end may be the segment's end */
    if (added != 0 && ((segment->free_mask & run) != run || !page_open(heap, segment, end, added, CLASS_MEDIUM)))
        return false;
    if (!prefix_charge(segment, page->start, medium_reach(usable)))
        return false;
    if (added != 0) {
        slices_claim(heap, segment, run);
        slices_name(segment, end, (unsigned)added, CLASS_MEDIUM, first);
        page->slice_count = (uint8_t)length;
    }
    page->block_size = (uint32_t)usable;
    medium_guards_set(page);
    return true;
}

/* ---- carving blocks ----------------------------------------------------- */
/* The secure flavour's carving: the `count` new blocks from `first` go on
 * the page's free list in a random order (Fisher-Yates), so that which
 * block comes next cannot be told from the last. */
static void carve_shuffled(struct page *page, char *first, size_t count)
{
    uint16_t order[PAGE_CARVE_BYTES / 8];
    strata_assert_cmp(count, <=, sizeof order / sizeof order[0]);
    for (size_t i = 0; i < count; i++)
        order[i] = (uint16_t)i;
    for (size_t i = count - 1; i > 0; i--) {
        size_t j = (size_t)(thread_random() % (i + 1));
        uint16_t swap = order[i];
        order[i] = order[j];
        order[j] = swap;
    }
    size_t size = page->block_size;
    struct block *next = page->free;
    for (size_t i = count; i-- > 0;) {
        struct block *b = (struct block *)(first + (size_t)order[i] * size);
        block_set_next(b, next);
        next = b;
    }
    page->free = next;
}

/* Of the whole OS pages from..to of the page, where those its touched
 * bytes do not say may be resident already begin (`to` or past it: none);
 * its touched bytes then reach `to`, the caller making them resident. */
static uintptr_t touched_claim(struct page *page, uintptr_t from, uintptr_t to)
{
    uintptr_t base = (uintptr_t)page->start;
    if (page->touched == PAGE_TOUCHED_ALL)
        return to;
    if (from < base + page->touched)
        from = base + page->touched;
    if (from < to)
        page->touched = (uint32_t)(to - base);
    return from;
}

/* The whole OS pages from..to of the page resident, but for what its
 * touched bytes say may be already. */
static void populate_past_touched(struct page *page, uintptr_t from, uintptr_t to)
{
    from = touched_claim(page, from, to);
    if (from < to)
        os_populate((void *)from, to - from);
}

size_t page_medium_claim(struct page *page, size_t length, char **from)
{
    strata_assert(page->class_index == CLASS_MEDIUM && length <= page->block_size);
    uintptr_t os_page = os_page_size();
    uintptr_t to = ((uintptr_t)medium_block(page) + length + os_page - 1) & ~(os_page - 1);
    uintptr_t start = touched_claim(page, (uintptr_t)page->start, to);
    *from = (char *)start;
    return start < to ? to - start : 0;
}

/* The OS pages of a carve's blocks, made resident by a call rather than
 * a trap each: where a trap costs what it does in some virtual machines
 * (10.5 us a page here, against 2.6 us for a call populating one and 1.1
 * us a page for 64 KiB), a program's first touches of fresh or purged
 * memory are mostly the carve's. Blocks of a page or less: the carve
 * writes each one's two words, and the program the rest; the pages up to
 * the last block's end, whose tail past its words would trap at the
 * program's first write (at most a page the next carve reaches anyway:
 * the lifetimes table's traps 1,333 -> 594). Larger blocks have pages
 * between their heads that only the program touches, and are left to
 * trap, their heads' pages populated a run of adjacent ones a call, but
 * where the class is written whole (pages.c, "pages written whole"). What
 * the page may have made resident before (its touched bytes) is not
 * asked for again. */
static void carve_populate(struct page *page, char *first, size_t count, size_t size)
{
    uintptr_t os_page = os_page_size(), start = (uintptr_t)first;
    const uintptr_t guard = sizeof(uint64_t); /* the guard word below each block, written by the carve */
    bool zeroed = secure_has(SECURE_ZERO);
    if (page->touched == PAGE_TOUCHED_ALL)
        return;
    if (size <= os_page || zeroed || page->populate_whole) {
        uintptr_t end = start + count * size;
        populate_past_touched(page, (start - guard) & ~(os_page - 1), (end + os_page - 1) & ~(os_page - 1));
        return;
    }
    /* A run of adjacent head pages a call (blocks under two pages have
     * their heads on every page or every other one), with the pages of the
     * guard words below each head and after the last block. */
    uintptr_t from = (start - guard) & ~(os_page - 1), to = (start & ~(os_page - 1)) + os_page;
    for (size_t i = 1; i <= count; i++) {
        uintptr_t next = start + i * size;
        uintptr_t low = (next - guard) & ~(os_page - 1);
        uintptr_t high = ((i < count ? next : next - guard) & ~(os_page - 1)) + os_page;
        if (low > to) {
            populate_past_touched(page, from, to);
            from = low;
        }
        if (high > to)
            to = high;
    }
    populate_past_touched(page, from, to);
}

/* page_extend's carving, for a page with blocks left to carve. */
static STRATA_NOINLINE bool page_carve(struct page *page)
{
    size_t size = page->block_size;
    size_t count = carve_count(size);
    if (count > page->reserved - page->capacity)
        count = page->reserved - page->capacity;
    if (os_limited() && !prefix_charge(segment_of(page->start), page->start,
                                       page_lead(size) + (size_t)(page->capacity + count) * size))
        return false;
    char *first = page_blocks(page) + (size_t)page->capacity * size;
    carve_populate(page, first, count, size);
    if (secure_has(SECURE_ZERO)) /* every block a thread pops reads as zero */
        memset(first, 0, count * size);
    /* Each slot's last word guards the next (block_guards.h), the lead's
     * the page's first block. A carve after the first finds its first
     * block's guard written by the one before, in the last slot carved
     * then: a write past that slot's block (32 bytes copied past a 4 KiB
     * block, which glibc's next chunk's size word stops) is reported now,
     * not carved over. */
    size_t i = 0;
    if (page->capacity != 0) {
        if (unlikely(!guard_word_intact(first)))
            report_fatal("write past the end of a block (the guard word after it is overwritten)", first - size);
        i = 1;
    }
    for (; i <= count; i++)
        guard_set(first + i * size);
    if (secure_has(SECURE_RANDOM) && count > 1) {
        carve_shuffled(page, first, count);
    } else {
        char *p = first;
        for (size_t i = 1; i < count; i++, p += size)
            block_set_next((struct block *)p, (struct block *)(p + size));
        block_set_next((struct block *)p, page->free);
        page->free = (struct block *)first;
    }
    /* Atomic: other threads read it to cache a freed block (layout.h,
     * page_surely_carved); it only grows while the page is in use. */
    __atomic_store_n(&page->capacity, page->capacity + (uint32_t)count, __ATOMIC_RELAXED);
    slices_carved(page);
    strata_assert_cmp(page->capacity, <=, page->reserved);
    strata_assert_cmp(page_lead(page->block_size) + (size_t)page->capacity * page->block_size, <=,
                      (size_t)page->slice_count * SLICE_SIZE);
    return true;
}

bool page_extend(struct page *page)
{
    return page->capacity != page->reserved && page_carve(page);
}

void page_restart(struct page *page)
{
    strata_assert(page->used == 0 && page->in_use && page->class_index != CLASS_MEDIUM);
    struct segment *segment = segment_of(page->start);
    unsigned first = (unsigned)(page - segment->pages);
    /* The free list is checked before it is forgotten, as the hand-outs
     * it replaces would have checked each block: a block written after
     * its free, or freed twice (the list then loops or runs past the
     * page's blocks), is reported here rather than carved over. */
    uint32_t count = 0;
    for (struct block *b = page->free; b != NULL; b = block_next(b))
        if (unlikely(++count > page->capacity))
            report_fatal("double free (a page's free list holds more blocks than it carved)", b);
    if (unlikely(count != page->capacity))
        report_fatal("double free or write after free (a page's free list lost blocks)", page->free);
    page->free = NULL;
    /* Atomic, as page_carve's store: other threads read it. */
    __atomic_store_n(&page->capacity, 0, __ATOMIC_RELAXED);
    slices_name(segment, first, page->slice_count, page->class_index, first); /* nothing carved */
}

/* ---- pages and segments given back -------------------------------------- */
/* A released page's slices point at the header's page slot, never in use, so
 * a stale free into them is reported even after a new page takes the first
 * slice; with no class and nothing carved, such a free leaves the inline path. */
static void slices_forget(struct segment *segment, unsigned first, unsigned count)
{
    slices_name(segment, first, count, CLASS_NONE, 0);
}

/* An empty segment leaves the map, then goes to the cache (purged, outside
 * the cache lock: a slot is reserved first) or back to the OS. */
static void segment_release(struct segment *segment)
{
    strata_assert_cmp(segment->pages_in_use, ==, 0);
    strata_assert_cmp(segment->purging, ==, 0);
    strata_assert(segment->free_mask == ALL_DATA_SLICES && segment->taken_mask == 0);
    map_set(segment, 0);
    pthread_mutex_lock(&cache_lock);
    bool keep = cache_count + cache_reserved < SEGMENT_CACHE_MAX;
    cache_reserved += keep;
    pthread_mutex_unlock(&cache_lock);
    if (!keep) {
        /* Its free slices not yet purged go with it. */
        slices_uncharge(segment, segment->dirty_mask);
        os_unreserve(segment_base(segment), SEGMENT_SIZE);
        return;
    }
    segment_purge_dirty(segment);
    pthread_mutex_lock(&cache_lock);
    cache_reserved--;
    segment->next = cache_head;
    segment->prev = NULL;
    cache_head = segment;
    cache_count++;
    pthread_mutex_unlock(&cache_lock);
}

/* Marks an emptied page's slices free; returns their run. */
static uint64_t page_forget(struct segment *segment, struct page *page)
{
    unsigned first = (unsigned)(page - segment->pages);
    strata_assert_cmp(first, >=, 1);
    strata_assert_cmp(first + page->slice_count, <=, SLICES_PER_SEGMENT);
    strata_assert_cmp(segment->pages_in_use, >, 0);
    uint64_t run = slice_run(first, page->slice_count);
    strata_assert((segment->free_mask & run) == 0);
    page->in_use = 0;
    page->free = NULL;
    counter_set(&page->used, 0);
    slices_forget(segment, first, page->slice_count);
    segment->free_mask |= run;
    segment->pages_in_use--;
    return run;
}

void page_release(struct heap *heap, struct page *page)
{
    struct segment *segment = segment_of(page);
    strata_assert(page->used == 0 && !page->listed);
    uint64_t run = page_forget(segment, page);
    segment->dirty_mask |= run;
    heap->dirty_slices += page->slice_count;
    purger_wake(); /* a sleeping purger has free slices to give back now */
    /* An empty segment stays, its slices resident for reuse like any free
     * slices, until the purge policy has given them back: then it goes
     * (heap_release_empty_segments). */
    if (STRATA_DEBUG_BUILD) {
        const char *broken = segment_check(segment, heap->owner_word);
        if (broken != NULL)
            report_assert(__FILE__, __LINE__, "segment_check after a page release", "%s", broken);
    }
}

/* The segment leaves the heap: its entry in the heap's own segments goes
 * (heap.h; the owner's inline free reads it without the lock). */
static void own_segment_forget(struct heap *heap, struct segment *segment)
{
    _Atomic uintptr_t *entry = &heap->own_segments[own_segment_slot((uintptr_t)segment)];
    if (atomic_load_explicit(entry, memory_order_relaxed) == (uintptr_t)segment)
        atomic_store_explicit(entry, heap->own_segment_empty, memory_order_relaxed);
}

void heap_release_empty_segments(struct heap *heap)
{
    struct segment *segment = heap->segments;
    while (segment != NULL) {
        struct segment *next = segment->next;
        if (segment->pages_in_use == 0 && segment->dirty_mask == 0 && segment->taken_mask == 0 &&
            (segment->prev || segment->next)) {
            segment_unlink(&heap->segments, segment);
            own_segment_forget(heap, segment);
            segment_release(segment);
        }
        segment = next;
    }
}

void segments_set_owner(struct segment *list, uintptr_t owner_word)
{
    for (struct segment *s = list; s != NULL; s = s->next)
        atomic_store_explicit(&s->owner, owner_word, memory_order_release);
}

/* ---- abandoned segments ------------------------------------------------- */
/* Called by a heap whose thread exits: empty segments go back to the OS, the
 * others are left to the frees of other threads (abandoned_free_block). */
void heap_segments_abandon(struct heap *heap)
{
    struct segment *segment = heap->segments;
    heap->segments = NULL;
    heap_own_segments_clear(heap);
    heap->dirty_slices = 0;
    while (segment != NULL) {
        struct segment *next = segment->next;
        segment->next = segment->prev = NULL;
        if (segment->pages_in_use == 0) {
            segment_release(segment);
        } else {
            segment_purge_dirty(segment);
            pthread_mutex_lock(&abandoned_lock);
            segment_push(&abandoned_segments, segment);
            atomic_store_explicit(&segment->owner, OWNER_ABANDONED, memory_order_release);
            pthread_mutex_unlock(&abandoned_lock);
        }
        segment = next;
    }
}

/* Whether an abandoned segment is done with (abandoned lock held): then it
 * leaves the list, and the caller releases it after unlocking. */
static bool abandoned_done(struct segment *segment)
{
    if (segment->pages_in_use != 0 || segment->purging != 0)
        return false;
    segment_unlink(&abandoned_segments, segment);
    return true;
}

bool abandoned_free_block(struct page *page, struct block *block)
{
    struct segment *segment = segment_of(page);
    uint64_t purge = 0, cover = 0;
    bool done = false;
    pthread_mutex_lock(&abandoned_lock);
    if (atomic_load_explicit(&segment->owner, memory_order_relaxed) != OWNER_ABANDONED) {
        pthread_mutex_unlock(&abandoned_lock); /* a heap adopted it meanwhile */
        return false;
    }
    /* The caller checked that this is a block start and not free; that it
     * was ever handed out only the page knows, and no owner changes it now. */
    const char *misuse = NULL;
    if (!page->in_use || page->free == block)
        misuse = "double free";
    else if (!page_carved(page, block))
        misuse = "free of a block that was never allocated";
    if (unlikely(misuse != NULL)) {
        pthread_mutex_unlock(&abandoned_lock);
        report_fatal(misuse, block);
    }
    strata_assert_cmp(page->used, >, 0);
    block_set_next(block, page->free);
    page->free = block;
    counters_bytes_out(-(long)page_usable(page));
    bool aging = false;
    if (--page->used == 0) {
        purge = page_forget(segment, page);
        done = abandoned_done(segment);
        if (!done && purger_gives_back_later()) {
            /* Resident for a heap that adopts the segment, until the
             * purger's rounds give them back (abandoned_purge_aged). */
            segment->dirty_mask |= purge;
            purge = 0;
            aging = true;
        } else if (!done) {
            /* No purger to give them back later: now, outside the lock;
             * `purging` keeps the segment mapped (and its free slices
             * free: no heap adopts it) meanwhile. */
            segment->purging++;
            cover = purge_cover(segment, purge);
        }
    }
    pthread_mutex_unlock(&abandoned_lock);
    if (aging)
        purger_ask();
    if (done)
        segment->dirty_mask |= purge; /* segment_release purges it, if cached */
    if (purge != 0 && !done) {
        purge_slices(segment, purge, cover);
        pthread_mutex_lock(&abandoned_lock);
        segment->purging--;
        done = abandoned_done(segment);
        pthread_mutex_unlock(&abandoned_lock);
    }
    if (done)
        segment_release(segment);
    return true;
}

struct segment *abandoned_adopt(struct heap *heap)
{
    pthread_mutex_lock(&abandoned_lock);
    struct segment *segment = abandoned_segments;
    while (segment != NULL && segment->purging != 0)
        segment = segment->next;
    if (segment != NULL) {
        segment_unlink(&abandoned_segments, segment);
        /* From here frees of its blocks go to this heap, locally or through
         * its pages' remote lists; a free that read the old word finds it changed
         * under the lock and goes again. */
        atomic_store_explicit(&segment->owner, heap->owner_word, memory_order_release);
    }
    pthread_mutex_unlock(&abandoned_lock);
    if (segment == NULL)
        return NULL;
    /* Its free slices not yet purged are the heap's now, ageing afresh. */
    segment->aging_mask = 0;
    heap->dirty_slices += (size_t)__builtin_popcountll(segment->dirty_mask);
    segment_push(&heap->segments, segment);
    return segment;
}

/* The segments whose aged slices a round purges outside the lock at most. */
#define ABANDONED_PURGES_A_ROUND 64

bool abandoned_purge_aged(bool all)
{
    struct segment *purged[ABANDONED_PURGES_A_ROUND];
    uint64_t slices[ABANDONED_PURGES_A_ROUND], covers[ABANDONED_PURGES_A_ROUND];
    size_t count = 0;
    bool left = false;
    pthread_mutex_lock(&abandoned_lock);
    for (struct segment *s = abandoned_segments; s != NULL; s = s->next) {
        /* Two steps, as a heap's (purge_policy.c): what was dirty at the
         * last round and still is goes now, what is dirty now at the next. */
        uint64_t due = all ? s->dirty_mask : s->aging_mask & s->dirty_mask;
        if (due != 0 && count < ABANDONED_PURGES_A_ROUND) {
            s->dirty_mask &= ~due;
            s->purging++;
            purged[count] = s;
            covers[count] = purge_cover(s, due);
            slices[count++] = due;
        }
        s->aging_mask = s->dirty_mask;
        left |= s->dirty_mask != 0;
    }
    pthread_mutex_unlock(&abandoned_lock);
    for (size_t i = 0; i < count; i++)
        purge_slices(purged[i], slices[i], covers[i]);
    if (count == 0)
        return left;
    struct segment *done = NULL;
    pthread_mutex_lock(&abandoned_lock);
    for (size_t i = 0; i < count; i++) {
        purged[i]->purging--;
        if (abandoned_done(purged[i])) {
            purged[i]->next = done;
            done = purged[i];
        }
    }
    pthread_mutex_unlock(&abandoned_lock);
    while (done != NULL) {
        struct segment *next = done->next;
        segment_release(done);
        done = next;
    }
    return left;
}

void abandoned_for_each(void (*fn)(const struct segment *, void *), void *arg)
{
    pthread_mutex_lock(&abandoned_lock);
    for (const struct segment *s = abandoned_segments; s != NULL; s = s->next)
        fn(s, arg);
    pthread_mutex_unlock(&abandoned_lock);
}

/* ---- the segment cache, fork -------------------------------------------- */
void segment_cache_release(void)
{
    pthread_mutex_lock(&cache_lock);
    struct segment *list = cache_head;
    cache_head = NULL;
    cache_count = 0;
    pthread_mutex_unlock(&cache_lock);
    while (list != NULL) {
        struct segment *next = list->next;
        os_unreserve(segment_base(list), SEGMENT_SIZE);
        list = next;
    }
}

void segment_lock_all(void)
{
    pthread_mutex_lock(&cache_lock);
    pthread_mutex_lock(&abandoned_lock);
}

void segment_unlock_all(void)
{
    pthread_mutex_unlock(&abandoned_lock);
    pthread_mutex_unlock(&cache_lock);
}

void segment_fork_child(void)
{
    pthread_mutex_init(&cache_lock, NULL);
    pthread_mutex_init(&abandoned_lock, NULL);
    /* A releaser of the parent that had reserved a slot is gone (its segment
     * stays mapped in the child, unused), and so is any purger of an
     * abandoned page: its segment goes back now if it is empty. */
    cache_reserved = 0;
    struct segment *segment = abandoned_segments;
    while (segment != NULL) {
        struct segment *next = segment->next;
        segment->purging = 0;
        if (abandoned_done(segment))
            segment_release(segment);
        segment = next;
    }
}

/* Whether the guard word below a carved block is as the carve wrote it
 * or, in the default flavour, a sample's mark (profile.h): read once,
 * since another thread may mark or unmark it meanwhile. */
static bool guard_word_sound(const char *block)
{
    if (STRATA_SECURE_BUILD)
        return guard_word_intact(block);
    uintptr_t word = __atomic_load_n((const uintptr_t *)(block - sizeof word), __ATOMIC_ACQUIRE);
    return word == small_guard_word(block) || profile_kept_record_at(small_guard_named(word));
}

/* ---- invariant checker ---------------------------------------------------- */
static STRATA_TLS char segment_broken[192];

#define BROKEN(...) (snprintf(segment_broken, sizeof segment_broken, __VA_ARGS__), segment_broken)

const char *segment_check(const struct segment *s, uintptr_t owner_word)
{
    uintptr_t owner = atomic_load(&s->owner);
    if (owner != owner_word)
        return BROKEN("segment %p: owner word %#lx, not its heap's %#lx", (const void *)s,
                      (unsigned long)owner, (unsigned long)owner_word);
    if ((s->free_mask & HEADER_SLICES) != 0)
        return BROKEN("segment %p: the header's slices are marked free (%#llx)", (const void *)s,
                      (unsigned long long)s->free_mask);
    if ((s->dirty_mask & ~s->free_mask) != 0)
        return BROKEN("segment %p: dirty slices %#llx not all free (%#llx)", (const void *)s,
                      (unsigned long long)s->dirty_mask, (unsigned long long)s->free_mask);
    if ((s->aging_mask & ~s->dirty_mask) != 0)
        return BROKEN("segment %p: aging slices %#llx not all dirty (%#llx)", (const void *)s,
                      (unsigned long long)s->aging_mask, (unsigned long long)s->dirty_mask);
    if ((s->taken_mask & (s->free_mask | HEADER_SLICES)) != 0)
        return BROKEN("segment %p: slices %#llx taken out to purge, but free or the header's (%#llx)",
                      (const void *)s, (unsigned long long)s->taken_mask, (unsigned long long)s->free_mask);
    if ((s->purged_mask & ~(s->free_mask & ~s->dirty_mask)) != 0)
        return BROKEN("segment %p: purged slices %#llx not all free and clean (%#llx, dirty %#llx)",
                      (const void *)s, (unsigned long long)s->purged_mask,
                      (unsigned long long)s->free_mask, (unsigned long long)s->dirty_mask);
    if ((s->dense_fresh & ~s->dense_pending) != 0)
        return BROKEN("segment %p: dense ranges %#x fresh but not pending (%#x)", (const void *)s,
                      (unsigned)s->dense_fresh, (unsigned)s->dense_pending);
    /* A pending range's slices are free and closed, or taken out by the
     * purger to purge the slices around them (a purge's cover). */
    for (unsigned r = 0; r < HUGE_RANGES_PER_SEGMENT; r++)
        if ((s->dense_pending >> r & 1) &&
            (range_data_slices(r) & ~((s->free_mask | s->taken_mask) & ~s->dirty_mask)) != 0)
            return BROKEN("segment %p: dense range %u pending, but its slices are not all free and closed (free "
                          "%#llx, dirty %#llx, taken %#llx)",
                          (const void *)s, r, (unsigned long long)s->free_mask, (unsigned long long)s->dirty_mask,
                          (unsigned long long)s->taken_mask);
    uint64_t covered = 0;
    unsigned in_use = 0;
    for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
        const struct page *page = &s->pages[i];
        if (!page->in_use)
            continue;
        in_use++;
        if (page->slice_count == 0 || i + page->slice_count > SLICES_PER_SEGMENT)
            return BROKEN("segment %p: page at slice %u spans %u slices", (const void *)s, i,
                          page->slice_count);
        uint64_t run = slice_run(i, page->slice_count);
        if ((covered & run) != 0 || ((s->free_mask | s->taken_mask) & run) != 0)
            return BROKEN("segment %p: page at slice %u overlaps a page or free slices",
                          (const void *)s, i);
        covered |= run;
        if (page->touched != PAGE_TOUCHED_ALL &&
            (page->touched > (size_t)page->slice_count * SLICE_SIZE || page->touched % os_page_size() != 0))
            return BROKEN("segment %p: page at slice %u has %u bytes touched, past its %u slices or not in OS pages",
                          (const void *)s, i, page->touched, page->slice_count);
        for (unsigned k = i; k < i + page->slice_count; k++)
            if (s->slices[k].placement != slice_placement(page->class_index, i))
                return BROKEN("segment %p: slice %u names page %u class %u, not page %u class %u",
                              (const void *)s, k, slice_page_index(&s->slices[k]), slice_class(&s->slices[k]),
                              i, page->class_index);
        /* A small page's carved blocks lie after its lead. */
        bool small = page->class_index < CLASS_COUNT;
        size_t lead = small && page->capacity != 0 ? page_lead(page->block_size) : 0;
        size_t carved_end = (size_t)i * SLICE_SIZE + lead + (size_t)page->capacity * page->block_size;
        uint32_t key = page->capacity * class_block_key[page->class_index];
        for (unsigned k = i; k < i + page->slice_count; k++) {
            uint32_t want = (size_t)k * SLICE_SIZE < carved_end ? key : 0;
            if (s->slices[k].carved_key != want || s->slices[k].multiplier != class_multiplier[page->class_index])
                return BROKEN("segment %p: slice %u has carved key %u, multiplier %#llx; the page wants %u",
                              (const void *)s, k, s->slices[k].carved_key,
                              (unsigned long long)s->slices[k].multiplier, want);
        }
        /* Under a limit, what the page has carved, or a medium page holds,
         * is charged. */
        size_t held = page->class_index == CLASS_MEDIUM ? medium_reach(page->block_size)
                                                        : lead + (size_t)page->capacity * page->block_size;
        for (unsigned k = i; os_limited() && k < i + page->slice_count; k++) {
            size_t from = (size_t)(k - i) * SLICE_SIZE;
            size_t need = held <= from ? 0 : held - from >= SLICE_SIZE ? SLICE_SIZE : held - from;
            if ((size_t)s->charged_kib[k] * 1024 < need)
                return BROKEN("segment %p: slice %u charges %u KiB, its page holds %zu bytes there",
                              (const void *)s, k, s->charged_kib[k], need);
        }
        if (page->used > page->capacity || page->capacity > page->reserved)
            return BROKEN("page %p: used %u, capacity %u, reserved %u", (const void *)page,
                          page->used, page->capacity, page->reserved);
        /* Every carved block's guard word, and the one after the last, as
         * the carve wrote them (block_guards.h), or a sample's mark. */
        for (uint32_t b = 0; small && page->capacity != 0 && b <= page->capacity; b++) {
            const char *block = page_blocks(page) + (size_t)b * page->block_size;
            if (!guard_word_sound(block))
                return BROKEN("page %p: the guard word below %p is overwritten (a write before a block's start)",
                              (const void *)page, (const void *)block);
        }
        if (page->class_index == CLASS_MEDIUM
                ? medium_slices(page->block_size) != page->slice_count || page->block_size % 16 != 0 ||
                      page->reserved != 1 || page->slice_count > MEDIUM_MAX_SLICES
                : page->class_index >= CLASS_COUNT || page->block_size != class_size[page->class_index])
            return BROKEN("page %p: block size %u, %u slices, %u blocks, class %u", (const void *)page,
                          page->block_size, page->slice_count, page->reserved, page->class_index);
    }
    if ((covered | s->free_mask | s->taken_mask | HEADER_SLICES) != ~(uint64_t)0)
        return BROKEN("segment %p: slices %#llx neither free nor in a page", (const void *)s,
                      (unsigned long long)~(covered | s->free_mask | s->taken_mask | HEADER_SLICES));
    for (unsigned k = 1; k < SLICES_PER_SEGMENT; k++)
        if (((s->free_mask >> k) & 1) &&
            (slice_page_index(&s->slices[k]) != 0 || slice_class(&s->slices[k]) != CLASS_NONE || s->slices[k].carved_key != 0 ||
             s->slices[k].multiplier != 0))
            return BROKEN("segment %p: free slice %u still names page %u class %u", (const void *)s,
                          k, slice_page_index(&s->slices[k]), slice_class(&s->slices[k]));
    if (in_use != s->pages_in_use)
        return BROKEN("segment %p: %u pages in use, counted %u", (const void *)s, in_use,
                      s->pages_in_use);
    /* A slice's charge is at most the slice; the header's slices and the
     * free slices purged since, or taken out to be purged, have none. */
    for (unsigned k = 0; k < SLICES_PER_SEGMENT; k++) {
        bool uncharged = ((HEADER_SLICES | s->taken_mask | (s->free_mask & ~s->dirty_mask)) >> k) & 1;
        if (s->charged_kib[k] > SLICE_SIZE / 1024 || (uncharged && s->charged_kib[k] != 0))
            return BROKEN("segment %p: slice %u charges %u KiB (%s)", (const void *)s, k, s->charged_kib[k],
                          uncharged ? "a header or purged slice" : "more than a slice");
    }
    return NULL;
}

void release_sample_or_report_guard(void *p)
{
    if (!profile_sample_unmark(p))
        report_guard_overwritten(p, small_block_below(p));
}

/* ---- the page of a freed pointer ------------------------------------------ */
/* A pointer into a segment must be the start of a block of a page in use
 * (that it was carved, heap_free_block asks its page's owner): its page, or
 * a report. Reads only what the page's owner does not change while one of
 * its blocks is out. */
struct page *free_segment_page(void *p)
{
    struct segment *segment = segment_of(p);
    const struct slice *slice = &segment->slices[slice_of(p)];
    unsigned class_index = slice_class(slice); /* not the carved key: the owner's */
    if (class_index == CLASS_NONE) /* a medium block freed twice lands here too */
        report_fatal("free of a pointer into memory that is not allocated (a double free?)", p);
    uint32_t in_page = slice_page_offset(slice, (uint32_t)((uintptr_t)p & SEGMENT_MASK));
    struct page *page = &segment->pages[slice_page_index(slice)];
    /* A medium page's one block lies MEDIUM_HEAD bytes in, its guards
     * around it; a small page's blocks are where their keys say. */
    if (class_index == CLASS_MEDIUM ? in_page != MEDIUM_HEAD : !slice_block_start(slice, page, in_page))
        report_fatal("free of a pointer that is not the start of a block", p);
    if (class_index == CLASS_MEDIUM)
        medium_guards_check(page);
    else if (page_surely_carved(page, p) && /* one never carved is reported later, as such */
             unlikely(small_guard_broken(p)))
        release_sample_or_report_guard(p);
    return page;
}
