/* secure.c: the secure flavour's allocation calls (libstrata-secure), which
 * api.h's inline paths and api.c send every allocation and free to in
 * that flavour. They run over the default flavour's heaps and large blocks
 * and add what block_guards.h describes:
 * - a small block handed out is checked zero (a write after free while it
 *   was free is reported) and reads as zero, its state set (layout.h) and a
 *   canary at its usable end;
 * - a free is validated (the start of a block strata handed out and has
 *   not taken back: every double free, told by the block's state alone),
 *   the canary checked (an overflow past the end is reported), the guard
 *   word before the block checked (a write before its start), the slot
 *   zeroed but for its own guard word and the block held in the thread's
 *   quarantine (free.c) before it is freed for real;
 * - blocks of size 0 are slots of an inaccessible region (zero_size.c);
 * - blocks above the small classes are large mappings, each ending at a
 *   guard page, inaccessible once freed (large.c), zeroed when handed out.
 * Invariant: a small block handed out has a nonzero state, its usable end
 * E (block_end of the size asked: at least it) with E + its tail <= its
 * slot, and its canary at E; a free one, state 0, is zero but for the two
 * words a free list writes. A large block's usable size is the size asked;
 * its size word ends its usable bytes. */
#include <errno.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "alloc.h"
#include "block_guards.h"
#include "core.h"
#include "init.h"
#include "secure.h"
#include "zero_size.h"

/* The largest size a small block holds with its tail. */
#define SECURE_SMALL_LIMIT (SMALL_MAX - SECURE_TAIL_SMALL)

/* A freed block of at least this many bytes is zeroed by stores that go
 * around the caches (zero_freed). Paired against memset, 7 runs each: the
 * threads table (blocks of 16 bytes to 16 KiB, a byte a page written)
 * 0.76x the time at 1 thread, 0.78x with two ends written, 0.75x at 2
 * threads; the cross-thread table 1.03x, sqlite3 1.02x, python3 0.95x.
 * From 1 KiB on, the cross-thread table took 3.0x the time: the next
 * thread to take such a block reads its first line at the hand-out (and
 * writes the rest) from memory, where memset had left it in a cache. */
#define ZERO_STREAMED_MIN 4096

/* A freed block's bytes zeroed (SECURE_ZERO). A large one is cold in the
 * caches where the program left it, typically, and memset would read
 * every line of it from memory to write it: stores around the caches
 * write it alone, and leave the caches to what the program uses. The
 * fence orders them before whatever makes the block another thread's. */
static void zero_freed(void *p, size_t size)
{
#if defined(__SSE2__)
    if (size >= ZERO_STREAMED_MIN) {
        char *c = p; /* 16-aligned, as every block */
        __m128i zero = _mm_setzero_si128();
        size_t done = 0;
        for (; done + 64 <= size; done += 64) {
            _mm_stream_si128((__m128i *)(c + done), zero);
            _mm_stream_si128((__m128i *)(c + done + 16), zero);
            _mm_stream_si128((__m128i *)(c + done + 32), zero);
            _mm_stream_si128((__m128i *)(c + done + 48), zero);
        }
        memset(c + done, 0, size - done);
        _mm_sfence();
        return;
    }
#endif
    memset(p, 0, size);
}

/* A small block of the class for `size` bytes: its first line checked zero
 * past the two words its free list wrote, which are cleared, so that it
 * reads as zero (its free zeroed the rest); its state and canary set.
 * (The class's size is read once the allocation has set strata up.) */
static void *handed_out(unsigned class_index, size_t size)
{
    void *p = bin_pop(class_index);
    if (unlikely(p == NULL)) {
        p = alloc_class(class_index, size);
        if (p == NULL)
            return NULL;
        if (unlikely(!is_segment_pointer(p))) { /* the heap profiler's sample (sampled_blocks.h) */
            struct block_keys keys = keys_of(p);
            large_tail_set(p, size, large_usable_size(p), &keys);
            return p;
        }
    }
    size_t slot = class_size[class_index];
    if (secure_has(SECURE_ZERO)) {
        if (unlikely(!zero_intact(p, sizeof(struct block), zeroed_first_line(slot))))
            report_fatal("write after free (a free block changed before it was handed out again)", p);
        memset(p, 0, sizeof(struct block));
    }
    struct block_keys keys = keys_of(p);
    small_mark_live(p, size, slot, &keys);
    return p;
}

/* A large mapping for `size` bytes and `room` more to grow into, zeroed
 * when asked or when every new block reads as zero (SECURE_ZERO). */
