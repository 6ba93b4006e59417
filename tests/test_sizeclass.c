/* test_sizeclass.c: white-box test of the size classes: every size maps to
 * the smallest class that holds it, waste stays within 25% from 64 bytes to
 * 4 KiB and 12.5% above, every request to the smallest class whose slot
 * holds it and its guard word (the tables agree), alignment follows the
 * class size; and of
 * where the secure flavour keeps each block's state (layout.h). */
#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"

/* The secure flavour's block states: segments filled with pages of random
 * classes side by side, as a heap may lay them out after the header and
 * the states' slices; every block's state is in the states' region, in the
 * array of its class's power of two, and no two blocks share one. (The
 * layout is the same function in every build; the default flavour only
 * leaves those slices to pages.) */
static void test_block_states(void)
{
    sizeclass_init();
    enum { STATE_COUNT = STATE_REGION_BYTES / sizeof(uint16_t), FIRST_SLICE = 1 + STATE_REGION_SLICES, LAYOUTS = 300 };
    static uint8_t taken[STATE_COUNT];
    char *base = (char *)((uintptr_t)64 << 40); /* a segment's address: never touched */
    uint64_t rng = 0x9e3779b97f4a7c15u;
    int inside = 1, in_own_array = 1, distinct = 1;
    size_t states = 0;
    for (int layout = 0; layout < LAYOUTS; layout++) {
        memset(taken, 0, sizeof taken);
        size_t slice = FIRST_SLICE;
        for (;;) {
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            unsigned c = layout == 0 ? 0 : (unsigned)(rng % CLASS_COUNT); /* one layout all 16-byte blocks */
            size_t slices = class_slices(c), size = class_size[c];
            if (slice + slices > SLICES_PER_SEGMENT)
                break;
            unsigned shift = 63 - (unsigned)__builtin_clzll((unsigned long long)size);
            uintptr_t array = ((uintptr_t)1 << 20) - ((uintptr_t)1 << (24 - shift));
            uintptr_t array_end = array + (((uintptr_t)SEGMENT_SIZE >> shift) * sizeof(uint16_t));
            size_t blocks = slices * SLICE_SIZE / size;
            for (size_t i = 0; i < blocks; i++) {
                char *p = base + slice * SLICE_SIZE + i * size;
                uintptr_t at = (uintptr_t)block_state(p, size) - (uintptr_t)base - SLICE_SIZE;
                if (at >= STATE_REGION_BYTES || at % sizeof(uint16_t) != 0) {
                    inside = 0;
                    continue;
                }
                if (at < array || at >= array_end)
                    in_own_array = 0;
                distinct &= taken[at / sizeof(uint16_t)] == 0;
                taken[at / sizeof(uint16_t)] = 1;
                states++;
            }
            slice += slices;
        }
    }
    CHECK(inside);
    CHECK(in_own_array);
    CHECK(distinct);
    CHECK_CMP(states, >, (size_t)(SLICES_PER_SEGMENT - FIRST_SLICE) * SLICE_SIZE / 16); /* the 16-byte layout's */
}

