/* test_fuzz.c: a differential fuzzer of the malloc family. Threads run
 * random sequences of malloc, calloc, realloc, reallocarray, aligned_alloc,
 * posix_memalign, usable_size and free on strata, with sizes from 0 to
 * 24 MB and near SIZE_MAX, valid and invalid alignments, and hand
 * their blocks to each other through shared slots. Every call's outcome is
 * checked against glibc's for the same arguments (success, or the same
 * errno), every block's alignment and usable size against the contract,
 * and every block's contents when it is reallocated, handed over or freed.
 * FUZZ_STEPS (per thread) and FUZZ_SEED choose the run: make test runs a
 * short one, make fuzz long ones. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "check.h"
#include "strata.h"

/* Under a sanitizer the reference malloc is the sanitizer's: it must answer
 * an impossible size with NULL, as glibc does, not stop the program. */
const char *__asan_default_options(void);
const char *__tsan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
const char *__tsan_default_options(void) { return "allocator_may_return_null=1 die_after_fork=0"; }

/* The reference calls, through pointers the compiler cannot see through:
 * it may assume a known malloc leaves errno alone. */
static void *(*volatile libc_malloc)(size_t) = malloc;
static void *(*volatile libc_calloc)(size_t, size_t) = calloc;
static void *(*volatile libc_aligned_alloc)(size_t, size_t) = aligned_alloc;
static int (*volatile libc_posix_memalign)(void **, size_t, size_t) = posix_memalign;

#define THREADS 4
#define SLOTS 256
#define OWN 64

struct tracked {
    unsigned char *p;
    size_t n;
    unsigned char seed;
};

static _Atomic(struct tracked *) slots[SLOTS];
static _Atomic long failures;
/* Under a sanitizer the reference is its allocator, whose aligned_alloc
 * refuses a size that is no multiple of the alignment (C11's letter) where
 * glibc and strata serve it: aligned_alloc is then compared with nothing
 * (its blocks are still checked against the contract). */
static int reference_is_glibc = 1;
static long steps = 4000;
static unsigned long long base_seed = 1;

#define FAIL(...)                                                                \
    do {                                                                         \
        atomic_fetch_add(&failures, 1);                                          \
        fprintf(stderr, __VA_ARGS__);                                            \
    } while (0)

/* Patterns every 4 KiB (at most 64 of them, spread) and at the end: cheap
 * on big blocks, yet a block that moved, overlapped another or was handed
 * out twice shows. */
static size_t stride_of(size_t n)
{
    return n / 61 > 4093 ? n / 61 : 4093;
}

static void paint(struct tracked *t)
{
    for (size_t i = 0; i < t->n; i += stride_of(t->n))
        t->p[i] = (unsigned char)(t->seed + i);
    if (t->n)
        t->p[t->n - 1] = (unsigned char)(t->seed ^ 0xa5);
}

static int painted(const struct tracked *t, size_t upto)
{
    size_t n = upto < t->n ? upto : t->n;
    for (size_t i = 0; i < n; i += stride_of(t->n))
        if (i != t->n - 1 && t->p[i] != (unsigned char)(t->seed + i))
            return 0;
    return upto < t->n || t->n == 0 || t->p[t->n - 1] == (unsigned char)(t->seed ^ 0xa5);
}

static size_t fuzz_size(unsigned long long *rng)
{
    unsigned long long r = check_random(rng);
    switch (r % 16) {
    case 0: return 0;
    case 1: return (size_t)(r >> 8) % 64;
    case 2: case 3: case 4: case 5: case 6: return (size_t)(r >> 8) % 4096;
    case 7: case 8: case 9: return (size_t)(r >> 8) % (160 * 1024);
    case 10: case 11: return (size_t)(r >> 8) % (4 << 20);
    case 12: return r % 64 == 12 ? (size_t)(r >> 8) % (24 << 20) : (size_t)(r >> 8) % (1 << 20);
    case 13: return SIZE_MAX - (size_t)(r >> 8) % 8192;
    case 14: return (size_t)PTRDIFF_MAX + (size_t)(r >> 8) % 3;
    default: return (size_t)(r >> 8) % 300;
    }
}

