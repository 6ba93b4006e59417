/* test_misuse.c: each misuse runs in a child process (this program again,
 * with `--case NAME` and STRATA_CHECK set); the parent checks how the child
 * ended and that strata's report names the address. Every case is a row of
 * one table, misuses, with its row of docs/safety.md's Misuse table where
 * it has one. Those rows also run on glibc's malloc (MISUSE_GLIBC=1 in the
 * child): the test fails when glibc stops a misuse that strata's default
 * mode lets through, and when the Misuse table of docs/safety.md says
 * otherwise than the runs. */
#include <pthread.h>

#include "check.h"
#include "checkers.h"
#include "heap.h"
#include "platform.h"
#include "strata.h"

/* The child's allocator: strata's, or glibc's (this program does not link
 * the override, so malloc here is glibc's). Through volatile pointers, so
 * the compiler cannot see a misuse and fold it away. */
static void *(*volatile m_malloc)(size_t) = strata_malloc;
static void (*volatile m_free)(void *) = strata_free;
static void *(*volatile m_realloc)(void *, size_t) = strata_realloc;

static void *free_in_thread(void *p)
{
    m_free(p);
    return NULL;
}

/* A thread with a heap of its own (it allocates first) frees the block
 * twice, another free between, and allocates on: its bin caches another
 * heap's block without reading it, so the second free is found later. */
static void *free_twice_in_heap_thread(void *p)
{
    void *mine[4];
    for (int i = 0; i < 4; i++)
        mine[i] = m_malloc(300);
    m_free(p);
    m_free(mine[0]);
    m_free(p);
    for (int i = 0; i < 2000; i++)
        m_malloc(300);
    return NULL;
}

/* The same, the second free right after the first. */
static void *free_twice_at_once_in_heap_thread(void *p)
{
    m_free(m_malloc(300));
    m_free(p);
    m_free(p);
    return NULL;
}

/* A thread with a heap of its own (it allocates first) frees a pointer
 * into another heap's page that no allocation returned, and allocates on:
 * its bin must not keep it, though it keeps that heap's blocks unread. */
static void *free_stray_in_heap_thread(void *p)
{
    m_free(m_malloc(100));
    m_free(p);
    for (int i = 0; i < 2000; i++)
        m_malloc(100);
    return NULL;
}

static void run_in_thread(void *(*fn)(void *), void *p)
{
    pthread_t t;
    pthread_create(&t, NULL, fn, p);
    pthread_join(t, NULL);
}

static void free_from_thread(void *p)
{
    run_in_thread(free_in_thread, p);
}

/* ---- the child cases: each misuses the allocator once ----------------------------------- */

static int double_free(void)
{
    char *p = m_malloc(100);
    say_address(p);
    m_free(p);
    m_free(p);
    return 0;
}

/* malloc(0)'s block freed twice: a 16-byte block in the default flavour, a
 * slot of the inaccessible region in the secure one (zero_size.c). */
static int zero_size_double(void)
{
    char *p = m_malloc(0);
    say_address(p);
    m_free(p);
    m_free(p);
    return 0;
}

/* Freed again behind another free, and the program goes on: the allocation
 * that would hand the block out twice stops it. */
static int double_free_later(void)
{
    char *p = m_malloc(100), *q = m_malloc(100);
    say_address(p);
    m_free(p);
    m_free(q);
    m_free(p);
    for (int i = 0; i < 4; i++)
        m_malloc(100);
    return 0;
}

static int double_free_remote(void)
{
    char *p = m_malloc(300);
    say_address(p);
    free_from_thread(p);
    m_free(p);
    for (int i = 0; i < 2000; i++) /* the owner collects its remote list */
        m_malloc(300);
    return 0;
}

/* The block has left the bin for its page when it is freed again. */
static int double_free_flushed(void)
{
    char *p = m_malloc(64);
    char *others[600];
    for (int i = 0; i < 600; i++)
        others[i] = m_malloc(64);
    say_address(p);
    m_free(p);
    for (int i = 0; i < 600; i++)
        m_free(others[i]);
    m_free(p);
    for (int i = 0; i < 700; i++)
        m_malloc(64);
    return 0;
}