/* Classes grow, from the 16-byte one to SMALL_MAX. */
static void test_class_sizes(void)
{
    sizeclass_init();
    int increasing = 1;
    for (unsigned c = 1; c < CLASS_COUNT; c++)
        increasing &= class_size[c] > class_size[c - 1];
    CHECK(increasing);
    CHECK_CMP(class_size[0], ==, 16); /* a free block's two words; malloc(0) 16-aligned, as glibc's */
    CHECK_CMP(size_class(0), ==, 0);
    CHECK_CMP(size_class(1), ==, 0);
    CHECK_CMP(size_class(16), ==, 0);
    CHECK_CMP(size_class(17), ==, 1);
    CHECK_CMP(class_size[CLASS_COUNT - 1], ==, SMALL_MAX);
    CHECK_CMP(size_class(SMALL_MAX), ==, CLASS_COUNT - 1);
    /* Four classes a doubling from 64 bytes to 4 KiB, eight above. */
    CHECK_CMP(class_size[size_class(64) + 1], ==, 80);
    CHECK_CMP(class_size[size_class(65)], ==, 80);
    CHECK_CMP(class_size[size_class(129)], ==, 160);
    CHECK_CMP(class_size[size_class(3073)], ==, 3584);
    CHECK_CMP(size_class(4096) - size_class(2048), ==, 4);
    CHECK_CMP(class_size[size_class(4096)], ==, 4096);
    CHECK_CMP(class_size[size_class(4097)], ==, 4112); /* COARSE_LAST_SLOT */
    CHECK_CMP(class_size[size_class(4112)], ==, 4112);
    CHECK_CMP(class_size[size_class(4113)], ==, 4608);
    CHECK_CMP(size_class(8192) - size_class(4096), ==, 9); /* eight a doubling, and 4112 */
}

/* Every size maps to the smallest class that holds it, within 25% of the
 * size from 64 bytes to 4 KiB and 12.5% above, and the tables agree. */
static void test_every_size(void)
{
    sizeclass_init();
    int fits = 1, smallest = 1, waste_ok = 1, direct_ok = 1;
    for (size_t n = 0; n <= SMALL_MAX; n++) {
        unsigned c = size_class(n);
        if (c >= CLASS_COUNT || class_size[c] < n) {
            fits = 0;
            continue;
        }
        if (c > 0 && class_size[c - 1] >= n)
            smallest = 0;
        if (n > 64 && (double)(class_size[c] - n) / (double)n > (n <= 4096 ? 0.25 : 0.125))
            waste_ok = 0;
        if (n <= DIRECT_MAX && class_of_direct[(n + 7) >> 3] != slot_class((n + 7) & ~(size_t)7))
            direct_ok = 0;
    }
    CHECK(fits);
    CHECK(smallest);
    CHECK(waste_ok);
    CHECK(direct_ok);
}

/* A request's class (the tables and request_class agree) is the smallest
 * whose slot holds the request and the guard word after it (rounded up to
 * the direct table's 8-byte step), and a free block's two words before the
 * guard, and is a multiple of 16 where the table's entry serves a request
 * that is (so that its blocks are 16-aligned); the usable size is the slot
 * short of the guard. */
static void test_requests(void)
{
    sizeclass_init();
    int tables_ok = 1, smallest = 1, aligned = 1;
    for (size_t n = 0; n <= SMALL_REQUEST_MAX; n++) {
        unsigned c = small_class(n);
        if (c != request_class(n) || c >= CLASS_COUNT) {
            tables_ok = 0;
            continue;
        }
        size_t step = (n + 8 + 7) & ~(size_t)7, least = step > 24 ? step : 24;
        if (SMALL_GUARD_BYTES == 0)
            least = n;
        bool wants_16 = SMALL_GUARD_BYTES != 0 && (step - 8) % 16 == 0;
        unsigned expected = 0;
        while (expected < CLASS_COUNT && (class_size[expected] < least || (wants_16 && class_size[expected] % 16 != 0)))
            expected++;
        if (c != expected)
            smallest = 0;
        if (n % 16 == 0 && class_size[c] % 16 != 0)
            aligned = 0;
    }
    CHECK(tables_ok);
    CHECK(smallest);
    CHECK(aligned);
    if (SMALL_GUARD_BYTES != 0) {
        /* malloc(0) and 16 bytes in 32-byte slots, 16-aligned, as glibc's
         * chunks; 1 to 8 in 24 (glibc's 32); 4096 in 4112, as glibc's. */
        CHECK_CMP(class_size[request_class(0)], ==, 32);
        CHECK_CMP(class_size[request_class(8)], ==, 24);
        CHECK_CMP(class_size[request_class(16)], ==, 32);
        CHECK_CMP(class_size[request_class(3576)], ==, 3584);
        CHECK_CMP(class_size[request_class(3577)], ==, 4096);
        CHECK_CMP(class_size[request_class(4088)], ==, 4096);
        CHECK_CMP(class_size[request_class(4089)], ==, 4112);
        CHECK_CMP(class_size[request_class(4096)], ==, 4112);
        CHECK_CMP(class_size[request_class(4104)], ==, 4112);
        CHECK_CMP(class_size[request_class(4105)], ==, 4608);
    }
}

