/* block_guards.h: what the secure flavour writes in and around a block,
 * for the files that carve, quarantine and check blocks: the zeros a free
 * block holds, the canary after a live block's end, and the state that
 * says where that end is (layout.h, block_state). Pure inline helpers over
 * layout.h; in the default flavour only the guard word below each small
 * block (guard_set, its value layout.h's small_guard_word) and a medium
 * block's guard word and canary (both flavours have them; the secure
 * flavour makes no medium block) are written and checked.
 *
 * A handed-out small block's usable end (block_end: the size asked, or
 * nearer its slot's end when the slack is too long for a state) holds
 * SECURE_CANARY_BYTES of canary; its state records where. Its free reads
 * the state, not the block, checks the canary and zeroes the whole slot,
 * so that a use after free reads zeros and no data of the program's
 * outlives its free. Leaving the quarantine, the block's first line must
 * still be zero (a write after free there is reported) before a free list
 * writes its first two words; its next hand-out checks the line again and
 * clears those two, so every block handed out reads as zero. (A check of
 * the whole slot at each hand-out took the threads table from 1.77 M to
 * 1.15 M operations a second: the rest is trusted to the free's zeros.)
 * Pages are carved zeroed (segment.c), so every block a thread can pop is.
 * Each small slot's last word guards the slot above (guard_set). Large
 * blocks keep their canary and a keyed size word in the mapping
 * (secure.c), and come zeroed. */
#ifndef STRATA_BLOCK_GUARDS_H
#define STRATA_BLOCK_GUARDS_H

#include <stdint.h>
#include <string.h>

#include "layout.h"
#include "report.h"

/* The bytes of a free block's first line that the quarantine's release
 * checks are still zero. */
#define SECURE_FIRST_LINE 64
#define SECURE_CANARY_BYTES 8
/* A small slot's last word: the guard of the slot after it (guard_set). */
#define SECURE_GUARD_BYTES (secure_has(SECURE_CANARY) ? (size_t)8 : 0)
/* Room a block keeps after what was asked: a small block's canary and its
 * slot's guard word; a large one's canary and size word. */
#define SECURE_TAIL_SMALL (secure_has(SECURE_CANARY) ? (size_t)SECURE_CANARY_BYTES + SECURE_GUARD_BYTES : 0)
#define SECURE_TAIL_LARGE (secure_has(SECURE_CANARY) ? (size_t)(SECURE_CANARY_BYTES + 8) : 0)
/* The largest state (layout.h), so the longest slack one records. */
#define STATE_MAX 65535u

/* A block's keys, from one multiplication of its address under the
 * secrets: its canary (the top bit of every byte set, so that an overflow
 * by a character or a string's terminating 0 always changes it; by another
 * byte, but for a chance of 1 in 128) and what its size word is xored
 * with. Without the secrets one block's keys say nothing of another's. */
struct block_keys {
    uint64_t canary;
    size_t size;
    uint64_t guard;
};

static inline struct block_keys keys_of(const void *p)
{
    uint64_t h = ((uint64_t)(uintptr_t)p ^ block_secret.address) * (block_secret.canary | 1);
    h ^= h >> 29;
    uint64_t canary = (h + block_secret.size) | 0x8080808080808080u;
    return (struct block_keys){canary, (size_t)((h >> 17) ^ block_secret.size), (canary << 32 | canary >> 32)};
}

/* The guard word in the 8 bytes before a small block: the last word of the
 * slot before it in its page (of the page's lead for its first block:
 * layout.h, page_lead), written when the blocks are carved and never again
 * while the page is in use (a secure free zeroes its slot but for it). A
 * write before a block's start changes it, and the block's free finds it
 * (secure.c; the default flavour's word and check: layout.h,
 * small_guard_word). guard_of gives the flavour's word for the block at
 * `next`, false where it keeps none. */
static inline bool guard_of(const void *next, uint64_t *guard)
{
    if (!STRATA_SECURE_BUILD)
        *guard = small_guard_word(next); /* the default flavour's (layout.h) */
    else if (secure_has(SECURE_CANARY))
        *guard = keys_of(next).guard;
    else
        return false;
    return true;
}

static inline void guard_set(void *next)
{
    uint64_t guard;
    if (guard_of(next, &guard))
        memcpy((char *)next - sizeof guard, &guard, sizeof guard);
}

/* Whether the guard word guard_set wrote below p is as written (true where
 * the flavour writes none). */
static inline bool guard_word_intact(const void *next)
{
    uint64_t guard;
    if (!guard_of(next, &guard))
        return true;
    uint64_t word;
    memcpy(&word, (const char *)next - sizeof word, sizeof word);
    return word == guard;
}

static inline bool guard_intact(const void *p, const struct block_keys *keys)
{
    uint64_t guard;
    memcpy(&guard, (const char *)p - SECURE_GUARD_BYTES, sizeof guard);
    return guard == keys->guard;
}

/* The bytes of a free block's slot the checks of its zeros read: its first
 * line, short of the guard word. */
static inline size_t zeroed_first_line(size_t slot)
{
    size_t zeroed = slot - SECURE_GUARD_BYTES;
    return zeroed < SECURE_FIRST_LINE ? zeroed : SECURE_FIRST_LINE;
}

/* Two words, read and or-ed 16 bytes at a time. */
typedef uint64_t zero_pair __attribute__((vector_size(16)));

/* Whether bytes [from, to) of a block are all zero (from and to multiples
 * of 8). A whole first line from a multiple of 16 (every block of 72
 * bytes and more) is read in 16-byte pieces: 3 or 4 loads. */
