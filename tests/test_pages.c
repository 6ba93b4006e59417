/* test_pages.c: white-box test of bins, pages and their free lists: blocks
 * reach the thread's bin and go back to their page in batches, a full page
 * rejoins its class's list when a block returns, an empty page returns its
 * slices to the segment, the segment map tells strata pointers from others,
 * dirty slices are purged past the heap's limit, and remote frees wait for
 * the owner; a bin whose list loops where a flush cuts it is reported; a
 * bin grows while its class swings between it and its pages, within the
 * heap's budget, and shrinks once the class is left alone; medium blocks
 * are pages of their own, reused without mappings and grown in place.
 * A carve makes what it writes resident in one call, and nothing more.
 * heap_check() validates every invariant after each step. */
#include <linux/perf_event.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "block_guards.h"
#include "core.h"
#include "heap_private.h"
#include "strata.h"

#define COUNT 8192

static void *blocks[COUNT];

/* Frees another heap's block from a thread with a heap, then allocates. */
struct foreign_probe {
    void *block;
    bool cached, reused, sound;
};
static void *free_and_reuse_elsewhere(void *arg)
{
    struct foreign_probe *probe = arg;
    strata_free(strata_malloc(16)); /* this thread's heap exists from here */
    unsigned c = request_class(2000);
    strata_free(probe->block);
    probe->cached = thread_heap->bins[c].head == probe->block;
    probe->sound = heap_check(thread_heap) == NULL;
    void *again = strata_malloc(2000);
    probe->reused = again == probe->block;
    strata_free(again);
    probe->sound &= heap_check(thread_heap) == NULL;
    return NULL;
}

static void *free_elsewhere(void *p)
{
    strata_free(p);
    return NULL;
}

/* The debug build checks the current page at every refill: a page whose
 * count is off by one stops the next refill with the invariant named. */
static int corrupt_current_page(void)
{
    void *p = strata_malloc(48);
    struct heap *heap = thread_heap;
    unsigned c48 = request_class(48);
    struct page *page = page_of(segment_of(p), p);
    page->capacity++; /* one block more than its lists and bins hold */
    guard_set(page_blocks(page) + (size_t)page->capacity * page->block_size); /* as its carve would have */
    size_t drain = bin_count(heap, &heap->bins[c48]) + 1;
    for (size_t i = 0; i < drain; i++)
        strata_malloc(48);
    return 0; /* not reached in the debug build */
}

/* free(x), k other frees, free(x) again: the bin's list becomes a loop
 * through x. With the bin holding limit/2 - 1 blocks first and k =
 * limit - limit/2, the last free overfills the bin and the flush's cut
 * falls inside the loop, so the part it sends to the pages is exactly as
 * long as the count says. The flush must see the loop anyway: nothing may
 * be both kept in the bin and given back to its page. */
static int loop_at_flush(void)
{
    unsigned c48 = request_class(48);
    (void)strata_malloc(48); /* a heap, a page and a refilled bin */
    struct heap *heap = thread_heap;
    struct bin *bin = &heap->bins[c48];
    uint32_t limit = bin_limit(heap, bin);
    uint32_t k = limit - limit / 2;
    void *x = strata_malloc(48), *others[BIN_MAX_BLOCKS];
    for (uint32_t i = 0; i < k; i++)
        others[i] = strata_malloc(48);
    void *held[BIN_MAX_BLOCKS];
    for (uint32_t i = 0; i < limit / 2 - 1; i++)
        held[i] = strata_malloc(48);
    while (bin_count(heap, bin) > 0) /* empty the bin; no refill until the next call */
        (void)strata_malloc(48);
    for (uint32_t i = 0; i < limit / 2 - 1; i++)
        strata_free(held[i]);
    say_address(x);
    strata_free(x);
    for (uint32_t i = 0; i < k; i++)
        strata_free(others[i]);
    strata_free(x); /* the bin overflows here */
    /* Not reached when the flush reports. Else x is in the bin and on
     * its page: the heap says so. */
    const char *broken = heap_check(thread_heap);
    printf("flush passed; heap_check: %s\n", broken ? broken : "sound");
    return 0;
}

/* This thread's heap, made by a first block if it has none yet. */
static struct heap *own_heap(void)
{
    strata_free(strata_malloc(16));
    return thread_heap;
}

/* Allocates and frees `n` blocks of `size` `rounds` times: each round's
 * frees overflow the bin (a flush) and the next round's allocations empty
 * it (a refill after a flush). */
static void swing(size_t size, size_t n, int rounds)
{
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++)
            blocks[i] = strata_malloc(size);
        for (size_t i = 0; i < n; i++)
            strata_free(blocks[i]);
    }
}

static void sleep_ns(uint64_t ns)
{
    struct timespec t = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    nanosleep(&t, NULL);
}

/* In a new thread (a new heap, its bins never grown), every class swinging
 * while the program holds little (a swing holds at most 128 KiB): the
 * growth stops at the budget's floor. */
static void *swing_holding_little(void *unused)
{
    (void)unused;
    struct heap *heap = own_heap();
    CHECK_CMP(heap->bin_growth, ==, 0);
    CHECK_CMP(bins_growth_budget(), ==, HEAP_BIN_GROWTH_MIN);
    for (size_t size = 16; size <= SMALL_MAX; size += size / 4)
        swing(size, (128 << 10) / size < 512 ? (128 << 10) / size : 512, 6);
    CHECK_CMP(heap->bin_growth, >, HEAP_BIN_GROWTH_MIN / 2);
    CHECK_CMP(heap->bin_growth, <=, HEAP_BIN_GROWTH_MIN);
    CHECK_SOUND(heap_check(heap));
    return NULL;
}

/* A class whose blocks swing between its bin and its pages grows its bin,
 * within the heap's budget however many classes swing, a budget that
 * follows what the program holds; a class left alone for two purge delays,
 * while another keeps the owner busy, shrinks back. */
static void test_adaptive_bins(void)
{
    strata_trim(); /* no parked heap left: the thread below makes a new one */
    pthread_t thread;
    pthread_create(&thread, NULL, swing_holding_little, NULL);
    pthread_join(thread, NULL);

    /* Holding 64 MiB, twice what a quarter to the ceiling needs, the
     * budget is its ceiling. */
    enum { HELD = 512 };
    static void *held[HELD];
    for (int i = 0; i < HELD; i++)
        held[i] = strata_malloc(128 << 10);
    CHECK_CMP(bins_growth_budget(), ==, HEAP_BIN_GROWTH_BYTES);
    struct heap *heap = own_heap();
    unsigned c = request_class(8192);
    struct bin *bin = &heap->bins[c];
    uint32_t base = (uint32_t)(BIN_BYTES / 8192); /* its base limit: BIN_BYTES of 8 KiB blocks */
    uint32_t before = bin_limit(heap, bin);
    swing(8192, 64, 8);
    uint32_t grown = bin_limit(heap, bin);
    CHECK_CMP(grown, >, 2 * before);
    CHECK_CMP(grown, <=, BIN_MAX_BLOCKS);
    CHECK_CMP(heap->bin_growth, >=, (size_t)(grown - base) * 8192);
    CHECK_SOUND(heap_check(heap));

    /* A class of large blocks swinging grows its bin up to
     * BIN_GROWN_MAX_BYTES of them, not to BIN_MAX_BLOCKS (the budget has
     * room for more); its free bursts drain it, its limit kept aside. */
    unsigned large = request_class(16384);
    struct bin *large_bin = &heap->bins[large];
    size_t before_growth = heap->bin_growth;
    swing(16384, 160, 12);
    uint32_t large_grown = heap->bin_drained_limit[large] ? heap->bin_drained_limit[large] : bin_limit(heap, large_bin);
    CHECK_CMP(class_size[large], ==, 18432);
    CHECK_CMP(large_grown, >, BIN_MIN_BLOCKS);
    CHECK_CMP((size_t)large_grown * class_size[large], <=, BIN_GROWN_MAX_BYTES);
    CHECK_CMP(large_grown, ==, (uint32_t)(BIN_GROWN_MAX_BYTES / class_size[large]));
    CHECK_CMP(heap->bin_growth + BIN_GROWN_MAX_BYTES, <, HEAP_BIN_GROWTH_BYTES);
    CHECK_CMP(heap->bin_growth, >, before_growth);
    CHECK_SOUND(heap_check(heap));

    /* Every class swinging: the growth goes past the floor and stops at
     * the ceiling. */
    for (size_t size = 16; size <= SMALL_MAX; size += size / 4)
        swing(size, size <= 4096 ? 512 : 48, 6);
    CHECK_CMP(heap->bin_growth, >, HEAP_BIN_GROWTH_BYTES / 2);
    CHECK_CMP(heap->bin_growth, <=, HEAP_BIN_GROWTH_BYTES);
    CHECK_SOUND(heap_check(heap));
    for (int i = 0; i < HELD; i++)
        strata_free(held[i]);

    /* Only the 48-byte class in use from here: the 8 KiB bin shrinks, its
     * blocks going back to the pages, and its growth to the budget. */
    grown = bin_limit(heap, bin);
    size_t growth = heap->bin_growth;
    uint64_t delay = strata_options.purge_delay_ns;
    for (int period = 0; period < 3; period++) {
        sleep_ns(delay + 2000000);
        swing(48, 4 * BIN_BASE_MAX_BLOCKS, 2 * BIN_AGE_EVERY / 4);
    }
    CHECK_CMP(bin_limit(heap, bin), <, grown);
    CHECK_CMP(bin_count(heap, bin), <=, bin_limit(heap, bin));
    CHECK_CMP(heap->bin_growth, <, growth);
    CHECK_SOUND(heap_check(heap));
}

/* Medium blocks are pages of their own in the heap's segments: freed and
 * allocated again they make no mapping, grow into the free slices after
 * them, come back zeroed from calloc, and return from another thread's
 * free through the owner. */
static void *calloc_elsewhere(void *size)
{
    return strata_calloc(1, (size_t)(uintptr_t)size);
}

