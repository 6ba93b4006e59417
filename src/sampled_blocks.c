/* sampled_blocks.c: the heap profiler's sampled blocks of the bins' sizes
 * (sampled_blocks.h). A sampled block must be told apart at its free
 * without the inline free paying for it, so it cannot be a block of the
 * bins; as a large block of its own each sample cost a mapping, its page
 * faults and an unmapping (the threads table ran 4.3x the time profiled).
 * Here each is a slot of whole pages carved from one reserved region:
 * free's slow path knows it by its address, and freed slots are kept on a
 * list per page count and reused, so that a sample costs no system call
 * once the region has carved what the program's live samples need.
 * A slot starts with its block's 64-byte header, the block right after
 * it (a block aligned to more lies at its alignment in the slot, the
 * header just before it, as a class's blocks are aligned to the class's
 * lowest bit, up to 128 KiB): the header names the block's sample, size
 * and slot, sealed by a keyed sum of its fields and address as a large
 * block's is, so a double free, a pointer that is no block's start and a
 * write before the block are reported.
 * A freed slot keeps its pages for the next sample of its page count
 * until it has been free for a purge delay (stretched as a heap's is);
 * the purger then gives back all its pages and lists it outside the slot
 * (purging each at its free ran the threads table at 0.55x the speed of
 * keeping them; keeping the header's page of every purged slot kept 8 MB
 * resident after the stress test, profiled at 4 KiB).
 * A thread keeps up to CACHE_SLOTS freed slots of CACHE_PAGES pages in all
 * for its next samples, taken and given with no lock and no atomic
 * read-modify-write: the first locked instruction after a program's
 * stream of stores waits for them to drain (about 400 cycles measured at
 * the lock take of a sampled block's free in the threads table, half the
 * sample's cost). Its cache goes to the lists at its exit; the purger does
 * not reach it meanwhile (at most 128 KiB a thread, and only profiled).
 * Invariants (under sampled_lock): every slot below `carved` is live (its
 * header sealed as such), in a thread's cache (sealed as freed), on its
 * page count's resident list (newest free first, sealed as freed), on its
 * purged list (in `purged_links`), or being purged; the resident lists'
 * slots add up to `free_resident` bytes; the region is accessible and
 * charged up to `opened`. */
#include <string.h>

#include "block_guards.h"
#include "core.h"
#include "heap.h"
#include "sampled_blocks.h"

#define SLOT_HEADER ((size_t)64)
/* The region is opened (made accessible and charged) this much at a time. */
#define OPEN_STEP ((size_t)2 << 20)
/* Free lists by page count: one for every count a slot of up to
 * SAMPLED_BLOCK_MAX bytes aligned to up to as much takes with 4 KiB pages
 * (larger pages need fewer). */
#define PAGE_COUNTS (((2 * SAMPLED_BLOCK_MAX) >> 12) + 2)

#define LIVE_MAGIC ((uintptr_t)0x53414d504c454421u)
#define FREED_MAGIC ((uintptr_t)0x53414d50465245e5u)

/* Just before its block, the seal last: a write before the block's start
 * breaks it. */
struct slot_header {
    struct slot_header *next_free; /* a free slot's, on its page count's list */
    uint64_t freed_at;             /* a free slot's: when the purger first saw it free
                                    * (0 before) */
    struct profile_sample sample;  /* a live block's record */
    size_t asked;                  /* the size the block was allocated with */
    uint32_t offset;               /* from the slot's start to the block */
    uint32_t pages;                /* the slot's */
    uintptr_t magic;               /* slot_magic of the block, live or freed */
};
_Static_assert(sizeof(struct slot_header) <= SLOT_HEADER, "a slot's header fits before its block");

_Atomic uintptr_t sampled_region;
static struct os_lock sampled_lock;
static _Atomic size_t carved; /* bytes from the region's start (written under sampled_lock) */
static size_t opened;
static struct slot_header *resident_slots[PAGE_COUNTS];
/* Purged slots are listed outside them (their pages read as zero): by the
 * index of their first page in the region, plus one (0 ends a list), in a
 * table of a link and a purge time for every page of the region. */
