/* test_misuse.c: each misuse runs in a child process (this program again,
 * with the case name and STRATA_CHECK set); the parent checks how the child
 * ended and that strata's report names the address. The cases of the
 * comparison table also run on glibc's malloc (MISUSE_GLIBC=1 in the child):
 * the test fails when glibc stops a misuse that strata's default mode lets
 * through, and when the Misuse table of docs/safety.md says otherwise
 * than the runs. */
#include <pthread.h>

#include "check.h"
#include "checkers.h"
#include "layout.h"
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

static int run_case(const char *name)
{
    if (getenv("MISUSE_GLIBC") != NULL) {
        m_malloc = malloc;
        m_free = free;
        m_realloc = realloc;
    }
    if (strcmp(name, "double-free") == 0) {
        char *p = m_malloc(100);
        say_address(p);
        m_free(p);
        m_free(p);
    } else if (strcmp(name, "double-free-later") == 0) {
        /* Freed again behind another free, and the program goes on: the
         * allocation that would hand the block out twice stops it. */
        char *p = m_malloc(100), *q = m_malloc(100);
        say_address(p);
        m_free(p);
        m_free(q);
        m_free(p);
        for (int i = 0; i < 4; i++)
            m_malloc(100);
    } else if (strcmp(name, "double-free-remote") == 0) {
        char *p = m_malloc(300);
        say_address(p);
        free_from_thread(p);
        m_free(p);
        for (int i = 0; i < 2000; i++) /* the owner collects its remote list */
            m_malloc(300);
    } else if (strcmp(name, "double-free-flushed") == 0) {
        /* The block has left the bin for its page when it is freed again. */
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
    } else if (strcmp(name, "double-free-remote-twice") == 0) {
        /* Another thread frees the block twice, with a free in between:
         * its owner's remote list must not become a cycle. */
        char *p = m_malloc(300), *q = m_malloc(300);
        say_address(p);
        free_from_thread(p);
        free_from_thread(q);
        free_from_thread(p);
        for (int i = 0; i < 2000; i++) /* the owner collects its remote list */
            m_malloc(300);
    } else if (strcmp(name, "double-free-cached") == 0) {
        char *p = m_malloc(300);
        say_address(p);
        run_in_thread(free_twice_in_heap_thread, p);
    } else if (strcmp(name, "double-free-cached-last") == 0) {
        char *p = m_malloc(300);
        say_address(p);
        run_in_thread(free_twice_at_once_in_heap_thread, p);
    } else if (strcmp(name, "misaligned") == 0) {
        char *p = m_malloc(100);
        say_address(p + 1);
        m_free(p + 1);
    } else if (strcmp(name, "interior") == 0) {
        char *p = m_malloc(100);
        say_address(p + 8);
        m_free(p + 8);
    } else if (strcmp(name, "interior-aligned") == 0) {
        /* 16 bytes in: aligned as any block start, but inside a block. */
        char *p = m_malloc(100);
        memset(p, 'A', 100);
        say_address(p + 16);
        m_free(p + 16);
        char *q = m_malloc(80);
        memset(q, 'B', 80);
    } else if (strcmp(name, "never-handed-out") == 0) {
        /* A block start no allocation has returned yet, well past the
         * first block of its page. */
        char *p = m_malloc(16);
        say_address(p + 16384);
        m_free(p + 16384);
        for (int i = 0; i < 2000; i++)
            m_malloc(16);
    } else if (strcmp(name, "write-after-free") == 0) {
        /* The freed block's link is overwritten with an address of the
         * writer's choosing; the allocations after must not return it. */
        static char target[256];
        char *p = m_malloc(64);
        say_address(p);
        m_free(p);
        memcpy(p, &(char *){target + 64}, sizeof(char *));
        for (int i = 0; i < 3; i++)
            if (m_malloc(64) == target + 64)
                printf("the forged address was returned\n");
    } else if (strcmp(name, "foreign") == 0) {
        static char not_ours[64];
        say_address(not_ours + 16);
        m_free(not_ours + 16);
    } else if (strcmp(name, "large-double") == 0) {
        char *p = m_malloc(8 << 20);
        say_address(p);
        m_free(p);
        m_free(p);
    } else if (strcmp(name, "medium-double") == 0) {
        char *p = m_malloc(1 << 20);
        say_address(p);
        m_free(p);
        m_free(p);
    } else if (strcmp(name, "realloc-foreign") == 0) {
        static char not_ours[64];
        say_address(not_ours);
        m_realloc(not_ours, 100);
    } else if (strcmp(name, "stale-slice") == 0) {
        /* Blocks of 20000 bytes live in two-slice pages (6 a page). Free them
         * all, so the first page goes back to its segment, let a one-slice
         * page of 16-byte blocks take its first slice, then free a stale
         * pointer into its second slice (block 4, at 80000 bytes). */
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
    } else if (strncmp(name, "small-write-after-free-", 23) == 0 && TEST_SECURE) {
        /* A byte written into a freed small block, anywhere in its first
         * 64 bytes (its canary's bytes among them): found when it leaves
         * the quarantine, here at the trim that empties it. */
        size_t size = (size_t)atoi(name + 23);
        unsigned char *p = m_malloc(size);
        say_address(p);
        size_t slot = page_of(segment_of(p), p)->block_size;
        m_free(p);
        size_t at = (size_t)atoi(strchr(name + 23, '@') + 1) % (slot < 64 ? slot : 64);
        p[at] ^= 0x20;
        strata_trim();
    } else if (strcmp(name, "state-overwritten") == 0 && TEST_SECURE) {
        /* A stray write into the block states (layout.h): the free that
         * reads a nonsense state stops, however the block looks. */
        char *p = m_malloc(100);
        say_address(p);
        size_t slot = page_of(segment_of(p), p)->block_size;
        *block_state(p, slot) = (uint16_t)(slot + 2);
        m_free(p);
    } else if (strcmp(name, "free-many") == 0) {
        /* 100 MB of 1000-byte blocks freed in order: pages and whole segments
         * go back while checked mode's frees run (a free must not read its
         * page after releasing it). */
        enum { COUNT = 100000 };
        static char *blocks[COUNT];
        for (int i = 0; i < COUNT; i++) {
            blocks[i] = m_malloc(1000);
            memset(blocks[i], i & 0xff, 1000);
        }
        for (int i = 0; i < COUNT; i++)
            m_free(blocks[i]);
        say_address(NULL);
    } else if (strcmp(name, "clean") == 0) {
        /* Heavy correct use: checked mode must not report anything. */
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
    } else {
        return 2;
    }
    return 0;
}

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