static size_t fuzz_alignment(unsigned long long *rng)
{
    unsigned long long r = check_random(rng);
    if (r % 8 == 0)
        return (size_t)(r >> 8) % 100; /* often not a power of two, maybe 0 */
    return (size_t)1 << ((r >> 8) % 24);
}

/* The contract: usable size, and 16-byte alignment for sizes that are
 * multiples of 16 (8 otherwise), or the asked alignment. */
static void check_block(const char *call, void *p, size_t n, size_t alignment)
{
    size_t want = alignment ? alignment : (n % 16 == 0 ? 16 : 8);
    if (((uintptr_t)p & (want - 1)) != 0)
        FAIL("%s(%zu): %p not %zu-aligned\n", call, n, p, want);
    if (strata_usable_size(p) < n)
        FAIL("%s(%zu): usable size %zu\n", call, n, strata_usable_size(p));
}

/* strata's outcome against glibc's for the same call: both succeed, or
 * both fail with the same errno (glibc's block, if any, is freed). */
static void compare(const char *call, size_t a, size_t b, void *ours, int our_errno, void *glibc,
                    int glibc_errno)
{
    if ((ours == NULL) != (glibc == NULL) || (ours == NULL && our_errno != glibc_errno))
        FAIL("%s(%zu, %zu): strata %p errno %d, glibc %p errno %d\n", call, a, b, ours, our_errno,
             glibc, glibc_errno);
    free(glibc);
}

static void retire(struct tracked *t)
{
    if (!painted(t, t->n))
        FAIL("block %p of %zu damaged\n", (void *)t->p, t->n);
    strata_free(t->p);
    strata_free(t);
}