static void test_medium_blocks(void)
{
    struct heap *heap = own_heap();
    size_t size = (size_t)1 << 20;
    unsigned char *p = strata_malloc(size);
    CHECK(p != NULL && is_segment_pointer(p));
    /* The block lies MEDIUM_HEAD bytes into its page, after its guard word,
     * its canary after its usable size (the size asked, rounded up to 16):
     * a size of whole slices takes one slice more. */
    CHECK_CMP((uintptr_t)p % SLICE_SIZE, ==, MEDIUM_HEAD);
    struct segment *segment = segment_of(p);
    struct page *page = page_of(segment, p);
    CHECK_CMP(page->class_index, ==, CLASS_MEDIUM);
    CHECK_CMP(page->start + MEDIUM_HEAD, ==, (char *)p);
    CHECK_CMP(page->slice_count, ==, 17);
    CHECK_CMP(strata_usable_size(p), ==, size);
    CHECK_CMP(slice_class(&segment->slices[slice_of(p) + 16]), ==, CLASS_MEDIUM);
    CHECK_CMP(slice_page_index(&segment->slices[slice_of(p) + 16]), ==, slice_of(p));
    CHECK_SOUND(heap_check(heap));
    memset(p, 0xab, size);
    /* Its size rounded up to 16; within a slice's slack it keeps its slices. */
    unsigned char *odd = strata_malloc(SMALL_MAX + 1);
    CHECK_CMP(strata_usable_size(odd), ==, SMALL_MAX + 16);
    CHECK_CMP(page_of(segment_of(odd), odd)->slice_count, ==, 3);
    strata_free(odd);

    /* Into the free slices after it, in place. */
    bool room = slice_of(p) + 24 <= SLICES_PER_SEGMENT &&
                ((segment->free_mask >> (slice_of(p) + 17)) & 0x7f) == 0x7f;
    unsigned char *q = strata_realloc(p, size + 5 * SLICE_SIZE);
    CHECK(q != NULL && q[size - 1] == 0xab);
    if (room) {
        CHECK_CMP(q, ==, p);
        CHECK_CMP(page->slice_count, ==, 22);
        CHECK_CMP(strata_usable_size(q), ==, size + 5 * SLICE_SIZE);
    }
    CHECK_SOUND(heap_check(heap));
    /* Grown within its slices' slack: in place, its canary moved. */
    size_t usable = strata_usable_size(q);
    unsigned char *r = strata_realloc(q, usable + 100);
    CHECK_CMP(r, ==, q);
    CHECK_CMP(strata_usable_size(r), ==, usable + 112);
    memset(r, 0xab, usable + 112);
    CHECK_SOUND(heap_check(heap));
    strata_free(q);
    CHECK_SOUND(heap_check(heap));
    /* Its slices are free again (malloc_usable_size of them stops the
     * program: test_usable_size_misuse). */
    CHECK_CMP(slice_class(&segment->slices[slice_of(q)]), ==, CLASS_NONE);

    /* A loop of medium blocks maps nothing once its slices are resident,
     * and calloc zeroes what the last block left. */
    size_t maps = os_map_count();
    int zeroed = 1;
    for (int i = 0; i < 200; i++) {
        size_t n = SMALL_MAX + 1 + (size_t)i * 15000;
        unsigned char *a = strata_malloc(n), *b = strata_calloc(1, n);
        zeroed &= a != NULL && b != NULL && b[0] == 0 && b[n / 2] == 0 && b[n - 1] == 0;
        if (a != NULL)
            memset(a, 0xcd, n);
        if (b != NULL)
            memset(b, 0xcd, n);
        strata_free(a);
        strata_free(b);
    }
    CHECK(zeroed);
    CHECK_CMP(os_map_count(), <=, maps + 1);
    CHECK_SOUND(heap_check(heap));

    /* Allocated in another thread, freed here: its heap takes it back. */
    pthread_t t;
    void *remote = NULL;
    pthread_create(&t, NULL, calloc_elsewhere, (void *)(uintptr_t)(3 * SLICE_SIZE));
    pthread_join(t, &remote);
    CHECK(remote != NULL && ((unsigned char *)remote)[3 * SLICE_SIZE - 1] == 0);
    strata_free(remote);
    struct strata_stats stats;
    strata_stats_get(&stats);
    CHECK_CMP(stats.allocated, >=, stats.large_bytes);
    CHECK_SOUND(heap_check(heap));
}

/* The first block of a 48-byte slot: a segment pointer in a segment this heap
 * owns, its slice mapped to its class and carved up to its page's end, and
 * the refill that moved every carved block of the page out: one to the
 * caller, the rest to the bin. (The first test: it needs a heap that has
 * not served 48 bytes yet.) */
static void test_first_page(void)
{
    void *first = strata_malloc(48 - SMALL_GUARD_BYTES);
    CHECK(first != NULL && is_segment_pointer(first));
    int local;
    CHECK(!is_segment_pointer(&local));
    CHECK(!is_segment_pointer(NULL));

    struct heap *heap = thread_heap;
    CHECK_CMP(heap, !=, &heap_empty);
    unsigned c48 = request_class(48 - SMALL_GUARD_BYTES);
    struct bin *bin = &heap->bins[c48];
    struct segment *segment = segment_of(first);
    struct page *page = page_of(segment, first);
    CHECK_CMP(atomic_load(&segment->owner), ==, heap->owner_word);
    CHECK_CMP(slice_class(&segment->slices[slice_of(first)]), ==, c48);
    /* The slice knows where its page's carving stops: its carved key takes
     * the page's carved blocks' starts, and nothing else (not its lead,
     * a slot whose last word is the first block's guard). */
    const struct slice *slice = &segment->slices[slice_of(first)];
    CHECK_CMP(slice->carved_key, ==, page->capacity * class_block_key[c48]);
    CHECK_CMP(slice_first_block(slice), ==, ((uintptr_t)page->start & SEGMENT_MASK) + 48);
    CHECK_CMP(slice_page_index(slice), ==, slice_of(page->start));
    uint32_t page_offset = (uint32_t)((uintptr_t)page_blocks(page) & SEGMENT_MASK);
    CHECK(!slice_holds_block(slice, (uint32_t)((uintptr_t)page->start & SEGMENT_MASK)));
    CHECK(slice_holds_block(slice, page_offset));
    CHECK(slice_holds_block(slice, page_offset + (page->capacity - 1) * 48));
    CHECK(!slice_holds_block(slice, page_offset + page->capacity * 48));
    CHECK(!slice_holds_block(slice, page_offset + 8));
    CHECK(!slice_holds_block(slice, page_offset + 48 + 16));
    CHECK(page->in_use);
    CHECK_CMP(page->block_size, ==, 48);
    CHECK_CMP(heap->current[c48], ==, page);
    /* The refill moved every carved block: one to the caller, the rest to
     * the bin, so the page's own list is empty. */
    CHECK(page->free == NULL);
    CHECK_CMP(page->used, ==, page->capacity);
    CHECK_CMP(bin_count(heap, bin), ==, page->capacity - 1);
    CHECK_SOUND(heap_check(heap));
    strata_free(first);
}

/* Page-fault traps of the calling thread from now, or -1 where the kernel
 * refuses to count them (perf_event_paranoid). */
static int trap_counter(void)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_PAGE_FAULTS;
    attr.exclude_kernel = 1;
    return (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0);
}

static long traps_counted(int counter)
{
    long long count = -1;
    if (read(counter, &count, sizeof count) != (ssize_t)sizeof count)
        count = -1;
    close(counter);
    return (long)count;
}

/* Whether the OS page at p is resident. */
static bool page_resident(const void *p)
{
    unsigned char in_core = 0;
    CHECK_CMP(mincore((void *)p, 1, &in_core), ==, 0);
    return (in_core & 1) != 0;
}

/* A carve of fresh or purged memory makes the OS pages of its blocks
 * resident in one call, before it writes them (no trap a page), and no
 * other: for blocks of a page or less every page from the guard word
 * below the first block (the lead's last word, for a page's first
 * carve) up to the last carved block's end (its tail too, which the
 * program writes and the next carve would reach), none after; for larger
 * blocks their heads' pages and the pages of the guard words below them
 * and after the last only (the pages between are the program's, unless
 * the class is written whole: pages_written_whole). */
static void test_carve_populates(void)
{
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t page_mask = ~(uintptr_t)(os_page - 1);
    strata_trim(); /* the free slices purged: the next pages come on clean ones */
    int counter = trap_counter();
    char *p = strata_malloc(os_page - SMALL_GUARD_BYTES); /* the first of its class here: a new page, 4 blocks carved */
    long traps = counter >= 0 ? traps_counted(counter) : -1;
    struct page *page = page_of(segment_of(p), p);
    CHECK_CMP(page->block_size, ==, os_page);
    CHECK(page->capacity > 0 && page->capacity < page->reserved);
    uintptr_t from = ((uintptr_t)page_blocks(page) - 8) & page_mask;
    uintptr_t to = ((uintptr_t)page_blocks(page) + (size_t)page->capacity * page->block_size + os_page - 1) & page_mask;
    CHECK_CMP(page->touched, ==, to - (uintptr_t)page->start);
    for (uintptr_t at = from; at < to; at += os_page)
        CHECK(page_resident((char *)at));
    CHECK(!page_resident((char *)to));
    for (uintptr_t at = (uintptr_t)page->start; at < from; at += os_page)
        CHECK(!page_resident((char *)at)); /* the lead's pages below its last word */
    /* One page's trap a carve without the call would take; one at most
     * with it (AddressSanitizer's build may trap once on the shadow of the
     * new pages). */
    CHECK_CMP((to - from) / os_page, >=, 4);
    if (traps >= 0)
        CHECK_CMP(traps, <=, 1);
    else
        printf("note: page-fault traps not counted here (perf events refused); residency checked\n");
    strata_free(p);

    /* Blocks of 1280 bytes, carved four at a time: every page from the
     * first block's guard word to the last block's tail resident. */
    char *tail_block = strata_malloc(1280 - SMALL_GUARD_BYTES);
    page = page_of(segment_of(tail_block), tail_block);
    CHECK_CMP(page->block_size, ==, 1280);
    char *tail = page_blocks(page) + (size_t)page->capacity * 1280 - 1;
    for (uintptr_t at = ((uintptr_t)page_blocks(page) - 8) & page_mask; at <= (uintptr_t)tail; at += os_page)
        CHECK(page_resident((char *)at));
    strata_free(tail_block);

    /* A class of blocks over an OS page: each block's head page (the
     * carve writes its two words there) and the page of the guard word
     * below it resident, a run of adjacent ones a call, and none of the
     * pages between them. */
    counter = trap_counter();
    char *q = strata_malloc(3 * os_page - SMALL_GUARD_BYTES);
    traps = counter >= 0 ? traps_counted(counter) : -1;
    page = page_of(segment_of(q), q);
    CHECK(page->capacity >= 4 && page->block_size > os_page);
    uintptr_t base = (uintptr_t)page_blocks(page);
    for (uint32_t i = 0; i < page->capacity; i++) {
        uintptr_t head = (base + (uintptr_t)i * page->block_size) & page_mask;
        uintptr_t next_guard = (base + (uintptr_t)(i + 1) * page->block_size - 8) & page_mask;
        CHECK(page_resident((char *)head));
        CHECK(page_resident((char *)next_guard));
        for (uintptr_t between = head + os_page; between < next_guard; between += os_page)
            CHECK(!page_resident((char *)between));
    }
    uintptr_t last_guard = (base + (uintptr_t)page->capacity * page->block_size - 8) & page_mask;
    CHECK_CMP(page->touched, ==, last_guard + os_page - (uintptr_t)page->start);
    /* A trap a head without the calls; AddressSanitizer's build may trap
     * on two pages of the shadow of the carve's range. */
    if (traps >= 0)
        CHECK_CMP(traps, <=, 2);
    strata_free(q);

    struct heap *heap = thread_heap;
    CHECK_SOUND(heap_check(heap));
}

