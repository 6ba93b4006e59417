/* zero_size.c: the secure flavour's blocks of size 0. `malloc(0)` must
 * return a pointer of its own that `free` takes back, but the program may
 * touch none of its bytes: each such block is a 16-byte slot of one region
 * of address space that is never accessible, so a read or a write through
 * the pointer faults at once, before and after its free. A bit a slot says
 * which are handed out (the region holds nothing, not even a free list);
 * slots go round the region in turn, so a freed one comes back last, after
 * every other slot. The region is reserved on the first zero-size request;
 * when every slot is out, the caller falls back to a block of its smallest
 * class. */
#include "zero_size.h"

#include "core.h"

/* 2 MiB of bits, whose pages are touched as the slots they count are. */
#define ZERO_SIZE_WORDS (ZERO_SIZE_SLOTS / 64)

/* The region's base (zero_size.h), and the bits. */
_Atomic uintptr_t zero_size_region;
static uint64_t *handed_out;
/* Held while the bits and the turn change (lock order: core.h). */
static struct os_lock zero_size_lock;
/* The word the next hand-out looks in first. */
static size_t turn;

/* The region and its bits, made once (a thread that loses the race gives
 * its own back); false when the address space is not to be had. */
static bool region_ready(void)
{
    if (atomic_load_explicit(&zero_size_region, memory_order_acquire) != 0)
        return true;
    void *slots = os_reserve(ZERO_SIZE_REGION);
    if (slots == NULL)
        return false;
    void *bits = os_reserve(ZERO_SIZE_WORDS * sizeof(uint64_t));
    if (bits == NULL || !os_protect(slots, ZERO_SIZE_REGION, false)) {
        os_unreserve(slots, ZERO_SIZE_REGION);
        if (bits != NULL)
            os_unreserve(bits, ZERO_SIZE_WORDS * sizeof(uint64_t));
        return false;
    }
    os_lock_take(&zero_size_lock);
    bool won = atomic_load_explicit(&zero_size_region, memory_order_relaxed) == 0;
    if (won) {
        handed_out = bits;
        atomic_store_explicit(&zero_size_region, (uintptr_t)slots, memory_order_release);
    }
    os_lock_give(&zero_size_lock);
    if (!won) {
        os_unreserve(slots, ZERO_SIZE_REGION);
        os_unreserve(bits, ZERO_SIZE_WORDS * sizeof(uint64_t));
    }
    return true;
}

void *zero_size_alloc(void)
{
    if (!region_ready())
        return NULL;
    void *p = NULL;
    os_lock_take(&zero_size_lock);
    for (size_t looked = 0; looked < ZERO_SIZE_WORDS; looked++) {
        size_t word = turn;
        turn = turn + 1 == ZERO_SIZE_WORDS ? 0 : turn + 1;
        uint64_t free_bits = ~handed_out[word];
        if (free_bits != 0) {
            unsigned bit = (unsigned)__builtin_ctzll(free_bits);
            handed_out[word] |= (uint64_t)1 << bit;
            p = (void *)(atomic_load_explicit(&zero_size_region, memory_order_relaxed) +
                         (word * 64 + bit) * ZERO_SIZE_SLOT);
            break;
        }
    }
    os_lock_give(&zero_size_lock);
    return p;
}

/* The slot of p, which zero_size_holds; misuse is reported: not a slot's
 * start, or (as `free_block` says) a slot not handed out. */
static size_t live_slot(const void *p, const char *free_block)
{
    size_t offset = (uintptr_t)p - atomic_load_explicit(&zero_size_region, memory_order_relaxed);
    if (offset % ZERO_SIZE_SLOT != 0)
        report_fatal("a pointer inside a block of size 0 (not the start of a block)", p);
    size_t slot = offset / ZERO_SIZE_SLOT;
    if ((handed_out[slot / 64] & ((uint64_t)1 << (slot % 64))) == 0)
        report_fatal(free_block, p);
    return slot;
}

void zero_size_free(void *p)
{
    os_lock_take(&zero_size_lock);
    size_t slot = live_slot(p, "double free (a block of size 0 freed already, or never handed out)");
    handed_out[slot / 64] &= ~((uint64_t)1 << (slot % 64));
    os_lock_give(&zero_size_lock);
}

void zero_size_check_live(const void *p)
{
    os_lock_take(&zero_size_lock);
    live_slot(p, "use of a freed block of size 0");
    os_lock_give(&zero_size_lock);
}

void zero_size_lock_all(void)
{
    os_lock_take(&zero_size_lock);
}

void zero_size_unlock_all(void)
{
    os_lock_give(&zero_size_lock);
}

void zero_size_fork_child(void)
{
    os_lock_init(&zero_size_lock);
}