struct purged_link {
    uint32_t next;         /* the next purged slot's page index + 1 */
    uint32_t purged_at_ms; /* os_now_ns() / 1e6, truncated */
};
static struct purged_link *purged_links;
static uint32_t purged_slots[PAGE_COUNTS];
static size_t free_resident;
/* The purger was asked to look at the free slots and has not yet found
 * them quiet (none resident, none freed for a purge delay): frees need
 * not ask again. (Asking whenever none was resident woke it at nearly
 * every sample, which was freed as soon as made: the per-thread loop ran
 * 1.3x the time, half of it in futex wakes.) */
static bool purger_asked;
static bool freed_since_round; /* a slot was freed since the purger's last round */
/* The delay stretches as a heap's does (purge_policy.c): a purged slot
 * taken again within the longest delay of its purge doubles it (up to
 * PURGE_STRETCH_MAX times), PURGE_CALM_CHECKS purges in a row with no
 * such slot between them halve it. (With the delay fixed, the threads
 * table faulted in and shot down the pages of slots purged 10 ms before.) */
static unsigned stretch, calm_purges;
static bool retaken_since_purge;
static long live_blocks, live_bytes; /* besides the caches' counts */

/* A thread's cache of freed slots. Its thread alone takes, gives and
 * counts (a plain load and store for each count, read by the statistics);
 * the lock guards the list of caches and who owns each. */
#define CACHE_SLOTS 16
#define CACHE_PAGES 32
struct slot_cache {
    struct slot_cache *next; /* every cache, newest first (sampled_lock) */
    bool owned;              /* a thread's (sampled_lock) */
    uint32_t count, pages_held;
    _Atomic long live_blocks, live_bytes; /* the thread's allocations less its frees */
    uint8_t pages[CACHE_SLOTS];
    struct slot_header *slots[CACHE_SLOTS];
};
static struct slot_cache *caches;
static STRATA_TLS struct slot_cache *thread_cache;
static STRATA_TLS bool thread_cache_closed; /* the thread is exiting: no cache */

static uintptr_t slot_magic(const void *block, const struct slot_header *h, uintptr_t kind)
{
    uint64_t sum = (uint64_t)(uintptr_t)block ^ block_secret.link;
    sum = (sum ^ h->pages ^ (uint64_t)h->offset << 32) * 0x9e3779b97f4a7c15u;
    if (kind == LIVE_MAGIC) {
        sum = (sum ^ h->asked) * 0xbf58476d1ce4e5b9u;
        sum = (sum ^ (uintptr_t)h->sample.stack) * 0x94d049bb133111ebu;
        sum = (sum ^ h->sample.size ^ h->sample.chance_bytes << 1) * 0x9e3779b97f4a7c15u;
    }
    return (uintptr_t)(sum ^ (sum >> 31) ^ kind);
}

static struct slot_header *header_of(const void *block)
{
    return (struct slot_header *)((uintptr_t)block - sizeof(struct slot_header));
}

static char *block_of(const struct slot_header *h)
{
    return (char *)h + sizeof *h;
}

/* The slot a block's header lies in. */
static char *slot_of(const struct slot_header *h)
{
    return block_of(h) - h->offset;
}

static size_t slot_bytes(size_t pages)
{
    return pages * os_page_size();
}

/* A block's usable size: from it to its slot's end. */
static size_t usable_of(const struct slot_header *h)
{
    return slot_bytes(h->pages) - h->offset;
}

/* The region, reserved once (a thread that loses the race gives its own
 * back); false when the address space is not to be had. */
static bool region_ready(void)
{
    if (atomic_load_explicit(&sampled_region, memory_order_acquire) != 0)
        return true;
    size_t links_size = SAMPLED_REGION / os_page_size() * sizeof(struct purged_link);
    void *region = os_reserve_inaccessible(SAMPLED_REGION);
    /* The links' pages are touched as slots are purged. */
    void *links = region != NULL ? os_reserve_inaccessible(links_size) : NULL;
    if (links == NULL || !os_protect(links, links_size, true)) {
        if (region != NULL)
            os_release_inaccessible(region, SAMPLED_REGION);
        if (links != NULL)
            os_release_inaccessible(links, links_size);
        return false;
    }
    os_lock_take_spinning(&sampled_lock);
    bool won = atomic_load_explicit(&sampled_region, memory_order_relaxed) == 0;
    if (won) {
        purged_links = links;
        atomic_store_explicit(&sampled_region, (uintptr_t)region, memory_order_release);
    }
    os_lock_give(&sampled_lock);
    if (!won) {
        os_release_inaccessible(region, SAMPLED_REGION);
        os_release_inaccessible(links, links_size);
    }
    return true;
}