/* Another thread frees the block twice, with a free in between: its
 * owner's remote list must not become a cycle. */
static int double_free_remote_twice(void)
{
    char *p = m_malloc(300), *q = m_malloc(300);
    say_address(p);
    free_from_thread(p);
    free_from_thread(q);
    free_from_thread(p);
    for (int i = 0; i < 2000; i++) /* the owner collects its remote list */
        m_malloc(300);
    return 0;
}

static int double_free_cached(void)
{
    char *p = m_malloc(300);
    say_address(p);
    run_in_thread(free_twice_in_heap_thread, p);
    return 0;
}

static int double_free_cached_last(void)
{
    char *p = m_malloc(300);
    say_address(p);
    run_in_thread(free_twice_at_once_in_heap_thread, p);
    return 0;
}

static int misaligned(void)
{
    char *p = m_malloc(100);
    say_address(p + 1);
    m_free(p + 1);
    return 0;
}

static int interior(void)
{
    char *p = m_malloc(100);
    say_address(p + 8);
    m_free(p + 8);
    return 0;
}

/* 16 bytes in: aligned as any block start, but inside a block. */
static int interior_aligned(void)
{
    char *p = m_malloc(100);
    memset(p, 'A', 100);
    say_address(p + 16);
    m_free(p + 16);
    char *q = m_malloc(80);
    memset(q, 'B', 80);
    return 0;
}

/* A block start no allocation has returned yet, well past the first block
 * of its page. */
static int never_handed_out(void)
{
    char *p = m_malloc(16);
    say_address(p + 16384);
    m_free(p + 16384);
    for (int i = 0; i < 2000; i++)
        m_malloc(16);
    return 0;
}

/* The same two, freed by another thread that allocates too. */
static void run_in_thread(void *(*fn)(void *), void *p);
static int interior_remote(void)
{
    char *p = m_malloc(100);
    memset(p, 'A', 100);
    say_address(p + 16);
    run_in_thread(free_stray_in_heap_thread, p + 16);
    return 0;
}

static int never_handed_out_remote(void)
{
    char *p = m_malloc(16);
    say_address(p + 16384);
    run_in_thread(free_stray_in_heap_thread, p + 16384);
    return 0;
}

/* The freed block's link is overwritten with an address of the writer's
 * choosing; the allocations after must not return it. */
static int write_after_free(void)
{
    static char target[256];
    char *p = m_malloc(64);
    say_address(p);
    m_free(p);
    memcpy(p, &(char *){target + 64}, sizeof(char *));
    for (int i = 0; i < 3; i++)
        if (m_malloc(64) == target + 64)
            printf("the forged address was returned\n");
    return 0;
}

/* A write after free into a block a drained bin sent to its page (the
 * class's current page), found when the page empties and its list is
 * checked before the page starts again from its first block. */
static int write_after_free_page(void)
{
    enum { COUNT = 8000 };
    static char *blocks[COUNT];
    for (int i = 0; i < COUNT; i++)
        blocks[i] = m_malloc(72);
    for (int i = 0; i < COUNT - 2; i++)
        m_free(blocks[i]);
    char *victim = blocks[COUNT - 2], *last = blocks[COUNT - 1];
    if (page_of(segment_of(victim), victim) != page_of(segment_of(last), last))
        victim = blocks[COUNT - 3];
    m_free(victim);
    say_address(victim);
    memcpy(victim, &(char *){(char *)blocks + 64}, sizeof(char *));
    m_free(last);
    for (int i = 0; i < 3; i++)
        if (m_malloc(72) == (char *)blocks + 64)
            printf("the forged address was returned\n");
    return 0;
}

static int foreign(void)
{
    static char not_ours[64];
    say_address(not_ours + 16);
    m_free(not_ours + 16);
    return 0;
}

