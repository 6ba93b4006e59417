/* sizeclass.c: the size classes. 8..64 bytes in steps of 8, then eight
 * classes per doubling up to SMALL_MAX, so rounding wastes at most 12.5%
 * above 64 bytes. A class size that is a multiple of 16 gives 16-aligned
 * blocks; the others only ever hold requests that need 8. */
#include "sizeclass.h"

uint32_t class_size[CLASS_COUNT];
uint8_t class_of_direct[DIRECT_COUNT];

void sizeclass_init(void)
{
    for (unsigned c = 0; c < 8; c++)
        class_size[c] = 8 * (c + 1);
    for (unsigned c = 8; c < CLASS_COUNT; c++) {
        unsigned doubling = (c - 8) / 8;
        unsigned within = (c - 8) % 8;
        uint32_t base = (uint32_t)64 << doubling;
        class_size[c] = base + (within + 1) * (base / 8);
    }
    class_of_direct[0] = (uint8_t)size_class(0);
    for (size_t i = 1; i < DIRECT_COUNT; i++)
        class_of_direct[i] = (uint8_t)size_class(i * 8);
}