#define WRITTEN_MAX 256 /* blocks allocate_written makes at most */

/* Blocks of `size` into `held` (at most WRITTEN_MAX) until the heap has
 * moved past `pages` new pages of their class, each written whole or only
 * at its two ends; returns how many, which the caller frees. */
static size_t allocate_written(size_t size, bool whole, size_t pages, char **held)
{
    size_t count = 0;
    struct page *last = NULL;
    size_t pages_seen = 0;
    while (pages_seen <= pages && count < WRITTEN_MAX) {
        char *p = strata_malloc(size);
        CHECK(p != NULL);
        if (whole)
            memset(p, 'w', size);
        else
            p[0] = p[size - 1] = 'e';
        struct page *page = page_of(segment_of(p), p);
        if (page != last) {
            pages_seen++;
            last = page;
        }
        held[count++] = p;
    }
    return count;
}

/* Whether every OS page of the block is resident. */
static bool block_resident(const char *p, size_t size)
{
    uintptr_t os_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uintptr_t at = (uintptr_t)p & ~(os_page - 1); at < (uintptr_t)p + size; at += os_page)
        if (!page_resident((const void *)at))
            return false;
    return true;
}

/* A class whose blocks the program writes whole has its new pages'
 * carves made resident whole (one call, no trap a page); one whose blocks
 * it writes in part keeps the heads-only carve, its blocks' middle pages
 * left to the program; and a class that changes is followed at its next
 * probe page, at most DENSITY_PROBE_EVERY (8) new pages later. */
static void test_pages_written_whole(void)
{
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    size_t dense = 3 * os_page, sparse = 5 * os_page; /* two classes, a page of each holds 16 */
    unsigned dense_class = small_class(dense), sparse_class = small_class(sparse);
    CHECK(dense_class != sparse_class);
    struct heap *heap = own_heap();
    strata_trim(); /* fresh or purged slices: what is resident is what was written */
    char *held[2 * WRITTEN_MAX + 64];

    /* Written whole: after the first (probe) page is spent, new pages
     * populate their carves whole. */
    size_t count = allocate_written(dense, true, 2, held);
    CHECK_CMP(heap->populate_whole[dense_class], ==, 1);
    char *fresh = strata_malloc(dense);
    struct page *page = page_of(segment_of(fresh), fresh);
    while (!page->populate_whole && count < WRITTEN_MAX + 60) { /* past a probe page, should one come */
        held[count++] = fresh;
        fresh = strata_malloc(dense);
        page = page_of(segment_of(fresh), fresh);
    }
    CHECK(page->populate_whole);
    CHECK(block_resident(fresh, dense)); /* before the program writes it */
    held[count++] = fresh;

    /* Written at the ends: heads only, the middle pages not resident. */
    size_t sparse_from = count;
    count += allocate_written(sparse, false, 2, held + count);
    CHECK_CMP(heap->populate_whole[sparse_class], ==, 0);
    char *part = strata_malloc(sparse);
    page = page_of(segment_of(part), part);
    CHECK(!page->populate_whole);
    uintptr_t head = (uintptr_t)part & ~(uintptr_t)(os_page - 1);
    CHECK(!page_resident((const void *)(head + 2 * os_page))); /* a middle page, never written */
    strata_free(part);
    for (size_t i = sparse_from; i < count; i++)
        strata_free(held[i]);
    count = sparse_from;

    /* The whole-written class now written at its ends only (its blocks so
     * far kept, so that new pages come, on purged slices): within 8 new
     * pages its probe is spent and the class goes back to heads only. */
    strata_trim();
    char *more[WRITTEN_MAX];
    size_t made = allocate_written(dense, false, 10, more);
    CHECK_CMP(heap->populate_whole[dense_class], ==, 0);
    for (size_t i = 0; i < made; i++)
        strata_free(more[i]);
    for (size_t i = 0; i < count; i++)
        strata_free(held[i]);
    CHECK_SOUND(heap_check(heap));
}

/* A medium block's pages past its guards are the program's to touch,
 * but where it is about to be written whole: zeroed by calloc, grown in
 * place by realloc (a program grows a block to write it) or moved by
 * realloc (the copy, and the writes past it), into a medium block or a
 * large one. Those are made resident in one call, not a trap a page. */
static void test_medium_populated(void)
{
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE), size = (size_t)1 << 20;
    strata_trim(); /* the free slices purged: what is resident is what was touched */
    char *plain = strata_malloc(size);
    CHECK(plain != NULL && !page_resident((void *)((uintptr_t)(plain + size / 2) & ~(uintptr_t)(os_page - 1))));

    int counter = trap_counter();
    char *zeroed = strata_calloc(1, size);
    long traps = counter >= 0 ? traps_counted(counter) : -1;
    CHECK(zeroed != NULL && zeroed[0] == 0 && zeroed[size - 1] == 0);
    struct page *page = page_of(segment_of(zeroed), zeroed);
    CHECK_CMP(page->touched, >=, MEDIUM_HEAD + size);
    /* 256 traps without the call; AddressSanitizer's build traps on the
     * block's shadow, an eighth of its pages. */
    if (traps >= 0)
        CHECK_CMP(traps, <=, (long)(size / os_page / 4));
    else
        printf("note: page-fault traps not counted here (perf events refused); touched bytes checked\n");

    /* Grown in place where the slices after it are free, else moved. */
    char *grown = strata_malloc(size / 4);
    memset(grown, 'g', size / 4);
    char *before = grown;
    grown = strata_realloc(grown, size);
    CHECK(grown != NULL && grown[size / 4 - 1] == 'g');
    printf("a 256 KiB block grown to 1 MiB %s\n", grown == before ? "in place" : "by a move");
    CHECK(block_resident(grown, size));

    /* A small block moved into a medium one, and that into a large one. */
    char *small = strata_malloc(1000);
    memset(small, 's', 1000);
    char *medium = strata_realloc(small, size);
    CHECK(medium != NULL && is_segment_pointer(medium) && medium[999] == 's');
    CHECK(block_resident(medium, size));
    char *large = strata_realloc(medium, MEDIUM_MAX + size);
    CHECK(large != NULL && !is_segment_pointer(large) && large[999] == 's');
    CHECK(block_resident(large, MEDIUM_MAX + size));

    strata_free(plain);
    strata_free(zeroed);
    strata_free(grown);
    strata_free(large);
    CHECK_SOUND(heap_check(thread_heap));
}

/* A bin's word keeps its count, its limit and the class's sample
 * countdown apart: pops take the countdown down one each, pushes leave it;
 * a pop that would spend it goes to the slow path, whose allocation is the
 * one picked (the profiler off: the bin's block, the countdown drawn again,
 * which off is BIN_COUNTDOWN_OFF). */
static void test_sample_countdown(void)
{
    struct heap *heap = own_heap();
    unsigned c = request_class(48);
    struct bin *bin = &heap->bins[c];
    strata_free(strata_malloc(48)); /* a refilled bin */
    CHECK_CMP(bin_count(heap, bin), >=, 3);
    CHECK_CMP(bin_countdown(bin), >, INT32_MAX / 2); /* off: far from spent */
    uint32_t count = bin_count(heap, bin), limit = bin_limit(heap, bin);
    bin_set_countdown(bin, 1);
    void *first = strata_malloc(48);
    CHECK_CMP(bin_countdown(bin), ==, 0);
    CHECK_CMP(bin_count(heap, bin), ==, count - 1);
    struct block *next = bin->head;
    void *second = strata_malloc(48); /* spent: the slow path */
    CHECK_CMP(second, ==, next);
    CHECK_CMP(bin_countdown(bin), ==, BIN_COUNTDOWN_OFF);
    CHECK_CMP(bin_count(heap, bin), ==, count - 2);
    CHECK_CMP(bin_limit(heap, bin), ==, limit);
    strata_free(second);
    strata_free(first);
    CHECK_CMP(bin_countdown(bin), ==, BIN_COUNTDOWN_OFF);
    CHECK_CMP(bin_count(heap, bin), ==, count);
    CHECK_SOUND(heap_check(heap));
}

/* A block handed out holds no free block's words. A free lands in the bin,
 * not the page, as a free block whose check word agrees with its encoded
 * link; the link is not the plain pointer. */
static void test_free_to_bin(void)
{
    struct heap *heap = own_heap();
    struct bin *bin = &heap->bins[request_class(48)];
    void *block = strata_malloc(48);
    struct page *page = page_of(segment_of(block), block);
    CHECK(!block_is_free(block));
    uint32_t before = bin_count(heap, bin), used = page->used;
    struct block *second = bin->head;
    strata_free(block);
    CHECK_CMP(bin_count(heap, bin), ==, before + 1);
    CHECK_CMP(bin->head, ==, block);
    CHECK_CMP(page->used, ==, used);
    CHECK(block_is_free(block));
    CHECK_CMP(block_next(block), ==, second);
    CHECK_CMP(((struct block *)block)->link, !=, (uintptr_t)second);
    /* Its link changed behind the allocator's back: no longer a free block. */
    ((struct block *)block)->link ^= 64;
    CHECK(!block_is_free(block));
    ((struct block *)block)->link ^= 64;
    CHECK(block_is_free(block));
}

