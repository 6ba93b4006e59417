/* bench/context.c: talloc's pool speed test. Kinds
 * (-k strata-ctx|strata-pool|talloc|talloc-pool|malloc|strata-malloc):
 *   speed:   each round allocates p1 (100 bytes) under the context (or the
 *            pool), p2 = strdup(p1, "foo bar"), p3 (300 bytes) under p1,
 *            then frees p1 (and with it p2, p3); 3 operations a round.
 *            malloc rows do malloc, strdup, malloc and three frees.
 *   reclaim: talloc's pool rule, allocate 2048 bytes / free in a 4096-byte
 *            pool, per second; the context rows do it under a plain context,
 *            the malloc rows with malloc and free.
 * strata's core is linked without the override, so `malloc` is glibc's.
 * talloc is measured where libtalloc-dev was found at build time. Kinds
 * named together (-k strata-pool,talloc-pool) alternate in short slices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "strata.h"

#if HAVE_TALLOC
#include <talloc.h>
#endif

static size_t sink;

struct kind {
    const char *name;
    void (*round)(void *context);
    void (*reclaim)(void *context);
    void *(*setup)(void);
};

/* ---- strata contexts and pools -------------------------------------------- */
static void ctx_round(void *context)
{
    char *p1 = strata_ctx_alloc(context, 100);
    char *p2 = strata_ctx_strdup(p1, "foo bar");
    char *p3 = strata_ctx_alloc(p1, 300);
    sink += (size_t)p2[1] + (size_t)(p3 != NULL);
    strata_ctx_free(p1);
}
static void ctx_reclaim(void *context)
{
    char *p = strata_ctx_alloc(context, 2048);
    p[0] = 1;
    strata_ctx_free(p);
}
static void *ctx_setup(void) { return strata_ctx_alloc(NULL, 0); }
static void *ctx_pool_setup(void) { return strata_ctx_pool(NULL, 1024); }
static void *ctx_reclaim_pool_setup(void) { return strata_ctx_pool(NULL, 4096); }

/* ---- libtalloc ------------------------------------------------------------- */
#if HAVE_TALLOC
static void talloc_round(void *context)
{
    char *p1 = talloc_size(context, 100);
    char *p2 = talloc_strdup(p1, "foo bar");
    char *p3 = talloc_size(p1, 300);
    sink += (size_t)p2[1] + (size_t)(p3 != NULL);
    talloc_free(p1);
}
static void talloc_reclaim(void *context)
{
    char *p = talloc_size(context, 2048);
    p[0] = 1;
    talloc_free(p);
}
static void *talloc_setup(void) { return talloc_new(NULL); }
static void *talloc_pool_setup(void) { return talloc_pool(NULL, 1024); }
static void *talloc_reclaim_pool_setup(void) { return talloc_pool(NULL, 4096); }
#endif

/* ---- malloc/free: glibc's and strata's -------------------------------------- */
static void malloc_round(void *context)
{
    (void)context;
    char *p1 = malloc(100);
    char *p2 = strdup("foo bar");
    char *p3 = malloc(300);
    sink += (size_t)p2[1] + (size_t)(p1 != NULL) + (size_t)(p3 != NULL);
    free(p1);
    free(p2);
    free(p3);
}
static void malloc_reclaim(void *context)
{
    (void)context;
    char *p = malloc(2048);
    p[0] = 1;
    sink += (size_t)p[0];
    free(p);
}
static void *no_setup(void) { return NULL; }

static void strata_malloc_round(void *context)
{
    (void)context;
    char *p1 = strata_malloc(100);
    char *p2 = strata_malloc(sizeof "foo bar");
    memcpy(p2, "foo bar", sizeof "foo bar");
    char *p3 = strata_malloc(300);
    sink += (size_t)p2[1] + (size_t)(p1 != NULL) + (size_t)(p3 != NULL);
    strata_free(p1);
    strata_free(p2);
    strata_free(p3);
}
static void strata_malloc_reclaim(void *context)
{
    (void)context;
    char *p = strata_malloc(2048);
    p[0] = 1;
    sink += (size_t)p[0];
    strata_free(p);
}

struct entry {
    struct kind kind;
    void *(*reclaim_setup)(void);
};

static const struct entry kinds[] = {
    {{"strata-ctx", ctx_round, ctx_reclaim, ctx_setup}, ctx_setup},
    {{"strata-pool", ctx_round, ctx_reclaim, ctx_pool_setup}, ctx_reclaim_pool_setup},
#if HAVE_TALLOC
    {{"talloc", talloc_round, talloc_reclaim, talloc_setup}, talloc_setup},
    {{"talloc-pool", talloc_round, talloc_reclaim, talloc_pool_setup}, talloc_reclaim_pool_setup},
#endif
    {{"malloc", malloc_round, malloc_reclaim, no_setup}, no_setup},
    {{"strata-malloc", strata_malloc_round, strata_malloc_reclaim, no_setup}, no_setup},
};

