/* test_limit.c: the memory limit (STRATA_LIMIT_MB) is usable. In child
 * processes with limits of 8, 16 and 64 MB, a program fills memory with
 * small, medium or large blocks, or a mixture, until an allocation fails:
 * it must have had at least 80% of the limit in the bytes it asked for,
 * never more than the limit, the failure must be NULL with ENOMEM (no
 * abort), every block must be intact, and once everything is freed a
 * second fill, of other sizes, must have at least 80% again. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <sys/resource.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

#define MIB ((size_t)1 << 20)

/* Small blocks of one size: 72 bytes, or 112 in the secure flavour. Each
 * slot keeps an 8-byte guard word (and, in the secure flavour, an 8-byte
 * canary): a 64-byte block takes an 80-byte slot, a fifth of it the
 * guard's and the rounding's (docs/safety.md); 72 bytes fill an 80-byte
 * slot but for the guard, 112 a 128-byte one but for an eighth, so that
 * the fill measures the limit, not the classes. */
#define SMALL_SIZE (TEST_SECURE ? 112 : 72)

/* The blocks of a fill, linked through their first word, their size in
 * the second; each ends in a byte made from its size, checked when it is
 * freed. */
struct held {
    struct held *next;
    size_t size;
};

static unsigned long long seed = 7;

/* A size between low and high, as likely in each power of two. */
static size_t log_uniform(size_t low, size_t high)
{
    unsigned from = 63 - (unsigned)__builtin_clzll(low), to = 63 - (unsigned)__builtin_clzll(high);
    unsigned power = from + (unsigned)(check_random(&seed) % (to - from + 1));
    size_t size = ((size_t)1 << power) + check_random(&seed) % ((size_t)1 << power);
    return size < low ? low : size > high ? high : size;
}

/* The next size a fill of `kind` asks for; 0 for an unknown kind. */
static size_t next_size(const char *kind, size_t limit)
{
    if (strcmp(kind, "small") == 0)
        return SMALL_SIZE;
    if (strcmp(kind, "small-mixed") == 0)
        return 16 + check_random(&seed) % 1009;
    if (strcmp(kind, "medium") == 0)
        return 256 * 1024;
    if (strcmp(kind, "medium-1m") == 0)
        return MIB;
    if (strcmp(kind, "large") == 0) /* just above the medium blocks' 3.75 MiB */
        return 3 * MIB + 920 * 1024;
    if (strcmp(kind, "mixture") == 0) /* 16 bytes to an eighth of the limit */
        return log_uniform(16, limit / 8);
    return 0;
}

static unsigned char tag_of(size_t size)
{
    return (unsigned char)(size * 31 + 7);
}

/* Allocates blocks of `kind` until one fails; returns the bytes asked for
 * and had, the blocks on *list. *failed_with is the failure's errno. */
static size_t fill(const char *kind, size_t limit, struct held **list, int *failed_with)
{
    size_t had = 0;
    for (;;) {
        size_t size = next_size(kind, limit);
        errno = 0;
        unsigned char *p = size >= 64 * 1024 && check_random(&seed) % 4 == 0 ? strata_calloc(1, size)
                                                                                : strata_malloc(size);
        if (p == NULL) {
            *failed_with = errno;
            return had;
        }
        /* Every OS page written, so that the memory is really had. */
        for (size_t at = 4096; at < size; at += 4096)
            p[at] = 1;
        ((struct held *)p)->next = *list;
        ((struct held *)p)->size = size;
        if (size > sizeof(struct held))
            p[size - 1] = tag_of(size);
        *list = (struct held *)p;
        had += size;
    }
}

/* Frees a fill's blocks; false if one of them was damaged. */
static bool free_all(struct held *list)
{
    bool intact = true;
    while (list != NULL) {
        struct held *next = list->next;
        intact &= list->size <= sizeof(struct held) || ((unsigned char *)list)[list->size - 1] == tag_of(list->size);
        strata_free(list);
        list = next;
    }
    return intact;
}