/* Overfilling the bin sends half of it back to the pages. */
static void test_bin_flush(void)
{
    struct heap *heap = own_heap();
    struct bin *bin = &heap->bins[request_class(48)];
    size_t n = bin_limit(heap, bin) + 8;
    for (size_t i = 0; i < n; i++)
        blocks[i] = strata_malloc(48);
    CHECK_SOUND(heap_check(heap));
    for (size_t i = 0; i < n; i++)
        strata_free(blocks[i]);
    CHECK_CMP(bin_count(heap, bin), <=, bin_limit(heap, bin));
    CHECK_CMP(bin_count(heap, bin), >=, bin_limit(heap, bin) / 2);
    CHECK_CMP(heap->bin_drained_limit[request_class(48)], ==, 0);
    CHECK_SOUND(heap_check(heap));
}

/* How many times the list from `head` meets p, in at most `limit` links. */
static size_t times_listed(struct block *head, const void *p, size_t limit)
{
    size_t found = 0;
    for (size_t steps = 0; head != NULL && steps < limit; steps++, head = block_next(head))
        found += (const void *)head == p;
    return found;
}

static void check_handed_out_once(struct heap *heap, size_t count, size_t size);

/* A flush gives the bin's blocks back a run at a time (the blocks of one
 * page that follow each other in the bin, spliced whole): freed in runs of
 * 1 to 4 blocks of one page, pages taken in turn, every freed block ends
 * up once in the bin or on its own page's free list, the heap sound. */
static void test_flush_runs(void)
{
    struct heap *heap = own_heap();
    unsigned c = request_class(1024);
    struct bin *bin = &heap->bins[c];
    enum { PAGES = 3 };
    size_t total = 0;
    for (; total < COUNT; total++) {
        blocks[total] = strata_malloc(1024);
        if (page_of(segment_of(blocks[total]), blocks[total]) !=
            page_of(segment_of(blocks[0]), blocks[0]))
            break;
    }
    size_t per_page = total++; /* blocks[total] was the next page's first */
    for (; total < per_page * PAGES; total++)
        blocks[total] = strata_malloc(1024);
    while (bin_count(heap, bin) > 0) /* the bin empty: the flush moves known blocks */
        blocks[total++] = strata_malloc(1024);
    uint32_t limit = bin_limit(heap, bin); /* refilled: its full limit, not the pass limit */
    CHECK_CMP((size_t)limit + 1, <=, per_page * PAGES);
    /* blocks[page * per_page + k] is block k of page `page`: freed in runs
     * of 1, 2, 3, 4 blocks of one page, the pages in turn. */
    void *order[COUNT];
    size_t next[PAGES] = {0}, freed = 0;
    for (size_t run = 0; freed <= limit; run++) {
        size_t page = run % PAGES, length = 1 + run % 4;
        for (size_t k = 0; k < length && freed <= limit && next[page] < per_page; k++)
            order[freed++] = blocks[page * per_page + next[page]++];
    }
    CHECK_CMP(freed, ==, (size_t)limit + 1);
    for (size_t i = 0; i < freed; i++)
        strata_free(order[i]);
    CHECK_CMP(bin_count(heap, bin), ==, limit / 2); /* one flush */
    CHECK_SOUND(heap_check(heap));
    size_t once = 0;
    for (size_t i = 0; i < freed; i++) {
        struct page *page = page_of(segment_of(order[i]), order[i]);
        size_t listed = times_listed(bin->head, order[i], BIN_MAX_BLOCKS);
        listed += times_listed(page->free, order[i], page->reserved);
        once += listed == 1;
    }
    CHECK_CMP(once, ==, freed);
    for (size_t i = 0; i < total; i++) {
        bool was_freed = false;
        for (size_t j = 0; j < freed; j++)
            was_freed |= blocks[i] == order[j];
        if (!was_freed)
            strata_free(blocks[i]);
    }
    CHECK_SOUND(heap_check(heap));
    check_handed_out_once(heap, per_page * PAGES, 1024);
}

/* A class whose frees outrun its allocations, flush after flush, drains:
 * its bin goes back whole and its frees go to their pages, which empty and
 * go back to their segment, none held by a block left in the bin, and the
 * current page starts again from its first block; the class's next
 * allocation gives the bin its limit back. One flush alone
 * (test_bin_flush) drains nothing. */
static void test_bin_drain(void)
{
    struct heap *heap = own_heap();
    unsigned c = request_class(72);
    struct bin *bin = &heap->bins[c];
    void *probe = strata_malloc(72);
    size_t per_page = page_of(segment_of(probe), probe)->reserved;
    strata_free(probe);
    size_t total = per_page * 8;
    CHECK_CMP(total, <=, sizeof blocks / sizeof blocks[0]);
    CHECK_CMP(total, >, (size_t)(BIN_DRAIN_FLUSHES + 1) * BIN_MAX_BLOCKS);
    for (size_t i = 0; i < total; i++)
        blocks[i] = strata_malloc(72);
    uint32_t limit = bin_limit(heap, bin);
    CHECK_CMP(heap->bin_drained_limit[c], ==, 0);
    CHECK_SOUND(heap_check(heap));
    /* Freed in an order that visits every page in turn, as a tree's
     * destruction does: each flush's blocks spread over all the pages. */
    size_t stride = total % 7919 ? 7919 : 7907; /* a prime not dividing total: every block once */
    for (size_t i = 0; i < total; i++)
        strata_free(blocks[i * stride % total]);
    CHECK_CMP(bin_limit(heap, bin), ==, 0);
    CHECK_CMP(bin_count(heap, bin), ==, 0);
    CHECK_CMP(heap->bin_drained_limit[c], ==, limit);
    CHECK_SOUND(heap_check(heap));
    size_t pinned = 0;
    for (size_t i = 0; i < total; i++) {
        struct page *page = page_of(segment_of(blocks[i]), blocks[i]);
        pinned += page->in_use && page != heap->current[c];
    }
    CHECK_CMP(pinned, ==, 0);
    /* The current page, emptied, starts again from its first block: the
     * next allocations are its blocks in address order. */
    struct page *current = heap->current[c];
    CHECK(current != NULL && current->used == 0);
    CHECK_CMP(current->capacity, ==, 0);
    CHECK(current->free == NULL);
    CHECK_CMP(segment_of(current->start)->slices[slice_of(current->start)].carved_key, ==, 0);
    enum { AGAIN = 16 };
    char *again[AGAIN];
    for (int i = 0; i < AGAIN; i++)
        again[i] = strata_malloc(72);
    CHECK(again[0] == page_blocks(current));
    int in_order = 1;
    for (int i = 1; i < AGAIN; i++)
        in_order &= again[i] == again[i - 1] + current->block_size;
    CHECK(in_order);
    CHECK_CMP(bin_limit(heap, bin), >=, limit);
    CHECK_CMP(heap->bin_drained_limit[c], ==, 0);
    CHECK_SOUND(heap_check(heap));
    for (int i = 0; i < AGAIN; i++)
        strata_free(again[i]);
}

/* Fill whole pages; then return every block: pages that are not current go
 * back to their segment, their slices marked free. */
static void test_empty_pages(void)
{
    struct heap *heap = own_heap();
    unsigned c48 = request_class(48);
    void *probe = strata_malloc(48);
    size_t per_page = page_of(segment_of(probe), probe)->reserved;
    strata_free(probe);
    size_t total = per_page * 3;
    for (size_t i = 0; i < total; i++)
        blocks[i] = strata_malloc(48);
    struct page *full = page_of(segment_of(blocks[0]), blocks[0]);
    CHECK_SOUND(heap_check(heap));
    int some_full = 0;
    for (size_t i = 0; i < total; i++) {
        struct page *p = page_of(segment_of(blocks[i]), blocks[i]);
        some_full |= p->free == NULL && p->used == p->reserved && p != heap->current[c48];
    }
    CHECK(some_full);
    for (size_t i = 0; i < total; i++)
        strata_free(blocks[i]);
    CHECK_SOUND(heap_check(heap));
    unsigned full_slice = slice_of(blocks[0]);
    if (full != heap->current[c48]) {
        CHECK(!full->in_use);
        CHECK((segment_of(blocks[0])->free_mask >> full_slice) & 1);
        CHECK_CMP(slice_class(&segment_of(blocks[0])->slices[full_slice]), ==, CLASS_NONE);
        CHECK_CMP(segment_of(blocks[0])->slices[full_slice].carved_key, ==, 0);
    }
}

/* Freed slices stay resident for reuse, then are purged once they have been
 * unused through a whole delay; past the dirty limit, at once. */
static void test_purge_delay(void)
{
    struct heap *heap = own_heap();
    size_t count = 40 * (SLICE_SIZE / 8192); /* 40 slices of 8000-byte blocks */
    CHECK_CMP(count, <=, COUNT);
    for (size_t i = 0; i < count; i++) {
        blocks[i] = strata_malloc(8000);
        memset(blocks[i], 1, 8000);
    }
    for (size_t i = 0; i < count; i++)
        strata_free(blocks[i]);
    CHECK_CMP(heap->dirty_slices, >=, 30);
    CHECK_SOUND(heap_check(heap));
    size_t resident_dirty = resident_bytes();
    struct timespec pause = {0, (long)(strata_options.purge_delay_ns * 5 / 2)};
    for (int step = 0; step < 2; step++) {
        nanosleep(&pause, NULL);
        heap_maybe_purge(heap); /* what the next page release or new page does */
    }
    CHECK_CMP(heap->dirty_slices, ==, 0);
    CHECK_CMP(resident_bytes() + 25 * SLICE_SIZE, <=, resident_dirty);
    CHECK_SOUND(heap_check(heap));
    /* Pretend: the count alone decides. Past HANDED_DIRTY_MAX the heap
     * purges at once itself, whether or not a purger runs to hand it to. */
    heap->dirty_slices += HANDED_DIRTY_MAX + 1;
    heap_maybe_purge(heap);
    CHECK_CMP(heap->dirty_slices, ==, 0);
}

