/* sizeclass.h: the size classes, which every layer above the OS layer
 * shares. 8..64 bytes in steps of 8, then eight classes per doubling up to
 * SMALL_MAX; the tables are filled once by config_init. */
#ifndef STRATA_SIZECLASS_H
#define STRATA_SIZECLASS_H

#include <stddef.h>
#include <stdint.h>

#include "platform.h"

#define CLASS_COUNT 96                    /* 8..64 by 8, then 8 per doubling */
#define SMALL_MAX ((size_t)128 * 1024)   /* largest class; above: mapped */
#define DIRECT_MAX ((size_t)1024)         /* sizes served by the direct table */
#define DIRECT_COUNT (DIRECT_MAX / 8 + 1)

/* A class index is stored in a byte (class_of_slice, page), CLASS_COUNT
 * itself included: it names "no class". */
_Static_assert(CLASS_COUNT < 256, "class indices fit a byte, with one to spare");

extern STRATA_INTERNAL uint32_t class_size[CLASS_COUNT];
extern STRATA_INTERNAL uint8_t class_of_direct[DIRECT_COUNT];
void sizeclass_init(void);

static inline unsigned size_class(size_t size)
{
    if (size <= 64) /* malloc(0) is 16 bytes, 16-aligned, as glibc's */
        return size <= 8 ? (unsigned)(size == 0) : (unsigned)((size - 1) >> 3);
    unsigned top = 63 - (unsigned)__builtin_clzll((unsigned long long)(size - 1));
    unsigned step_shift = top - 3;
    unsigned within = (unsigned)(((size - 1) >> step_shift) & 7);
    return 8 + (top - 6) * 8 + within;
}

#endif /* STRATA_SIZECLASS_H */