/* FILL=kind [REFILL=kind]: fills under the limit, frees, fills again. */
static int fill_case(void)
{
    const char *limit_mb = getenv("STRATA_LIMIT_MB"), *kind = getenv("FILL"), *refill = getenv("REFILL");
    size_t limit = (size_t)atol(limit_mb != NULL ? limit_mb : "0") * MIB;
    if (limit == 0 || kind == NULL || next_size(kind, limit) == 0 || (refill != NULL && next_size(refill, limit) == 0)) {
        printf("usage: STRATA_LIMIT_MB=N FILL=kind [REFILL=kind]\n");
        return 2;
    }
    struct held *list = NULL;
    int failed_with = 0;
    size_t had = fill(kind, limit, &list, &failed_with);
    printf("had=%zu\nenomem=%d\n", had, failed_with == ENOMEM);
    printf("intact=%d\n", free_all(list));
    if (refill != NULL) {
        list = NULL;
        failed_with = 0;
        size_t again = fill(refill, limit, &list, &failed_with);
        printf("refill_had=%zu\nrefill_enomem=%d\n", again, failed_with == ENOMEM);
        printf("refill_intact=%d\n", free_all(list));
    }
    return 0;
}

/* Small pages emptied (their slices dirty and charged), then a medium
 * block of whole slices on them: it takes a slice more for its canary,
 * and gives back the part of that slice it does not reach. */
static int medium_on_dirty_case(void)
{
    struct held *list = NULL;
    for (size_t small = 0; small < 2 * MIB / 64; small++) {
        struct held *p = strata_malloc(64);
        if (p == NULL)
            return 2;
        p->next = list;
        list = p;
    }
    free_all(list);
    size_t before = os_charged_bytes();
    void *medium = strata_malloc(256 * 1024);
    size_t after = os_charged_bytes();
    printf("charged_before=%zu\ncharged_after=%zu\nblock=%d\n", before, after, medium != NULL);
    strata_free(medium);
    return 0;
}

/* The program's first block, then 3.9 MB of 64-byte blocks, then blocks of
 * 1 MiB until one fails: what a program given 8 MB met. */
static int small_then_medium_case(void)
{
    struct held *list = NULL;
    void *first = strata_malloc(16);
    size_t had = first != NULL ? 16 : 0;
    for (size_t small = 0; small < 3900 * 1000 / 64; small++) {
        struct held *p = strata_malloc(64);
        if (p == NULL)
            break;
        p->next = list;
        list = p;
        had += 64;
    }
    size_t small_had = had;
    int failed_with = 0;
    for (;;) {
        errno = 0;
        struct held *p = strata_malloc(MIB);
        if (p == NULL) {
            failed_with = errno;
            break;
        }
        memset(p, 1, MIB);
        p->next = list;
        list = p;
        had += MIB;
    }
    printf("small_had=%zu\nhad=%zu\nenomem=%d\n", small_had, had, failed_with == ENOMEM);
    while (list != NULL) {
        struct held *next = list->next;
        strata_free(list);
        list = next;
    }
    strata_free(first);
    return 0;
}

/* One block grown by realloc in steps of 64 KiB until a step fails: it
 * keeps its contents, and the failure leaves it as it was. */
static int realloc_growth_case(void)
{
    size_t size = 64 * 1024;
    unsigned char *p = strata_malloc(size);
    memset(p, 0x5a, size);
    int failed_with = 0;
    for (;;) {
        errno = 0;
        unsigned char *q = strata_realloc(p, size + 64 * 1024);
        if (q == NULL) {
            failed_with = errno;
            break;
        }
        p = q;
        memset(p + size, 0x5a, 64 * 1024);
        size += 64 * 1024;
    }
    bool intact = true;
    for (size_t at = 0; at < size; at += 4096)
        intact &= p[at] == 0x5a && p[size - 1] == 0x5a;
    printf("had=%zu\nenomem=%d\nintact=%d\n", size, failed_with == ENOMEM, intact);
    strata_free(p);
    return 0;
}

/* Small blocks to the limit, all freed (kept resident: no purge), then an
 * arena's allocations until one fails. */
static int arena_after_free_case(void)
{
    struct held *list = NULL;
    int failed_with = 0;
    free_all((fill("small-mixed", 0, &list, &failed_with), list));
    strata_arena *arena = strata_arena_new(NULL);
    size_t had = 0;
    for (;;) {
        errno = 0;
        char *p = arena != NULL ? strata_arena_alloc(arena, 1000) : NULL;
        if (p == NULL) {
            failed_with = errno;
            break;
        }
        memset(p, 1, 1000);
        had += 1000;
    }
    printf("had=%zu\nenomem=%d\n", had, failed_with == ENOMEM);
    strata_arena_destroy(arena);
    return 0;
}