static void *large_block(size_t size, size_t room, size_t alignment, bool zero)
{
    if (size > (size_t)PTRDIFF_MAX - SECURE_TAIL_LARGE - room) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = alloc_large(size + room + SECURE_TAIL_LARGE, alignment, zero || secure_has(SECURE_ZERO));
    if (p != NULL) {
        struct block_keys keys = keys_of(p);
        large_tail_set(p, size, large_usable_size(p), &keys);
    }
    return p;
}

/* A block for `size` bytes with `room` more, of a class whose blocks are
 * all 16-aligned, as glibc's are: the class of a multiple of 16 is that
 * (sizeclass.h). */
static void *block_with_room(size_t size, size_t room)
{
    if (likely(size <= SECURE_SMALL_LIMIT && room <= SECURE_SMALL_LIMIT - size)) {
        /* At least a free list's two words before the guard word. */
        size_t want = size + room + SECURE_TAIL_SMALL;
        if (want < sizeof(struct block) + SECURE_GUARD_BYTES)
            want = sizeof(struct block) + SECURE_GUARD_BYTES;
        return handed_out(size_class((want + 15) & ~(size_t)15), size);
    }
    return large_block(size, room, 0, false);
}

void *secure_malloc(size_t size)
{
    if (unlikely(size == 0)) {
        void *p = zero_size_alloc();
        if (p != NULL)
            return p;
    }
    return block_with_room(size, 0);
}

void *secure_calloc(size_t total)
{
    if (total == 0)
        return secure_malloc(0);
    if (total > SECURE_SMALL_LIMIT)
        return large_block(total, 0, 0, true);
    void *p = block_with_room(total, 0);
    if (!secure_has(SECURE_ZERO) && p != NULL)
        memset(p, 0, total);
    return p;
}

void *secure_aligned_alloc(size_t alignment, size_t size)
{
    if (alignment <= ZERO_SIZE_SLOT)
        return secure_malloc(size);
    size_t want = size + SECURE_TAIL_SMALL;
    if (size > SECURE_SMALL_LIMIT || alignment > SLICE_SIZE)
        return large_block(size, 0, alignment, false);
    config_init(); /* the class sizes are read here */
    unsigned c = class_aligned_from(size_class(want > alignment ? want : alignment), alignment);
    if (c == CLASS_COUNT)
        return large_block(size, 0, alignment, false);
    return handed_out(c, size);
}

/* The slot of a pointer into a segment that starts a small block: the
 * thread's own carved ones are told by their slice alone, as the inline
 * free tells them, their class in *own_class; the others by their page
 * (free_segment_page reports the rest), with CLASS_NONE. 0 for a medium
 * block, which the secure flavour never makes. */
static size_t small_slot(const void *p, unsigned *own_class)
{
    const struct segment *segment = segment_of(p);
    uint32_t offset = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    const struct slice *slice = &segment->slices[offset >> SLICE_SHIFT];
    bool own = atomic_load_explicit(&segment->owner, memory_order_relaxed) == (uintptr_t)thread_heap;
    if (likely(own && slice_holds_block(slice, offset))) {
        *own_class = slice_class(slice);
        return class_size[slice_class(slice)];
    }
    *own_class = CLASS_NONE;
    struct page *page = free_segment_page((void *)p);
    return page->class_index < CLASS_COUNT ? page->block_size : 0;
}

/* A live block's usable size (its end: a large block's size asked, a small
 * one's block_end), its slot in *slot; misuse (a pointer strata did not
 * hand out, a free block, an overflow) is reported. */
static size_t live_end(const void *p, bool *large, size_t *slot)
{
    *large = !is_segment_pointer(p);
    struct block_keys keys = keys_of(p);
    if (*large) {
        *slot = large_usable_size(p);
        if (*slot == 0) {
            free_slow((void *)p); /* reports it: a double free, or not strata's */
            report_fatal("free of a pointer strata did not allocate", p);
        }
        return large_tail_check(p, *slot, &keys);
    }
    unsigned own_class;
    *slot = small_slot(p, &own_class);
    if (unlikely(*slot == 0))
        report_fatal("free of a pointer that is not the start of a block", p);
    return small_live_end(p, *block_state(p, *slot), *slot, &keys);
}