static int large_double(void)
{
    char *p = m_malloc(8 << 20);
    say_address(p);
    m_free(p);
    m_free(p);
    return 0;
}

/* A large block freed, its mapping taken again by a block of its size
 * (the address is then live once more), and that block freed twice. */
static int large_double_reused(void)
{
    char *p = m_malloc(8 << 20);
    m_free(p);
    char *q = m_malloc(8 << 20);
    say_address(q);
    m_free(q);
    m_free(q);
    return 0;
}

/* The byte before a block of `size` written, then its free. */
static int underflow_byte(size_t size)
{
    char *p = m_malloc(size);
    say_address(p);
    *(volatile char *)(p - 1) ^= 0x5a;
    m_free(p);
    return 0;
}

/* The byte before a large block written, then its free: the header
 * there is sealed (large.c). */
static int large_underflow(void)
{
    return underflow_byte(8 << 20);
}

static int medium_double(void)
{
    char *p = m_malloc(1 << 20);
    say_address(p);
    m_free(p);
    m_free(p);
    return 0;
}

/* A byte written just before a medium block, or just past the size asked
 * of one, then its free (by the thread or another one) or its growth in
 * place: the guard word and the canary around it (layout.h, MEDIUM_HEAD). */
static int medium_underflow(void)
{
    return underflow_byte(1 << 20);
}

static int small_underflow(void)
{
    return underflow_byte(64);
}

/* The lowest of a class's first blocks: its page's first, whose guard
 * word lies in the page's lead. */
static int small_underflow_first(void)
{
    enum { COUNT = 64 };
    char *block[COUNT], *lowest = NULL;
    for (int i = 0; i < COUNT; i++) {
        block[i] = m_malloc(4000);
        if (lowest == NULL || block[i] < lowest)
            lowest = block[i];
    }
    say_address(lowest);
    memset(lowest - 32, 'U', 32);
    m_free(lowest);
    return 0;
}

/* 16 bytes written past a 64-byte block, reaching the guard word of the
 * block above it in its page (the usable size is 72: its slot is 80),
 * then both freed: the upper one's free reports it, naming both (the
 * secure flavour's canary stops the lower one's). (Blocks are taken
 * until two lie side by side.) */
static int small_overflow_next(void)
{
    enum { COUNT = 64 };
    char *block[COUNT];
    for (int i = 0; i < COUNT; i++) {
        block[i] = m_malloc(64);
        for (int j = 0; j < i; j++) {
            char *low = block[j] < block[i] ? block[j] : block[i];
            char *high = block[j] < block[i] ? block[i] : block[j];
            if (high - low == 80) {
                say_address(low);
                memset(low + 64, 'O', 16);
                m_free(low);
                m_free(high);
                return 0;
            }
        }
    }
    return 3;
}

/* 32 bytes copied past a 4096-byte block, the last its page has carved
 * (a child's first four blocks of the size are its page's first carve:
 * layout.h, PAGE_CARVE_MIN_BLOCKS), then the next of its size: the carve
 * that makes it finds its guard word overwritten (glibc: the top chunk's
 * size word). */
static int small_overflow_carved(void)
{
    char *block[4], *highest = NULL;
    for (int i = 0; i < 4; i++) {
        block[i] = m_malloc(4096);
        if (highest == NULL || block[i] > highest)
            highest = block[i];
    }
    say_address(highest);
    memset(highest, 'O', 4096 + 32);
    char *next = m_malloc(4096);
    m_free(next);
    return 0;
}

/* 16 bytes written before a block of `size`, then its free by another
 * thread. */
static int underflow_remote(size_t size)
{
    char *p = m_malloc(size);
    say_address(p);
    memset(p - 16, 'U', 16);
    free_from_thread(p);
    return 0;
}

static int small_underflow_remote(void)
{
    return underflow_remote(200);
}

static int medium_overflow(void)
{
    char *p = m_malloc(1 << 20);
    say_address(p);
    *(volatile char *)(p + (1 << 20)) = 0;
    m_free(p);
    return 0;
}