/* ---- the address-space limit (RLIMIT_AS, `ulimit -v`) ---------------------
 * A limit the OS sets, not strata: a mapping past it fails. Before strata
 * refuses an allocation for that, it gives back what it keeps mapped for
 * reuse (freed large mappings, empty segments) and tries again. Each case
 * runs on strata, or with ALLOCATOR=glibc on glibc's malloc, beside it. */
struct allocator {
    void *(*malloc)(size_t);
    void (*free)(void *);
};

static struct allocator allocator_chosen(void)
{
    const char *name = getenv("ALLOCATOR");
    if (name != NULL && strcmp(name, "glibc") == 0)
        return (struct allocator){malloc, free};
    return (struct allocator){strata_malloc, strata_free};
}

/* The process's address space now, in bytes (VmSize). */
static size_t address_space_bytes(void)
{
    long kib = status_field("/proc/self/status", "VmSize");
    return kib > 0 ? (size_t)kib * 1024 : 0;
}

/* RLIMIT_AS set to the address space in use now, the allocator's first
 * block made, plus `room`; false if it cannot be set. */
static bool address_space_limited(const struct allocator *a, size_t room)
{
    a->free(a->malloc(100));
    struct rlimit limit;
    limit.rlim_cur = limit.rlim_max = address_space_bytes() + room;
    return setrlimit(RLIMIT_AS, &limit) == 0;
}

#define BIG_BLOCK (10 * MIB)

/* Writes every OS page of a block. */
static void touch(unsigned char *p, size_t size)
{
    for (size_t at = 0; at < size; at += 4096)
        p[at] = 1;
}

/* Three 10 MB blocks written and freed, then 200,000 blocks of 200 bytes
 * (45 MB with their rounding) in 64 MB of address space: what the freed
 * blocks left mapped must give way. */
static int address_space_after_big_case(void)
{
    struct allocator a = allocator_chosen();
    if (!address_space_limited(&a, 64 * MIB))
        return 3;
    void *big[3];
    for (int i = 0; i < 3; i++) {
        big[i] = a.malloc(BIG_BLOCK);
        if (big[i] == NULL)
            return 4;
        touch(big[i], BIG_BLOCK);
    }
    for (int i = 0; i < 3; i++)
        a.free(big[i]);
    enum { SMALL_BLOCKS = 200000 };
    static void *small[SMALL_BLOCKS];
    size_t had = 0;
    errno = 0;
    while (had < SMALL_BLOCKS && (small[had] = a.malloc(200)) != NULL)
        memset(small[had++], 1, 200);
    printf("blocks=%zu\nenomem=%d\n", had, had < SMALL_BLOCKS && errno == ENOMEM);
    for (size_t i = 0; i < had; i++)
        a.free(small[i]);
    return 0;
}

/* 10 MB blocks until one fails (NULL, ENOMEM), all freed: the next small
 * block must be had, and a second fill as many blocks as the first. */
static int address_space_refill_case(void)
{
    struct allocator a = allocator_chosen();
    if (!address_space_limited(&a, 64 * MIB))
        return 3;
    int rounds[2] = {0, 0}, enomem = 1;
    void *small = NULL;
    for (int round = 0; round < 2; round++) {
        void *big[16];
        int n = 0;
        errno = 0;
        while (n < 16 && (big[n] = a.malloc(BIG_BLOCK)) != NULL)
            touch(big[n++], BIG_BLOCK);
        enomem &= n < 16 && errno == ENOMEM;
        rounds[round] = n;
        while (n > 0)
            a.free(big[--n]);
        if (round == 0)
            small = a.malloc(100);
    }
    printf("first=%d\nsmall=%d\nsecond=%d\nenomem=%d\n", rounds[0], small != NULL, rounds[1], enomem);
    a.free(small);
    return 0;
}


/* A `key=value` figure of a child's output; -1 when it has none. */
static long long figure(const char *output, const char *key)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, "%s=", key);
    for (const char *at = output; (at = strstr(at, pattern)) != NULL; at++)
        if (at == output || at[-1] == '\n')
            return atoll(at + strlen(pattern));
    return -1;
}

