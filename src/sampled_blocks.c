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
 * Invariants (under sampled_lock): every slot below `carved` is live (its
 * header sealed as such), on its page count's resident list (newest free
 * first, sealed as freed), on its purged list (in `purged_links`), or
 * being purged; the resident lists' slots add up to `free_resident`
 * bytes; the region is accessible and charged up to `opened`. */
#include <string.h>

#include "block_guards.h"
#include "core.h"
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
    struct profile_sample *sample; /* a live block's */
    size_t asked;                  /* the size the block was allocated with */
    size_t offset;                 /* from the slot's start to the block */
    size_t pages;                  /* the slot's */
    uintptr_t magic;               /* slot_magic of the block, live or freed */
};
_Static_assert(sizeof(struct slot_header) <= SLOT_HEADER, "a slot's header fits before its block");

_Atomic uintptr_t sampled_region;
static struct os_lock sampled_lock;
static size_t carved, opened; /* bytes from the region's start */
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
static size_t live_blocks, live_bytes;

static uintptr_t slot_magic(const void *block, const struct slot_header *h, uintptr_t kind)
{
    uint64_t sum = (uint64_t)(uintptr_t)block ^ block_secret.link;
    sum = (sum ^ h->pages ^ h->offset << 32) * 0x9e3779b97f4a7c15u;
    sum = (sum ^ (kind == LIVE_MAGIC ? h->asked : 0)) * 0xbf58476d1ce4e5b9u;
    sum = (sum ^ (kind == LIVE_MAGIC ? (uintptr_t)h->sample : 0)) * 0x94d049bb133111ebu;
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
    while (carved + bytes > opened) {
        if (opened + OPEN_STEP > SAMPLED_REGION || !os_charge(OPEN_STEP))
            return NULL;
        if (!os_protect((char *)base + opened, OPEN_STEP, true)) {
            os_uncharge(OPEN_STEP);
            return NULL;
        }
        opened += OPEN_STEP;
    }
    char *slot = (char *)base + carved;
    carved += bytes;
    return slot;
}

/* A free slot of `pages` pages, resident ones first (sampled_lock held);
 * NULL when there is none. In the secure flavour a resident slot's bytes
 * were zeroed at its free and are checked zero here (a write after free
 * is reported), its old header cleared: all of it reads as zero
 * (*zeroed). */
static char *reuse(size_t pages, bool *zeroed)
{
    *zeroed = false;
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_relaxed);
    struct slot_header *freed = resident_slots[pages];
    if (freed != NULL) {
        /* A write before a freed block's start must not steer the list. */
        uintptr_t offset = (uintptr_t)block_of(freed) - base;
        if (offset > carved || freed->magic != slot_magic(block_of(freed), freed, FREED_MAGIC) ||
            freed->pages != pages)
            report_fatal("write before the start of a freed block (its header is overwritten)", block_of(freed));
        resident_slots[pages] = freed->next_free;
        free_resident -= slot_bytes(pages);
        char *slot = slot_of(freed), *block = block_of(freed);
        if (secure_has(SECURE_ZERO)) {
            if (!zero_intact(slot, 0, (size_t)((char *)freed - slot)) ||
                !zero_intact(block, 0, usable_of(freed)))
                report_fatal("write after free (a freed block changed before it was handed out again)", block);
            memset(freed, 0, sizeof *freed);
            *zeroed = true;
        }
        return slot;
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

void *sampled_block_alloc(size_t size, size_t alignment, bool zero, struct profile_sample *sample)
{
    size_t page = os_page_size();
    if (size > SAMPLED_BLOCK_MAX || alignment > SAMPLED_BLOCK_MAX || !region_ready())
        return NULL;
    uintptr_t base = atomic_load_explicit(&sampled_region, memory_order_acquire);
    /* Slots are page-aligned: a block aligned to A lies at most A in. */
    size_t align = alignment > SLOT_HEADER ? alignment : SLOT_HEADER;
    size_t pages = (size + align + page - 1) / page;
    os_lock_take_spinning(&sampled_lock);
    bool zeroed;
    char *slot = reuse(pages, &zeroed);
    bool reused = slot != NULL;
    if (!reused)
        slot = carve(base, slot_bytes(pages));
    char *block = NULL;
    size_t usable = 0;
    if (slot != NULL) {
        block = (char *)(((uintptr_t)slot + SLOT_HEADER + align - 1) & ~(uintptr_t)(align - 1));
        struct slot_header *h = header_of(block);
        *h = (struct slot_header){NULL, 0, sample, size, (size_t)(block - slot), pages, 0};
        h->magic = slot_magic(block, h, LIVE_MAGIC);
        usable = usable_of(h);
        live_blocks++;
        live_bytes += usable;
    }
    os_lock_give(&sampled_lock);
    if (block == NULL)
        return NULL;
    if (zero && reused && !zeroed) /* a fresh slot's pages are zero; a reused one's need not be */
        memset(block, 0, size);
    counters_bytes_out((long)usable);
    return block;
}

/* The header of the live block at p (sampled_lock held); anything else is
 * reported: `not_ours` for an address no block of the region can have. */
static struct slot_header *live_header(const void *p, const char *not_ours)
{
    uintptr_t offset = (uintptr_t)p - atomic_load_explicit(&sampled_region, memory_order_relaxed);
    if (offset < SLOT_HEADER || offset > carved || (offset & 15) != 0)
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

void sampled_block_free(void *p)
{
    os_lock_take_spinning(&sampled_lock);
    struct slot_header *h = live_header(p, "free of a pointer strata did not allocate");
    struct profile_sample *sample = h->sample;
    size_t usable = usable_of(h);
    bool ask = !purger_asked;
    purger_asked = true;
    h->magic = slot_magic(p, h, FREED_MAGIC);
    /* Stamped by the purger's next round, so that a free reads no clock
     * (2% of the threads table's time profiled). */
    h->freed_at = 0;
    freed_since_round = true;
    live_blocks--;
    live_bytes -= usable;
    if (secure_has(SECURE_ZERO)) {
        /* Sealed as freed, on no list: zeroed outside the lock, then
         * listed (its reuse checks the zeros). */
        os_lock_give(&sampled_lock);
        memset(p, 0, usable);
        os_lock_take_spinning(&sampled_lock);
    }
    h->next_free = resident_slots[h->pages];
    resident_slots[h->pages] = h;
    free_resident += slot_bytes(h->pages);
    os_lock_give(&sampled_lock);
    counters_bytes_out(-(long)usable);
    profile_sample_release(sample);
    if (ask)
        purger_ask(); /* it gives the pages back if no sample takes them */
}

size_t sampled_block_usable_size(const void *p)
{
    os_lock_take_spinning(&sampled_lock);
    size_t usable = usable_of(live_header(p, "a pointer strata did not allocate"));
    os_lock_give(&sampled_lock);
    return usable;
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
        os_purge(slot, slot_bytes(pages));
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
    *blocks += live_blocks;
    *bytes += live_bytes;
    os_lock_give(&sampled_lock);
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
}