static void *fuzz_thread(void *arg)
{
    unsigned long long rng = base_seed * 1000003u + (unsigned long long)(uintptr_t)arg;
    struct tracked *own[OWN] = {0};
    for (long step = 0; step < steps; step++) {
        struct tracked **t = &own[check_random(&rng) % OWN];
        unsigned op = (unsigned)(check_random(&rng) % 10);
        size_t n = fuzz_size(&rng), count = 1 + check_random(&rng) % 4;
        size_t alignment = 0;
        void *p = NULL, *g = NULL;
        int e = 0, ge = 0;
        if (*t != NULL && op < 3) { /* realloc or reallocarray of a live block */
            errno = 0;
            p = op == 0 ? strata_reallocarray((*t)->p, count, n) : strata_realloc((*t)->p, n);
            e = errno;
            size_t total = op == 0 ? (count > 0 && n > SIZE_MAX / count ? SIZE_MAX : count * n) : n;
            if (op == 0 && total == SIZE_MAX && p != NULL)
                FAIL("reallocarray(%zu, %zu) overflowed yet succeeded\n", count, n);
            if (p == NULL && total == 0) { /* realloc(p, 0) freed p */
                strata_free(*t);
                *t = NULL;
                continue;
            }
            if (p == NULL) {
                if (e != ENOMEM)
                    FAIL("realloc(%zu) failed with errno %d\n", total, e);
                if (!painted(*t, (*t)->n))
                    FAIL("failed realloc damaged its block\n");
                continue;
            }
            (*t)->p = p;
            if (!painted(*t, total))
                FAIL("realloc(%zu) lost contents\n", total);
            (*t)->n = total;
            check_block("realloc", p, total, 0);
            paint(*t);
            continue;
        }
        if (*t != NULL) {
            /* Hand it to another thread's slot, or free it. */
            if (op == 3) {
                struct tracked *theirs = atomic_exchange(&slots[check_random(&rng) % SLOTS], *t);
                *t = theirs;
                if (theirs != NULL && !painted(theirs, theirs->n))
                    FAIL("block handed over damaged\n");
                continue;
            }
            retire(*t);
            *t = NULL;
        }
        errno = 0;
        switch (op) {
        case 4:
            p = strata_calloc(count, n), e = errno;
            errno = 0, g = libc_calloc(count, n), ge = errno;
            compare("calloc", count, n, p, e, g, ge);
            n = p ? count * n : 0;
            for (size_t i = 0; p != NULL && i < n; i += 4093)
                if (((unsigned char *)p)[i] != 0)
                    FAIL("calloc(%zu) not zeroed at %zu\n", n, i);
            break;
        case 5:
            alignment = fuzz_alignment(&rng);
            p = strata_aligned_alloc(alignment, n), e = errno;
            /* glibc rounds an odd alignment up; strata's own call refuses it. */
            if (alignment != 0 && (alignment & (alignment - 1)) == 0) {
                if (reference_is_glibc) {
                    errno = 0, g = libc_aligned_alloc(alignment, n), ge = errno;
                    compare("aligned_alloc", alignment, n, p, e, g, ge);
                }
            } else if (p != NULL || e != EINVAL) {
                FAIL("aligned_alloc(%zu, %zu): %p errno %d, not EINVAL\n", alignment, n, p, e);
            }
            break;
        case 6: {
            alignment = fuzz_alignment(&rng);
            void *q = NULL, *gq = NULL;
            int r = strata_posix_memalign(&q, alignment, n);
            int gr = libc_posix_memalign(&gq, alignment, n);
            compare("posix_memalign", alignment, n, r == 0 ? q : NULL, r, gr == 0 ? gq : NULL, gr);
            p = r == 0 ? q : NULL;
            break;
        }
        default:
            p = strata_malloc(n), e = errno;
            errno = 0, g = libc_malloc(n), ge = errno;
            compare("malloc", n, 0, p, e, g, ge);
            break;
        }
        if (p == NULL)
            continue;
        if (alignment < 8)
            alignment = 0;
        check_block("alloc", p, n, alignment);
        *t = strata_malloc(sizeof **t);
        **t = (struct tracked){p, n, (unsigned char)check_random(&rng)};
        paint(*t);
    }
    for (int i = 0; i < OWN; i++)
        if (own[i] != NULL)
            retire(own[i]);
    return NULL;
}

/* Two rounds of THREADS threads fuzzing at once, then everything they
 * left in the slots retired: no failure, and nothing left allocated. */
static void test_differential(void)
{
    const char *s = getenv("FUZZ_STEPS");
    if (s != NULL)
        steps = atol(s);
    s = getenv("FUZZ_SEED");
    if (s != NULL)
        base_seed = strtoull(s, NULL, 10);
    s = getenv("SANITIZER");
    if (s != NULL && *s != '\0') {
        reference_is_glibc = 0;
        printf("reference allocator is %s's: aligned_alloc not compared with it\n", s);
    }
    printf("fuzz: %d threads, %ld steps each, seed %llu\n", THREADS, steps, base_seed);
    for (int round = 0; round < 2; round++) {
        pthread_t threads[THREADS];
        for (int i = 0; i < THREADS; i++)
            pthread_create(&threads[i], NULL, fuzz_thread, (void *)(uintptr_t)(round * THREADS + i + 1));
        for (int i = 0; i < THREADS; i++)
            pthread_join(threads[i], NULL);
    }
    for (int i = 0; i < SLOTS; i++) {
        struct tracked *t = atomic_exchange(&slots[i], NULL);
        if (t != NULL)
            retire(t);
    }
    CHECK_CMP(atomic_load(&failures), ==, 0);
    struct strata_stats stats;
    strata_stats_get(&stats);
    CHECK_CMP(stats.allocated, ==, 0); /* everything came back */
    CHECK_CMP(stats.large_blocks, ==, 0);
}

static const struct check_test tests[] = {
    {"differential", test_differential},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