static inline bool zero_intact(const void *p, size_t from, size_t to)
{
    if (likely(to == SECURE_FIRST_LINE) && from % 16 == 0) {
        const char *line = (const char *)p;
        zero_pair seen = {0, 0};
        for (size_t at = from; at < SECURE_FIRST_LINE; at += 16) {
            zero_pair piece;
            memcpy(&piece, line + at, sizeof piece);
            seen |= piece;
        }
        return (seen[0] | seen[1]) == 0;
    }
    if (to <= from)
        return true;
    const uint64_t *w = (const uint64_t *)((const char *)p + from);
    size_t words = (to - from) / sizeof *w, i = 0;
    uint64_t seen = 0;
    /* The checks of a first line read 6 or 8 words: 6 with no loop. */
    if (likely(words >= 6)) {
        seen = w[0] | w[1] | w[2] | w[3] | w[4] | w[5];
        i = 6;
    }
    for (; i < words; i++)
        seen |= w[i];
    return seen == 0;
}

/* A small block's usable end for `size` bytes in a slot: where its canary
 * goes, at the size asked unless the slack is longer than a state records
 * (an alignment, or a block shrunk in place); the slot's end without a
 * canary. */
static inline size_t block_end(size_t size, size_t slot)
{
    if (!secure_has(SECURE_CANARY))
        return slot;
    return size + STATE_MAX >= slot + 1 ? size : slot + 1 - STATE_MAX;
}

static inline uint16_t state_of_end(size_t end, size_t slot)
{
    return (uint16_t)(slot + 1 - end);
}

/* The usable end a handed-out block's state records, or a report: 0 is a
 * free block's (a double free, or a block never handed out), and a state
 * that leaves no room for the canary was written by something else. */
static inline size_t end_of_state(const void *p, unsigned state, size_t slot)
{
    if (unlikely(state - (SECURE_TAIL_SMALL + 1) > slot - SECURE_TAIL_SMALL))
        report_fatal(state == 0 ? "double free (or free of a block strata has not handed out)"
                                : "a block's state is overwritten (a stray write into strata's metadata)",
                     p);
    return slot + 1 - state;
}

static inline void canary_set(void *p, size_t end, const struct block_keys *keys)
{
    if (secure_has(SECURE_CANARY))
        memcpy((char *)p + end, &keys->canary, sizeof keys->canary);
}

static inline void canary_check(const void *p, size_t end, const struct block_keys *keys)
{
    if (!secure_has(SECURE_CANARY))
        return;
    uint64_t canary;
    memcpy(&canary, (const char *)p + end, sizeof canary);
    if (unlikely(canary != keys->canary))
        report_fatal("write past the end of a block (its canary is overwritten)", p);
}

/* A small block in a slot of `slot` bytes now holds `size`: its state and
 * its canary say so, together. */
static inline void small_mark_live(void *p, size_t size, size_t slot, const struct block_keys *keys)
{
    size_t end = block_end(size, slot);
    *block_state(p, slot) = state_of_end(end, slot);
    canary_set(p, end, keys);
}

/* A handed-out small block's usable end, from its state (reported unless
 * it is a live block's), its canary checked. */
static inline size_t small_live_end(const void *p, unsigned state, size_t slot, const struct block_keys *keys)
{
    size_t end = end_of_state(p, state, slot);
    canary_check(p, end, keys);
    return end;
}

/* A large block's canary at `size` and keyed size word at the end of its
 * `usable` bytes. */
static inline void large_tail_set(void *p, size_t size, size_t usable, const struct block_keys *keys)
{
    if (!secure_has(SECURE_CANARY))
        return;
    canary_set(p, size, keys);
    uint64_t word = (uint64_t)(size ^ keys->size);
    memcpy((char *)p + usable - sizeof word, &word, sizeof word);
}

/* The size a large block was asked for, its tail checked. */
static inline size_t large_tail_check(const void *p, size_t usable, const struct block_keys *keys)
{
    if (!secure_has(SECURE_CANARY))
        return usable;
    uint64_t word;
    memcpy(&word, (const char *)p + usable - sizeof word, sizeof word);
    size_t size = (size_t)word ^ keys->size;
    if (unlikely(size > usable - SECURE_TAIL_LARGE))
        report_fatal("write past the end of a block (its size word is overwritten)", p);
    canary_check(p, size, keys);
    return size;
}

/* ---- a medium block's guards (layout.h, MEDIUM_HEAD) ------------------------
 * Its guard word before it, its canary after its usable size; written when
 * the block is made or grown in place (segment.c, under its heap's lock).
 * A page's block_size is only changed by its owner under that lock, and
 * read by a free once the program handed the block over. */
static inline void medium_guards_set(const struct page *page)
{
    char *p = medium_block(page);
    struct block_keys keys = keys_of(p);
    memcpy(p - sizeof keys.guard, &keys.guard, sizeof keys.guard);
    memcpy(p + page->block_size, &keys.canary, sizeof keys.canary);
}

/* What is wrong with a live medium block's guards: NULL, or a report's
 * words. */
static inline const char *medium_guards_broken(const struct page *page)
{
    const char *p = medium_block(page);
    struct block_keys keys = keys_of(p);
    uint64_t guard, canary;
    memcpy(&guard, p - sizeof guard, sizeof guard);
    memcpy(&canary, p + page->block_size, sizeof canary);
    if (unlikely(guard != keys.guard))
        return "write before the start of a block (the guard word before it is overwritten)";
    if (unlikely(canary != keys.canary))
        return "write past the end of a block (its canary is overwritten)";
    return NULL;
}

static inline void medium_guards_check(const struct page *page)
{
    const char *broken = medium_guards_broken(page);
    if (unlikely(broken != NULL))
        report_fatal(broken, medium_block(page));
}

#endif /* STRATA_BLOCK_GUARDS_H */