static const int limits_mb[] = {8, 16, 64};

/* A child case under a limit of `limit_mb`, with more variables set. */
static struct outcome spawn_limited(const char *name, int limit_mb, const char *more)
{
    char env[256];
    snprintf(env, sizeof env, "STRATA_LIMIT_MB=%d %s", limit_mb, more);
    return check_spawn(name, env);
}

/* A child that ran until an allocation failed: it exited cleanly, had
 * (the figure `had`, or with a prefix) at least `least` bytes and no more
 * than the limit, and the failure was ENOMEM. */
static void check_had(const struct outcome *o, const char *prefix, int limit_mb, long long least)
{
    char had[32], enomem[32];
    snprintf(had, sizeof had, "%shad", prefix);
    snprintf(enomem, sizeof enomem, "%senomem", prefix);
    CHECK(exited_cleanly(o));
    CHECK_CMP(figure(o->output, had), >=, least);
    CHECK_CMP(figure(o->output, had), <=, (long long)limit_mb * (long long)MIB);
    CHECK_CMP(figure(o->output, enomem), ==, 1);
    if (!exited_cleanly(o))
        printf("  the child said: %.600s\n", o->output);
}

/* One fill under each limit, and a refill of other sizes after it. Freed
 * memory goes back only when an allocation at the limit asks (no purger, a
 * long purge delay), and the secure flavour's quarantine holds up to 4 MB
 * of it: the refill tests that they give way. */
static void check_fill(const char *kind, const char *refill)
{
    for (size_t i = 0; i < CHECK_COUNT(limits_mb); i++) {
        long long least = (long long)limits_mb[i] * (long long)MIB * 8 / 10;
        char more[192];
        snprintf(more, sizeof more,
                 "STRATA_PURGE_DELAY_MS=600000 STRATA_BACKGROUND_PURGE=0 STRATA_QUARANTINE_KB=4096 FILL=%s REFILL=%s",
                 kind, refill);
        struct outcome o = spawn_limited("fill", limits_mb[i], more);
        printf("%2d MB, %s then %s: had %.1f MB, then %.1f MB\n", limits_mb[i], kind, refill,
               (double)figure(o.output, "had") / (double)MIB, (double)figure(o.output, "refill_had") / (double)MIB);
        check_had(&o, "", limits_mb[i], least);
        check_had(&o, "refill_", limits_mb[i], least);
        CHECK_CMP(figure(o.output, "intact"), ==, 1);
        CHECK_CMP(figure(o.output, "refill_intact"), ==, 1);
    }
}

static void test_small(void)
{
    check_fill("small", "large");
}

static void test_small_mixed(void)
{
    check_fill("small-mixed", "medium");
}

static void test_medium(void)
{
    check_fill("medium", "small");
}

static void test_medium_1m(void)
{
    check_fill("medium-1m", "small-mixed");
}

static void test_large(void)
{
    check_fill("large", "small");
}

static void test_mixture(void)
{
    check_fill("mixture", "mixture");
}

static void test_medium_on_dirty(void)
{
    if (TEST_SECURE) {
        printf("the secure flavour has no medium blocks\n");
        return;
    }
    struct outcome o = spawn_limited("medium-on-dirty", 8, "STRATA_PURGE_DELAY_MS=600000 STRATA_BACKGROUND_PURGE=0");
    long long before = figure(o.output, "charged_before"), after = figure(o.output, "charged_after");
    printf("a 256 KiB block on emptied small pages: charged %.0f KiB, then %.0f KiB\n", (double)before / 1024,
           (double)after / 1024);
    CHECK(exited_cleanly(&o));
    CHECK_CMP(figure(o.output, "block"), ==, 1);
    /* Its five slices were charged whole; it keeps four and a page. */
    CHECK_CMP(before, >, 0);
    CHECK_CMP(after, <=, before - 56 * 1024);
}

/* What a program given 8 MB met: after 3.9 MB of small blocks, 1 MiB
 * blocks until the limit, at least 80% in all. */