static int medium_underflow_remote(void)
{
    return underflow_remote(200000);
}

static int medium_overflow_grown(void)
{
    char *p = m_malloc(200000);
    say_address(p);
    memset(p, 'O', 200000 + 32);
    p = m_realloc(p, 200100);
    m_free(p);
    return 0;
}

static int realloc_foreign(void)
{
    static char not_ours[64];
    say_address(not_ours);
    m_realloc(not_ours, 100);
    return 0;
}

/* Blocks of 20000 bytes live in two-slice pages (6 a page). Free them all,
 * so the first page goes back to its segment, let a one-slice page of
 * 16-byte blocks take its first slice, then free a stale pointer into its
 * second slice (block 4, at 80000 bytes). */
static int stale_slice(void)
{
    char *blocks[30];
    for (int i = 0; i < 30; i++)
        blocks[i] = m_malloc(20000);
    char *stale = blocks[4];
    for (int i = 0; i < 30; i++)
        m_free(blocks[i]);
    for (int i = 0; i < 2000; i++)
        m_malloc(16);
    say_address(stale);
    m_free(stale);
    printf("stale free accepted\n");
    return 0;
}

/* The secure flavour's cases know its block states; elsewhere they are no
 * case at all. */
static int secure_only(void)
{
    fprintf(stderr, "%s: a case of the secure flavour's build\n", check_name);
    return 2;
}

/* A byte written into a freed small block, anywhere in its first 64 bytes
 * (its canary's bytes among them): found when it leaves the quarantine,
 * here at the trim that empties it. MISUSE_WRITE=SIZE@OFFSET says which
 * block and byte. */
static int small_write_after_free(void)
{
    const char *where = getenv("MISUSE_WRITE");
    if (!TEST_SECURE)
        return secure_only();
    if (where == NULL || strchr(where, '@') == NULL) {
        fprintf(stderr, "small-write-after-free: MISUSE_WRITE=SIZE@OFFSET is not set\n");
        return 2;
    }
    size_t size = (size_t)atoi(where);
    unsigned char *p = m_malloc(size);
    say_address(p);
    size_t slot = page_of(segment_of(p), p)->block_size;
    m_free(p);
    size_t at = (size_t)atoi(strchr(where, '@') + 1) % (slot < 64 ? slot : 64);
    p[at] ^= 0x20;
    strata_trim();
    return 0;
}

/* A stray write into the block states (layout.h): the free that reads a
 * nonsense state stops, however the block looks. */
static int state_overwritten(void)
{
    if (!TEST_SECURE)
        return secure_only();
    char *p = m_malloc(100);
    say_address(p);
    size_t slot = page_of(segment_of(p), p)->block_size;
    *block_state(p, slot) = (uint16_t)(slot + 2);
    m_free(p);
    return 0;
}

/* 100 MB of 1000-byte blocks freed in order: pages and whole segments go
 * back while checked mode's frees run (a free must not read its page after
 * releasing it). */
static int free_many(void)
{
    enum { COUNT = 100000 };
    static char *blocks[COUNT];
    for (int i = 0; i < COUNT; i++) {
        blocks[i] = m_malloc(1000);
        memset(blocks[i], i & 0xff, 1000);
    }
    for (int i = 0; i < COUNT; i++)
        m_free(blocks[i]);
    say_address(NULL);
    return 0;
}

/* Heavy correct use: checked mode must not report anything. */
static int clean(void)
{
    void *held[512] = {0};
    unsigned long long rng = 5;
    for (int i = 0; i < 50000; i++) {
        unsigned slot = (unsigned)(check_random(&rng) % 512);
        if (held[slot] && check_random(&rng) % 4 == 0) {
            pthread_t t;
            pthread_create(&t, NULL, free_in_thread, held[slot]);
            pthread_join(t, NULL);
        } else {
            m_free(held[slot]);
        }
        size_t r = check_random(&rng);
        held[slot] = r % 3 ? m_malloc(r % 3000) : m_realloc(NULL, r % 300000);
    }
    for (int i = 0; i < 512; i++)
        m_free(held[i]);
    say_address(NULL);
    return 0;
}

