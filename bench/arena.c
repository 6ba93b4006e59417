/* bench/arena.c: the arena tables (zsh's perf-test and mmap string test).
 * One kind of allocator per run (-k strata|obstack|apr|malloc), so resident
 * figures do not mix; the command test takes several (-k strata,apr), in
 * turns:
 *   command: per "command", mark, 200 allocations of 8..200 bytes written
 *            to, release; allocations per second.
 *   spike:   256 MB in 100-byte pieces, released; resident MB before, at
 *            peak and after.
 *   string:  zsh's string test: the newest block grown by 10 bytes at a
 *            time up to -m bytes, released; median ms per string.
 * strata is linked in (its core, without the malloc override), so `malloc`
 * is glibc's. APR pools are measured where libapr1-dev was found at build
 * time (HAVE_APR). */
#include <obstack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "strata.h"

#if HAVE_APR
#include <apr_general.h>
#include <apr_pools.h>
#endif

#define obstack_chunk_alloc malloc
#define obstack_chunk_free free

static unsigned long long rng = 2024;
static size_t sink;

/* One allocator behind four calls: begin a command, allocate, grow the
 * newest allocation, end the command (release everything it allocated). */
struct kind {
    const char *name;
    void (*setup)(void);
    void (*begin)(void);
    void *(*alloc)(size_t n);
    void *(*grow)(void *p, size_t old, size_t n);
    void (*end)(void);
};

/* ---- strata arena ------------------------------------------------------ */
static strata_arena *arena;
static strata_mark arena_mark;
static void arena_setup(void) { arena = strata_arena_new(NULL); }
static void arena_begin(void) { arena_mark = strata_arena_mark(arena); }
static void *arena_alloc(size_t n) { return strata_arena_alloc(arena, n); }
static void *arena_grow(void *p, size_t old, size_t n)
{
    (void)old;
    return strata_arena_grow(arena, p, n);
}
static void arena_end(void) { strata_arena_release(arena, arena_mark); }

/* ---- GNU obstack: obstack_free to a mark ------------------------------- */
static struct obstack ob;
static void *ob_mark;
static void ob_setup(void) { obstack_init(&ob); }
static void ob_begin(void) { ob_mark = obstack_alloc(&ob, 1); }
static void *ob_alloc(size_t n) { return obstack_alloc(&ob, n); }
static void *ob_grow(void *p, size_t old, size_t n)
{
    /* obstack's own growing object: p is the unfinished object that
     * ob_start began; obstack_blank extends it, moving it when needed. */
    (void)p;
    obstack_blank(&ob, (int)(n - old));
    return obstack_base(&ob);
}
static void *ob_start(size_t n)
{
    obstack_blank(&ob, (int)n);
    return obstack_base(&ob);
}
static void ob_end(void) { obstack_free(&ob, ob_mark); }

/* ---- malloc/free of each block ----------------------------------------- */
#define MAX_HELD (1u << 22)
static void **held;
static size_t held_count;
static void malloc_setup(void) { held = calloc(MAX_HELD, sizeof *held); }
static void malloc_begin(void) { held_count = 0; }
static void *malloc_alloc(size_t n) { return held[held_count++] = malloc(n); }
static void *malloc_grow(void *p, size_t old, size_t n)
{
    (void)old;
    void *q = realloc(p, n);
    for (size_t i = held_count; i-- > 0;)
        if (held[i] == p) {
            held[i] = q;
            break;
        }
    return q;
}
static void malloc_end(void)
{
    for (size_t i = 0; i < held_count; i++)
        free(held[i]);
}

#if HAVE_APR
/* ---- APR pools: apr_pool_clear of a sub-pool --------------------------- */
static apr_pool_t *apr_root, *apr_sub;
static size_t apr_capacity; /* of the newest block, for growth */
static void apr_setup(void)
{
    apr_initialize();
    apr_pool_create(&apr_root, NULL);
    apr_pool_create(&apr_sub, apr_root);
}
static void apr_begin(void) { apr_capacity = 0; }
static void *apr_alloc_block(size_t n) { return apr_palloc(apr_sub, n); }
static void *apr_grow(void *p, size_t old, size_t n)
{
    /* A pool never resizes: a user doubles the room and copies. */
    if (n <= apr_capacity)
        return p;
    apr_capacity = 2 * n;
    void *q = apr_palloc(apr_sub, apr_capacity);
    memcpy(q, p, old);
    return q;
}
static void apr_end(void) { apr_pool_clear(apr_sub); }
#endif

