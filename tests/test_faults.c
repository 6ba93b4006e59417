/* test_faults.c: strata when the OS says no. The OS layer's fault injection
 * makes mmap, mremap, madvise and munmap fail, now and then or at a chosen
 * call, while the API's edge cases, a realloc-heavy loop, arenas, contexts
 * and threads that hand blocks to each other run: nothing may abort, every
 * failure is NULL with errno = ENOMEM, every block that was handed out keeps
 * its contents (a failed realloc leaves the old block as it was), and once
 * the faults stop, everything allocates again. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

/* Marks a block at its last byte and, from 3 bytes, its first and middle. */
static void fill(unsigned char *p, size_t n, unsigned tag)
{
    if (n == 0)
        return;
    if (n >= 3) {
        p[0] = (unsigned char)tag;
        p[n / 2] = (unsigned char)(tag >> 8);
    }
    p[n - 1] = (unsigned char)(tag ^ 0x5a);
}

static int intact(const unsigned char *p, size_t n, unsigned tag)
{
    if (n == 0)
        return 1;
    if (n >= 3 && (p[0] != (unsigned char)tag || p[n / 2] != (unsigned char)(tag >> 8)))
        return 0;
    return p[n - 1] == (unsigned char)(tag ^ 0x5a);
}

static void faults_on(unsigned long map, unsigned long remap, unsigned long purge,
                      unsigned long unmap, uint64_t seed)
{
    os_fault_inject(OS_FAULT_MAP, 0, map, seed);
    os_fault_inject(OS_FAULT_REMAP, 0, remap, seed + 1);
    os_fault_inject(OS_FAULT_PURGE, 0, purge, seed + 2);
    os_fault_inject(OS_FAULT_UNMAP, 0, unmap, seed + 3);
}

static void faults_off(void)
{
    faults_on(0, 0, 0, 0, 0);
}

/* A size of every kind: small, medium, large, huge. */
static size_t random_size(unsigned long long *rng)
{
    unsigned long long r = check_random(rng);
    switch (r % 8) {
    case 0: return (size_t)(r >> 8) % 17;
    case 1: case 2: case 3: return (size_t)(r >> 8) % 2048;
    case 4: case 5: return (size_t)(r >> 8) % (256 * 1024);
    case 6: return (size_t)(r >> 8) % (4 << 20);
    default: return (size_t)(r >> 8) % (24 << 20);
    }
}

struct held {
    unsigned char *p;
    size_t n;
    unsigned tag;
};

#define HELD 256

/* Every call of the API, at random, with the OS failing under it. */
static void test_api_under_faults(void)
{
    static struct held held[HELD];
    unsigned long long rng = 11;
    long bad_errno = 0, damaged = 0, failures = 0, successes = 0;
    faults_on(7, 3, 5, 5, 1234);
    for (int step = 0; step < 6000; step++) {
        struct held *h = &held[check_random(&rng) % HELD];
        unsigned op = (unsigned)(check_random(&rng) % 6);
        size_t n = random_size(&rng);
        unsigned tag = (unsigned)check_random(&rng);
        void *p = NULL;
        errno = 0;
        if (h->p != NULL && op < 2) { /* realloc: the old block survives a failure */
            p = strata_realloc(h->p, n + 1);
            if (p == NULL) {
                failures++;
                bad_errno += errno != ENOMEM;
                damaged += !intact(h->p, h->n, h->tag);
                continue;
            }
            size_t kept = h->n < n + 1 ? h->n : n + 1;
            damaged += kept == h->n && !intact(p, h->n, h->tag);
            h->p = p;
            h->n = n + 1;
            fill(h->p, h->n, h->tag);
            successes++;
            continue;
        }
        if (h->p != NULL) {
            damaged += !intact(h->p, h->n, h->tag);
            strata_free(h->p);
            h->p = NULL;
        }
        switch (op) {
        case 2: p = strata_calloc(1, n); break;
        case 3: p = strata_aligned_alloc((size_t)1 << (4 + check_random(&rng) % 18), n); break;
        default: p = strata_malloc(n); break;
        }
        if (p == NULL) {
            failures++;
            bad_errno += errno != ENOMEM;
            continue;
        }
        if (op == 2 && n > 0)
            damaged += ((unsigned char *)p)[0] != 0 || ((unsigned char *)p)[n - 1] != 0;
        successes++;
        *h = (struct held){p, n, tag};
        fill(p, n, tag);
    }
    faults_off();
    printf("api: %ld calls failed, %ld succeeded; injected failures: %lu map, %lu remap, "
           "%lu purge, %lu unmap\n",
           failures, successes, os_fault_count(OS_FAULT_MAP), os_fault_count(OS_FAULT_REMAP),
           os_fault_count(OS_FAULT_PURGE), os_fault_count(OS_FAULT_UNMAP));
    CHECK_CMP(failures, >, 0); /* the faults reached the API */
    CHECK_CMP(successes, >, 0);
    CHECK_CMP(bad_errno, ==, 0);
    CHECK_CMP(damaged, ==, 0);
    for (int i = 0; i < HELD; i++) {
        damaged += held[i].p != NULL && !intact(held[i].p, held[i].n, held[i].tag);
        strata_free(held[i].p);
        held[i].p = NULL;
    }
    CHECK_CMP(damaged, ==, 0);
    /* With the OS willing again, every kind of allocation works. */
    int all = 1;
    for (size_t n = 1; n <= ((size_t)32 << 20); n *= 3) {
        void *p = strata_malloc(n);
        all &= p != NULL;
        strata_free(p);
    }
    void *aligned = strata_aligned_alloc((size_t)1 << 20, 100);
    all &= aligned != NULL;
    strata_free(aligned);
    CHECK(all);
}

