/* block_guards.h: what the secure flavour writes in and around a block,
 * for the files that carve, quarantine and check blocks: the key its first
 * line is filled with while it is free, the canary after its end, and the
 * state that says where that end is (layout.h, block_state). Pure inline
 * helpers over layout.h; in the default flavour nothing calls them.
 *
 * A handed-out small block's usable end (block_end: the size asked, or
 * nearer its slot's end when the slack is too long for a state) holds
 * SECURE_CANARY_BYTES of canary; its state records where. Its free reads
 * the state, not the block. A canary within the block's first 64 bytes is
 * checked at the free, which then keys all those bytes; one further on is
 * checked when the block leaves the quarantine (the free fetches its line
 * ahead: a program may have left the block cold long ago), and the free
 * keys the words before it. Leaving the quarantine, the block has its keys
 * checked and words 2..7 keyed (the words a free list leaves alone), which
 * the next hand-out checks. Pages are carved with those in place (segment.c),
 * so every block a thread can pop carries them. Large blocks keep their
 * canary and a keyed size word in the mapping (secure.c). */
#ifndef STRATA_BLOCK_GUARDS_H
#define STRATA_BLOCK_GUARDS_H

#include <stdint.h>
#include <string.h>

#include "layout.h"
#include "report.h"

/* Key words at most in a free block's first line. */
#define SECURE_FILL_WORDS 8
#define SECURE_FILL_BYTES (SECURE_FILL_WORDS * sizeof(uintptr_t))
#define SECURE_CANARY_BYTES 8
/* Room a block keeps after what was asked: a small block's canary; a large
 * one's canary and size word. */
#define SECURE_TAIL_SMALL (secure_has(SECURE_CANARY) ? (size_t)SECURE_CANARY_BYTES : 0)
#define SECURE_TAIL_LARGE (secure_has(SECURE_CANARY) ? (size_t)(SECURE_CANARY_BYTES + 8) : 0)
/* The largest state (layout.h), so the longest slack one records. */
#define STATE_MAX 65535u

/* A block's keys, from one multiplication of its address under the
 * secrets: what fills it while it is free, its canary (the top bit of every
 * byte set, so that an overflow by a character or a string's terminating 0
 * always changes it; by another byte, but for a chance of 1 in 128) and what
 * its size word is xored with. Without the secrets one block's keys say
 * nothing of another's; a program that can read freed memory learns its
 * blocks' fill keys, which tell the other two only with the secrets. */
struct block_keys {
    uintptr_t fill;
    uint64_t canary;
    size_t size;
};

static inline struct block_keys keys_of(const void *p)
{
    uint64_t h = ((uint64_t)(uintptr_t)p ^ block_secret.fill) * (block_secret.canary | 1);
    h ^= h >> 29;
    return (struct block_keys){(uintptr_t)h, (h + block_secret.size) | 0x8080808080808080u,
                               (size_t)((h >> 17) ^ block_secret.size)};
}

/* Key words in the first `bytes` of a block: a free keys those before its
 * canary (`bytes` its end), from word 0; a free list's block those of its
 * slot from word 2, which the next hand-out checks. */
static inline size_t fill_words(size_t bytes)
{
    return bytes / sizeof(uintptr_t) < SECURE_FILL_WORDS ? bytes / sizeof(uintptr_t) : SECURE_FILL_WORDS;
}

/* Keys words [from, words) of a free block. A whole line goes in four
 * 16-byte stores: the line is cold as often as not, and each store waits
 * in the store buffer until the line arrives. */
typedef uintptr_t key_pair __attribute__((vector_size(2 * sizeof(uintptr_t))));
static inline void fill_block(void *p, uintptr_t key, size_t from, size_t words)
{
    uintptr_t *w = p;
    if (from == 0 && words == SECURE_FILL_WORDS) {
        key_pair pair = {key, key};
        for (size_t i = 0; i < SECURE_FILL_WORDS; i += 2)
            memcpy(w + i, &pair, sizeof pair);
        return;
    }
    for (size_t i = from; i < words; i++)
        w[i] = key;
}

/* Whether words [from, words) still hold the block's key. */
static inline bool fill_intact(const void *p, uintptr_t key, size_t from, size_t words)
{
    const uintptr_t *w = p;
    uintptr_t differ = 0;
    for (size_t i = from; i < words; i++)
        differ |= w[i] ^ key;
    return differ == 0;
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

/* A canary within the first 64 bytes of a block, which its free keys, is
 * checked at the free; one further on when the block leaves the
 * quarantine. */
static inline bool canary_checked_at_free(size_t end)
{
    return end + SECURE_CANARY_BYTES <= SECURE_FILL_BYTES;
}

/* Key words a free writes, from word 0: all of the first 64 bytes of its
 * slot once a canary among them is checked (so that a write after free
 * anywhere there is seen); else those that end before the canary, which is
 * checked later. The quarantine's release checks the same words. */
static inline size_t freed_key_words(size_t end, size_t slot)
{
    return canary_checked_at_free(end) ? fill_words(slot) : fill_words(end);
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

#endif /* STRATA_BLOCK_GUARDS_H */
