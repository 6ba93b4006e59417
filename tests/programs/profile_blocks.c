/* tests/programs/profile_blocks.c: the heap profiler's sampled blocks used
 * as any block is. tests/test_profile.sh runs it with STRATA_PROFILE and
 * STRATA_PROFILE_SAMPLE=1, so that every allocation is sampled:
 *   (no argument)  blocks of 1 byte to 1 MiB written and read back, freed
 *                  in another order; calloc zero on reused slots; every
 *                  alignment posix_memalign and aligned_alloc take, to
 *                  128 KiB; realloc within, across and out of the bins'
 *                  sizes keeping the contents; usable size at least the
 *                  size; blocks freed by other threads; then each slot
 *                  reused. Prints "ok" and exits 0, or says what failed
 *                  and exits 1.
 *   double-free | interior-free | header-write | interior-realloc
 *                  one misuse of a sampled block, which strata stops;
 *   write-after-free  one the secure flavour stops;
 *   all-freed      every block it allocates freed, nothing printed;
 *   realloc-in-place  a sampled block kept in place by realloc is held
 *                  no more, and its free takes nothing off again;
 *   thread-caches  threads allocate sampled blocks, free half of them
 *                  and hand the rest to the main thread, which frees
 *                  them after the threads exit: the profile holds a
 *                  record of each live block and each free takes one
 *                  off, though each thread keeps its own cache of free
 *                  records (and, in the secure flavour, of freed
 *                  slots). Prints "ok" or what failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strata.h"

#define BLOCKS 4000

static int failed;

static void expect(int ok, const char *what, size_t n)
{
    if (!ok && failed++ < 10)
        printf("FAIL %s (%zu)\n", what, n);
}

static unsigned char pattern(size_t block, size_t i)
{
    return (unsigned char)(block * 131 + i * 7 + 1);
}

static void fill(unsigned char *p, size_t size, size_t block)
{
    for (size_t i = 0; i < size; i += size > 4096 ? 61 : 1)
        p[i] = pattern(block, i);
}

static int intact(const unsigned char *p, size_t size, size_t block)
{
    for (size_t i = 0; i < size; i += size > 4096 ? 61 : 1)
        if (p[i] != pattern(block, i))
            return 0;
    return 1;
}

static size_t size_of(size_t i)
{
    static const size_t sizes[] = {1, 8, 16, 24, 100, 1000, 4000, 4096, 8192, 12288, 65536, 131072, 200000, 1 << 20};
    return sizes[i % (sizeof sizes / sizeof sizes[0])] + (i / 14) % 3;
}

static void *blocks[BLOCKS];

static void *free_half(void *arg)
{
    (void)arg;
    for (size_t i = 1; i < BLOCKS; i += 2) {
        expect(intact(blocks[i], size_of(i), i), "a block freed by another thread kept its contents", i);
        free(blocks[i]);
    }
    return NULL;
}

static void ordinary_use(void)
{
    for (int round = 0; round < 2; round++) { /* the second reuses the first's slots */
        for (size_t i = 0; i < BLOCKS; i++) {
            size_t size = size_of(i);
            blocks[i] = malloc(size);
            if (blocks[i] == NULL) {
                expect(0, "malloc", size);
                return;
            }
            expect(malloc_usable_size(blocks[i]) >= size, "usable size at least the size", size);
            /* strata's alignment: 16 for a multiple of 16, else 8. */
            expect(((uintptr_t)blocks[i] & (size % 16 == 0 ? 15 : 7)) == 0, "the fundamental alignment", size);
            fill(blocks[i], size, i);
        }
        pthread_t thread;
        pthread_create(&thread, NULL, free_half, NULL);
        pthread_join(thread, NULL);
        for (size_t i = 0; i < BLOCKS; i += 2) {
            expect(intact(blocks[i], size_of(i), i), "a block kept its contents", i);
            free(blocks[i]);
        }
    }
    /* calloc on slots the loop above left written. */
    for (size_t i = 0; i < 200; i++) {
        size_t size = size_of(i);
        unsigned char *p = calloc(1, size);
        size_t nonzero = 0;
        for (size_t j = 0; p != NULL && j < size; j++)
            nonzero += p[j] != 0;
        expect(p != NULL && nonzero == 0, "calloc's block reads as zero", size);
        if (p != NULL)
            memset(p, 0xab, size);
        free(p);
    }
    /* Every alignment. */
    for (size_t alignment = 16; alignment <= ((size_t)128 << 10); alignment *= 2) {
        for (size_t size = alignment / 2; size <= alignment * 2; size += alignment / 2 + 8) {
            void *p = NULL;
            int error = posix_memalign(&p, alignment, size);
            expect(error == 0 && ((uintptr_t)p & (alignment - 1)) == 0, "posix_memalign's alignment", alignment);
            if (p != NULL)
                memset(p, 0x5a, size);
            void *q = aligned_alloc(alignment, alignment);
            expect(q != NULL && ((uintptr_t)q & (alignment - 1)) == 0, "aligned_alloc's alignment", alignment);
            free(p);
            free(q);
        }
    }
    /* realloc: within the bins' sizes, out of them, back into them. */
    static const size_t steps[] = {10, 100, 3000, 5000, 20000, 140000, 300000, 90000, 2000, 50};
    unsigned char *p = malloc(steps[0]);
    fill(p, steps[0], 7);
    size_t have = steps[0];
    for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
        size_t kept = have < steps[i] ? have : steps[i];
        p = realloc(p, steps[i]);
        expect(p != NULL && intact(p, kept, 7), "realloc keeps the contents", steps[i]);
        if (p == NULL)
            return;
        fill(p, steps[i], 7);
        have = steps[i];
    }
    free(p);
}