static void test_small_then_medium(void)
{
    for (size_t i = 0; i < CHECK_COUNT(limits_mb); i++) {
        struct outcome o = spawn_limited("small-then-medium", limits_mb[i], "");
        printf("%2d MB: %.1f MB of small blocks, %.1f MB in all\n", limits_mb[i],
               (double)figure(o.output, "small_had") / (double)MIB, (double)figure(o.output, "had") / (double)MIB);
        check_had(&o, "", limits_mb[i], (long long)limits_mb[i] * (long long)MIB * 8 / 10);
    }
}

/* A block grown by realloc reaches 90% of the limit where it can be
 * remapped in place: at the limit the room kept for growth gives way
 * before the block (without that, 89% at 8 MB). The secure flavour moves a
 * growing block to a new mapping, copying it, so old and new are mapped at
 * once and it reaches about half. */
static void test_realloc_growth(void)
{
    for (size_t i = 0; i < CHECK_COUNT(limits_mb); i++) {
        struct outcome o = spawn_limited("realloc-growth", limits_mb[i], "");
        long long limit = (long long)limits_mb[i] * (long long)MIB;
        printf("%2d MB: one block grown to %.1f MB\n", limits_mb[i], (double)figure(o.output, "had") / (double)MIB);
        check_had(&o, "", limits_mb[i], TEST_SECURE ? limit * 4 / 10 : limit * 9 / 10);
        CHECK_CMP(figure(o.output, "intact"), ==, 1);
    }
}

/* Under a limit, the bytes it counts are what the calling thread's
 * segments charge (no large block, arena or other thread here): after
 * blocks of every kind are handed out, after half of them are freed, after
 * a trim, and after all are freed and trimmed (the empty current pages
 * gone too). Prints each step's difference, which must stay what it was. */
static long long segments_charged(void)
{
    long long bytes = 0;
    for (const struct segment *s = thread_heap->segments; s != NULL; s = s->next)
        for (unsigned k = 0; k < SLICES_PER_SEGMENT; k++)
            bytes += (long long)s->charged_kib[k] * 1024;
    return bytes;
}

static int charges_case(void)
{
    strata_trim();
    long long start = (long long)os_charged_bytes() - segments_charged();
    void *held[3000];
    for (size_t i = 0; i < CHECK_COUNT(held); i++)
        held[i] = strata_malloc(i % 7 == 6 && !TEST_SECURE ? 200 * 1024 + i : 16 + (i * 37) % 3000);
    const char *broken = heap_check(thread_heap);
    printf("allocated=%lld\nallocated_sound=%d\n", (long long)os_charged_bytes() - segments_charged() - start,
           broken == NULL);
    for (size_t i = 0; i < CHECK_COUNT(held); i += 2)
        strata_free(held[i]);
    broken = heap_check(thread_heap);
    printf("half_freed=%lld\nhalf_freed_sound=%d\n", (long long)os_charged_bytes() - segments_charged() - start,
           broken == NULL);
    strata_trim();
    broken = heap_check(thread_heap);
    printf("trimmed=%lld\ntrimmed_sound=%d\n", (long long)os_charged_bytes() - segments_charged() - start,
           broken == NULL);
    for (size_t i = 1; i < CHECK_COUNT(held); i += 2)
        strata_free(held[i]);
    strata_trim();
    printf("all_freed=%lld\nleft=%lld\n", (long long)os_charged_bytes() - segments_charged() - start,
           segments_charged());
    if (broken != NULL)
        printf("%s\n", broken);
    return 0;
}

static void test_charges_add_up(void)
{
    struct outcome o = check_spawn("charges", "STRATA_LIMIT_MB=64");
    CHECK(exited_cleanly(&o));
    static const char *const steps[] = {"allocated", "half_freed", "trimmed", "all_freed"};
    for (size_t i = 0; i < CHECK_COUNT(steps); i++)
        CHECK_CMP(figure(o.output, steps[i]), ==, 0);
    CHECK_CMP(figure(o.output, "allocated_sound"), ==, 1);
    CHECK_CMP(figure(o.output, "half_freed_sound"), ==, 1);
    CHECK_CMP(figure(o.output, "trimmed_sound"), ==, 1);
    CHECK_CMP(figure(o.output, "left"), ==, 0);
    /* Without a limit nothing is counted. */
    o = check_spawn("charges", "");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(figure(o.output, "left"), ==, 0);
    CHECK_CMP(figure(o.output, "allocated"), ==, 0);
}