/* One kind's two loops, their contexts and what they have done so far. */
struct meter {
    const struct entry *entry;
    void *speed_context, *reclaim_context;
    double speed_ops, speed_seconds, reclaim_ops, reclaim_seconds;
};

/* Runs `step` in batches of 1000 for about `seconds`; adds what it did. */
static void run_slice(void (*step)(void *), void *context, double ops_per_step, double seconds,
                      double *ops, double *elapsed)
{
    double start = bench_now(), now;
    long steps = 0;
    do {
        for (int i = 0; i < 1000; i++)
            step(context);
        steps += 1000;
        now = bench_now();
    } while (now - start < seconds);
    *ops += (double)steps * ops_per_step;
    *elapsed += now - start;
}

#define SLICES 10
#define MAX_KINDS 8

static const struct entry *find_kind(const char *name)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].kind.name, name) == 0)
            return &kinds[i];
    return NULL;
}

int main(int argc, char **argv)
{
    const char *kind_list = "strata-ctx";
    double seconds = 0.5;
    const struct bench_flag flags[] = {
        BENCH_STRING_FLAG("-k", "kind[,kind...]", &kind_list,
                          "the kinds to measure, taking turns in slices (default strata-ctx)"),
        BENCH_DOUBLE_FLAG("-t", "seconds", &seconds, 0, "time for each kind's speed and reclaim loops (default 0.5)"),
    };
    const struct bench_command_line command_line = {
        "context", "[kinds]", 0, "kinds: list the kinds this build measures, one kind=NAME line each, and exit",
        flags, BENCH_FLAG_COUNT(flags)};
    int operands = bench_parse_command_line(&command_line, argc, argv);
    if (operands > 1)
        bench_usage_error(&command_line, "unexpected word %s", argv[2]);
    if (operands == 1) {
        if (strcmp(argv[1], "kinds") != 0)
            bench_usage_error(&command_line, "unexpected word %s", argv[1]);
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
            printf("kind=%s\n", kinds[i].kind.name);
        return 0;
    }
    char list[256];
    if (strlen(kind_list) >= sizeof list)
        bench_usage_error(&command_line, "-k %s: longer than %zu characters", kind_list, sizeof list - 1);
    snprintf(list, sizeof list, "%s", kind_list);
    /* Several kinds (-k a,b) take turns in slices of a tenth of the time,
     * so a change in the machine's speed falls on all of them alike. */
    struct meter meters[MAX_KINDS];
    size_t count = 0;
    for (char *name = strtok(list, ","); name != NULL && count < MAX_KINDS; name = strtok(NULL, ",")) {
        const struct entry *e = find_kind(name);
        if (e == NULL)
            bench_usage_error(&command_line, "-k: unknown kind %s (context kinds lists them)", name);
        meters[count++] = (struct meter){e, e->kind.setup(), e->reclaim_setup(), 0, 0, 0, 0};
    }
    if (count == 0)
        bench_usage_error(&command_line, "-k %s: names no kind", kind_list);
    for (size_t k = 0; k < count; k++) { /* warm the caches and pools */
        double ops = 0, elapsed = 0;
        run_slice(meters[k].entry->kind.round, meters[k].speed_context, 3.0, 0.0, &ops, &elapsed);
        run_slice(meters[k].entry->kind.reclaim, meters[k].reclaim_context, 1.0, 0.0, &ops, &elapsed);
    }
    for (int slice = 0; slice < SLICES; slice++)
        for (size_t k = 0; k < count; k++) {
            struct meter *m = &meters[k];
            run_slice(m->entry->kind.round, m->speed_context, 3.0, seconds / SLICES, &m->speed_ops,
                      &m->speed_seconds);
            run_slice(m->entry->kind.reclaim, m->reclaim_context, 1.0, seconds / SLICES, &m->reclaim_ops,
                      &m->reclaim_seconds);
        }
    for (size_t k = 0; k < count; k++)
        printf("kind=%s ops_per_sec=%.0f reclaim_per_sec=%.0f\n", meters[k].entry->kind.name,
               meters[k].speed_ops / meters[k].speed_seconds,
               meters[k].reclaim_ops / meters[k].reclaim_seconds);
    return sink == 42 ? 3 : 0; /* keeps the reads alive */
}