/* The heap's purge past its limit, as the free path waits on it: whether
 * it is handed over or not. */
static bool handoff_settled(struct heap *heap)
{
    os_lock_take(&heap->lock);
    bool settled = atomic_load(&heap->purge_handoff) == PURGE_NOT_HANDED && heap->dirty_slices <= HEAP_DIRTY_LIMIT;
    os_lock_give(&heap->lock);
    return settled;
}

/* Whether it settles within `ms` milliseconds. */
static bool handoff_settles_within(struct heap *heap, int ms)
{
    for (int waited = 0; !handoff_settled(heap) && waited < ms; waited++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    return handoff_settled(heap);
}

/* In a child with a purge delay of 2 s (no aged purge meddles): medium
 * pages of 3 slices, a little more than the dirty limit, written and
 * freed, three times. Past the limit the heap hands its purge to the
 * purger thread: the freeing thread makes no purge call, the purger gives
 * the slices back soon after, and the pages made again from them hold what
 * is written into them. A heap that went past the limit while the purger
 * held its purge taken is handed over again when that purge ends. Past
 * HANDED_DIRTY_MAX free slices with the purge still handed (the purger
 * starved), the heap purges itself. Exit status: 0, or the step that
 * failed. */
static int limit_purge_handed(void)
{
    enum { PAGE_BYTES = 3 * SLICE_SIZE, PAGES = HEAP_DIRTY_LIMIT / 3 + 16, MORE = HANDED_DIRTY_MAX / 3 + 16 };
    static char *page[MORE];
    purger_ask();
    strata_free(strata_malloc(16)); /* the allocation starts the purger asked for */
    struct heap *heap = thread_heap;
    if (atomic_load(&purger_request) != PURGER_TAKEN) {
        printf("no purger thread\n");
        return 2;
    }
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < PAGES; i++) {
            page[i] = strata_malloc(PAGE_BYTES);
            memset(page[i], (i + round) & 0xff, PAGE_BYTES);
        }
        for (int i = 0; i < PAGES; i++)
            for (size_t at = 0; at < PAGE_BYTES; at += 4096)
                if (page[i][at] != (char)((i + round) & 0xff)) {
                    printf("round %d: page %d lost its contents at %zu\n", round, i, at);
                    return 3;
                }
        if (heap->purge_stretch != 0) {
            printf("round %d: the limit stretched\n", round);
            return 4;
        }
        size_t calls = os_purge_count_here(), purged = os_purged_bytes();
        for (int i = 0; i < PAGES; i++)
            strata_free(page[i]);
        if (os_purge_count_here() != calls) {
            printf("round %d: the freeing thread made %zu purge calls\n", round, os_purge_count_here() - calls);
            return 5;
        }
        if (!handoff_settles_within(heap, 20000)) {
            printf("round %d: the purge handed over never ended (%zu dirty slices)\n", round, heap->dirty_slices);
            return 6;
        }
        if (os_purged_bytes() - purged < (size_t)HEAP_DIRTY_LIMIT * SLICE_SIZE) {
            printf("round %d: %zu bytes purged\n", round, os_purged_bytes() - purged);
            return 7;
        }
        const char *broken = heap_check(heap);
        if (broken != NULL) {
            printf("round %d: %s\n", round, broken);
            return 8;
        }
    }
    /* Past the limit while the purger held a purge taken: the owner's
     * frees hand nothing, and once done it never comes back to; the end of
     * the purger's purge hands it again. */
    for (int i = 0; i < PAGES; i++)
        page[i] = strata_malloc(PAGE_BYTES);
    os_lock_take(&heap->lock);
    atomic_store(&heap->purge_handoff, PURGE_TAKEN);
    os_lock_give(&heap->lock);
    for (int i = 0; i < PAGES; i++)
        strata_free(page[i]);
    os_lock_take(&heap->lock);
    if (heap->dirty_slices <= HEAP_DIRTY_LIMIT) {
        printf("freed past the limit, %zu dirty slices\n", heap->dirty_slices);
        return 11;
    }
    heap_purge_handed_end(heap); /* what the purger's purge ends with */
    os_lock_give(&heap->lock);
    purger_ring(); /* the purger, its caller, would look at the flag before it waits */
    /* Within 1.5 s, before the purger's rounds would purge them as idle
     * (two delays without a check, 4 s). */
    if (!handoff_settles_within(heap, 1500)) {
        printf("not handed again: %zu dirty slices\n", heap->dirty_slices);
        return 12;
    }
    /* Not rung, the purger never looks at a purge handed this way. */
    os_lock_take(&heap->lock);
    atomic_store(&heap->purge_handoff, PURGE_HANDED);
    os_lock_give(&heap->lock);
    for (int i = 0; i < MORE; i++)
        page[i] = strata_malloc(PAGE_BYTES);
    size_t calls = os_purge_count_here();
    for (int i = 0; i < MORE; i++)
        strata_free(page[i]);
    if (os_purge_count_here() == calls || heap->dirty_slices > HANDED_DIRTY_MAX) {
        printf("past the handed limits: %zu purge calls, %zu dirty slices\n", os_purge_count_here() - calls,
               heap->dirty_slices);
        return 9;
    }
    os_lock_take(&heap->lock);
    atomic_store(&heap->purge_handoff, PURGE_NOT_HANDED);
    os_lock_give(&heap->lock);
    const char *broken = heap_check(heap);
    if (broken != NULL) {
        printf("at the end: %s\n", broken);
        return 10;
    }
    return 0;
}

static void test_limit_purge_handed(void)
{
    if (!children_runnable())
        return;
    struct outcome o = check_spawn_within("limit-purge-handed", "STRATA_PURGE_DELAY_MS=2000", 120);
    CHECK(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0);
    if (!WIFEXITED(o.status) || WEXITSTATUS(o.status) != 0)
        fprintf(stderr, "child said: %s\n", o.output);
}

/* In a new thread (a segment of its own, filled from its first slice):
 * medium pages of 3 slices, every other one freed and purged (one call
 * each: live pages lie between), then the others freed: they lie between
 * purged slices, and go back with one call. */
static void *purge_runs_in_thread(void *unused)
{
    (void)unused;
    /* A block of 3 slices, its guards counted. */
    enum { PAGES = 17, PAGE_BYTES = 3 * SLICE_SIZE, BLOCK_BYTES = PAGE_BYTES - MEDIUM_HEAD - MEDIUM_TAIL };
    struct heap *heap = own_heap();
    CHECK(heap->segments != NULL && heap->segments->next == NULL);
    char *page[PAGES];
    for (int i = 0; i < PAGES; i++) {
        page[i] = strata_malloc(BLOCK_BYTES);
        memset(page[i], 1, BLOCK_BYTES);
    }
    for (int i = 1; i < PAGES; i++)
        CHECK(page[i] == page[0] + (size_t)i * PAGE_BYTES); /* one run, so one segment */
    for (int i = 0; i < PAGES - 1; i += 2)
        strata_free(page[i]);
    os_lock_take(&heap->lock);
    size_t calls = os_purge_count(), purged = os_purged_bytes();
    heap_purge_dirty(heap);
    CHECK_CMP(os_purge_count() - calls, ==, (size_t)(PAGES / 2));
    CHECK_CMP(os_purged_bytes() - purged, ==, (size_t)(PAGES / 2) * PAGE_BYTES);
    os_lock_give(&heap->lock);
    for (int i = 1; i < PAGES - 1; i += 2)
        strata_free(page[i]);
    os_lock_take(&heap->lock);
    calls = os_purge_count();
    purged = os_purged_bytes();
    heap_purge_dirty(heap);
    CHECK_CMP(os_purge_count() - calls, ==, 1);
    /* Counted once: only the slices resident until this purge. */
    CHECK_CMP(os_purged_bytes() - purged, ==, (size_t)(PAGES / 2) * PAGE_BYTES);
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap));
    /* Purged and closed, the slices open again for a new page. */
    char *again = strata_malloc(BLOCK_BYTES);
    memset(again, 2, BLOCK_BYTES);
    CHECK(segment_of(again) == segment_of(page[0]));
    strata_free(again);
    strata_free(page[PAGES - 1]);
    return NULL;
}

static void test_purge_runs(void)
{
    pthread_t thread;
    strata_trim(); /* no parked heap for the thread: a fresh one, and a new segment */
    pthread_create(&thread, NULL, purge_runs_in_thread, NULL);
    pthread_join(thread, NULL);
}

/* A fork while the purger holds slices of the heap outside its lock (the
 * purge handed and taken): the child has no purger to give them back, so
 * its fork handler does, free and closed, and no purge stays handed. Made
 * here by hand, as the purger leaves it between its take and its give-back
 * (the closed free slices of a segment, which a take reaches over too). */
static void test_fork_with_purge_taken(void)
{
    struct heap *heap = own_heap();
    void *page = strata_malloc(3 * SLICE_SIZE); /* a segment with free slices beside it */
    CHECK(page != NULL);
    struct segment *segment = segment_of(page);
    os_lock_take(&heap->lock);
    uint64_t slices = segment->free_mask & ~segment->dirty_mask;
    CHECK(slices != 0);
    uint64_t purged = segment->purged_mask & slices;
    segment->purged_mask &= ~slices;
    segment->free_mask &= ~slices;
    segment->taken_mask = slices;
    atomic_store(&heap->purge_handoff, PURGE_TAKEN);
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap)); /* taken slices are neither free nor a page's */
    pid_t child = fork();
    if (child == 0) {
        int broken = heap_check(heap) != NULL;
        int kept = segment->taken_mask != 0 || (segment->free_mask & slices) != slices;
        int handed = atomic_load(&heap->purge_handoff) != PURGE_NOT_HANDED;
        void *again = strata_malloc(3 * SLICE_SIZE); /* the slices open for a page again */
        if (again != NULL)
            memset(again, 1, 3 * SLICE_SIZE);
        _exit(broken | kept << 1 | handed << 2 | (again == NULL) << 3);
    }
    CHECK(child > 0);
    int status = -1;
    CHECK_CMP(waitpid(child, &status, 0), ==, child);
    CHECK(WIFEXITED(status));
    CHECK_CMP(WEXITSTATUS(status), ==, 0);
    os_lock_take(&heap->lock);
    segment->free_mask |= slices;
    segment->taken_mask = 0;
    segment->purged_mask |= purged;
    atomic_store(&heap->purge_handoff, PURGE_NOT_HANDED);
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap));
    strata_free(page);
}