/* Every case, with its row of the Misuse table of docs/safety.md where it
 * has one, in the table's words. */
struct misuse {
    struct check_case child;
    const char *what;   /* the row's misuse; NULL: not a row of the table */
    const char *report; /* what strata's report says */
};

static const struct misuse misuses[] = {
    {{"double-free", double_free}, "double free of the block freed last", "double free"},
    {{"double-free-later", double_free_later}, "double free of an older block (`free(p); free(q); free(p)`), the program allocating on", "double free"},
    {{"double-free-flushed", double_free_flushed}, "double free of a block gone back to its page, the program allocating on", "double free"},
    {{"double-free-remote", double_free_remote}, "a block freed by another thread, then by its owner, the program allocating on", "double free"},
    {{"double-free-remote-twice", double_free_remote_twice}, "a block freed twice by another thread", "double free"},
    {{"double-free-cached", double_free_cached}, "a block freed twice by another thread that allocates too, the program allocating on", "double free"},
    {{"double-free-cached-last", double_free_cached_last}, "a block freed twice in a row by another thread that allocates too", "double free"},
    {{"zero-size-double", zero_size_double}, "`malloc(0)`'s block freed twice", "double free"},
    {{"medium-double", medium_double}, "a medium block (1 MiB) freed twice", "double free"},
    {{"large-double", large_double}, "a large block (8 MiB) freed twice", "double free"},
    {{"large-double-reused", large_double_reused}, NULL, "double free"},
    {{"small-underflow", small_underflow}, "a byte written before a small block (64 bytes), then its free", "write before the start of a block"},
    {{"small-underflow-first", small_underflow_first}, "a page's first block (4000 bytes) with 32 bytes written before it, then its free", "write before the start of a block"},
    {{"small-overflow-next", small_overflow_next}, "a small block (64 bytes) with 16 bytes written past it, then it and the block above it freed", "past the end of the block below it"},
    {{"small-overflow-carved", small_overflow_carved}, "a page's last carved block (4096 bytes) with 32 bytes copied past it, then a block of its size", "write past the end of a block"},
    {{"small-underflow-remote", small_underflow_remote}, NULL, "write before the start of a block"},
    {{"medium-underflow", medium_underflow}, "a byte written before a medium block (1 MiB), then its free", "write before the start of a block"},
    {{"medium-overflow", medium_overflow}, "a byte written past a medium block's size (1 MiB), then its free", "write past the end of a block"},
    {{"medium-underflow-remote", medium_underflow_remote}, NULL, "write before the start of a block"},
    {{"medium-overflow-grown", medium_overflow_grown}, NULL, "write past the end of a block"},
    {{"large-underflow", large_underflow}, "a byte written before a large block (8 MiB), then its free", "write before the start of a block"},
    {{"misaligned", misaligned}, "`free(p + 1)`", "not the start of a block"},
    {{"interior", interior}, "`free(p + 8)`", "not the start of a block"},
    {{"interior-aligned", interior_aligned}, "`free(p + 16)`, inside a 100-byte block", "not the start of a block"},
    {{"never-handed-out", never_handed_out}, "`free(malloc(16) + 16384)`: a block no allocation returned", "never allocated"},
    {{"stale-slice", stale_slice}, "a free into a page released since", "not"},
    {{"foreign", foreign}, "`free` of a pointer into static memory", "did not allocate"},
    {{"realloc-foreign", realloc_foreign}, "`realloc` of a pointer into static memory", "did not allocate"},
    {{"interior-remote", interior_remote}, NULL, "not the start of a block"},
    {{"never-handed-out-remote", never_handed_out_remote}, NULL, "never allocated"},
    {{"write-after-free", write_after_free}, NULL, "write after free"},
    {{"small-write-after-free", small_write_after_free}, NULL, "write after free"},
    {{"write-after-free-page", write_after_free_page}, NULL, "write after free"},
    {{"state-overwritten", state_overwritten}, NULL, "state is overwritten"},
    {{"free-many", free_many}, NULL, NULL},
    {{"clean", clean}, NULL, NULL},
};