struct row {
    const char *name, *what;
    const char *report; /* what strata's report says */
};

/* The comparison table, in the words of docs/safety.md. */
static const struct row table[] = {
    {"double-free", "double free of the block freed last", "double free"},
    {"double-free-later", "double free of an older block (`free(p); free(q); free(p)`), the program allocating on", "double free"},
    {"double-free-flushed", "double free of a block gone back to its page, the program allocating on", "double free"},
    {"double-free-remote", "a block freed by another thread, then by its owner, the program allocating on", "double free"},
    {"double-free-remote-twice", "a block freed twice by another thread", "double free"},
    {"double-free-cached", "a block freed twice by another thread that allocates too, the program allocating on", "double free"},
    {"double-free-cached-last", "a block freed twice in a row by another thread that allocates too", "double free"},
    {"medium-double", "a medium block (1 MiB) freed twice", "double free"},
    {"large-double", "a large block (8 MiB) freed twice", "double free"},
    {"misaligned", "`free(p + 1)`", "not the start of a block"},
    {"interior", "`free(p + 8)`", "not the start of a block"},
    {"interior-aligned", "`free(p + 16)`, inside a 100-byte block", "not the start of a block"},
    {"never-handed-out", "`free(malloc(16) + 16384)`: a block no allocation returned", "never allocated"},
    {"stale-slice", "a free into a page released since", "not"},
    {"foreign", "`free` of a pointer into static memory", "did not allocate"},
    {"realloc-foreign", "`realloc` of a pointer into static memory", "did not allocate"},
};

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

