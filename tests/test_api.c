/* test_api.c: edge cases of every public allocation function, with errno. */
#include <errno.h>
#include <stdint.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

static int all_bytes(const unsigned char *p, size_t n, unsigned char value)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != value)
            return 0;
    return 1;
}

static void test_malloc(void)
{
    void *zero = strata_malloc(0);
    CHECK(zero != NULL);
    void *zero2 = strata_malloc(0);
    CHECK(zero2 != NULL);
    CHECK_CMP(zero2, !=, zero);
    strata_free(zero);
    strata_free(zero2);
    strata_free(NULL);

    static const size_t sizes[] = {1, 7, 8, 9, 15, 16, 17, 24, 33, 64, 65, 72, 80, 100, 127,
                                   128, 129, 1000, 1024, 1025, 4096, 8191, 16384, 65536,
                                   131072, 131073, 200000, 1 << 20, 5 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        unsigned char *p = strata_malloc(n);
        CHECK(p != NULL);
        CHECK_CMP(strata_usable_size(p), >=, n);
        CHECK_CMP((uintptr_t)p % (n % 16 == 0 ? 16 : 8), ==, 0);
        memset(p, 0xab, strata_usable_size(p));
        CHECK(all_bytes(p, n, 0xab));
        strata_free(p);
    }

    errno = 0;
    CHECK_CMP(strata_malloc(SIZE_MAX), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    errno = 0;
    CHECK_CMP(strata_malloc((size_t)PTRDIFF_MAX + 1), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    errno = 0;
    CHECK_CMP(strata_malloc((size_t)1 << 46), ==, NULL); /* 64 TiB */
    CHECK_CMP(errno, ==, ENOMEM);
}

static void test_calloc(void)
{
    for (size_t n = 1; n < 300000; n = n * 3 + 1) {
        unsigned char *p = strata_malloc(n);
        memset(p, 0x5a, n);
        strata_free(p);
        unsigned char *q = strata_calloc(n, 1);
        CHECK(q != NULL && all_bytes(q, n, 0));
        strata_free(q);
    }
    unsigned char *z = strata_calloc(0, 10);
    CHECK(z != NULL);
    strata_free(z);
    errno = 0;
    CHECK_CMP(strata_calloc(SIZE_MAX / 2, 3), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    errno = 0;
    CHECK_CMP(strata_calloc((size_t)1 << 32, (size_t)1 << 32), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
}

static void fill(unsigned char *p, size_t n, size_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed);
}

static int filled(const unsigned char *p, size_t n, size_t seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed))
            return 0;
    return 1;
}

static void test_realloc(void)
{
    unsigned char *p = strata_realloc(NULL, 10);
    CHECK(p != NULL);
    CHECK_CMP(strata_usable_size(p), >=, 10);
    fill(p, 10, 1);
    /* Grow in small steps through every class and into mapped blocks. */
    size_t n = 10;
    int intact = 1;
    while (n < (3 << 20)) {
        size_t next = n + n / 7 + 3;
        p = strata_realloc(p, next);
        if (p == NULL || !filled(p, n, 1)) {
            intact = 0;
            break;
        }
        fill(p, next, 1);
        n = next;
    }
    CHECK(intact);
    CHECK_CMP(strata_usable_size(p), >=, n);
    /* Shrink from a mapped block back to a class block. */
    p = strata_realloc(p, 100);
    CHECK(p != NULL && filled(p, 100, 1));
    CHECK_CMP(strata_usable_size(p), <, 1000);
    /* Shrinking a little keeps the block. */
    unsigned char *same = strata_realloc(p, 90);
    CHECK_CMP(same, ==, p);
    p = same;
    /* realloc(p, 0) frees and returns NULL. */
    CHECK_CMP(strata_realloc(p, 0), ==, NULL);

    unsigned char *keep = strata_malloc(64);
    fill(keep, 64, 7);
    errno = 0;
    CHECK_CMP(strata_realloc(keep, SIZE_MAX), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    CHECK(filled(keep, 64, 7));
    unsigned char *big = strata_malloc(1 << 20);
    fill(big, 1 << 20, 3);
    errno = 0;
    CHECK_CMP(strata_realloc(big, SIZE_MAX - 4096), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    CHECK(filled(big, 1 << 20, 3));
    strata_free(big);

    errno = 0;
    CHECK_CMP(strata_reallocarray(keep, SIZE_MAX / 2, 3), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    keep = strata_reallocarray(keep, 100, 8);
    CHECK(keep != NULL && filled(keep, 64, 7));
    CHECK_CMP(strata_usable_size(keep), >=, 800);
    strata_free(keep);
}

/* Grows *p 1000 bytes at a time from *n until it reaches `until`, the new
 * bytes written; counts the moves. False if a realloc failed. */
static int grow_in_steps(unsigned char **p, size_t *n, size_t until, size_t *moves, size_t *steps)
{
    *moves = *steps = 0;
    while (*n < until) {
        size_t next = *n + 1000;
        unsigned char *q = strata_realloc(*p, next);
        if (q == NULL)
            return 0;
        *moves += q != *p;
        ++*steps;
        memset(q + *n, 0x77, next - *n);
        *p = q;
        *n = next;
    }
    return 1;
}

/* As in zsh's mmap string test, a string grown in small steps: as a medium
 * block (in the segments) it grows into the slices after it or moves to
 * 1/8 more, far fewer moves than steps; past MEDIUM_MAX it moves with
 * mremap: no new mapping and no copy. */
static void test_large_growth(void)
{
    size_t n = 200000, start = n, moves, steps;
    unsigned char *p = strata_malloc(n);
    fill(p, n, 9);
    CHECK(grow_in_steps(&p, &n, MEDIUM_MAX + 4096, &moves, &steps));
    CHECK_CMP(moves * 50, <, steps);
    CHECK(filled(p, start, 9) && p[n - 1] == 0x77);
    size_t maps = os_map_count();
    CHECK(grow_in_steps(&p, &n, (size_t)32 << 20, &moves, &steps));
    /* The secure flavour never remaps (a block's guard page would move):
     * it moves to new mappings, an eighth larger each time. */
    if (TEST_SECURE)
        CHECK_CMP(os_map_count(), >, maps);
    else
        CHECK_CMP(os_map_count(), ==, maps);
    CHECK_CMP(moves * 50, <, steps);
    CHECK(filled(p, start, 9) && p[n - 1] == 0x77);
    strata_free(p);
}

/* A freed large mapping is reused for a smaller request without a new
 * mapping, and the part it does not need stays cached for the next. */
static void test_large_reuse(void)
{
    unsigned char *big = strata_malloc((size_t)20 << 20);
    CHECK(big != NULL);
    memset(big, 5, (size_t)20 << 20);
    strata_free(big);
    size_t maps = os_map_count();
    unsigned char *a = strata_malloc((size_t)8 << 20);
    unsigned char *b = strata_malloc((size_t)10 << 20);
    /* The secure flavour never hands the mapping freed last back at once,
     * nor splits a cached one. */
    CHECK(a != NULL && b != NULL);
    if (TEST_SECURE) {
        CHECK_CMP(a, !=, big);
        CHECK_CMP(b, !=, big);
    } else {
        CHECK_CMP(os_map_count(), ==, maps);
    }
    fill(a, (size_t)8 << 20, 6);
    fill(b, (size_t)10 << 20, 7);
    CHECK(filled(a, (size_t)8 << 20, 6) && filled(b, (size_t)10 << 20, 7));
    strata_free(a);
    strata_free(b);
}

/* A large block taken again from the mapping cache reads as zero where it
 * must: calloc's in both flavours, every new block in the secure flavour.
 * Only the mapping's resident pages are zeroed, so that a block whose
 * program touched a few pages does not fault the rest in at its reuse.
 * Two blocks freed, since the secure flavour passes over the mapping freed
 * last. */
static void test_large_reused_zero(void)
{
    const size_t size = (size_t)8 << 20, page = os_page_size();
    CHECK_CMP(size, >, MEDIUM_MAX); /* a mapping of its own */
    for (int touched_whole = 0; touched_whole <= 1; touched_whole++)
        for (int by_calloc = 0; by_calloc <= 1; by_calloc++) {
            if (!by_calloc && !TEST_SECURE)
                continue;
            large_cache_release(); /* the earlier tests' mappings, kept or given back, out of the way */
            unsigned char *a = strata_malloc(size), *b = strata_malloc(size);
            CHECK(a != NULL && b != NULL);
            for (size_t i = 0; i < size; i += touched_whole ? 1 : size / 4)
                a[i] = b[i] = 0x5a;
            strata_free(a);
            strata_free(b);
            size_t maps = os_map_count();
            unsigned char *c = by_calloc ? strata_calloc(1, size) : strata_malloc(size);
            CHECK(c != NULL);
            CHECK_CMP(os_map_count(), ==, maps); /* a cached mapping, not a new one */
            {
                /* The pages touched before, and no more: a few, or all. */
                const void *first_page = (const void *)((uintptr_t)c & ~(uintptr_t)(page - 1));
                size_t resident = os_resident_pages(first_page, size), looked = size / page;
                looked = looked < OS_RESIDENT_MAX_PAGES ? looked : OS_RESIDENT_MAX_PAGES;
                if (touched_whole)
                    CHECK_CMP(resident * 2, >, looked);
                else
                    CHECK_CMP(resident, <=, 8u);
            }
            size_t nonzero = 0;
            for (size_t i = 0; i < size; i++)
                nonzero += c[i] != 0;
            CHECK_CMP(nonzero, ==, 0u);
            strata_free(c);
        }
}

/* Buffers of several sizes replaced by as many of the same sizes, in
 * another order: the cache keeps them all (up to eight times the size of
 * the mapping freed last), so no new mapping is made and no page faults
 * in again; keeping only two would have mapped the other three anew. */
static void test_large_cache_sizes(void)
{
    static const size_t mib[] = {12, 20, 8, 16, 24};
    enum { COUNT = sizeof mib / sizeof mib[0] };
    unsigned char *blocks[COUNT];
    for (size_t i = 0; i < COUNT; i++) {
        blocks[i] = strata_malloc(mib[i] << 20);
        CHECK(blocks[i] != NULL);
    }
    for (size_t i = 0; i < COUNT; i++)
        strata_free(blocks[i]);
    size_t maps = os_map_count();
    for (size_t i = COUNT; i-- > 0;) {
        blocks[i] = strata_malloc(mib[i] << 20);
        CHECK(blocks[i] != NULL);
        fill(blocks[i], 4096, (unsigned char)i);
    }
    /* The secure flavour never hands the mapping freed last back at once. */
    if (!TEST_SECURE)
        CHECK_CMP(os_map_count(), ==, maps);
    for (size_t i = 0; i < COUNT; i++) {
        CHECK(filled(blocks[i], 4096, (unsigned char)i));
        strata_free(blocks[i]);
    }
}

/* Blocks aligned to an OS page or less that no class serves (above the
 * small classes) come from the mapping cache like any large block:
 * replaced one at a time, no new mapping after the first. (Taken only for
 * alignments up to 64 bytes, each pair cost a mapping and an unmapping.) */
static void test_aligned_cached(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), size = SMALL_MAX + 2 * page;
    unsigned char *p = strata_aligned_alloc(page, size);
    CHECK(p != NULL && ((uintptr_t)p & (page - 1)) == 0);
    strata_free(p);
    size_t maps = os_map_count();
    for (int i = 0; i < 64; i++) {
        p = strata_aligned_alloc(i % 2 ? page : 128, size - 16 * (size_t)i);
        CHECK(p != NULL && ((uintptr_t)p & ((i % 2 ? page : 128) - 1)) == 0);
        fill(p, size - 16 * (size_t)i, (unsigned char)i);
        CHECK(filled(p, size - 16 * (size_t)i, (unsigned char)i));
        strata_free(p);
    }
    /* The secure flavour never hands the mapping freed last back at once. */
    if (!TEST_SECURE)
        CHECK_CMP(os_map_count(), ==, maps);
}

/* An aligned request of up to the small classes' largest takes a class
 * whose blocks have the alignment (up to an OS page: the powers of two
 * above 4 KiB start theirs 4 KiB into their pages), not a mapping of its
 * own: posix_memalign(4096, 8192) and its free took 120 ns through the
 * mapping cache, 25 through the class. */
static void test_aligned_class(void)
{
    static const size_t sizes[] = {100, 4089, 5000, 8184, 8185, 65536, 100000, SMALL_REQUEST_MAX};
    for (size_t align = 32; align <= 4096; align *= 2)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            unsigned char *p = strata_aligned_alloc(align, sizes[i]);
            CHECK(p != NULL && ((uintptr_t)p & (align - 1)) == 0);
            if (!TEST_SECURE) /* whose aligned blocks carry their canary: classes up to a smaller size */
                CHECK(is_segment_pointer(p));
            CHECK_CMP(strata_usable_size(p), >=, sizes[i]);
            memset(p, 7, sizes[i]);
            strata_free(p);
        }
}

static void test_aligned(void)
{
    for (size_t align = 1; align <= ((size_t)64 << 20); align *= 2) {
        static const size_t sizes[] = {0, 1, 16, 100, 4096, 70000, 300000};
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            unsigned char *p = strata_aligned_alloc(align, sizes[i]);
            CHECK(p != NULL && ((uintptr_t)p & (align - 1)) == 0);
            CHECK_CMP(strata_usable_size(p), >=, sizes[i]);
            memset(p, 1, sizes[i]);
            if (sizes[i] == 0) {
                /* An aligned malloc(0) is a block of its own: it grows. (In
                 * the secure flavour its usable size is what was asked: a
                 * byte written is past its end.) */
                if (TEST_SECURE)
                    CHECK_CMP(strata_usable_size(p), ==, 0u);
                else
                    CHECK_CMP(strata_usable_size(p), >=, 1);
                p = strata_realloc(p, 100);
                CHECK(p != NULL);
                memset(p, 2, 100);
            }
            strata_free(p);
            void *q = NULL;
            if (align >= sizeof(void *)) {
                CHECK_CMP(strata_posix_memalign(&q, align, sizes[i]), ==, 0);
                CHECK(q != NULL && ((uintptr_t)q & (align - 1)) == 0);
                strata_free(q);
            }
        }
    }
    /* A size that asks for 16-byte alignment gets it from realloc too, in
     * place or moved: 100 bytes are in an 8-aligned class (104). */
    int aligned16 = 1;
    for (size_t from = 1; from <= 600; from++) {
        for (size_t to = 16; to <= 640; to += 16) {
            char *p = strata_malloc(from);
            p = strata_realloc(p, to);
            aligned16 &= p != NULL && ((uintptr_t)p & 15) == 0;
            strata_free(p);
        }
    }
    CHECK(aligned16);
    errno = 0;
    CHECK_CMP(strata_aligned_alloc(0, 16), ==, NULL);
    CHECK_CMP(errno, ==, EINVAL);
    errno = 0;
    CHECK_CMP(strata_aligned_alloc(24, 16), ==, NULL);
    CHECK_CMP(errno, ==, EINVAL);
    errno = 0;
    CHECK_CMP(strata_aligned_alloc(64, SIZE_MAX - 10), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);

    void *q = (void *)0x1;
    errno = 1234;
    CHECK_CMP(strata_posix_memalign(&q, 4, 16), ==, EINVAL);
    CHECK_CMP(strata_posix_memalign(&q, 48, 16), ==, EINVAL);
    CHECK_CMP(strata_posix_memalign(&q, 0, 16), ==, EINVAL);
    CHECK_CMP(strata_posix_memalign(&q, 64, SIZE_MAX - 10), ==, ENOMEM);
    CHECK_CMP(q, ==, (void *)0x1);
    CHECK_CMP(errno, ==, 1234);
}

static int address_order(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Blocks of size 0: each a pointer of its own, freed and reused like any
 * other; in the secure flavour slots of an inaccessible region (a touch
 * faults: test_security.sh's zero-size-* kinds), usable size 0. */
static void test_zero_size(void)
{
    enum { COUNT = 100000 };
    void **blocks = strata_malloc(COUNT * sizeof *blocks);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < COUNT; i++)
            blocks[i] = i % 3 == 0 ? strata_calloc(0, 8) : strata_malloc(0);
        qsort(blocks, COUNT, sizeof *blocks, address_order);
        int distinct = 1, aligned = 1;
        for (int i = 0; i < COUNT; i++) {
            distinct &= i == 0 || blocks[i] != blocks[i - 1];
            aligned &= blocks[i] != NULL && (uintptr_t)blocks[i] % 16 == 0;
        }
        CHECK(distinct);
        CHECK(aligned);
        CHECK_CMP(strata_usable_size(blocks[0]), ==, TEST_SECURE ? 0u : 24u); /* a 32-byte slot, as glibc's chunk */
        for (int i = 0; i < COUNT; i++)
            strata_free(blocks[i]);
    }
    strata_free(blocks);
    /* Grown by realloc into a block that holds bytes. */
    char *p = strata_realloc(strata_malloc(0), 100);
    CHECK(p != NULL);
    memset(p, 7, 100);
    CHECK_CMP(strata_usable_size(p), >=, 100);
    strata_free(p);
    void *q = strata_aligned_alloc(16, 0);
    CHECK(q != NULL);
    strata_free(q);
}

static void test_usable_size(void)
{
    CHECK_CMP(strata_usable_size(NULL), ==, 0);
    void *big = strata_malloc(1 << 20);
    CHECK_CMP(strata_usable_size(big), >=, (1 << 20));
    /* Memory strata never mapped: the default answers 0, the secure
     * flavour stops it (test_security.sh's usable-size-* kinds). Inside a
     * block of 1 MiB (a medium one), both stop it (test_pages). */
    if (!TEST_SECURE) {
        int on_stack;
        CHECK_CMP(strata_usable_size(&on_stack), ==, 0);
        static char in_data[64];
        CHECK_CMP(strata_usable_size(in_data), ==, 0);
    }
    strata_free(big);
}

/* The version: macros, string and runtime call agree, and the statistics
 * carry it. */
static void test_version(void)
{
    char expected[32];
    snprintf(expected, sizeof expected, "%d.%d.%d", STRATA_VERSION_MAJOR, STRATA_VERSION_MINOR,
             STRATA_VERSION_PATCH);
    CHECK(strcmp(STRATA_VERSION, expected) == 0);
    CHECK(strcmp(strata_version(), STRATA_VERSION) == 0);
    CHECK_CMP(STRATA_VERSION_NUMBER, ==, STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 +
                                             STRATA_VERSION_PATCH);
    char text[65536];
    FILE *out = fmemopen(text, sizeof text, "w");
    CHECK(out != NULL);
    strata_stats_json(out);
    fclose(out);
    char field[64];
    snprintf(field, sizeof field, "{\"version\": \"%s\", ", STRATA_VERSION);
    CHECK(strncmp(text, field, strlen(field)) == 0);
    out = fmemopen(text, sizeof text, "w");
    CHECK(out != NULL);
    strata_stats_print(out);
    fclose(out);
    snprintf(field, sizeof field, "strata %s%s statistics", STRATA_VERSION, TEST_FLAVOUR);
    CHECK(strstr(text, field) == text);
}

/* The secure flavour's quarantine: blocks leave it oldest first, once
 * STRATA_QUARANTINE_BLOCKS wait or their slots pass STRATA_QUARANTINE_KB
 * (the defaults here: 256 blocks, 256 KiB), each into the bin it would
 * have reached, so that the oldest is handed out next. The default flavour
 * hands a freed block out again at once. */
static void test_quarantine(void)
{
    enum { SMALL = 300, BIG = 40 };
    static void *block[SMALL];
    strata_trim(); /* an empty quarantine and empty bins */
    for (int i = 0; i < SMALL; i++)
        CHECK((block[i] = strata_malloc(64)) != NULL);
    struct quarantine *q = &thread_heap->quarantine;
    if (!TEST_SECURE) {
        strata_free(block[0]);
        void *again = strata_malloc(64);
        CHECK(again == block[0]);
        strata_free(again);
        for (int i = 1; i < SMALL; i++)
            strata_free(block[i]);
        return;
    }
    /* A block's slot holds its canary and the guard word after it. */
    size_t slot = class_size[size_class(64 + 16)];
    for (int i = 0; i < 256; i++)
        strata_free(block[i]);
    CHECK_CMP(q->count, ==, 256u);
    CHECK_CMP(q->bytes, ==, 256 * slot);
    /* The 257th free sends the oldest out, the next the second oldest. */
    strata_free(block[256]);
    CHECK_CMP(q->count, ==, 256u);
    CHECK(strata_malloc(64) == block[0]);
    strata_free(block[257]);
    CHECK(strata_malloc(64) == block[1]);
    strata_free(block[0]);
    strata_free(block[1]);
    for (int i = 258; i < SMALL; i++)
        strata_free(block[i]);
    CHECK_CMP(q->count, ==, 256u);
    CHECK_CMP(q->bytes, ==, 256 * slot);
    /* The bytes' bound: 40 blocks of an 8 KiB slot hold 320 KiB, past 256:
     * the small blocks leave first, then the oldest big ones, never the
     * newest. */
    static void *big[BIG];
    for (int i = 0; i < BIG; i++)
        CHECK((big[i] = strata_malloc(8000)) != NULL);
    size_t big_slot = class_size[size_class(8000 + 16)];
    for (int i = 0; i < BIG; i++) {
        strata_free(big[i]);
        CHECK(q->bytes <= (size_t)256 << 10);
    }
    size_t held = ((size_t)256 << 10) / big_slot;
    CHECK_CMP(q->count, ==, held);
    CHECK_CMP(q->bytes, ==, held * big_slot);
    CHECK(q->block[q->head] == big[BIG - held]); /* the oldest still held */
    CHECK(strata_malloc(8000) == big[BIG - held - 1]);  /* the newest to have left */
    strata_free(big[BIG - held - 1]);
    strata_trim();
    CHECK_CMP(q->count, ==, 0u);
    CHECK_CMP(q->bytes, ==, 0u);
}

/* Without STRATA_PROFILE the profiler is off: a dump writes nothing and
 * says so (tests/test_profile.sh dumps profiles of a profiled program). */
static void test_profile_off(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/strata-profile-off-%ld", (long)getpid());
    CHECK_CMP(strata_profile_dump(path), ==, ENOTSUP);
    CHECK(access(path, F_OK) != 0);
}

static const struct check_test tests[] = {
    {"version", test_version},
    {"profile_off", test_profile_off},
    {"malloc", test_malloc},
    {"calloc", test_calloc},
    {"realloc", test_realloc},
    {"large_growth", test_large_growth},
    {"large_reuse", test_large_reuse},
    {"large_reused_zero", test_large_reused_zero},
    {"large_cache_sizes", test_large_cache_sizes},
    {"aligned_cached", test_aligned_cached},
    {"aligned_class", test_aligned_class},
    {"aligned", test_aligned},
    {"usable_size", test_usable_size},
    {"zero_size", test_zero_size},
    {"quarantine", test_quarantine},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