static const struct kind kinds[] = {
    {"strata", arena_setup, arena_begin, arena_alloc, arena_grow, arena_end},
    {"obstack", ob_setup, ob_begin, ob_alloc, ob_grow, ob_end},
#if HAVE_APR
    {"apr", apr_setup, apr_begin, apr_alloc_block, apr_grow, apr_end},
#endif
    {"malloc", malloc_setup, malloc_begin, malloc_alloc, malloc_grow, malloc_end},
};

/* The loop, inlined for one kind at a time (k is a constant there), so that
 * each allocation is a direct call, or inline where the allocator is: as a
 * program calls it, not through a function pointer. */
#define SIZES 4096 /* random sizes drawn before the clock starts */
static unsigned short command_sizes[SIZES];

static inline __attribute__((always_inline)) void command_loop(const struct kind *k, long rounds)
{
    unsigned next = 0;
    for (long r = 0; r < rounds; r++) {
        k->begin();
        for (int i = 0; i < 200; i++) {
            size_t n = command_sizes[next++ % SIZES];
            char *p = k->alloc(n);
            p[0] = (char)i;
            p[n - 1] = (char)r;
            sink += (size_t)p[0];
        }
        k->end();
    }
}

static void command_of(size_t kind, long rounds)
{
    switch (kind) {
    case 0: command_loop(&kinds[0], rounds); break;
    case 1: command_loop(&kinds[1], rounds); break;
    case 2: command_loop(&kinds[2], rounds); break;
#if HAVE_APR
    case 3: command_loop(&kinds[3], rounds); break;
#endif
    default: break;
    }
}

#define KIND_COUNT (sizeof kinds / sizeof kinds[0])
#define SLICES 10

/* The kind called `name`, or NULL. */
static const struct kind *find_kind(const char *name)
{
    for (size_t i = 0; i < KIND_COUNT; i++)
        if (strcmp(kinds[i].name, name) == 0)
            return &kinds[i];
    return NULL;
}

/* The command loop for each of the `count` kinds chosen (indices into
 * kinds); several kinds take turns in ten slices, so that this machine's
 * slow spells fall on all of them alike. */
static void command(const size_t *chosen, size_t count, long rounds)
{
    for (size_t c = 0; c < count; c++)
        kinds[chosen[c]].setup();
    for (size_t i = 0; i < SIZES; i++)
        command_sizes[i] = (unsigned short)(8 + bench_random(&rng) % 193);
    double seconds[KIND_COUNT] = {0};
    for (int slice = 0; slice < SLICES; slice++)
        for (size_t c = 0; c < count; c++) {
            double start = bench_now();
            command_of(chosen[c], rounds / SLICES);
            seconds[c] += bench_now() - start;
        }
    for (size_t c = 0; c < count; c++)
        printf("kind=%s allocs_per_sec=%.0f\n", kinds[chosen[c]].name,
               200.0 * (double)(rounds / SLICES * SLICES) / seconds[c]);
}

static void spike(const struct kind *k, size_t mb)
{
    k->setup();
    k->begin(); /* a small first command, so setup costs are in the start figure */
    k->alloc(100);
    k->end();
    double start = bench_current_memory().resident_mb;
    k->begin();
    for (size_t i = 0; i < mb * 1048576 / 100; i++)
        memset(k->alloc(100), 1, 100);
    double peak = bench_current_memory().resident_mb;
    k->end();
    double after = bench_current_memory().resident_mb;
    printf("kind=%s start_rss_mb=%.1f peak_rss_mb=%.1f after_rss_mb=%.1f\n", k->name, start, peak,
           after);
}