/* A fresh slot of `bytes` at the region's end, opening more of it when
 * needed (sampled_lock held); NULL when the region is full, the kernel
 * refuses or the memory limit would be passed. */
static char *carve(uintptr_t base, size_t bytes)
{
    size_t end = atomic_load_explicit(&carved, memory_order_relaxed);
    while (end + bytes > opened) {
        if (opened + OPEN_STEP > SAMPLED_REGION || !os_charge(OPEN_STEP))
            return NULL;
        if (!os_protect((char *)base + opened, OPEN_STEP, true)) {
            os_uncharge(OPEN_STEP);
            return NULL;
        }
        opened += OPEN_STEP;
    }
    atomic_store_explicit(&carved, end + bytes, memory_order_relaxed);
    return (char *)base + end;
}

/* The slot of a freed block's header, taken for reuse: still sealed as
 * freed, of `pages` pages (a write before a freed block's start is
 * reported). In the secure flavour its bytes were zeroed at its free and
 * are checked zero here (a write after free is reported), its old header
 * cleared: all of it reads as zero (*zeroed). The caller reads nothing of
 * the header after. */
static char *slot_taken(struct slot_header *freed, size_t pages, bool *zeroed)
{
    char *slot = slot_of(freed), *block = block_of(freed);
    *zeroed = false;
    if (freed->magic != slot_magic(block, freed, FREED_MAGIC) || freed->pages != pages)
        report_fatal("write before the start of a freed block (its header is overwritten)", block);
    if (!secure_has(SECURE_ZERO))
        return slot;
    if (!zero_intact(slot, 0, (size_t)((char *)freed - slot)) || !zero_intact(block, 0, usable_of(freed)))
        report_fatal("write after free (a freed block changed before it was handed out again)", block);
    memset(freed, 0, sizeof *freed);
    *zeroed = true;
    return slot;
}

/* A free slot of `pages` pages off the lists, resident ones first
 * (sampled_lock held); NULL when there is none. *zeroed: slot_taken's. */
static char *reuse(size_t pages, bool *zeroed)
{
    *zeroed = false;
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_relaxed);
    struct slot_header *freed = resident_slots[pages];
    if (freed != NULL) {
        /* A write before a freed block's start must not steer the list. */
        if ((uintptr_t)block_of(freed) - base > atomic_load_explicit(&carved, memory_order_relaxed))
            report_fatal("write before the start of a freed block (its header is overwritten)", block_of(freed));
        resident_slots[pages] = freed->next_free;
        free_resident -= slot_bytes(pages);
        return slot_taken(freed, pages, zeroed);
    }
    uint32_t taken = purged_slots[pages];
    if (taken == 0)
        return NULL;
    struct purged_link *link = &purged_links[taken - 1];
    purged_slots[pages] = link->next;
    uint32_t now_ms = (uint32_t)(os_now_ns() / 1000000u);
    if ((uint64_t)(uint32_t)(now_ms - link->purged_at_ms) * 1000000u < purge_retake_window()) {
        /* Purged too soon. */
        if (!retaken_since_purge && stretch < PURGE_STRETCH_MAX)
            stretch++;
        retaken_since_purge = true;
        calm_purges = 0;
    }
    return (char *)base + (size_t)(taken - 1) * os_page_size();
}

/* The calling thread's cache: a free one, or one made; NULL when the
 * thread has no heap (whose exit hook gives the cache back), is exiting,
 * or no memory is to be had (its slots then go by the lists). */
static struct slot_cache *cache_claim(void)
{
    if (thread_cache_closed || thread_heap == &heap_empty)
        return NULL;
    os_lock_take_spinning(&sampled_lock);
    struct slot_cache *cache = caches;
    while (cache != NULL && cache->owned)
        cache = cache->next;
    if (cache == NULL) {
        cache = os_map(os_page_size());
        if (cache != NULL) {
            cache->next = caches;
            caches = cache;
        }
    }
    if (cache != NULL)
        cache->owned = true;
    os_lock_give(&sampled_lock);
    thread_cache = cache;
    return cache;
}