/* Allocating and freeing across page boundaries maps nothing new. */
static void test_no_mapping_in_loop(void)
{
    struct heap *heap = own_heap();
    size_t maps = os_map_count();
    for (int round = 0; round < 1000; round++) {
        for (size_t i = 0; i < 300; i++)
            blocks[i] = strata_malloc(512);
        for (size_t i = 0; i < 300; i++)
            strata_free(blocks[i]);
    }
    CHECK_CMP(os_map_count(), ==, maps);
    CHECK_SOUND(heap_check(heap));
}

/* A block freed by a thread without a heap waits on its page's remote list,
 * the page on its owner's stack, until the owner's current page for that
 * class runs dry. */
static void test_remote_free(void)
{
    struct heap *heap = own_heap();
    unsigned c2000 = request_class(2000);
    void *shared = strata_malloc(2000);
    struct page *shared_page = page_of(segment_of(shared), shared);
    uint32_t used_before = shared_page->used;
    pthread_t thread;
    /* The heap's lock, held while the other thread runs, keeps the purger
     * from collecting the remote list of this heap, idle meanwhile. */
    os_lock_take(&heap->lock);
    pthread_create(&thread, NULL, free_elsewhere, shared);
    pthread_join(thread, NULL);
    CHECK_CMP(atomic_load(&heap->remote), ==, shared_page);
    CHECK_CMP(PAGE_REMOTE_HEAD(atomic_load(page_remote_word(shared_page))), ==, shared);
    CHECK_CMP(PAGE_REMOTE_BLOCKS(atomic_load(page_remote_word(shared_page))), ==, 1);
    CHECK_CMP(shared_page->remote_tail, ==, shared);
    CHECK_CMP(shared_page->used, ==, used_before);
    os_lock_give(&heap->lock);
    size_t taken = 0;
    while (heap->current[c2000] == shared_page && taken < COUNT)
        blocks[taken++] = strata_malloc(2000);
    CHECK(atomic_load(&heap->remote) == NULL); /* collected on the way */
    CHECK_CMP(atomic_load(page_remote_word(shared_page)), ==, 0);
    int found = 0;
    for (size_t i = 0; i < taken; i++)
        found |= blocks[i] == shared;
    CHECK(found || shared_page->free == shared);
    for (size_t i = 0; i < taken; i++)
        strata_free(blocks[i]);
    CHECK_SOUND(heap_check(heap));
}

/* A refill whose current page is spent takes the class's available page
 * before the remote lists: they are taken only when no page of the class
 * has a free block (so that each page's list is taken with more blocks on
 * it), and then before any new page. */
static void test_refill_prefers_available(void)
{
    struct heap *heap = own_heap();
    unsigned c3000 = request_class(3000);
    struct bin *bin = &heap->bins[c3000];
    size_t n = 0;
    /* Three pages or more, the bin empty, the current page spent. */
    while (n < COUNT && (n < 63 || bin_count(heap, bin) > 0 || heap->current[c3000]->free != NULL ||
                         heap->current[c3000]->capacity < heap->current[c3000]->reserved))
        blocks[n++] = strata_malloc(3000);
    CHECK(bin_count(heap, bin) == 0 && heap->current[c3000]->free == NULL);
    /* One block of an older page goes back to it: that page is available. */
    void *local = blocks[0];
    struct page *available = page_of(segment_of(local), local);
    CHECK(available != heap->current[c3000]);
    void *remote = NULL;
    for (size_t i = 1; i < n && remote == NULL; i++)
        if (page_of(segment_of(blocks[i]), blocks[i]) != available)
            remote = blocks[i];
    CHECK(remote != NULL);
    struct page *remote_page = page_of(segment_of(remote), remote);
    os_lock_take(&heap->lock);
    page_free_block(heap, available, local);
    counters_bytes_out(-(long)available->block_size);
    /* Another page's block freed by another thread, onto the stack (the
     * heap's lock keeps the purger off it meanwhile). */
    pthread_t thread;
    pthread_create(&thread, NULL, free_elsewhere, remote);
    pthread_join(thread, NULL);
    CHECK_CMP(heap->available[c3000], ==, available);
    CHECK_CMP(atomic_load(&heap->remote), ==, remote_page);
    os_lock_give(&heap->lock);
    void *first = heap_bin_refill(heap, c3000);
    CHECK_CMP(first, ==, local);
    CHECK_CMP(atomic_load(&heap->remote), ==, remote_page); /* left for a later refill */
    /* No page of the class with a free block now: the next refill takes
     * the stack. */
    CHECK(bin_count(heap, bin) == 0 && heap->available[c3000] == NULL);
    void *second = heap_bin_refill(heap, c3000);
    CHECK(atomic_load(&heap->remote) == NULL);
    CHECK(second != NULL);
    strata_free(first);
    strata_free(second);
    for (size_t i = 1; i < n; i++)
        if (blocks[i] != remote)
            strata_free(blocks[i]);
    CHECK_SOUND(heap_check(heap));
}

/* `count` blocks of `size` into blocks[]: none handed out twice; then
 * freed, the heap sound. */
static void check_handed_out_once(struct heap *heap, size_t count, size_t size)
{
    for (size_t i = 0; i < count; i++)
        blocks[i] = strata_malloc(size);
    size_t twice = 0;
    for (size_t i = 0; i < count; i++)
        for (size_t j = i + 1; j < count; j++)
            twice += blocks[i] == blocks[j];
    CHECK_CMP(twice, ==, 0);
    for (size_t i = 0; i < count; i++)
        strata_free(blocks[i]);
    CHECK_SOUND(heap_check(heap));
}

struct remote_batch {
    void **blocks;
    size_t count;
};

static void *free_batch_elsewhere(void *arg)
{
    struct remote_batch *batch = arg;
    for (size_t i = 0; i < batch->count; i++)
        strata_free(batch->blocks[i]);
    return NULL;
}

/* Blocks of several pages freed by another thread: each page is on the
 * owner's stack once, its list counting its blocks, its oldest the first
 * freed; the owner takes each list whole, the counts off the pages' used
 * blocks, the blocks on their free lists, and the pages that emptied go
 * back to their segments. */
static void test_remote_pages(void)
{
    struct heap *heap = own_heap();
    enum { N = 200 }; /* 3000-byte blocks: 21 a page, so ten pages */
    unsigned c3000 = request_class(3000);
    for (size_t i = 0; i < N; i++)
        blocks[i] = strata_malloc(3000);
    struct page *pages[N];
    uint32_t used_before[N], on_page[N];
    void *first_freed[N];
    size_t page_count = 0;
    for (size_t i = 0; i < N; i++) {
        struct page *page = page_of(segment_of(blocks[i]), blocks[i]);
        size_t k = 0;
        while (k < page_count && pages[k] != page)
            k++;
        if (k == page_count) {
            pages[page_count] = page;
            used_before[page_count] = page->used;
            on_page[page_count] = 0;
            first_freed[page_count] = blocks[i];
            page_count++;
        }
        on_page[k]++;
    }
    CHECK_CMP(page_count, >=, 5);
    struct remote_batch batch = {blocks, N};
    pthread_t thread;
    os_lock_take(&heap->lock); /* the purger leaves the stack alone */
    pthread_create(&thread, NULL, free_batch_elsewhere, &batch);
    pthread_join(thread, NULL);
    size_t stacked = 0;
    for (struct page *page = atomic_load(&heap->remote); page != NULL; page = page->remote_next) {
        size_t k = 0;
        while (k < page_count && pages[k] != page)
            k++;
        CHECK_CMP(k, <, page_count); /* one of the blocks' pages */
        if (k == page_count)
            break;
        uintptr_t word = atomic_load(page_remote_word(page));
        CHECK_CMP(PAGE_REMOTE_BLOCKS(word), ==, on_page[k]);
        CHECK_CMP(PAGE_REMOTE_HEAD(word), !=, NULL);
        CHECK_CMP(page->remote_tail, ==, first_freed[k]);
        CHECK_CMP(page->used, ==, used_before[k]); /* counted as used until taken */
        stacked++;
    }
    CHECK_CMP(stacked, ==, page_count);
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap)); /* the stack's invariants among them */
    os_lock_take(&heap->lock);
    heap_collect_remote(heap); /* unless the purger did, meanwhile */
    CHECK(atomic_load(&heap->remote) == NULL);
    for (size_t k = 0; k < page_count; k++) {
        CHECK_CMP(atomic_load(page_remote_word(pages[k])), ==, 0);
        /* Emptied: given back, unless current; else the blocks are off. */
        if (pages[k]->in_use && pages[k]->class_index == c3000)
            CHECK_CMP(pages[k]->used, ==, used_before[k] - on_page[k]);
    }
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap));
    /* Every block is handed out again, each once. */
    check_handed_out_once(heap, N, 3000);
    /* A medium block's page has its one block on the list, and goes back
     * to its segment when the list is taken. */
    void *medium = strata_malloc(1 << 20);
    struct page *medium_page = page_of(segment_of(medium), medium);
    os_lock_take(&heap->lock);
    pthread_create(&thread, NULL, free_elsewhere, medium);
    pthread_join(thread, NULL);
    CHECK_CMP(PAGE_REMOTE_BLOCKS(atomic_load(page_remote_word(medium_page))), ==, 1);
    CHECK(medium_page->in_use);
    heap_collect_remote(heap);
    CHECK(!medium_page->in_use);
    os_lock_give(&heap->lock);
    CHECK_SOUND(heap_check(heap));
}

/* A thread with a heap of its own keeps a block of this heap it frees in
 * its bin, still counted as used in this heap's page, and hands it out
 * again; at its exit the bin goes back, the block to this heap's remote
 * list. */
