/* test_arena.c: arenas. Nested marks, grow in place and by move with the
 * contents kept, big blocks, resident memory after a spike, no mapping per
 * iteration in a mark/release loop (counted through the OS layer), misuse
 * of marks, use after release caught by AddressSanitizer (in a child), and
 * a random sequence of operations checked against a simple model. */
#include <errno.h>
#include <stdint.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

static size_t in_use(strata_arena *a)
{
    struct strata_arena_stats s;
    strata_arena_stats(a, &s);
    return s.in_use;
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 13);
}

static int filled(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 13))
            return 0;
    return 1;
}

static void test_basics(void)
{
    strata_arena *a = strata_arena_new(NULL);
    CHECK(a != NULL);
    void *p = strata_arena_alloc(a, 1);
    void *q = strata_arena_alloc(a, 24);
    CHECK(p && q && ((uintptr_t)p & 15) == 0 && ((uintptr_t)q & 15) == 0);
    CHECK_CMP(p, !=, q);
    void *r = strata_arena_alloc_aligned(a, 10, 4096);
    CHECK(r != NULL);
    CHECK_CMP((uintptr_t)r % 4096, ==, 0);
    void *huge_align = strata_arena_alloc_aligned(a, 10, (size_t)1 << 20);
    CHECK(huge_align != NULL);
    CHECK_CMP((uintptr_t)huge_align % (1 << 20), ==, 0);
    errno = 0;
    CHECK_CMP(strata_arena_alloc_aligned(a, 10, 24), ==, NULL);
    CHECK_CMP(errno, ==, EINVAL);
    errno = 0;
    CHECK_CMP(strata_arena_alloc(a, SIZE_MAX), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    errno = 0;
    CHECK_CMP(strata_arena_alloc(a, (size_t)1 << 46), ==, NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    char *s = strata_arena_strdup(a, "hello arena");
    CHECK(s && strcmp(s, "hello arena") == 0);
    char *t = strata_arena_strndup(a, "truncate me", 8);
    CHECK(t && strcmp(t, "truncate") == 0);
    char *u = strata_arena_printf(a, "%s-%d-%05.1f", "x", 42, 3.14159);
    CHECK(u && strcmp(u, "x-42-003.1") == 0);
    strata_arena_reset(a);
    CHECK_CMP(in_use(a), ==, 0);
    strata_arena_destroy(a);
    strata_arena_destroy(NULL);
    strata_arena_opts bad = {16, 0};
    errno = 0;
    CHECK_CMP(strata_arena_new(&bad), ==, NULL);
    CHECK_CMP(errno, ==, EINVAL);
}

static void test_marks(void)
{
    strata_arena *a = strata_arena_new(NULL);
    unsigned char *first = strata_arena_alloc(a, 100);
    fill(first, 100, 1);
    size_t after_first = in_use(a);
    strata_mark outer = strata_arena_mark(a);
    for (int i = 0; i < 2000; i++) /* several chunks */
        fill(strata_arena_alloc(a, 100), 100, 2);
    strata_mark inner = strata_arena_mark(a);
    void *big = strata_arena_alloc(a, 1 << 20);
    memset(big, 3, 1 << 20);
    struct strata_arena_stats s;
    strata_arena_stats(a, &s);
    CHECK_CMP(s.big_blocks, ==, 1);
    CHECK_CMP(s.chunks, >=, 3);
    strata_arena_release(a, inner);
    strata_arena_stats(a, &s);
    CHECK_CMP(s.big_blocks, ==, 0);
    CHECK_CMP(s.mapped, <, (1 << 20));
    CHECK_CMP(in_use(a), >, after_first);
    strata_arena_release(a, outer); /* releases the inner marks too */
    CHECK_CMP(in_use(a), ==, after_first);
    CHECK(filled(first, 100, 1));
    strata_arena_stats(a, &s);
    CHECK_CMP(s.chunks, ==, 1);
    CHECK_CMP(s.cached_chunks, ==, 2); /* the bound: 2 by default */
    unsigned char *again = strata_arena_alloc(a, 100);
    CHECK(again == first + 112 || again > first); /* allocation goes on after `first` */
    strata_arena_destroy(a);
}

static void test_grow(void)
{
    strata_arena *a = strata_arena_new(NULL);
    unsigned char *p = strata_arena_alloc(a, 100);
    fill(p, 100, 5);
    unsigned char *q = strata_arena_grow(a, p, 300);
    CHECK_CMP(q, ==, p); /* the newest block grows in place */
    CHECK(filled(q, 100, 5));
    fill(q, 300, 6);
    q = strata_arena_grow(a, q, 50); /* and shrinks in place */
    CHECK_CMP(q, ==, p);
    CHECK(filled(q, 50, 6));
    unsigned char *other = strata_arena_alloc(a, 10);
    unsigned char *moved = strata_arena_grow(a, q, 2000);
    CHECK_CMP(moved, !=, q); /* not the newest: moved */
    CHECK(filled(moved, 50, 6));
    memset(other, 0, 10);
    /* The newest block grown in small steps past a chunk, then big. */
    unsigned char *s = strata_arena_alloc(a, 10);
    size_t n = 10;
    fill(s, n, 7);
    int intact = 1;
    while (n < (3 << 20)) {
        size_t next = n + 777;
        s = strata_arena_grow(a, s, next);
        if (s == NULL) {
            intact = 0;
            break;
        }
        fill(s + n, next - n, (unsigned)(7 + n * 13)); /* the pattern goes on */
        n = next;
        if (n % 64 == 0 || n >= (3 << 20))
            intact &= filled(s, n, 7);
    }
    CHECK(intact);
    CHECK(strata_arena_grow(a, NULL, 10) != NULL);
    strata_arena_destroy(a);
}

/* A loop of mark / allocate across a chunk boundary / release maps nothing
 * after the first round, and a spike goes back to the OS at release. */
static void test_chunk_cache_and_spike(void)
{
    strata_arena *a = strata_arena_new(NULL);
    for (int round = 0; round < 3; round++) {
        strata_mark m = strata_arena_mark(a);
        for (int i = 0; i < 500; i++)
            strata_arena_alloc(a, 200);
        strata_arena_release(a, m);
    }
    size_t maps = os_map_count();
    for (int round = 0; round < 1000; round++) {
        strata_mark m = strata_arena_mark(a);
        for (int i = 0; i < 500; i++) /* 100 KB: crosses a 64 KiB chunk */
            memset(strata_arena_alloc(a, 200), round, 200);
        strata_arena_release(a, m);
    }
    CHECK_CMP(os_map_count(), ==, maps);

    size_t start = resident_bytes();
    strata_mark m = strata_arena_mark(a);
    for (size_t i = 0; i < (256u << 20) / 100; i++)
        memset(strata_arena_alloc(a, 100), 1, 100);
    struct strata_arena_stats s;
    strata_arena_stats(a, &s);
    CHECK_CMP(s.high_water, >, (256u << 20));
    strata_arena_release(a, m);
    strata_arena_stats(a, &s);
    CHECK_CMP(s.mapped, <=, 4 * (64 << 10)); /* the current chunk and the bounded cache */
    if (resident_is_meaningful())
        CHECK_CMP(resident_bytes(), <, start + 2 * 1024 * 1024);
    strata_arena_destroy(a);
}

/* A random sequence of operations against a model: every live allocation
 * keeps its pattern; releases drop exactly what came after their mark. */
#define MAX_LIVE 4096
#define MAX_MARKS 64

struct model_block {
    unsigned char *p;
    size_t n;
    unsigned seed;
};

static void test_model(void)
{
    strata_arena *a = strata_arena_new(&(strata_arena_opts){16 * 1024, 1});
    static struct model_block live[MAX_LIVE];
    size_t live_count = 0;
    strata_mark marks[MAX_MARKS];
    size_t mark_live[MAX_MARKS], mark_count = 0;
    unsigned long long rng = 99;
    int ok = 1;
    const char *broken = NULL;
    for (int step = 0; step < 20000 && ok; step++) {
        unsigned op = (unsigned)(check_random(&rng) % 100);
        if (op < 60 && live_count < MAX_LIVE) {
            size_t n = check_random(&rng) % 9 == 0 ? 1 + check_random(&rng) % 20000
                                                      : 1 + check_random(&rng) % 300;
            unsigned seed = (unsigned)check_random(&rng);
            unsigned char *p = strata_arena_alloc(a, n);
            fill(p, n, seed);
            live[live_count++] = (struct model_block){p, n, seed};
        } else if (op < 70 && live_count > 0 &&
                   (mark_count == 0 || live_count - 1 >= mark_live[mark_count - 1])) {
            /* grow the newest block, as zsh's hrealloc does (one made since
             * the latest mark: a block moved past a mark is released with it) */
            struct model_block *b = &live[live_count - 1];
            size_t n = b->n + check_random(&rng) % 500;
            b->p = strata_arena_grow(a, b->p, n);
            ok &= filled(b->p, b->n, b->seed);
            fill(b->p, n, b->seed);
            b->n = n;
        } else if (op < 80 && mark_count < MAX_MARKS) {
            marks[mark_count] = strata_arena_mark(a);
            mark_live[mark_count++] = live_count;
        } else if (op < 90 && mark_count > 0) {
            size_t which = (size_t)(check_random(&rng) % mark_count);
            strata_arena_release(a, marks[which]);
            live_count = mark_live[which];
            mark_count = which;
        }
        if (broken == NULL)
            broken = arena_check(a); /* chunks, cache, big blocks, marks, counts */
        if (step % 100 == 0)
            for (size_t i = 0; i < live_count && ok; i++)
                ok &= filled(live[i].p, live[i].n, live[i].seed);
    }
    CHECK_SOUND(broken);
    for (size_t i = 0; i < live_count && ok; i++)
        ok &= filled(live[i].p, live[i].n, live[i].seed);
    CHECK(ok);
    strata_arena_destroy(a);
}

/* The child cases: misuse of a mark, after a mark and a block in arena a
 * (and an arena b beside it). Each says it survived if it was not stopped. */
struct marked {
    strata_arena *a, *b;
    strata_mark m;
    char *p;
};

static struct marked marked_arena(void)
{
    struct marked s;
    s.a = strata_arena_new(NULL);
    s.b = strata_arena_new(NULL);
    s.m = strata_arena_mark(s.a);
    s.p = strata_arena_alloc(s.a, 64);
    return s;
}

static int survived(void)
{
    printf("survived\n");
    return 0;
}

static int release_twice(void)
{
    struct marked s = marked_arena();
    strata_arena_release(s.a, s.m);
    strata_arena_release(s.a, s.m);
    return survived();
}

static int release_in_other_arena(void)
{
    struct marked s = marked_arena();
    strata_arena_release(s.b, s.m);
    return survived();
}

static int use_after_release(void)
{
    struct marked s = marked_arena();
    strata_arena_release(s.a, s.m);
    s.p[3] = 'x'; /* AddressSanitizer stops here */
    return survived();
}

static const struct check_case cases[] = {
    {"release-twice", release_twice},
    {"other-arena", release_in_other_arena},
    {"use-after-release", use_after_release},
};

/* A mark that is not live: reported, and nothing released; checked mode
 * aborts. */
static void test_dead_marks(void)
{
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("release-twice", NULL);
    CHECK(exited_cleanly(&o) && strstr(o.output, "not live") && strstr(o.output, "survived"));
    o = check_spawn("release-twice", "STRATA_CHECK=1");
    CHECK(aborted(&o) && strstr(o.output, "not live"));
    o = check_spawn("other-arena", "STRATA_CHECK=1");
    CHECK(aborted(&o) && strstr(o.output, "not live"));
}

static void test_use_after_release(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer == NULL || strcmp(sanitizer, "asan") != 0) {
        printf("use after release is checked in the ASan build (make test-asan)\n");
        return;
    }
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("use-after-release", NULL);
    CHECK(!exited_cleanly(&o) && strstr(o.output, "use-after-poison") != NULL);
}

static const struct check_test tests[] = {
    {"basics", test_basics},
    {"marks", test_marks},
    {"grow", test_grow},
    {"chunk_cache_and_spike", test_chunk_cache_and_spike},
    {"model", test_model},
    {"dead_marks", test_dead_marks},
    {"use_after_release", test_use_after_release},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