void secure_free(void *p)
{
    if (p == NULL)
        return;
    if (unlikely(zero_size_holds(p))) {
        zero_size_free(p);
        return;
    }
    if (unlikely(!is_segment_pointer(p))) {
        bool large;
        size_t slot;
        live_end(p, &large, &slot);
        free_slow(p); /* the mapping is made inaccessible in the cache */
        return;
    }
    unsigned own_class;
    size_t slot = small_slot(p, &own_class);
    if (unlikely(slot == 0)) { /* a medium block: none of the secure flavour's */
        free_segment_slow(p);
        return;
    }
    uint16_t *state = block_state(p, slot);
    size_t end = end_of_state(p, *state, slot);
    *state = 0;
    struct block_keys keys = keys_of(p);
    canary_check(p, end, &keys);
    if (secure_has(SECURE_CANARY) && unlikely(!guard_intact(p, &keys)))
        report_fatal("write before the start of a block (the guard word before it is overwritten)", p);
    if (secure_has(SECURE_ZERO))
        zero_freed(p, slot - SECURE_GUARD_BYTES);
    quarantine_put(thread_heap, p, slot, own_class);
    purger_start_if_wanted(); /* the frees it made may have filled the pages' free slices */
}

/* Whether p starts a small block of a page in use. */
static bool starts_small_block(const void *p)
{
    const struct segment *segment = segment_of(p);
    const struct slice *slice = &segment->slices[slice_of(p)];
    if (slice_class(slice) >= CLASS_COUNT)
        return false;
    uint32_t in_page = slice_page_offset(slice, (uint32_t)((uintptr_t)p & SEGMENT_MASK));
    return slice_block_start(slice, &segment->pages[slice_page_index(slice)], in_page);
}

bool secure_block_is_free(const void *p)
{
    if (zero_size_holds(p))
        return false; /* never a context's header: it has no bytes */
    return is_segment_pointer(p) && starts_small_block(p) &&
           *block_state(p, page_of(segment_of(p), p)->block_size) == 0;
}

/* The usable size of a live block; anything else is misuse, reported as a
 * free of it would be (the default flavour answers 0 instead). */
size_t secure_usable_size(const void *p)
{
    if (p == NULL)
        return 0;
    if (zero_size_holds(p)) {
        zero_size_check_live(p);
        return 0;
    }
    struct block_keys keys = keys_of(p);
    if (!is_segment_pointer(p)) {
        size_t slot = large_usable_size(p);
        if (slot == 0)
            report_fatal("malloc_usable_size of a pointer strata did not allocate", p);
        return large_tail_check(p, slot, &keys);
    }
    if (!starts_small_block(p))
        report_fatal("malloc_usable_size of a pointer that is not the start of a block", p);
    size_t slot = page_of(segment_of(p), p)->block_size;
    unsigned state = *block_state(p, slot);
    if (state == 0)
        report_fatal("malloc_usable_size of a free block (a use after free)", p);
    return small_live_end(p, state, slot, &keys);
}

/* A live block now holds `size` bytes: its tail (and state) say so. */
static void resize_in_place(void *p, size_t size, size_t slot, bool large)
{
    struct block_keys keys = keys_of(p);
    if (large) {
        large_tail_set(p, size, slot, &keys);
        return;
    }
    small_mark_live(p, size, slot, &keys);
}

/* A block that grows tends to grow again: it moves with an eighth more. */
#define SECURE_GROWTH_DIVISOR 8

void *secure_realloc(void *p, size_t size)
{
    if (p == NULL)
        return secure_malloc(size);
    if (size == 0) {
        secure_free(p);
        return NULL;
    }
    if (zero_size_holds(p)) { /* nothing to copy */
        zero_size_check_live(p);
        void *fresh = secure_malloc(size);
        if (fresh != NULL)
            zero_size_free(p);
        return fresh;
    }
    bool large;
    size_t slot;
    size_t old = live_end(p, &large, &slot);
    size_t tail = large ? SECURE_TAIL_LARGE : SECURE_TAIL_SMALL;
    /* In place while it fits and keeps at least half its slot. */
    if (size <= slot - tail && size >= slot / 2) {
        resize_in_place(p, size, slot, large);
        return p;
    }
    size_t room = size > old ? size / SECURE_GROWTH_DIVISOR : 0;
    int saved = errno;
    void *fresh = block_with_room(size, room);
    if (fresh == NULL && room != 0)
        fresh = block_with_room(size, 0);
    if (unlikely(fresh == NULL)) {
        if (size > old)
            return NULL;
        errno = saved; /* a shrink never fails: the block stays, smaller */
        resize_in_place(p, size, slot, large);
        return p;
    }
    memcpy(fresh, p, old < size ? old : size);
    secure_free(p);
    return fresh;
}
