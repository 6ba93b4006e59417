/* secure.h: what the secure flavour's layers share about a block's
 * contents: the key its first line is filled with while it is free, the
 * canary after its end and the word that records its size, and the thread's
 * random numbers for the order blocks are carved in. Pure inline helpers
 * over layout.h; in the default flavour nothing calls them.
 *
 * A handed-out block of `size` bytes has SECURE_CANARY_BYTES of canary at
 * `size` and its size, keyed, in the last word of its slot.
 * A free block carries its fill key in words 2..7 of its first line (the
 * words a free list leaves alone), from its free to its next hand-out: a
 * write after free changes one, and the quarantine's release or the next
 * hand-out finds it. Pages are carved with the keys in place (segment.c),
 * so every block a thread can pop carries them; a hand-out clears them, so
 * that a live block never passes for a free one.
 * Every free reads the block's first line: a block on a free list, or
 * keyed in a quarantine, is freed twice. A block of up to
 * SECURE_CHECK_AT_FREE bytes has its canary checked at its free too and is
 * keyed from word 0, its tail included. A larger one, whose end a program
 * may have left cold long ago, is keyed from word 2 and has its canary and
 * keys checked when it leaves the quarantine, where it was fetched ahead. */
#ifndef STRATA_SECURE_H
#define STRATA_SECURE_H

#include <stdint.h>
#include <string.h>

#include "layout.h"
#include "report.h"

/* Key words at most in a free block's first line. */
#define SECURE_FILL_WORDS 8
/* Blocks up to this size are checked at their free: their canary and size
 * word are in the line the free writes (a smaller block of a class above
 * holds more than 64 bytes, so keying words 2..7 never touches its tail). */
#define SECURE_CHECK_AT_FREE 80
#define SECURE_FILL_BYTES (SECURE_FILL_WORDS * sizeof(uintptr_t))
#define SECURE_CANARY_BYTES 8
/* Room a block keeps after what was asked: the canary and the size word
 * (4 bytes in a small block, 8 in a large one). */
#define SECURE_TAIL_SMALL (secure_has(SECURE_CANARY) ? (size_t)(SECURE_CANARY_BYTES + 4) : 0)
#define SECURE_TAIL_LARGE (secure_has(SECURE_CANARY) ? (size_t)(SECURE_CANARY_BYTES + 8) : 0)

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

/* Key words of a free block of `slot` bytes. */
static inline size_t fill_words(size_t slot)
{
    return slot / sizeof(uintptr_t) < SECURE_FILL_WORDS ? slot / sizeof(uintptr_t) : SECURE_FILL_WORDS;
}

/* Keys words [from, words) of a free block. */
static inline void fill_block(void *p, uintptr_t key, size_t from, size_t words)
{
    uintptr_t *w = p;
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

/* Where a block's canary is: at its size, but never among the words a free
 * keys in a block checked when it leaves the quarantine (a small size in a
 * larger slot, after a realloc or an alignment: its canary is then after
 * those words, and the bytes up to it are slack). */
static inline size_t canary_at(size_t size, size_t slot, bool large)
{
    return !large && slot > SECURE_CHECK_AT_FREE && size < SECURE_FILL_BYTES ? SECURE_FILL_BYTES : size;
}

/* A handed-out block's canary at `size` and size word at the slot's end. */
static inline void tail_set(void *p, size_t size, size_t slot, bool large, const struct block_keys *keys)
{
    if (!secure_has(SECURE_CANARY))
        return;
    memcpy((char *)p + canary_at(size, slot, large), &keys->canary, sizeof keys->canary);
    if (large) {
        uint64_t word = (uint64_t)(size ^ keys->size);
        memcpy((char *)p + slot - sizeof word, &word, sizeof word);
    } else {
        uint32_t word = (uint32_t)(size ^ keys->size);
        memcpy((char *)p + slot - sizeof word, &word, sizeof word);
    }
}

/* The size a handed-out block was asked for, its tail checked. */
static inline size_t tail_check(const void *p, size_t slot, bool large, const struct block_keys *keys)
{
    if (!secure_has(SECURE_CANARY))
        return slot;
    size_t size;
    if (large) {
        uint64_t word;
        memcpy(&word, (const char *)p + slot - sizeof word, sizeof word);
        size = (size_t)word ^ keys->size;
    } else {
        uint32_t word;
        memcpy(&word, (const char *)p + slot - sizeof word, sizeof word);
        size = (size_t)(word ^ (uint32_t)keys->size);
    }
    if (unlikely(size > slot - (large ? SECURE_TAIL_LARGE : SECURE_TAIL_SMALL)))
        report_fatal("write past the end of a block (its size word is overwritten)", p);
    uint64_t canary;
    memcpy(&canary, (const char *)p + canary_at(size, slot, large), sizeof canary);
    if (unlikely(canary != keys->canary))
        report_fatal("write past the end of a block (its canary is overwritten)", p);
    return size;
}

/* Fetches the line of a small block's canary, once its size word is in
 * the cache (the quarantine fetches blocks ahead of their checks). */
static inline void tail_prefetch(const void *p, size_t slot)
{
    if (!secure_has(SECURE_CANARY))
        return;
    uint32_t word;
    memcpy(&word, (const char *)p + slot - sizeof word, sizeof word);
    size_t size = (size_t)(word ^ (uint32_t)keys_of(p).size);
    if (size < slot)
        __builtin_prefetch((const char *)p + canary_at(size, slot, false));
}

/* The thread's random numbers (xorshift, seeded from the OS at its first
 * use): not for secrets, for orders an attacker should not predict. */
extern STRATA_INTERNAL STRATA_TLS uint64_t secure_random_state;
uint64_t secure_random_seed(void);

static inline uint64_t secure_random(void)
{
    uint64_t x = secure_random_state;
    if (unlikely(x == 0))
        x = secure_random_seed();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    secure_random_state = x;
    return x;
}

#endif /* STRATA_SECURE_H */
