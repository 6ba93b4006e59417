/* test_misuse.c: each misuse runs in a child process (this program again,
 * with the case name and STRATA_CHECK set); the parent checks how the child
 * ended and that strata's report names the address. */
#include <pthread.h>

#include "check.h"
#include "strata.h"

static void *free_in_thread(void *p)
{
    strata_free(p);
    return NULL;
}

static int run_case(const char *name)
{
    if (strcmp(name, "double-free") == 0) {
        char *p = strata_malloc(100);
        say_address(p);
        strata_free(p);
        strata_free(p);
    } else if (strcmp(name, "double-free-later") == 0) {
        char *p = strata_malloc(100), *q = strata_malloc(100);
        say_address(p);
        strata_free(p);
        strata_free(q);
        strata_free(p);
    } else if (strcmp(name, "double-free-remote") == 0) {
        char *p = strata_malloc(300);
        say_address(p);
        pthread_t t;
        pthread_create(&t, NULL, free_in_thread, p);
        pthread_join(t, NULL);
        strata_free(p);
    } else if (strcmp(name, "double-free-flushed") == 0) {
        /* The block has left the bin for its page when it is freed again. */
        char *p = strata_malloc(64);
        char *others[600];
        for (int i = 0; i < 600; i++)
            others[i] = strata_malloc(64);
        say_address(p);
        strata_free(p);
        for (int i = 0; i < 600; i++)
            strata_free(others[i]);
        strata_free(p);
    } else if (strcmp(name, "double-free-remote-twice") == 0) {
        /* Another thread frees the block twice, with a free in between:
         * its owner's remote list must not become a cycle. */
        char *p = strata_malloc(300), *q = strata_malloc(300);
        say_address(p);
        pthread_t t;
        pthread_create(&t, NULL, free_in_thread, p);
        pthread_join(t, NULL);
        pthread_create(&t, NULL, free_in_thread, q);
        pthread_join(t, NULL);
        pthread_create(&t, NULL, free_in_thread, p);
        pthread_join(t, NULL);
        for (int i = 0; i < 2000; i++) /* the owner collects its remote list */
            strata_malloc(300);
    } else if (strcmp(name, "misaligned") == 0) {
        char *p = strata_malloc(100);
        say_address(p + 1);
        strata_free(p + 1);
    } else if (strcmp(name, "interior") == 0) {
        char *p = strata_malloc(100);
        say_address(p + 8);
        strata_free(p + 8);
    } else if (strcmp(name, "foreign") == 0) {
        static char not_ours[64];
        say_address(not_ours + 16);
        strata_free(not_ours + 16);
    } else if (strcmp(name, "large-double") == 0) {
        char *p = strata_malloc(1 << 20);
        say_address(p);
        strata_free(p);
        strata_free(p);
    } else if (strcmp(name, "realloc-foreign") == 0) {
        static char not_ours[64];
        say_address(not_ours);
        strata_realloc(not_ours, 100);
    } else if (strcmp(name, "stale-slice") == 0) {
        /* Blocks of 20000 bytes live in two-slice pages (6 a page). Free them
         * all, so the first page goes back to its segment, let a one-slice
         * page of 16-byte blocks take its first slice, then free a stale
         * pointer into its second slice (block 4, at 80000 bytes). */
        char *blocks[30];
        for (int i = 0; i < 30; i++)
            blocks[i] = strata_malloc(20000);
        char *stale = blocks[4];
        for (int i = 0; i < 30; i++)
            strata_free(blocks[i]);
        for (int i = 0; i < 2000; i++)
            strata_malloc(16);
        say_address(stale);
        strata_free(stale);
        printf("stale free accepted\n");
    } else if (strcmp(name, "free-many") == 0) {
        /* 100 MB of 1000-byte blocks freed in order: pages and whole segments
         * go back while checked mode's frees run (a free must not read its
         * page after releasing it). */
        enum { COUNT = 100000 };
        static char *blocks[COUNT];
        for (int i = 0; i < COUNT; i++) {
            blocks[i] = strata_malloc(1000);
            memset(blocks[i], i & 0xff, 1000);
        }
        for (int i = 0; i < COUNT; i++)
            strata_free(blocks[i]);
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
                strata_free(held[slot]);
            }
            size_t r = check_random(&rng);
            held[slot] = r % 3 ? strata_malloc(r % 3000) : strata_realloc(NULL, r % 300000);
        }
        for (int i = 0; i < 512; i++)
            strata_free(held[i]);
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

int main(int argc, char **argv)
{
    if (argc == 2)
        return run_case(argv[1]);

    struct outcome o = spawn("double-free", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("double-free", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("double-free-later", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("double-free-remote", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("interior", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "not the start of a block"));
    o = spawn("foreign", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "did not allocate"));
    o = spawn("large-double", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("stale-slice", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "not allocated"));
    o = spawn("realloc-foreign", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "did not allocate"));

    /* Default mode: a pointer that is not strata's is reported and ignored,
     * which corrupts nothing. */
    o = spawn("foreign", NULL);
    CHECK(exited_cleanly(&o) && check_reports(&o, "strata: ", "did not allocate, ignored"));

    /* Default mode stops, besides a double free of the block freed last: a
     * block freed twice by another thread (its owner's remote list would
     * become a cycle), a large block freed twice, a pointer that is not
     * 8-aligned. (A double free of an older block by its owner is stopped
     * in checked mode.) */
    static const char *const default_stops[][2] = {
        {"double-free-remote-twice", "double free"},
        {"large-double", "double free"},
        {"misaligned", "not the start of a block"},
    };
    for (size_t i = 0; i < sizeof default_stops / sizeof default_stops[0]; i++) {
        o = spawn(default_stops[i][0], NULL);
        CHECK(aborted(&o) && check_reports(&o, "strata: ", default_stops[i][1]));
        if (!aborted(&o))
            fprintf(stderr, "default mode let %s through: %s\n", default_stops[i][0], o.output);
    }
    o = spawn("double-free-flushed", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("double-free-remote-twice", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "double free"));
    o = spawn("misaligned", "1");
    CHECK(aborted(&o) && check_reports(&o, "strata: ", "not the start of a block"));

    /* No false alarm from checked mode on heavy correct use. */
    o = spawn("free-many", "1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    o = spawn("free-many", NULL);
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    o = spawn("clean", "1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata:") == NULL);
    /* A malformed option value is reported, and the default is used. */
    o = spawn("clean", "maybe");
    CHECK(exited_cleanly(&o) && strstr(o.output, "STRATA_CHECK=maybe is malformed") != NULL);
    return check_finish();
}