int main(int argc, char **argv)
{
    if (argc == 2)
        return run_case(argv[1]);

    /* Sanitizers replace glibc's malloc with their own: the glibc column is
     * measured in the plain builds only. */
    const char *sanitizer = getenv("SANITIZER");
    int with_glibc = sanitizer == NULL || sanitizer[0] == '\0';
    if (TEST_SECURE) {
        /* Built on the secure flavour: every misuse checked mode catches,
         * it stops by default, with a report and the address (its own
         * words for some); a forged link is never followed. */
        for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
            struct outcome o = spawn(table[i].name, NULL);
            CHECK(aborted(&o) && check_reports(&o, "strata: error: ", ""));
            if (!aborted(&o))
                printf("  the secure flavour did not stop: %s\n", table[i].what);
        }
        struct outcome o = spawn("write-after-free", NULL);
        CHECK((aborted(&o) || exited_cleanly(&o)) && strstr(o.output, "forged address was returned") == NULL);
        /* A write after free anywhere in a small block's first 64 bytes. */
        static const char *small_writes[] = {"1@0", "1@5", "1@15", "8@8", "8@12", "24@24", "24@31",
                                             "50@48", "50@63", "56@60", "100@7", "100@63"};
        for (size_t i = 0; i < sizeof small_writes / sizeof small_writes[0]; i++) {
            char name[64];
            snprintf(name, sizeof name, "small-write-after-free-%s", small_writes[i]);
            o = spawn(name, NULL);
            CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
            if (!aborted(&o))
                printf("  not stopped: %s\n", name);
        }
        o = spawn("state-overwritten", NULL);
        CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "state is overwritten"));
        /* heap_check sees a free block whose state says it is handed out. */
        char *keep = strata_malloc(100), *p = strata_malloc(100); /* keep holds the page */
        size_t slot = page_of(segment_of(p), p)->block_size;
        strata_free(p);
        strata_trim(); /* out of the quarantine, onto a free list */
        CHECK(heap_check(thread_heap) == NULL);
        *block_state(p, slot) = 1;
        const char *broken = heap_check(thread_heap);
        CHECK(broken != NULL && strstr(broken, "state") != NULL);
        *block_state(p, slot) = 0;
        CHECK(heap_check(thread_heap) == NULL);
        strata_free(keep);
        o = spawn("free-many", NULL);
        CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
        o = spawn("clean", NULL);
        CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
        return check_finish();
    }
    if (!with_glibc)
        printf("glibc column not measured under a sanitizer (its malloc is the sanitizer's)\n");
    printf("| misuse | glibc | strata | `STRATA_CHECK=1` |\n| --- | --- | --- | --- |\n");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const struct row *row = &table[i];
        struct outcome on_strata = spawn(row->name, NULL);
        struct outcome checked = spawn(row->name, "1");
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
        struct outcome glibc = check_spawn(row->name, "MISUSE_GLIBC=1");
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

    /* A forged link in a freed block: never followed, in either mode. */
    struct outcome o = spawn("write-after-free", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "write after free"));
    CHECK(strstr(o.output, "forged address was returned") == NULL);
    o = spawn("write-after-free", "1");
    CHECK(aborted(&o) && strstr(o.output, "forged address was returned") == NULL);

    /* No false alarm on heavy correct use, in either mode. */
    o = spawn("free-many", "1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    o = spawn("free-many", NULL);
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    o = spawn("clean", "1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    o = spawn("clean", NULL);
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    /* A malformed option value is reported, and the default is used. */
    o = spawn("clean", "maybe");
    CHECK(exited_cleanly(&o) && strstr(o.output, "STRATA_CHECK=maybe is not valid (a flag: 1/0, yes/no, on/off or true/false, in any case); using the default, 0") != NULL);
    return check_finish();
}
