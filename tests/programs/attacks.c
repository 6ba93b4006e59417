/* tests/programs/attacks.c: one memory-safety attack a run, through the
 * plain malloc family, for tests/test_security.sh to run on glibc and on
 * each strata flavour. `attacks NAME` carries out the attack and says how
 * it went, if it is still running at the end:
 *   "got through: ..." (exit 3): the attack did what it set out to do;
 *   "neutralised: ..." (exit 0): it ran, but had no effect on the program.
 * An allocator that stops the attack ends the process (abort, or a fault)
 * before either line. The compiler must not see through the misuse:
 * pointers pass through a volatile and calls go to an opaque function. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile launder_slot;

/* The pointer, with everything the compiler knew about it forgotten. */
static void *launder(void *p)
{
    launder_slot = p;
    return launder_slot;
}

static int got_through(const char *what)
{
    printf("got through: %s\n", what);
    fflush(stdout);
    return 3;
}

static int neutralised(const char *what)
{
    printf("neutralised: %s\n", what);
    fflush(stdout);
    return 0;
}

#define SMALL 64
#define LARGE ((size_t)1 << 20)
static const char secret[] = "the password is swordfish";

/* Freed memory read back: does it still hold what the program wrote? */
static int use_after_free_read(size_t size)
{
    char *p = malloc(size);
    memset(p, 0, size);
    memcpy(p + 24, secret, sizeof secret); /* past the words a free list writes */
    free(launder(p));
    char copy[sizeof secret];
    memcpy(copy, (char *)launder(p) + 24, sizeof copy);
    if (memcmp(copy, secret, sizeof secret) == 0)
        return got_through("the freed block still held the secret");
    return neutralised("the freed block no longer held the secret");
}

/* A write through a stale pointer, then the allocations a program goes on
 * making: does a new block of that size come with the stale write in it? */
static int use_after_free_write(size_t size)
{
    char *p = malloc(size);
    memset(p, 0, size);
    free(launder(p));
    memset((char *)launder(p) + 16, 'X', 32); /* past the words a free list writes */
    for (int i = 0; i < 4096; i++) {
        char *q = malloc(size);
        if (q == NULL)
            return 2;
        if (q == p && q[16] == 'X')
            return got_through("a new block came with the stale write in it");
        free(q);
    }
    return neutralised("no new block had the stale write in it");
}

/* A write past the end of a block, then its free. */
static int overflow(size_t size, size_t by)
{
    char *p = malloc(size);
    memset(p, 'a', size);
    memset((char *)launder(p) + size, 'O', by);
    free(launder(p));
    /* What glibc checks only later: the block after it, and more frees. */
    for (int i = 0; i < 64; i++)
        free(malloc(size));
    return got_through("the overflow went unnoticed");
}

/* A freed block's first word overwritten with an address of the attacker's
 * choosing: will malloc hand that address out? */
static int free_list_forgery(void)
{
    static char target[256] __attribute__((aligned(64)));
    void *p = malloc(SMALL);
    void *q = malloc(SMALL);
    free(launder(q));
    free(launder(p));
    *(void **)launder(p) = target; /* the link to the next free block */
    for (int i = 0; i < 64; i++) {
        void *r = malloc(SMALL);
        if (r == target)
            return got_through("malloc handed out the forged address");
    }
    return neutralised("the forged address was never handed out");
}

static int double_free(void)
{
    void *p = malloc(SMALL);
    free(launder(p));
    free(launder(p));
    void *a = malloc(SMALL), *b = malloc(SMALL);
    if (a == b)
        return got_through("two mallocs returned the same block");
    return got_through("the second free went unnoticed");
}

static int invalid_free(void)
{
    static char not_from_malloc[SMALL] __attribute__((aligned(16)));
    free(launder(not_from_malloc));
    return got_through("a free of memory malloc never gave went unnoticed");
}

static int interior_free(void)
{
    char *p = malloc(SMALL);
    free(launder(p + 16));
    return got_through("a free inside a block went unnoticed");
}

/* The block is freed, malloc hands it out again, the new owner writes it,
 * and then the stale pointer writes: does the new owner's data change? */
static int stale_write_after_reuse(void)
{
    char *p = malloc(SMALL);
    free(launder(p));
    char *q = malloc(SMALL);
    strcpy(q, "the new owner's data");
    strcpy((char *)launder(p), "STALE");
    if (strcmp(q, "the new owner's data") != 0)
        return got_through("the stale pointer changed the new owner's data");
    return neutralised("the new owner's data was untouched");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: attacks NAME\n");
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "uaf-read-small") == 0)
        return use_after_free_read(SMALL);
    if (strcmp(name, "uaf-read-large") == 0)
        return use_after_free_read(LARGE);
    if (strcmp(name, "uaf-write-small") == 0)
        return use_after_free_write(SMALL);
    if (strcmp(name, "uaf-write-large") == 0)
        return use_after_free_write(LARGE);
    if (strcmp(name, "overflow-1-small") == 0)
        return overflow(SMALL - 8, 1);
    if (strcmp(name, "overflow-8-small") == 0)
        return overflow(SMALL - 8, 8);
    if (strcmp(name, "overflow-1-large") == 0)
        return overflow(LARGE, 1);
    if (strcmp(name, "overflow-8-large") == 0)
        return overflow(LARGE, 8);
    if (strcmp(name, "free-list-forgery") == 0)
        return free_list_forgery();
    if (strcmp(name, "double-free") == 0)
        return double_free();
    if (strcmp(name, "invalid-free") == 0)
        return invalid_free();
    if (strcmp(name, "interior-free") == 0)
        return interior_free();
    if (strcmp(name, "stale-write-after-reuse") == 0)
        return stale_write_after_reuse();
    fprintf(stderr, "attacks: no attack %s\n", name);
    return 2;
}