/* A class whose size is not a multiple of 16 only holds requests that are
 * not multiples of 16 either, so 8-byte alignment serves them. */
static void test_alignment(void)
{
    sizeclass_init();
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
}

/* Pages hold at least 4 blocks after their lead and fit in a segment
 * beside its header; the lead keeps each class's blocks as aligned as its
 * size up to 64 bytes (the aligned allocations' classes). */
static void test_pages(void)
{
    sizeclass_init();
    int pages_ok = 1;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        size_t slices = class_slices(c);
        if ((slices * SLICE_SIZE - page_lead(class_size[c])) / class_size[c] < 4 || slices > SLICES_PER_SEGMENT - 1)
            pages_ok = 0;
    }
    CHECK(pages_ok);
    /* Where a page's blocks lie: every block 16-aligned; a power-of-two
     * class's aligned to its size up to 4 KiB and to 4 KiB above; any
     * other class of 32-byte multiples with every block's guard word in
     * the block's first line; the others as aligned as their size makes
     * them, up to a line. */
    int aligned_ok = 1, guard_in_line_ok = 1;
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        size_t size = class_size[c], natural = size & -size;
        bool power_of_two = natural == size;
        size_t align = power_of_two ? (size <= 4096 ? size : 4096) : size % 32 == 0 ? 16 : natural < 64 ? natural : 64;
        if (!class_aligned(c, align) || class_aligned(c, align * 2))
            aligned_ok = 0;
        if (power_of_two || size % 32 != 0)
            continue;
        for (size_t start = page_lead(size); start + size <= SLICE_SIZE; start += size)
            if ((start - 8) / 64 != start / 64 || start % 16 != 0) {
                fprintf(stderr, "  class %zu: a block %zu bytes into its page, its guard word in another line\n", size,
                        start);
                guard_in_line_ok = 0;
                break;
            }
    }
    CHECK(aligned_ok);
    CHECK(guard_in_line_ok);
    /* class_aligned_from against a walk of every class with the remainder
     * itself, from every class, at every alignment a class may serve. */
    int from_ok = 1;
    for (size_t align = 1; align <= SLICE_SIZE; align *= 2)
        for (unsigned start = 0; start <= CLASS_COUNT; start++) {
            unsigned expect = start;
            while (expect < CLASS_COUNT &&
                   (class_size[expect] % align != 0 || page_lead(class_size[expect]) % align != 0))
                expect++;
            if (class_aligned_from(start, align) != expect) {
                fprintf(stderr, "  class_aligned_from(%u, %zu) = %u, a walk finds %u\n", start, align,
                        class_aligned_from(start, align), expect);
                from_ok = 0;
            }
        }
    CHECK(from_ok);
}

/* Block keys: every offset in a segment whose key is below n block keys
 * is the start of one of the first n blocks, and every such start has
 * that key. Exhaustive over the offsets a page of each class can hold,
 * and at every offset of a segment for classes of every kind. */
static void test_block_keys(void)
{
    sizeclass_init();
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
    CHECK_CMP(class_multiplier[CLASS_COUNT], ==, 0);
    CHECK_CMP(class_block_key[CLASS_COUNT], ==, 0);
}

static const struct check_test tests[] = {
    {"class_sizes", test_class_sizes},
    {"every_size", test_every_size},
    {"requests", test_requests},
    {"alignment", test_alignment},
    {"pages", test_pages},
    {"block_keys", test_block_keys},
    {"block_states", test_block_states},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