/* A slot of at least `pages` pages from the thread's cache, the smallest
 * there up to twice as many (its block gets the slot's room: a sample
 * whose slot was a little bigger would otherwise take the lock), or NULL
 * (no lock). *slot_pages: the slot's pages. */
static char *cache_take(struct slot_cache *cache, size_t pages, size_t *slot_pages, bool *zeroed)
{
    uint32_t best = CACHE_SLOTS;
    for (uint32_t i = 0; i < cache->count; i++)
        if (cache->pages[i] >= pages && cache->pages[i] <= 2 * pages &&
            (best == CACHE_SLOTS || cache->pages[i] < cache->pages[best]))
            best = i;
    if (best == CACHE_SLOTS)
        return NULL;
    struct slot_header *freed = cache->slots[best];
    *slot_pages = cache->pages[best];
    uint32_t last = --cache->count;
    cache->slots[best] = cache->slots[last];
    cache->pages[best] = cache->pages[last];
    cache->pages_held -= (uint32_t)*slot_pages;
    return slot_taken(freed, *slot_pages, zeroed);
}

/* The live blocks and bytes moved: the thread's cache's counts (no lock:
 * its own), or without a cache the totals (sampled_lock held). */
static void live_count(struct slot_cache *cache, long blocks, long bytes)
{
    if (cache == NULL) {
        live_blocks += blocks;
        live_bytes += bytes;
        return;
    }
    atomic_store_explicit(&cache->live_blocks, atomic_load_explicit(&cache->live_blocks, memory_order_relaxed) + blocks,
                          memory_order_relaxed);
    atomic_store_explicit(&cache->live_bytes, atomic_load_explicit(&cache->live_bytes, memory_order_relaxed) + bytes,
                          memory_order_relaxed);
}

/* The live block's header written and sealed in its slot. */
static char *block_made(char *slot, size_t pages, size_t size, size_t align, const struct profile_sample *sample)
{
    char *block = (char *)(((uintptr_t)slot + SLOT_HEADER + align - 1) & ~(uintptr_t)(align - 1));
    struct slot_header *h = header_of(block);
    *h = (struct slot_header){NULL, 0, *sample, size, (uint32_t)(block - slot), (uint32_t)pages, 0};
    h->magic = slot_magic(block, h, LIVE_MAGIC);
    return block;
}

void *sampled_block_alloc(size_t size, size_t alignment, bool zero, const struct profile_sample *sample)
{
    size_t page = os_page_size();
    if (size > SAMPLED_BLOCK_MAX || alignment > SAMPLED_BLOCK_MAX || !region_ready())
        return NULL;
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_acquire);
    /* Slots are page-aligned: a block aligned to A lies at most A in. */
    size_t align = alignment > SLOT_HEADER ? alignment : SLOT_HEADER;
    size_t pages = (size + align + page - 1) / page;
    struct slot_cache *cache = thread_cache;
    if (unlikely(cache == NULL))
        cache = cache_claim();
    bool zeroed = false;
    size_t slot_pages = pages;
    char *slot = cache != NULL ? cache_take(cache, pages, &slot_pages, &zeroed) : NULL;
    bool reused = slot != NULL;
    char *block = NULL;
    size_t usable = 0;
    if (reused) {
        block = block_made(slot, slot_pages, size, align, sample);
        usable = usable_of(header_of(block));
        live_count(cache, 1, (long)usable);
    } else {
        os_lock_take_spinning(&sampled_lock);
        slot = reuse(pages, &zeroed);
        reused = slot != NULL;
        if (!reused)
            slot = carve(base, slot_bytes(pages));
        if (slot != NULL) {
            block = block_made(slot, pages, size, align, sample);
            usable = usable_of(header_of(block));
            live_count(cache, 1, (long)usable);
        }
        os_lock_give(&sampled_lock);
        if (block == NULL)
            return NULL;
    }
    if (zero && reused && !zeroed) /* a fresh slot's pages are zero; a reused one's need not be */
        memset(block, 0, size);
    counters_bytes_out((long)usable);
    return block;
}

/* The header of the live block at p; anything else is reported:
 * `not_ours` for an address no block of the region can have. (Read with
 * no lock: a block is its owner's until freed; two threads freeing one
 * block at once are a race this check does not see.) */