/* A string grown 10 bytes at a time to 12 MB (past the medium blocks, into
 * a mapping of its own) and shrunk back, mremap and mmap failing now and
 * then, and every one of them failing for one call at 6 MB: every failure
 * leaves the string as it was, and a shrink never fails (the block still
 * fits where it is). */
static void test_realloc_growth(void)
{
    strata_trim(); /* no cached mapping to grow into: every move is a remap */
    /* One map and one remap in two fail: a growing realloc tries once more
     * without room to grow when its first try fails, so a call fails only
     * when both do (the secure flavour never remaps: it moves to a new
     * mapping). How many do depends on the purger's calls meanwhile. */
    faults_on(2, 2, 0, 0, 77);
    size_t n = 0;
    char *s = NULL;
    long failures = 0, bad = 0;
    bool forced = false;
    while (n < ((size_t)12 << 20)) {
        size_t want = n + 10 + (n >> 6);
        errno = 0;
        if (!forced && n >= ((size_t)6 << 20)) { /* a growth no map or remap serves */
            forced = true;
            faults_on(1, 1, 0, 0, 0);
            char *t = strata_realloc(s, n + ((size_t)4 << 20));
            CHECK(t == NULL);
            CHECK_CMP(errno, ==, ENOMEM);
            CHECK(s[0] == 'a' && s[n - 1] == (char)('a' + n % 26));
            faults_on(2, 2, 0, 0, 78);
            if (t != NULL)
                s = t;
        }
        char *t = strata_realloc(s, want);
        if (t == NULL) {
            failures++;
            bad += errno != ENOMEM || (n > 0 && (s[0] != 'a' || s[n - 1] != (char)('a' + n % 26)));
            continue;
        }
        bad += n > 0 && (t[0] != 'a' || t[n - 1] != (char)('a' + n % 26));
        s = t;
        memset(s + n, 0, want - n);
        n = want;
        s[0] = 'a';
        s[n - 1] = (char)('a' + n % 26);
    }
    while (n > 100) {
        size_t want = n / 3;
        char *t = strata_realloc(s, want);
        if (t == NULL) {
            bad++;
            break;
        }
        s = t;
        n = want;
        s[n - 1] = (char)('a' + n % 26);
    }
    faults_off();
    printf("realloc growth: %ld calls failed by chance, and one made to\n", failures);
    CHECK(forced);
    CHECK_CMP(bad, ==, 0);
    CHECK_CMP(s[0], ==, 'a');
    strata_free(s);
}

/* Arenas and contexts map and allocate under the same faults. */
static void test_arena_and_contexts(void)
{
    faults_on(3, 2, 0, 0, 99);
    long bad = 0, failures = 0;
    for (int round = 0; round < 200; round++) {
        strata_arena *a = strata_arena_new(NULL);
        if (a == NULL) {
            bad += errno != ENOMEM;
            failures++;
            continue;
        }
        strata_mark m = strata_arena_mark(a);
        for (int i = 0; i < 50; i++) {
            errno = 0;
            char *p = strata_arena_alloc(a, (size_t)(i * 997) % 70000 + 1);
            if (p == NULL) {
                bad += errno != ENOMEM;
                failures++;
            } else {
                p[0] = 1;
            }
        }
        strata_arena_release(a, m);
        strata_arena_destroy(a);
        errno = 0;
        char *root = strata_ctx_alloc(NULL, 64);
        if (root == NULL) {
            bad += errno != ENOMEM;
            failures++;
            continue;
        }
        void *pool = strata_ctx_pool(root, 200000);
        for (int i = 0; i < 40; i++) {
            errno = 0;
            char *c = strata_ctx_alloc(i % 2 && pool ? pool : root, (size_t)(i * 7919) % 300000 + 1);
            if (c == NULL) {
                bad += errno != ENOMEM;
                failures++;
            } else {
                c[0] = 2;
            }
        }
        bad += strata_ctx_free(root) != 0;
    }
    faults_off();
    printf("arenas and contexts: %ld calls failed\n", failures);
    CHECK_CMP(failures, >, 0);
    CHECK_CMP(bad, ==, 0);
}

/* Threads hand blocks to each other through shared slots while the OS
 * fails under them; threads come and go. */