/* ---- the tests, in this process --------------------------------------------------------- */

static struct outcome spawn(const char *name, const char *check_value)
{
    char env[64] = "";
    if (check_value != NULL)
        snprintf(env, sizeof env, "STRATA_CHECK=%s", check_value);
    return check_spawn(name, env);
}

/* strata's report of a misuse: an error naming `what` and the address, or
 * in the debug build, a checkpoint that met the damage first and names the
 * address in its broken invariant. */
static int strata_reported(const struct outcome *o, const char *what)
{
    return check_reports(o, "strata: error: ", what) ||
           (STRATA_DEBUG_BUILD && check_reports(o, "strata: invariant broken", ""));
}

/* How a child ended, in the table's words. */
static const char *ending(const struct outcome *o, int strata)
{
    if (aborted(o))
        return !strata || strata_reported(o, "") ? "stops" : "aborts unreported";
    if (WIFSIGNALED(o->status))
        return "crashes";
    if (strata && strstr(o->output, "strata: warning") != NULL)
        return "warns, runs on";
    return "runs on";
}

/* Whether docs/safety.md holds this exact line. */
static int readme_has(const char *line)
{
    FILE *f = fopen("docs/safety.md", "r");
    if (f == NULL)
        return 0;
    char buffer[512];
    int found = 0;
    while (!found && fgets(buffer, sizeof buffer, f) != NULL) {
        buffer[strcspn(buffer, "\n")] = '\0';
        found = strcmp(buffer, line) == 0;
    }
    fclose(f);
    return found;
}

/* Each row of the Misuse table, on strata in both modes and on glibc: every
 * one stopped with a report naming the address, in either mode; what
 * glibc stops, strata stops; and docs/safety.md has the line the runs
 * make. Built on the secure flavour: it stops every one, with a report
 * and the address (its own words for some). */
static void test_table(void)
{
    if (TEST_SECURE) {
        for (size_t i = 0; i < CHECK_COUNT(misuses); i++) {
            const struct misuse *row = &misuses[i];
            if (row->what == NULL)
                continue;
            struct outcome o = spawn(row->child.name, NULL);
            CHECK(aborted(&o) && check_reports(&o, "strata: error: ", ""));
            if (!aborted(&o))
                printf("  the secure flavour did not stop: %s\n", row->what);
        }
        return;
    }
    /* Sanitizers replace glibc's malloc with their own: the glibc column is
     * measured in the plain builds only. */
    const char *sanitizer = getenv("SANITIZER");
    int with_glibc = sanitizer == NULL || sanitizer[0] == '\0';
    if (!with_glibc)
        printf("glibc column not measured under a sanitizer (its malloc is the sanitizer's)\n");
    printf("| misuse | glibc | strata | `STRATA_CHECK=1` |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < CHECK_COUNT(misuses); i++) {
        const struct misuse *row = &misuses[i];
        if (row->what == NULL)
            continue;
        struct outcome on_strata = spawn(row->child.name, NULL);
        struct outcome checked = spawn(row->child.name, "1");
        const char *strata_end = ending(&on_strata, 1), *checked_end = ending(&checked, 1);
        /* Every case is a misuse checked mode can see, and says so with
         * the address; so does the default mode, wherever it stops. */
        CHECK(aborted(&checked) && strata_reported(&checked, row->report));
        if (aborted(&on_strata))
            CHECK(strata_reported(&on_strata, row->report));
        /* strata stops every one of these in the default mode too. */
        CHECK(strcmp(strata_end, "stops") == 0);
        if (!with_glibc)
            continue;
        struct outcome glibc = check_spawn(row->child.name, "MISUSE_GLIBC=1");
        const char *glibc_end = ending(&glibc, 0);
        /* What glibc stops, strata's default mode stops. */
        if (strcmp(glibc_end, "stops") == 0)
            CHECK(strcmp(strata_end, "stops") == 0);
        char line[512];
        snprintf(line, sizeof line, "| %s | %s | %s | %s |", row->what, glibc_end, strata_end,
                 checked_end);
        printf("%s\n", line);
        CHECK(readme_has(line));
        if (!readme_has(line))
            printf("  (the Misuse table of docs/safety.md does not have this line)\n");
    }
}

