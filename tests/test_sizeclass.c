/* test_sizeclass.c: white-box test of the size classes: every size maps to
 * the smallest class that holds it, waste stays within 12.5% above 64 bytes,
 * the direct table agrees, and alignment follows the class size. */
#include "check.h"
#include "checkers.h"
#include "core.h"

int main(void)
{
    sizeclass_init();
    int increasing = 1;
    for (unsigned c = 1; c < CLASS_COUNT; c++)
        increasing &= class_size[c] > class_size[c - 1];
    CHECK(increasing);
    CHECK(class_size[0] == 16); /* a free block's two words; malloc(0) 16-aligned, as glibc's */
    CHECK(size_class(0) == 0 && size_class(1) == 0 && size_class(16) == 0 && size_class(17) == 1);
    CHECK(class_size[CLASS_COUNT - 1] == SMALL_MAX);

    int fits = 1, smallest = 1, waste_ok = 1, direct_ok = 1;
    for (size_t n = 0; n <= SMALL_MAX; n++) {
        unsigned c = size_class(n);
        if (c >= CLASS_COUNT || class_size[c] < n) {
            fits = 0;
            continue;
        }
        if (c > 0 && class_size[c - 1] >= n)
            smallest = 0;
        if (n > 64 && (double)(class_size[c] - n) / (double)n > 0.125)
            waste_ok = 0;
        if (n <= DIRECT_MAX && class_of_direct[(n + 7) >> 3] != c)
            direct_ok = 0;
        if (small_class(n) != c)
            direct_ok = 0;
    }
    CHECK(fits);
    CHECK(smallest);
    CHECK(waste_ok);
    CHECK(direct_ok);

    /* A class whose size is not a multiple of 16 only holds requests that are
     * not multiples of 16 either, so 8-byte alignment serves them. */
    int alignment_ok = 1;
    for (unsigned c = 1; c < CLASS_COUNT; c++) {
        if (class_size[c] % 16 == 0)
            continue;
        for (size_t n = class_size[c - 1] + 1; n <= class_size[c]; n++)
            if (n % 16 == 0)
                alignment_ok = 0;
        if (class_size[c] % 8 != 0)
            alignment_ok = 0;
    }
    CHECK(alignment_ok);

    /* Pages hold at least 4 blocks and fit in a segment beside its header. */
    int pages_ok = 1;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        size_t slices = class_slices(c);
        if (slices * SLICE_SIZE / class_size[c] < 4 || slices > SLICES_PER_SEGMENT - 1)
            pages_ok = 0;
    }
    CHECK(pages_ok);
    CHECK(size_class(SMALL_MAX) == CLASS_COUNT - 1);

    /* Block keys: every offset in a segment whose key is below n block keys
     * is the start of one of the first n blocks, and every such start has
     * that key. Exhaustive over the offsets a page of each class can hold,
     * and at every offset of a segment for classes of every kind. */
    int keys_ok = 1;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        uint64_t multiplier = class_multiplier[c];
        uint32_t size = class_size[c], key = class_block_key[c];
        if (key < 1 || key > size)
            keys_ok = 0;
        uint32_t limit = (uint32_t)(class_slices(c) * SLICE_SIZE);
        if (c % 8 == 0 || c == CLASS_COUNT - 1)
            limit = (uint32_t)SEGMENT_SIZE - 1;
        for (uint32_t offset = 0; offset <= limit; offset++) {
            uint64_t k = block_key(multiplier, offset);
            if (offset % size == 0 ? k != (uint64_t)(offset / size) * key : k < ((uint64_t)1 << 47))
                keys_ok = 0;
        }
    }
    CHECK(keys_ok);
    CHECK(class_multiplier[CLASS_COUNT] == 0 && class_block_key[CLASS_COUNT] == 0);
    return check_finish();
}