static void string(const struct kind *k, size_t max, int repeats)
{
    k->setup();
    double *times = malloc((size_t)repeats * sizeof *times);
    for (int r = 0; r < repeats; r++) {
        double start = bench_now();
        k->begin();
        size_t n = 10;
        char *s = k->setup == ob_setup ? ob_start(n) : k->alloc(n);
        memset(s, 'a', n);
        while (n < max) {
            s = k->grow(s, n, n + 10);
            memset(s + n, 'b', 10);
            n += 10;
        }
        sink += (size_t)s[max / 2];
        if (k->setup == ob_setup)
            obstack_finish(&ob);
        k->end();
        times[r] = (bench_now() - start) * 1000.0;
    }
    printf("kind=%s max_bytes=%zu ms_per_string=%.3f\n", k->name, max,
           bench_median(times, (size_t)repeats));
    free(times);
}

enum test { TEST_COMMAND, TEST_SPIKE, TEST_STRING, TEST_KINDS };

int main(int argc, char **argv)
{
    const char *kind_list = "strata";
    long rounds = 20000;
    size_t max = 225000, mb = 256;
    int repeats = 11;
    const struct bench_flag flags[] = {
        BENCH_STRING_FLAG("-k", "kind[,kind...]", &kind_list,
                          "the allocator; command takes several, in turns (default strata)"),
        BENCH_LONG_FLAG("-n", "rounds", &rounds, SLICES, "command: commands run by each kind (default 20000)"),
        BENCH_SIZE_FLAG("-m", "bytes", &max, 10, "string: the string's final length (default 225000)"),
        BENCH_SIZE_FLAG("-w", "mb", &mb, 1, "spike: MB allocated in 100-byte pieces (default 256)"),
        BENCH_INT_FLAG("-r", "repeats", &repeats, 1, "string: strings grown; the median time is printed (default 11)"),
    };
    const struct bench_command_line command_line = {
        "arena", "command|spike|string|kinds", 0,
        "command: allocations per second of commands (mark, 200 allocations, release)\n"
        "spike: resident MB before, at the peak of and after a spike of 100-byte pieces\n"
        "string: median ms to grow the newest block 10 bytes at a time\n"
        "kinds: list the kinds this build measures, one kind=NAME line each",
        flags, BENCH_FLAG_COUNT(flags)};
    int operands = bench_parse_command_line(&command_line, argc, argv);
    if (operands == 0)
        bench_usage_error(&command_line, "no test named");
    if (operands > 1)
        bench_usage_error(&command_line, "unexpected word %s", argv[2]);
    enum test test = (enum test)bench_choice(&command_line, "test", argv[1], "command|spike|string|kinds");
    if (test == TEST_KINDS) {
        for (size_t i = 0; i < KIND_COUNT; i++)
            printf("kind=%s\n", kinds[i].name);
        return 0;
    }
    char list[256];
    if (strlen(kind_list) >= sizeof list)
        bench_usage_error(&command_line, "-k %s: longer than %zu characters", kind_list, sizeof list - 1);
    snprintf(list, sizeof list, "%s", kind_list);
    size_t chosen[KIND_COUNT], count = 0;
    for (char *name = strtok(list, ","); name != NULL; name = strtok(NULL, ",")) {
        const struct kind *k = find_kind(name);
        if (k == NULL)
            bench_usage_error(&command_line, "-k: unknown kind %s (arena kinds lists them)", name);
        if (count == KIND_COUNT)
            bench_usage_error(&command_line, "-k %s: more kinds than the %zu there are", kind_list, KIND_COUNT);
        chosen[count++] = (size_t)(k - kinds);
    }
    if (count == 0)
        bench_usage_error(&command_line, "-k %s: names no kind", kind_list);
    if (test != TEST_COMMAND && count > 1)
        bench_usage_error(&command_line, "-k %s: %s measures one kind at a time", kind_list, argv[1]);
    if (test == TEST_COMMAND)
        command(chosen, count, rounds);
    else if (test == TEST_SPIKE)
        spike(&kinds[chosen[0]], mb);
    else
        string(&kinds[chosen[0]], max, repeats);
    return sink == 42 ? 3 : 0; /* keeps the writes alive */
}
