/* sizeclass.c: the size classes. 16..64 bytes in steps of 8, then four
 * classes per doubling up to 4 KiB (COARSE_MAX), rounding wasting less
 * than 25% of the size, as jemalloc's, mimalloc's and snmalloc's classes
 * do, then 4 KiB and 16 bytes (sizeclass.h, COARSE_LAST_SLOT), then eight
 * per doubling up to SMALL_MAX (at most 12.5%). Each class
 * costs each heap a bin and partly used pages: with eight a doubling below
 * 4 KiB those held as much as the live blocks on the random lifetimes
 * table (docs/design.md). Above 4 KiB a block spans pages and the slots'
 * stride decides how many pages the written parts of blocks reach, so the
 * finer classes stay. No class is smaller than 16 bytes: a free block
 * holds two words, its link and their check (layout.h). A class size that
 * is a multiple of 16 gives 16-aligned blocks; the others only ever hold
 * requests that need 8. */
#include "sizeclass.h"

uint32_t class_size[CLASS_COUNT];
uint8_t class_of_direct[DIRECT_COUNT];
uint8_t class_of_medium[MEDIUM_COUNT];
uint64_t class_multiplier[CLASS_COUNT + 2];
uint32_t class_block_key[CLASS_COUNT + 2];

void sizeclass_init(void)
{
    for (unsigned c = 0; c < COARSE_FIRST; c++)
        class_size[c] = 16 + 8 * c;
    for (unsigned c = COARSE_FIRST; c < COARSE_FIRST + COARSE_COUNT; c++) {
        uint32_t base = (uint32_t)64 << ((c - COARSE_FIRST) / 4);
        class_size[c] = base + ((c - COARSE_FIRST) % 4 + 1) * (base / 4);
    }
    class_size[COARSE_LAST_SLOT_CLASS] = COARSE_LAST_SLOT;
    for (unsigned c = COARSE_LAST_SLOT_CLASS + 1; c < CLASS_COUNT; c++) {
        unsigned after = c - COARSE_LAST_SLOT_CLASS - 1;
        uint32_t base = (uint32_t)COARSE_MAX << (after / 8);
        class_size[c] = base + (after % 8 + 1) * (base / 8);
    }
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        uint32_t size = class_size[c];
        bool power_of_two = (size & (size - 1)) == 0;
        class_multiplier[c] = UINT64_MAX / size + 1 + power_of_two; /* floor(2^64 / size) + 1 */
        class_block_key[c] = (uint32_t)(class_size[c] * class_multiplier[c]);
    }
    /* Indexed by a request with its guard word: each entry serves those
     * up to its own size. */
    for (size_t i = 0; i < DIRECT_COUNT; i++)
        class_of_direct[i] = (uint8_t)slot_class(i * 8);
    for (size_t i = 0; i < MEDIUM_COUNT; i++)
        class_of_medium[i] = (uint8_t)size_class(i << MEDIUM_STEP_SHIFT);
}