static struct slot_header *live_header(const void *p, const char *not_ours)
{
    uintptr_t offset = (uintptr_t)p - atomic_load_explicit(&sampled_region, memory_order_relaxed);
    if (offset < SLOT_HEADER || offset > atomic_load_explicit(&carved, memory_order_relaxed) || (offset & 15) != 0)
        report_fatal(not_ours, p);
    struct slot_header *h = header_of(p);
    if (likely(h->magic == slot_magic(p, h, LIVE_MAGIC)))
        return h;
    if (h->magic == slot_magic(p, h, FREED_MAGIC))
        report_fatal("double free", p);
    /* Within a block, or a block whose header was written over. */
    report_fatal("a pointer that is not a block's start, or a write before the start of a block (its header "
                 "is overwritten)",
                 p);
}

/* Whether the purger is to be asked to look at the free slots: the first
 * time since it last found them quiet (sampled_lock held). */
static bool purger_ask_due(void)
{
    bool due = !purger_asked;
    purger_asked = true;
    return due;
}

/* A freed slot onto its page count's resident list (sampled_lock held). */
static void slot_listed(struct slot_header *h)
{
    h->freed_at = 0; /* stamped by the purger's next round, so that no free reads a clock */
    h->next_free = resident_slots[h->pages];
    resident_slots[h->pages] = h;
    free_resident += slot_bytes(h->pages);
    freed_since_round = true;
}

void sampled_block_free(void *p)
{
    struct slot_header *h = live_header(p, "free of a pointer strata did not allocate");
    struct profile_sample sample = h->sample;
    size_t usable = usable_of(h);
    h->magic = slot_magic(p, h, FREED_MAGIC);
    if (secure_has(SECURE_ZERO))
        memset(p, 0, usable); /* its reuse checks the zeros */
    struct slot_cache *cache = thread_cache;
    if (unlikely(cache == NULL))
        cache = cache_claim();
    bool ask = false;
    bool fits = cache != NULL && h->pages <= CACHE_PAGES / 2;
    if (fits && (cache->count == CACHE_SLOTS || cache->pages_held + h->pages > CACHE_PAGES)) {
        /* Full: half of it goes to the lists under one lock take. */
        os_lock_take_spinning(&sampled_lock);
        while (cache->count > CACHE_SLOTS / 2 || cache->pages_held > CACHE_PAGES / 2) {
            cache->count--;
            cache->pages_held -= cache->pages[cache->count];
            slot_listed(cache->slots[cache->count]);
        }
        ask = purger_ask_due();
        os_lock_give(&sampled_lock);
    }
    if (fits) {
        live_count(cache, -1, -(long)usable);
        cache->slots[cache->count] = h;
        cache->pages[cache->count++] = (uint8_t)h->pages;
        cache->pages_held += h->pages;
    } else {
        os_lock_take_spinning(&sampled_lock);
        live_count(cache, -1, -(long)usable);
        slot_listed(h);
        ask = purger_ask_due();
        os_lock_give(&sampled_lock);
    }
    counters_bytes_out(-(long)usable);
    profile_sample_release(&sample);
    if (ask)
        purger_ask(); /* it gives the pages back if no sample takes them */
}

size_t sampled_block_usable_size(const void *p)
{
    return usable_of(live_header(p, "a pointer strata did not allocate"));
}

/* The cache's slots onto the lists and its counts into the totals
 * (sampled_lock held); its owner stays its owner. */
static void cache_give_back(struct slot_cache *cache)
{
    for (uint32_t i = 0; i < cache->count; i++)
        slot_listed(cache->slots[i]);
    cache->count = 0;
    cache->pages_held = 0;
    live_blocks += atomic_load_explicit(&cache->live_blocks, memory_order_relaxed);
    live_bytes += atomic_load_explicit(&cache->live_bytes, memory_order_relaxed);
    atomic_store_explicit(&cache->live_blocks, 0, memory_order_relaxed);
    atomic_store_explicit(&cache->live_bytes, 0, memory_order_relaxed);
}

void sampled_blocks_thread_exit(void)
{
    thread_cache_closed = true;
    struct slot_cache *cache = thread_cache;
    if (cache == NULL)
        return;
    thread_cache = NULL;
    os_lock_take_spinning(&sampled_lock);
    bool ask = cache->count != 0 && purger_ask_due();
    cache_give_back(cache);
    cache->owned = false;
    os_lock_give(&sampled_lock);
    if (ask)
        purger_ask();
}