/* A forged link in a freed block: never followed, in either mode. */
static void test_forged_link(void)
{
    struct outcome o = spawn("write-after-free", NULL);
    if (TEST_SECURE) {
        CHECK((aborted(&o) || exited_cleanly(&o)) && strstr(o.output, "forged address was returned") == NULL);
        return;
    }
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
    CHECK(strstr(o.output, "forged address was returned") == NULL);
    o = spawn("write-after-free", "1");
    CHECK(aborted(&o) && strstr(o.output, "forged address was returned") == NULL);
}

/* A forged link in a block that went back to its page is never followed
 * either: the default mode finds it when the page empties, checked mode
 * when the block is handed out again. */
static void test_forged_link_in_page(void)
{
    if (TEST_SECURE) {
        printf("the secure flavour's blocks are checked at every free (small_write_after_free)\n");
        return;
    }
    struct outcome o = spawn("write-after-free-page", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
    CHECK(strstr(o.output, "forged address was returned") == NULL);
    o = spawn("write-after-free-page", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
    CHECK(strstr(o.output, "forged address was returned") == NULL);
}

/* The secure flavour: a write after free anywhere in a small block's first
 * 64 bytes is stopped. */
static void test_small_write_after_free(void)
{
    if (!TEST_SECURE) {
        printf("writes into freed small blocks are stopped by the secure flavour (tests-secure)\n");
        return;
    }
    static const char *small_writes[] = {"1@0", "1@5", "1@15", "8@8", "8@12", "24@24", "24@31",
                                         "50@48", "50@63", "56@60", "100@7", "100@63"};
    for (size_t i = 0; i < CHECK_COUNT(small_writes); i++) {
        char env[64];
        snprintf(env, sizeof env, "MISUSE_WRITE=%s", small_writes[i]);
        struct outcome o = check_spawn("small-write-after-free", env);
        CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
        if (!aborted(&o))
            printf("  not stopped: a write after free at %s (size@offset)\n", small_writes[i]);
    }
}

/* A stray pointer into another heap's page, freed by a thread whose bin
 * keeps that heap's blocks without reading them: stopped with the address,
 * in both modes and both flavours, as the owner's own free stops it. */
/* Children that must be stopped in both modes, each with a report in its
 * own words (the secure flavour's may be its own). */
struct stopped_case {
    const char *name, *what;
};

static void check_stopped(const struct stopped_case *cases, size_t count)
{
    static const char *checks[] = {NULL, "1"};
    for (size_t i = 0; i < count; i++)
        for (size_t m = 0; m < CHECK_COUNT(checks); m++) {
            struct outcome o = spawn(cases[i].name, checks[m]);
            CHECK(aborted(&o) && (check_reports(&o, "strata: error: ", cases[i].what) ||
                                  (TEST_SECURE && check_reports(&o, "strata: error: ", ""))));
            if (!aborted(&o))
                printf("  not stopped: %s%s\n", cases[i].name, checks[m] ? " (STRATA_CHECK=1)" : "");
        }
}

static void test_stray_free_remote(void)
{
    static const struct stopped_case strays[] = {{"interior-remote", "not the start of a block"},
                                                 {"never-handed-out-remote", "never allocated"}};
    check_stopped(strays, CHECK_COUNT(strays));
}

/* A medium block's guards: freed by another thread after an underflow, or
 * grown in place after an overflow, in both modes (the secure flavour's
 * blocks of that size are large ones, their words its own). heap_check
 * sees a broken guard of a live block, and a sound one once mended. */
static void test_medium_guards(void)
{
    static const struct stopped_case cases[] = {{"medium-underflow-remote", "write before the start of a block"},
                                                {"medium-overflow-grown", "write past the end of a block"}};
    check_stopped(cases, CHECK_COUNT(cases));
    if (TEST_SECURE)
        return;
    char *p = strata_malloc(300000);
    CHECK_SOUND(heap_check(thread_heap));
    char saved = p[-1];
    p[-1] ^= 1;
    const char *broken = heap_check(thread_heap);
    CHECK(broken != NULL && strstr(broken, "medium block") != NULL && strstr(broken, "guard word") != NULL);
    p[-1] = saved;
    p[300000] ^= 1;
    broken = heap_check(thread_heap);
    CHECK(broken != NULL && strstr(broken, "canary") != NULL);
    p[300000] ^= 1;
    CHECK_SOUND(heap_check(thread_heap));
    strata_free(p);
}

/* The secure flavour: a block state overwritten by a stray write is
 * reported at the block's free. */
static void test_state_overwritten(void)
{
    if (!TEST_SECURE) {
        printf("block states are the secure flavour's (tests-secure)\n");
        return;
    }
    struct outcome o = spawn("state-overwritten", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "state is overwritten"));
}

/* The secure flavour: heap_check sees a free block whose state says it is
 * handed out. */
static void test_heap_check_states(void)
{
    if (!TEST_SECURE) {
        printf("block states are the secure flavour's (tests-secure)\n");
        return;
    }
    char *keep = strata_malloc(100), *p = strata_malloc(100); /* keep holds the page */
    size_t slot = page_of(segment_of(p), p)->block_size;
    strata_free(p);
    strata_trim(); /* out of the quarantine, onto a free list */
    CHECK_SOUND(heap_check(thread_heap));
    *block_state(p, slot) = 1;
    const char *broken = heap_check(thread_heap);
    CHECK(broken != NULL && strstr(broken, "state") != NULL);
    *block_state(p, slot) = 0;
    CHECK_SOUND(heap_check(thread_heap));
    strata_free(keep);
}

/* No false alarm on heavy correct use, in either mode (the secure flavour:
 * its default mode). */
static void test_no_false_alarm(void)
{
    static const char *const modes[] = {"1", NULL};
    for (size_t i = TEST_SECURE ? 1 : 0; i < CHECK_COUNT(modes); i++) {
        struct outcome o = spawn("free-many", modes[i]);
        CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    }
    for (size_t i = TEST_SECURE ? 1 : 0; i < CHECK_COUNT(modes); i++) {
        struct outcome o = spawn("clean", modes[i]);
        CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    }
}

/* A malformed option value is reported, and the default is used. */
static void test_malformed_option(void)
{
    struct outcome o = spawn("clean", "maybe");
    CHECK(exited_cleanly(&o) && strstr(o.output, "STRATA_CHECK=maybe is not valid (a flag: 1/0, yes/no, on/off or true/false, in any case); using the default, 0") != NULL);
}

static const struct check_test tests[] = {
    {"table", test_table},
    {"forged_link", test_forged_link},
    {"forged_link_in_page", test_forged_link_in_page},
    {"small_write_after_free", test_small_write_after_free},
    {"stray_free_remote", test_stray_free_remote},
    {"medium_guards", test_medium_guards},
    {"state_overwritten", test_state_overwritten},
    {"heap_check_states", test_heap_check_states},
    {"no_false_alarm", test_no_false_alarm},
    {"malformed_option", test_malformed_option},
};

int main(int argc, char **argv)
{
    /* A child on glibc's malloc (the table's glibc column): every case's
     * calls go there. */
    if (getenv("MISUSE_GLIBC") != NULL) {
        m_malloc = malloc;
        m_free = free;
        m_realloc = realloc;
    }
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES_IN(misuses, child));
}