#define SLOTS 512
static _Atomic(struct held *) slots[SLOTS];
static _Atomic long thread_bad, thread_failures;

static void check_and_free(struct held *h)
{
    if (!intact(h->p, h->n, h->tag))
        atomic_fetch_add(&thread_bad, 1);
    strata_free(h->p);
    strata_free(h);
}

static void *churn(void *arg)
{
    unsigned long long rng = (unsigned long long)(uintptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        errno = 0;
        struct held *h = strata_malloc(sizeof *h);
        size_t n = check_random(&rng) % 16 == 0 ? random_size(&rng) : check_random(&rng) % 4000;
        unsigned char *p = h ? strata_malloc(n) : NULL;
        if (p == NULL) {
            if (errno != ENOMEM)
                atomic_fetch_add(&thread_bad, 1);
            atomic_fetch_add(&thread_failures, 1);
            strata_free(h);
            continue;
        }
        *h = (struct held){p, n, (unsigned)check_random(&rng)};
        fill(p, n, h->tag);
        struct held *theirs = atomic_exchange(&slots[check_random(&rng) % SLOTS], h);
        if (theirs != NULL)
            check_and_free(theirs);
    }
    return NULL;
}

static void test_threads(void)
{
    faults_on(5, 3, 4, 4, 4242);
    for (int round = 0; round < 3; round++) {
        pthread_t threads[4];
        for (int t = 0; t < 4; t++)
            pthread_create(&threads[t], NULL, churn, (void *)(uintptr_t)(round * 10 + t + 1));
        for (int t = 0; t < 4; t++)
            pthread_join(threads[t], NULL);
    }
    faults_off();
    for (int i = 0; i < SLOTS; i++) {
        struct held *h = atomic_exchange(&slots[i], NULL);
        if (h != NULL)
            check_and_free(h);
    }
    printf("threads: %ld allocations failed\n", (long)atomic_load(&thread_failures));
    CHECK_CMP(atomic_load(&thread_failures), >, 0);
    CHECK_CMP(atomic_load(&thread_bad), ==, 0);
    CHECK_SOUND(heap_check(thread_heap));
}

/* The nth mapping fails: the first heap, the first segment, the first
 * large block of a thread each fail cleanly, and the next call succeeds. */
static void *first_calls(void *arg)
{
    (void)arg;
    long bad = 0;
    for (unsigned long nth = 1; nth <= 4; nth++) {
        os_fault_inject(OS_FAULT_MAP, nth, 0, 0);
        void *p[4];
        for (int i = 0; i < 4; i++) {
            errno = 0;
            p[i] = strata_malloc(i % 2 ? (size_t)300000 : (size_t)100 * (size_t)(nth + 1));
            bad += p[i] == NULL && errno != ENOMEM;
        }
        for (int i = 0; i < 4; i++)
            strata_free(p[i]);
    }
    os_fault_inject(OS_FAULT_MAP, 0, 0, 0);
    void *q = strata_malloc(100);
    bad += q == NULL;
    strata_free(q);
    return (void *)(intptr_t)bad;
}

/* The stack of live marks cannot grow: the mark says so, its release does
 * nothing, and the arena works on. */
static void test_arena_marks(void)
{
    strata_arena *a = strata_arena_new(0);
    CHECK(a != NULL);
    enum { MARKS = 600000 }; /* a stack past MEDIUM_MAX must be mapped */
    static strata_mark marks[MARKS];
    faults_on(1, 1, 0, 0, 99); /* every mapping fails */
    int failed = -1;
    for (int i = 0; i < MARKS && failed < 0; i++) {
        errno = 0;
        marks[i] = strata_arena_mark(a);
        if (marks[i].arena == NULL)
            failed = i;
    }
    int failed_errno = errno;
    faults_off();
    CHECK_CMP(failed, >, 0);
    CHECK_CMP(failed_errno, ==, ENOMEM);
    if (failed > 0) {
        strata_arena_release(a, marks[failed]); /* does nothing */
        char *p = strata_arena_alloc(a, 100);
        CHECK(p != NULL);
        strata_arena_release(a, marks[0]);
        CHECK_SOUND(arena_check(a));
    }
    strata_arena_destroy(a);
}

static void test_nth_failures(void)
{
    unsigned long before = os_fault_count(OS_FAULT_MAP);
    pthread_t t;
    void *bad;
    pthread_create(&t, NULL, first_calls, NULL);
    pthread_join(t, &bad);
    CHECK_CMP((intptr_t)bad, ==, 0);
    CHECK_CMP(os_fault_count(OS_FAULT_MAP), >, before);
}

static const struct check_test tests[] = {
    {"nth_failures", test_nth_failures},
    {"api_under_faults", test_api_under_faults},
    {"realloc_growth", test_realloc_growth},
    {"arena_and_contexts", test_arena_and_contexts},
    {"arena_marks", test_arena_marks},
    {"threads", test_threads},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