/* Gives back the pages of the free slots on the chain, off every list
 * so that no thread takes one meanwhile, links them as purged outside
 * the lock (their links are no one else's until listed), and lists them
 * all under it once. */
static void purge_chain(struct slot_header *chain, size_t pages, uint64_t now)
{
    if (chain == NULL)
        return;
    size_t page = os_page_size();
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_relaxed);
    uint32_t first = 0, last = 0;
    while (chain != NULL) {
        struct slot_header *next = chain->next_free; /* read before the purge zeroes it */
        char *slot = slot_of(chain);
        os_purge(slot, slot_bytes(pages), slot_bytes(pages));
        uint32_t index = (uint32_t)(((uintptr_t)slot - base) / page) + 1;
        purged_links[index - 1] = (struct purged_link){0, (uint32_t)(now / 1000000u)};
        if (last != 0)
            purged_links[last - 1].next = index;
        else
            first = index;
        last = index;
        chain = next;
    }
    os_lock_take_spinning(&sampled_lock);
    purged_links[last - 1].next = purged_slots[pages];
    purged_slots[pages] = first;
    os_lock_give(&sampled_lock);
}

size_t sampled_blocks_expire_now(bool all)
{
    if (atomic_load_explicit(&sampled_region, memory_order_acquire) == 0)
        return 0;
    uint64_t now = os_now_ns();
    struct slot_header *expired[PAGE_COUNTS] = {0};
    bool any = false;
    os_lock_take_spinning(&sampled_lock);
    struct slot_cache *cache = thread_cache;
    if (all && cache != NULL) /* strata_trim: the caller's cache too */
        cache_give_back(cache);
    uint64_t delay = all ? 0 : strata_options.purge_delay_ns << stretch;
    for (size_t pages = 1; pages < PAGE_COUNTS; pages++) {
        /* Newest first: those freed since the last round (stamped now),
         * then by their stamps; the expired ones are the list's end. */
        struct slot_header **link = &resident_slots[pages];
        for (; *link != NULL && (*link)->freed_at == 0; link = &(*link)->next_free)
            (*link)->freed_at = now;
        while (*link != NULL && now - (*link)->freed_at < delay)
            link = &(*link)->next_free;
        expired[pages] = *link;
        *link = NULL;
        for (struct slot_header *h = expired[pages]; h != NULL; h = h->next_free) {
            free_resident -= slot_bytes(pages);
            any = true;
        }
    }
    size_t left = free_resident;
    bool quiet = left == 0 && !freed_since_round;
    if (quiet)
        purger_asked = false;
    freed_since_round = false;
    if (any) {
        if (!retaken_since_purge && ++calm_purges >= PURGE_CALM_CHECKS) {
            if (stretch > 0)
                stretch--;
            calm_purges = 0;
        }
        retaken_since_purge = false;
    }
    os_lock_give(&sampled_lock);
    if (!any)
        return quiet ? 0 : left + 1;
    /* Off every list while their pages go back: no sample takes them. */
    for (size_t pages = 1; pages < PAGE_COUNTS; pages++)
        purge_chain(expired[pages], pages, now);
    return left + 1; /* not quiet: the purger looks again */
}

void sampled_blocks_stats(size_t *blocks, size_t *bytes)
{
    os_lock_take_spinning(&sampled_lock);
    long live = live_blocks, held = live_bytes;
    for (struct slot_cache *cache = caches; cache != NULL; cache = cache->next) {
        live += atomic_load_explicit(&cache->live_blocks, memory_order_relaxed);
        held += atomic_load_explicit(&cache->live_bytes, memory_order_relaxed);
    }
    os_lock_give(&sampled_lock);
    *blocks += live > 0 ? (size_t)live : 0;
    *bytes += held > 0 ? (size_t)held : 0;
}

/* ---- fork ------------------------------------------------------------------ */
void sampled_blocks_lock_all(void)
{
    os_lock_take_spinning(&sampled_lock);
}

void sampled_blocks_unlock_all(void)
{
    os_lock_give(&sampled_lock);
}

void sampled_blocks_fork_child(void)
{
    os_lock_init(&sampled_lock);
    /* The other threads are gone: their caches' slots go to the lists. */
    for (struct slot_cache *cache = caches; cache != NULL; cache = cache->next)
        if (cache != thread_cache && cache->owned) {
            cache_give_back(cache);
            cache->owned = false;
        }
}