static void test_foreign_block_in_bin(void)
{
    struct heap *heap = own_heap();
    void *shared = strata_malloc(2000);
    struct page *shared_page = page_of(segment_of(shared), shared);
    uint32_t used_before = shared_page->used;
    struct foreign_probe probe = {.block = shared};
    pthread_t thread;
    /* Held while the other thread runs: the purger then leaves this idle
     * heap's remote list alone, and the other thread's refills its pages
     * (their lock is only tried). */
    os_lock_take(&heap->lock);
    pthread_create(&thread, NULL, free_and_reuse_elsewhere, &probe);
    pthread_join(thread, NULL);
    CHECK(probe.cached && probe.reused && probe.sound);
    CHECK_CMP(shared_page->used, ==, used_before); /* in use all along */
    CHECK_CMP(atomic_load(&heap->remote), ==, shared_page);
    CHECK_CMP(PAGE_REMOTE_HEAD(atomic_load(page_remote_word(shared_page))), ==, shared);
    heap_collect_remote(heap);
    os_lock_give(&heap->lock);
    CHECK_CMP(atomic_load(page_remote_word(shared_page)), ==, 0);
    CHECK_CMP(shared_page->used, ==, used_before - 1);
    CHECK_SOUND(heap_check(heap));
}

/* What a thread that only frees saw of its own heap. */
struct pass_probe {
    void **blocks;
    size_t count;
    bool heapless_at_first;      /* no heap of its own after its first frees */
    bool heap_after;             /* one after all of them */
    uint32_t bin_count, bin_limit, drained_limit;
    uint32_t refilled_limit;     /* its bin's limit once it allocates the class */
    const char *broken;          /* heap_check of its heap */
};

static void *free_only_elsewhere(void *arg)
{
    struct pass_probe *probe = arg;
    unsigned c = request_class(64);
    for (size_t i = 0; i < probe->count; i++) {
        strata_free(probe->blocks[i]);
        if (i == 0)
            probe->heapless_at_first = thread_heap == &heap_empty;
    }
    struct heap *heap = thread_heap;
    probe->heap_after = heap != &heap_empty;
    if (!probe->heap_after)
        return NULL;
    probe->bin_count = bin_count(heap, &heap->bins[c]);
    probe->bin_limit = bin_limit(heap, &heap->bins[c]);
    probe->drained_limit = heap->bin_drained_limit[c];
    probe->broken = heap_check(heap);
    /* Allocating the class (what its bin holds, then a refill), the
     * thread's bin takes its full limit back (grown, the refill coming
     * after flushes). */
    void *mine[BIN_PASS_MAX_BLOCKS + 1];
    uint32_t held = probe->bin_count <= BIN_PASS_MAX_BLOCKS ? probe->bin_count : BIN_PASS_MAX_BLOCKS;
    for (uint32_t i = 0; i <= held; i++)
        mine[i] = strata_malloc(64);
    probe->refilled_limit = bin_limit(heap, &heap->bins[c]);
    for (uint32_t i = 0; i <= held; i++)
        strata_free(mine[i]);
    return NULL;
}

/* A thread that frees another's blocks without allocating takes a heap of
 * its own after its first frees, and its bin of a class it does not
 * allocate passes them on holding little (about BIN_PASS_BYTES of them),
 * until it allocates the class; every block reaches its owner, counted,
 * and is handed out again once. */
static void test_pass_on_runs(void)
{
    struct heap *heap = own_heap();
    enum { N = 1000 };
    for (size_t i = 0; i < N; i++)
        blocks[i] = strata_malloc(64);
    uint32_t used_before = 0;
    struct page *first_page = page_of(segment_of(blocks[0]), blocks[0]);
    used_before = first_page->used;
    struct pass_probe probe = {.blocks = blocks, .count = N};
    pthread_t thread;
    pthread_create(&thread, NULL, free_only_elsewhere, &probe);
    pthread_join(thread, NULL);
    CHECK(probe.heapless_at_first);
    CHECK(probe.heap_after);
    CHECK_CMP(probe.drained_limit, >, probe.bin_limit); /* its full limit, kept */
    CHECK_CMP((size_t)probe.bin_limit * 64, <=, BIN_PASS_BYTES);
    CHECK_CMP(probe.bin_limit, <=, BIN_PASS_MAX_BLOCKS);
    CHECK_CMP(probe.bin_count, <=, probe.bin_limit);
    CHECK_CMP(probe.refilled_limit, >=, probe.drained_limit); /* back, or grown by the refill */
    CHECK(probe.broken == NULL);
    if (probe.broken != NULL)
        printf("the passing thread's heap: %s\n", probe.broken);
    /* Every block back: taken from the remote lists, the first page's
     * used count falls by its blocks that were freed. */
    os_lock_take(&heap->lock);
    heap_collect_remote(heap);
    os_lock_give(&heap->lock);
    size_t on_first = 0;
    for (size_t i = 0; i < N; i++)
        on_first += page_of(segment_of(blocks[i]), blocks[i]) == first_page;
    if (first_page->in_use && first_page->class_index == request_class(64))
        CHECK_CMP(first_page->used, <=, used_before - on_first);
    CHECK_SOUND(heap_check(heap));
    check_handed_out_once(heap, N, 64);
}

/* A thread's refill that finds no free block of its own takes the free
 * blocks of an idle heap's available page: the block it hands out is of
 * that page, still the idle heap's, and both heaps stay sound. (The idle
 * heap's lock is only tried, and the purger may hold it a moment: a few
 * threads try.) */
static void *allocate_elsewhere(void *size)
{
    return strata_malloc(*(size_t *)size);
}

static void test_refill_from_idle_heap(void)
{
    struct heap *heap = own_heap();
    size_t size = 2900;
    void *blocks[256];
    size_t count = 0;
    blocks[count++] = strata_malloc(size);
    struct page *page = page_of(segment_of(blocks[0]), blocks[0]);
    while (count < 256) { /* the page filled: another is current */
        blocks[count] = strata_malloc(size);
        if (page_of(segment_of(blocks[count]), blocks[count]) != page)
            break;
        count++;
    }
    CHECK_CMP(count, <, 256);
    size_t on_page = count;
    count++;
    for (size_t i = 1; i < on_page; i++) /* one stays: the page stays in use */
        strata_free(blocks[i]);
    os_lock_take(&heap->lock);
    bins_flush_all(heap);
    os_lock_give(&heap->lock);
    CHECK(page->listed && page->free != NULL);
    void *taken = NULL;
    for (int attempt = 0; attempt < 5 && taken == NULL; attempt++) {
        atomic_store(&heap->idle, true);
        pthread_t thread;
        void *p;
        pthread_create(&thread, NULL, allocate_elsewhere, &size);
        pthread_join(thread, &p);
        if (page_of(segment_of(p), p) == page)
            taken = p;
        else
            strata_free(p);
    }
    CHECK(taken != NULL);
    CHECK_CMP(atomic_load(&segment_of(taken)->owner), ==, heap->owner_word);
    strata_free(taken);
    strata_free(blocks[0]);
    strata_free(blocks[on_page]);
    CHECK_SOUND(heap_check(heap));
}

/* heap_check names the invariant that broke: a bin's count off by one, a
 * page's. */
static void test_heap_check_names(void)
{
    struct heap *heap = own_heap();
    unsigned c2000 = request_class(2000);
    void *held = strata_malloc(2000); /* a current page for the class */
    struct bin *bin = &heap->bins[c2000];
    bin_set_count(heap, bin, bin_count(heap, bin) + 1);
    const char *broken = heap_check(heap);
    CHECK(broken != NULL && strstr(broken, "bin of class") != NULL);
    bin_set_count(heap, bin, bin_count(heap, bin) - 1);
    CHECK_SOUND(heap_check(heap));
    /* The page counts one block more in use than its free list leaves (one
     * fewer if it is full: more would break its capacity first). */
    struct page *current = heap->current[c2000];
    bool full = current->used == current->capacity;
    current->used = full ? current->used - 1 : current->used + 1;
    broken = heap_check(heap);
    CHECK(broken != NULL && strstr(broken, "free list") != NULL);
    current->used = full ? current->used + 1 : current->used - 1;
    CHECK_SOUND(heap_check(heap));
    strata_free(held);
}

/* The header the heap's own segments give p's segment (a segment of its
 * own, or the empty entry's header), NULL when p's entry does not hold p. */
static struct segment *own_segment_of(const struct heap *heap, const void *p)
{
    uintptr_t entry = own_segment_entry(heap, p);
    return own_segment_entry_holds(entry, p) ? (struct segment *)entry : NULL;
}

/* Whether the heap's own segments name p's segment (not the empty entry). */
static bool names_own_segment(const struct heap *heap, const void *p)
{
    const struct segment *segment = own_segment_of(heap, p);
    return segment != NULL && (uintptr_t)segment != heap->own_segment_empty;
}

/* The heap's own segments (heap.h): an owner's free names its block's
 * segment's header there, so that the next frees into it take the inline
 * path without the segment map; a segment that leaves the heap leaves
 * them; a pointer beside the empty entry's header is refused; the checker
 * reports an entry that names no segment of the heap. */