/* An arena gets the limit too once the general allocator's freed memory
 * gives way. */
static void test_arena_after_free(void)
{
    for (size_t i = 0; i < CHECK_COUNT(limits_mb); i++) {
        struct outcome o = spawn_limited("arena-after-free", limits_mb[i],
                                         "STRATA_PURGE_DELAY_MS=600000 STRATA_BACKGROUND_PURGE=0");
        printf("%2d MB: an arena had %.1f MB after the blocks were freed\n", limits_mb[i],
               (double)figure(o.output, "had") / (double)MIB);
        check_had(&o, "", limits_mb[i], (long long)limits_mb[i] * (long long)MIB * 8 / 10);
    }
}

/* The address-space cases on glibc and on strata (with its purger and
 * without: nothing may depend on a thread giving memory back in time). A
 * sanitizer reserves terabytes of shadow memory for itself and fails or
 * hangs under such a limit, with strata or without: not run there. */
static bool address_space_testable(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer == NULL || *sanitizer == '\0')
        return true;
    printf("address-space limits not tested under %s, whose shadow memory is address space too\n", sanitizer);
    return false;
}

static const char *const address_space_runs[][2] = {
    {"glibc", "ALLOCATOR=glibc"},
    {"strata", ""},
    {"strata, no purger", "STRATA_BACKGROUND_PURGE=0 STRATA_PURGE_DELAY_MS=600000"},
};

static void test_address_space_after_big(void)
{
    if (!address_space_testable())
        return;
    for (size_t i = 0; i < CHECK_COUNT(address_space_runs); i++) {
        struct outcome o = check_spawn("address-space-after-big", address_space_runs[i][1]);
        printf("%s: 3 blocks of 10 MB freed, then %lld of 200000 blocks of 200 bytes in 64 MB\n",
               address_space_runs[i][0], figure(o.output, "blocks"));
        CHECK(exited_cleanly(&o));
        CHECK_CMP(figure(o.output, "blocks"), ==, 200000);
        if (!exited_cleanly(&o))
            printf("  the child said: %.600s\n", o.output);
    }
}

static void test_address_space_refill(void)
{
    if (!address_space_testable())
        return;
    for (size_t i = 0; i < CHECK_COUNT(address_space_runs); i++) {
        struct outcome o = check_spawn("address-space-refill", address_space_runs[i][1]);
        printf("%s: %lld blocks of 10 MB in 64 MB, all freed, a small block %s, then %lld again\n",
               address_space_runs[i][0], figure(o.output, "first"), figure(o.output, "small") == 1 ? "had" : "refused",
               figure(o.output, "second"));
        CHECK(exited_cleanly(&o));
        CHECK_CMP(figure(o.output, "first"), >=, 5);
        CHECK_CMP(figure(o.output, "small"), ==, 1);
        CHECK_CMP(figure(o.output, "second"), >=, figure(o.output, "first"));
        CHECK_CMP(figure(o.output, "enomem"), ==, 1);
        if (!exited_cleanly(&o))
            printf("  the child said: %.600s\n", o.output);
    }
}

static const struct check_case cases[] = {
    {"charges", charges_case},
    {"arena-after-free", arena_after_free_case},
    {"fill", fill_case},
    {"small-then-medium", small_then_medium_case},
    {"medium-on-dirty", medium_on_dirty_case},
    {"realloc-growth", realloc_growth_case},
    {"address-space-after-big", address_space_after_big_case},
    {"address-space-refill", address_space_refill_case},
};

static const struct check_test tests[] = {
    {"charges_add_up", test_charges_add_up},
    {"small", test_small},
    {"small_mixed", test_small_mixed},
    {"medium", test_medium},
    {"medium_1m", test_medium_1m},
    {"large", test_large},
    {"mixture", test_mixture},
    {"small_then_medium", test_small_then_medium},
    {"medium_on_dirty", test_medium_on_dirty},
    {"realloc_growth", test_realloc_growth},
    {"arena_after_free", test_arena_after_free},
    {"address_space_after_big", test_address_space_after_big},
    {"address_space_refill", test_address_space_refill},
};

int main(int argc, char **argv)
{
    if (argc == 1 && !children_runnable())
        return check_finish();
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