#define CACHE_THREADS 8
#define CACHE_BLOCKS 40
static void *handed[CACHE_THREADS][CACHE_BLOCKS];

static void *allocate_and_hand(void *arg)
{
    size_t t = (size_t)(uintptr_t)arg;
    void *own[CACHE_BLOCKS];
    for (size_t i = 0; i < CACHE_BLOCKS; i++) {
        size_t size = 100 + (t * CACHE_BLOCKS + i) * 997 % 20000;
        own[i] = malloc(size);
        handed[t][i] = malloc(size);
        expect(own[i] != NULL && handed[t][i] != NULL, "thread-caches: malloc", size);
    }
    for (size_t i = 0; i < CACHE_BLOCKS; i++)
        free(own[i]);
    return NULL;
}

/* The blocks the heap profiler holds records of now, from its dump's
 * first line ("heap profile: BLOCKS: BYTES [...]"): with every allocation
 * sampled, each live block once. */
static size_t sampled_blocks_now(void)
{
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "strata_profile_dump");
    char path[] = "/tmp/strata-profile-blocks-XXXXXX";
    int fd = mkstemp(path);
    size_t blocks = 0;
    if (dump == NULL || fd < 0 || dump(path) != 0) {
        expect(0, "thread-caches: strata_profile_dump writes a profile", 0);
    } else {
        FILE *f = fopen(path, "r");
        if (f == NULL || fscanf(f, "heap profile: %zu:", &blocks) != 1)
            expect(0, "thread-caches: the profile's first line", 0);
        if (f != NULL)
            fclose(f);
    }
    if (fd >= 0) {
        close(fd);
        unlink(path);
        char folded[sizeof path + 8];
        snprintf(folded, sizeof folded, "%s.folded", path);
        unlink(folded);
    }
    return blocks;
}

static void thread_caches(void)
{
    size_t before = sampled_blocks_now();
    pthread_t threads[CACHE_THREADS];
    for (size_t t = 0; t < CACHE_THREADS; t++)
        pthread_create(&threads[t], NULL, allocate_and_hand, (void *)(uintptr_t)t);
    for (size_t t = 0; t < CACHE_THREADS; t++)
        pthread_join(threads[t], NULL);
    /* The threads' own allocations (pthread's among them) are sampled
     * too: at least the handed blocks live, and their frees by this
     * thread take exactly them off. */
    size_t living = sampled_blocks_now();
    expect(living >= before + CACHE_THREADS * CACHE_BLOCKS, "thread-caches: every live sampled block counted",
           living - before);
    for (size_t t = 0; t < CACHE_THREADS; t++)
        for (size_t i = 0; i < CACHE_BLOCKS; i++)
            free(handed[t][i]);
    size_t after = sampled_blocks_now();
    expect(living - after == CACHE_THREADS * CACHE_BLOCKS, "thread-caches: each freed block counted off once",
           living - after);
}

/* A sampled block kept in place by realloc: the realloc is its free and an
 * unsampled allocation, so the profile holds it no more, and its free
 * later takes nothing off again. */
static void realloc_in_place(void)
{
    size_t before = sampled_blocks_now();
    unsigned char *p = malloc(200);
    fill(p, 200, 3);
    size_t held = sampled_blocks_now();
    unsigned char *q = realloc(p, 180);
    expect(q == p && intact(q, 180, 3), "realloc-in-place: kept in place, its contents too", 180);
    size_t after_realloc = sampled_blocks_now();
    free(q);
    size_t after_free = sampled_blocks_now();
    expect(held == before + 1, "realloc-in-place: the block held", held - before);
    expect(after_realloc == before, "realloc-in-place: held no more after the realloc", after_realloc - before);
    expect(after_free == before, "realloc-in-place: its free takes nothing off again", before - after_free);
}

/* Blocks allocated and every one freed, nothing printed (stdout's buffer
 * would stay): the profile written at exit holds nothing. */
static void all_freed(void)
{
    void *blocks[2000];
    for (size_t i = 0; i < 2000; i++)
        blocks[i] = malloc(16 + i * 37 % 3000);
    for (size_t i = 0; i < 2000; i++)
        free(blocks[i]);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "all-freed") == 0) {
        all_freed();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "realloc-in-place") == 0) {
        realloc_in_place();
        if (failed)
            return 1;
        printf("ok\n");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "thread-caches") == 0) {
        thread_caches();
        if (failed)
            return 1;
        printf("ok\n");
        return 0;
    }
    if (argc < 2) {
        ordinary_use();
        if (failed)
            return 1;
        printf("ok\n");
        return 0;
    }
    char *volatile p = malloc(40);
    char *volatile q = malloc(40);
    memset(p, 1, 40);
    if (strcmp(argv[1], "double-free") == 0) {
        free(p);
        free(q);
        free(p);
    } else if (strcmp(argv[1], "interior-free") == 0) {
        free(p + 16);
    } else if (strcmp(argv[1], "header-write") == 0) {
        memset(p - 8, 0x41, 8);
        free(p);
    } else if (strcmp(argv[1], "interior-realloc") == 0) {
        p = realloc(p + 16, 300000);
    } else if (strcmp(argv[1], "write-after-free") == 0) { /* the secure flavour stops it */
        free(p);
        p[8] = 1;
        q = malloc(40); /* the slot p had, again */
    }
    printf("the misuse went through\n");
    return 0;
}