static void test_own_segments(void)
{
    struct heap *heap = own_heap();
    enum { BIG_BLOCKS = 96 }; /* 6 MiB of 64 KiB blocks: more than one segment */
    static void *big[BIG_BLOCKS];
    for (int i = 0; i < BIG_BLOCKS; i++)
        big[i] = strata_malloc(64 * 1024);
    uintptr_t first = (uintptr_t)big[0] & ~(uintptr_t)SEGMENT_MASK;
    uintptr_t last = (uintptr_t)big[BIG_BLOCKS - 1] & ~(uintptr_t)SEGMENT_MASK;
    CHECK(first != last);
    for (int i = 0; i < BIG_BLOCKS; i++) {
        strata_free(big[i]);
        CHECK(own_segment_of(heap, big[i]) == segment_of(big[i]));
    }
    CHECK_SOUND(heap_check(heap));
    /* Pointers outside the heap's segments are never its own. */
    static char outside[64];
    CHECK(!names_own_segment(heap, NULL));
    CHECK(!names_own_segment(heap, outside));
    /* A pointer beside the empty entry's header matches an empty slot, and
     * its slices refuse it: nothing reaches a bin. */
    void *beside = (void *)((heap->own_segment_empty & ~(uintptr_t)SEGMENT_MASK) + 64);
    unsigned beside_slot = own_segment_slot((uintptr_t)beside);
    uintptr_t beside_saved = atomic_load_explicit(&heap->own_segments[beside_slot], memory_order_relaxed);
    atomic_store_explicit(&heap->own_segments[beside_slot], heap->own_segment_empty, memory_order_relaxed);
    struct segment *empty = own_segment_of(heap, beside);
    CHECK(empty != NULL && (uintptr_t)empty == heap->own_segment_empty);
    bool full = false;
    CHECK(empty == NULL || bin_push_in_segment(heap, empty, beside, &full) == NULL);
    atomic_store_explicit(&heap->own_segments[beside_slot], beside_saved, memory_order_relaxed);
    /* Trimmed, the emptied segments go (all but one, which the heap keeps):
     * their entries with them. */
    strata_trim();
    size_t kept = 0;
    for (const struct segment *s = heap->segments; s != NULL; s = s->next)
        kept++;
    size_t named = 0;
    for (unsigned k = 0; k < OWN_SEGMENT_SLOTS; k++)
        named += atomic_load_explicit(&heap->own_segments[k], memory_order_relaxed) != heap->own_segment_empty;
    CHECK_CMP(named, <=, kept);
    CHECK(!names_own_segment(heap, big[0]) || !names_own_segment(heap, big[BIG_BLOCKS - 1]));
    CHECK_SOUND(heap_check(heap));
    /* An entry naming a region the heap does not own is a broken heap. */
    unsigned slot = own_segment_slot((uintptr_t)outside);
    uintptr_t saved = atomic_load_explicit(&heap->own_segments[slot], memory_order_relaxed);
    atomic_store_explicit(&heap->own_segments[slot], (uintptr_t)outside & ~(uintptr_t)SEGMENT_MASK,
                          memory_order_relaxed);
    const char *broken = heap_check(heap);
    CHECK(broken != NULL && strstr(broken, "own segment") != NULL);
    atomic_store_explicit(&heap->own_segments[slot], saved, memory_order_relaxed);
    CHECK_SOUND(heap_check(heap));
}

/* A bin whose list loops where a flush cuts it: the flush reports the
 * double free. */
static void test_loop_at_flush(void)
{
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("loop-at-flush", "");
    CHECK(aborted(&o) && strstr(o.output, "strata: error: double free") != NULL);
    if (!aborted(&o))
        fprintf(stderr, "child said: %s\n", o.output);
}

/* In the debug build, a page whose count is off stops the next refill with
 * the file, line and invariant. */
static void test_refill_checkpoint(void)
{
    if (!STRATA_DEBUG_BUILD) {
        printf("the debug build's refill checkpoint is tested by make test-debug\n");
        return;
    }
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("corrupt-page", "");
    CHECK(aborted(&o));
    CHECK(strstr(o.output, "strata: invariant broken at src/bins.c:") != NULL &&
          strstr(o.output, "heap_check at a page refill") != NULL);
    if (!(WIFSIGNALED(o.status)))
        fprintf(stderr, "child said: %s\n", o.output);
}

/* malloc_usable_size of what is not a live block's start, in strata's
 * memory of blocks: each prints the pointer, then asks. */
static int usable_size_of_freed_small(void)
{
    char *p = strata_malloc(48);
    strata_free(p);
    say_address(p);
    return (int)strata_usable_size(p);
}

static int usable_size_of_freed_medium(void)
{
    char *p = strata_malloc(SMALL_MAX + 4096);
    strata_free(p);
    say_address(p);
    return (int)strata_usable_size(p);
}

static int usable_size_inside_medium(void)
{
    char *p = strata_malloc(SMALL_MAX + 4096);
    say_address(p + 4096);
    return (int)strata_usable_size(p + 4096);
}

static void test_usable_size_misuse(void)
{
    static const struct {
        const char *name, *what;
    } misuses[] = {
        {"usable-size-freed-small", "malloc_usable_size of a free block"},
        {"usable-size-freed-medium", "malloc_usable_size of a pointer that is not allocated"},
        {"usable-size-inside-medium", "malloc_usable_size of a pointer that is not allocated"},
    };
    for (size_t i = 0; i < sizeof misuses / sizeof misuses[0]; i++) {
        struct outcome o = check_spawn(misuses[i].name, "");
        CHECK(aborted(&o));
        CHECK(check_reports(&o, "strata: error: ", misuses[i].what));
    }
    /* Memory strata never mapped answers 0. */
    int on_stack = 0;
    CHECK_CMP(strata_usable_size(&on_stack), ==, 0);
}

/* malloc_usable_size's inline path (api.h, usable_size_inline) answers
 * the heap's own carved live blocks, as the full look-up does, and leaves
 * everything else to it: a pointer inside a block, a free block, a medium
 * or large block, NULL and another thread's block. */
static void *allocate_48(void *unused)
{
    (void)unused;
    return strata_malloc(48 - SMALL_GUARD_BYTES);
}

static void test_usable_size_inline(void)
{
    struct heap *heap = own_heap();
    char *p = strata_malloc(100);
    CHECK(p != NULL);
    size_t usable = strata_usable_size(p);
    CHECK_CMP(usable, >=, 100);
    CHECK_CMP(own_block_usable_size(heap, p), ==, usable);
    CHECK_CMP(own_block_usable_size(heap, p + 16), ==, 0);
    CHECK_CMP(own_block_usable_size(heap, NULL), ==, 0);
    char *medium = strata_malloc(SMALL_MAX + 1000), *large = strata_malloc(MEDIUM_MAX + 1000);
    CHECK(medium != NULL && large != NULL);
    CHECK_CMP(own_block_usable_size(heap, medium), ==, 0);
    CHECK_CMP(own_block_usable_size(heap, large), ==, 0);
    pthread_t thread;
    void *theirs = NULL;
    CHECK_CMP(pthread_create(&thread, NULL, allocate_48, NULL), ==, 0);
    CHECK_CMP(pthread_join(thread, &theirs), ==, 0);
    CHECK(theirs != NULL);
    if (segment_of(theirs)->owner != heap->owner_word)
        CHECK_CMP(own_block_usable_size(heap, theirs), ==, 0);
    CHECK_CMP(strata_usable_size(theirs), >=, 48 - SMALL_GUARD_BYTES);
    strata_free(theirs);
    strata_free(medium);
    strata_free(large);
    strata_free(p); /* into the bin: a free block the inline path refuses */
    CHECK_CMP(own_block_usable_size(heap, p), ==, 0);
}

/* A byte of text written just below a block, or one past the block
 * below, always changes the guard word: its two top bytes have their top
 * bits set and its low nibble is fixed by the block's alignment (options.h,
 * GUARD_SECRET_FIXED_BITS), with a random secret beside them. */
static void test_guard_word_bytes(void)
{
    CHECK_CMP(block_secret.guard & GUARD_SECRET_FIXED_MASK, ==, GUARD_SECRET_FIXED_BITS);
    static const size_t sizes[] = {8, 24, 40, 100, 1000, 4000, 4096, 16000, 60000};
    int fixed_ok = 1, text_changes_ok = 1;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        for (int k = 0; k < 8; k++) {
            char *p = strata_malloc(sizes[i]);
            CHECK(p != NULL && is_segment_pointer(p));
            uintptr_t guard = small_guard_read(p);
            /* Blocks lie 16-aligned, or 8 past (the smallest class's):
             * the low nibble is 0xb or 0x3. */
            uintptr_t nibble = ((uintptr_t)p & 0xf) ^ (GUARD_SECRET_FIXED_BITS & 0xf);
            if (guard != small_guard_word(p) || ((uintptr_t)p & 7) != 0 ||
                ((guard ^ (uintptr_t)p) & GUARD_SECRET_FIXED_MASK) != GUARD_SECRET_FIXED_BITS)
                fixed_ok = 0;
            for (unsigned b = 0; b < 0x80; b++) { /* NUL and every ASCII character */
                if ((guard >> 56) == b || ((guard >> 48) & 0xff) == b)
                    text_changes_ok = 0;
                if ((b & 0xf) != nibble && (guard & 0xff) == b)
                    text_changes_ok = 0;
            }
            if (nibble == 0x0 || nibble == 0xf || nibble == 0x5) /* NUL, 'O', 'U' */
                text_changes_ok = 0;
            strata_free(p);
        }
    }
    CHECK(fixed_ok);
    CHECK(text_changes_ok);
}

static const struct check_case cases[] = {
    {"usable-size-freed-small", usable_size_of_freed_small},
    {"usable-size-freed-medium", usable_size_of_freed_medium},
    {"usable-size-inside-medium", usable_size_inside_medium},
    {"corrupt-page", corrupt_current_page},
    {"loop-at-flush", loop_at_flush},
    {"limit-purge-handed", limit_purge_handed},
};

static const struct check_test tests[] = {
    {"first_page", test_first_page},
    {"free_to_bin", test_free_to_bin},
    {"sample_countdown", test_sample_countdown},
    {"bin_flush", test_bin_flush},
    {"flush_runs", test_flush_runs},
    {"bin_drain", test_bin_drain},
    {"empty_pages", test_empty_pages},
    {"purge_delay", test_purge_delay},
    {"purge_runs", test_purge_runs},
    {"limit_purge_handed", test_limit_purge_handed},
    {"fork_with_purge_taken", test_fork_with_purge_taken},
    {"no_mapping_in_loop", test_no_mapping_in_loop},
    {"remote_free", test_remote_free},
    {"remote_pages", test_remote_pages},
    {"refill_prefers_available", test_refill_prefers_available},
    {"foreign_block_in_bin", test_foreign_block_in_bin},
    {"refill_from_idle_heap", test_refill_from_idle_heap},
    {"heap_check_names", test_heap_check_names},
    {"own_segments", test_own_segments},
    {"pass_on_runs", test_pass_on_runs},
    {"adaptive_bins", test_adaptive_bins},
    {"medium_blocks", test_medium_blocks},
    {"loop_at_flush", test_loop_at_flush},
    {"refill_checkpoint", test_refill_checkpoint},
    {"carve_populates", test_carve_populates},
    {"pages_written_whole", test_pages_written_whole},
    {"medium_populated", test_medium_populated},
    {"usable_size_misuse", test_usable_size_misuse},
    {"usable_size_inline", test_usable_size_inline},
    {"guard_word_bytes", test_guard_word_bytes},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
