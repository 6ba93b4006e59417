/* sizeclass.h: the size classes, which every layer above the OS layer
 * shares. 16..64 bytes in steps of 8, four classes per doubling up to
 * COARSE_MAX, one of COARSE_LAST_SLOT, then eight up to SMALL_MAX; the
 * tables are filled once by config_init. */
#ifndef STRATA_SIZECLASS_H
#define STRATA_SIZECLASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define CLASS_COUNT 72                    /* 16..64 by 8, 4 per doubling to 4 KiB, 4112, then 8 */
#define COARSE_MAX ((size_t)4096)         /* the last class of four a doubling */
/* A class of its own after it: a 4 KiB request with its guard word,
 * 16-aligned (glibc's chunk for it is 4112 too). The commonest buffer
 * size then wastes 16 bytes, not the 512 of the next class, and a write
 * past its end reaches the guard of the block above it, as it reaches
 * glibc's next chunk's size word. (The 4096-byte class stays: its blocks
 * are page-aligned, and serve aligned allocations up to 4088 bytes.) */
#define COARSE_LAST_SLOT (COARSE_MAX + 16)
#define COARSE_LAST_SLOT_CLASS (COARSE_FIRST + COARSE_COUNT)
#define SMALL_MAX ((size_t)128 * 1024)   /* largest class; above: mapped */
#define DIRECT_MAX COARSE_LAST_SLOT       /* sizes served by the direct table */
#define DIRECT_COUNT (DIRECT_MAX / 8 + 1)
/* Above DIRECT_MAX classes are at least 128 bytes apart and their sizes
 * multiples of 128: a second table serves the rest of the small sizes. */
#define MEDIUM_STEP_SHIFT 7
#define MEDIUM_COUNT ((SMALL_MAX >> MEDIUM_STEP_SHIFT) + 1)

/* A class index is stored in a byte (struct slice, page), CLASS_COUNT
 * itself included: it names "no class". */
_Static_assert(CLASS_COUNT + 1 < 256, "class indices fit a byte, with two to spare");

extern STRATA_INTERNAL uint32_t class_size[CLASS_COUNT];
extern STRATA_INTERNAL uint8_t class_of_direct[DIRECT_COUNT];
extern STRATA_INTERNAL uint8_t class_of_medium[MEDIUM_COUNT];
/* Block keys: a multiplier per class, the smallest above 2^64 / size, and
 * the key of one block, size * multiplier mod 2^64 (between 1 and size).
 * The key of an offset in a page, offset * multiplier mod 2^64, is i times
 * the block key when the offset is the start of block i, and at least the
 * multiplier (2^47 or more) when it is not, for any offset below 2^22: so one
 * multiplication and one compare against n block keys ask "the start of one
 * of the first n blocks?" (after Lemire, Kaser and Kurz, 2019). No class
 * (CLASS_COUNT) and the medium pages' (CLASS_COUNT + 1, layout.h) have
 * multiplier and key 0: no offset passes the inline test. */
extern STRATA_INTERNAL uint64_t class_multiplier[CLASS_COUNT + 2];
extern STRATA_INTERNAL uint32_t class_block_key[CLASS_COUNT + 2];
void sizeclass_init(void);

/* The key of `offset` (below 2^22, the segment's size) under a class's
 * multiplier. */
static inline uint64_t block_key(uint64_t multiplier, uint32_t offset)
{
    return (uint64_t)offset * multiplier;
}

/* The classes of 64 bytes to COARSE_MAX: 7 (80 bytes) to 30. */
#define COARSE_FIRST 7
#define COARSE_COUNT 24

static inline unsigned size_class(size_t size)
{
    if (size <= 64) /* 16 bytes at least: a free block's two words */
        return size <= 16 ? 0 : (unsigned)((size - 9) >> 3);
    unsigned top = 63 - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
    if (size <= COARSE_MAX) {
        unsigned within = (unsigned)(((size - 1) >> (top - 2)) & 3);
        return COARSE_FIRST + (top - 6) * 4 + within;
    }
    if (size <= COARSE_LAST_SLOT)
        return COARSE_LAST_SLOT_CLASS;
    unsigned within = (unsigned)(((size - 1) >> (top - 3)) & 7);
    return COARSE_LAST_SLOT_CLASS + 1 + (top - 12) * 8 + within;
}

/* The word at the end of each small slot that guards the slot above it
 * (block_guards.h): the default flavour's slots hold it past the request;
 * the secure flavour counts it in a tail of its own (SECURE_TAIL_SMALL). */
#define SMALL_GUARD_BYTES ((size_t)(STRATA_SECURE_BUILD ? 0 : 8))
/* The largest request a small class serves; above it, a medium or large
 * block. */
#define SMALL_REQUEST_MAX (SMALL_MAX - SMALL_GUARD_BYTES)

/* A block of class c's usable size: its slot short of the guard word. */
static inline size_t class_usable(unsigned c)
{
    return class_size[c] - SMALL_GUARD_BYTES;
}

/* The class of the slots of a direct table entry, whose requests with
 * their guard words take up to `want` bytes (a multiple of 8): at least a
 * free block's two words before the guard, and, where one of them is a
 * multiple of 16 (want is 8 more than a multiple of 16; malloc(0)'s too,
 * as glibc's), a class that is too, so that its blocks are 16-aligned. */
static inline unsigned slot_class(size_t want)
{
    if (SMALL_GUARD_BYTES != 0) {
        bool aligned = (want & 15) == SMALL_GUARD_BYTES;
        if (want < 16 + SMALL_GUARD_BYTES)
            want = 16 + SMALL_GUARD_BYTES;
        if (aligned)
            want = (want + 15) & ~(size_t)15;
    }
    return size_class(want);
}

/* The class of a request of `size` bytes (at most SMALL_REQUEST_MAX): its
 * slot holds the size and the guard word after it. What small_class's
 * tables hold: above DIRECT_MAX every class is a multiple of 128. */
static inline unsigned request_class(size_t size)
{
    size_t want = size + SMALL_GUARD_BYTES;
    return want <= DIRECT_MAX ? slot_class((want + 7) & ~(size_t)7) : size_class(want);
}

/* request_class by table, indexed by the request with its guard word. */
static inline unsigned small_class(size_t size)
{
    size_t want = size + SMALL_GUARD_BYTES;
    if (want <= DIRECT_MAX)
        return class_of_direct[(want + 7) >> 3];
    return class_of_medium[(want + ((size_t)1 << MEDIUM_STEP_SHIFT) - 1) >> MEDIUM_STEP_SHIFT];
}

#endif /* STRATA_SIZECLASS_H */
