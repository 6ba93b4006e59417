/* tests/programs/attacks.c: one misuse of the malloc family a run, for
 * tests/test_security.sh to run on glibc and on each strata flavour (and for
 * anyone to run on another allocator). `attacks KIND [SIZE]` carries the
 * misuse out on a block of SIZE bytes (the kinds marked "sized" below; 8,
 * 4096 and 262144 in the suite) and says how it went, if it is still
 * running at the end:
 *   "got through: ..." (exit 3): the misuse went unnoticed and did what it
 *                                set out to do;
 *   "neutralised: ..." (exit 0): it ran, but the program's data was not
 *                                there to read or to change.
 * An allocator that stops the misuse ends the process (abort, or a fault)
 * before either line. `attacks --list` prints the kinds, "sized" beside
 * those that take a size. The compiler must not see through the misuse:
 * pointers pass through a volatile, so that it cannot prove them freed. */
#include <malloc.h>
#include <pthread.h>
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

static char *filled(size_t size, char with)
{
    char *p = malloc(size);
    if (p == NULL) {
        fprintf(stderr, "attacks: malloc(%zu) failed\n", size);
        exit(2);
    }
    memset(p, with, size);
    return launder(p);
}

/* What a program goes on doing after the misuse: the allocations and frees
 * of the size that an allocator checking lazily would check. */
static void carry_on(size_t size)
{
    void *blocks[64];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 64; i++)
            blocks[i] = malloc(size);
        for (int i = 0; i < 64; i++)
            free(blocks[i]);
    }
}

#define FAR ((size_t)1 << 20)
static char not_from_malloc[4096] __attribute__((aligned(64)));

/* ---- frees of what is not a live block ---------------------------------- */

static int double_free(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    free(launder(p));
    return got_through("the second free went unnoticed");
}

static int double_free_delayed(size_t size)
{
    char *p = filled(size, 'a'), *q = filled(size, 'b');
    free(p);
    free(q);
    free(launder(p));
    return got_through("free(p); free(q); free(p) went unnoticed");
}

/* Freed twice with other sizes allocated between: an allocator that checks
 * only when it hands the size out again never looks. */
static int double_free_later(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    carry_on(size == 48 ? 96 : 48);
    free(launder(p));
    return got_through("the second free, after other sizes' allocations, went unnoticed");
}

static void *free_it(void *p)
{
    free(p);
    return NULL;
}

static int double_free_thread(size_t size)
{
    char *p = filled(size, 'a');
    pthread_t thread;
    pthread_create(&thread, NULL, free_it, p);
    pthread_join(thread, NULL);
    free(launder(p));
    return got_through("a block freed by another thread and then by its owner went unnoticed");
}

/* Another thread, one that allocates the size too, frees two of the
 * owner's blocks and the first again: the freeing thread's cache, not the
 * owner's, holds them. The thread says so itself, before its exit empties
 * its cache. */
static void *free_delayed_it(void *blocks)
{
    char **pq = blocks;
    carry_on(strlen(pq[1]));
    free(pq[0]);
    free(pq[1]);
    free(launder(pq[0]));
    exit(got_through("another thread's free(p); free(q); free(p) went unnoticed"));
}

static int double_free_foreign(size_t size)
{
    char *pq[2] = {filled(size, 'a'), filled(size, 'b')};
    pq[1][size - 1] = '\0'; /* its length tells the thread the size */
    pthread_t thread;
    pthread_create(&thread, NULL, free_delayed_it, pq);
    pthread_join(thread, NULL);
    return 2; /* not reached */
}

static int free_unaligned(size_t size)
{
    char *p = filled(size, 'a');
    free(launder(p + 1));
    return got_through("free(p + 1) went unnoticed");
}

static size_t interior_offset(size_t size)
{
    return size >= 32 ? size / 2 : 8;
}

static int free_interior(size_t size)
{
    char *p = filled(size, 'a');
    free(launder(p + interior_offset(size)));
    return got_through("a free inside a block went unnoticed");
}

/* A pointer into the allocator's memory, aligned as its blocks are, that no
 * allocation returned. */
static int free_never_allocated(size_t size)
{
    char *p = filled(size, 'a');
    free(launder(p + 16 * size));
    return got_through("a free of a pointer no allocation returned went unnoticed");
}

static int free_static(size_t size)
{
    (void)size;
    free(launder(not_from_malloc + 64));
    return got_through("a free of static memory went unnoticed");
}

static int free_stack(size_t size)
{
    (void)size;
    char local[256] __attribute__((aligned(16)));
    memset(local, 0, sizeof local);
    free(launder(local + 16));
    return got_through("a free of stack memory went unnoticed");
}

static int free_wild(size_t size)
{
    (void)size;
    free(launder((void *)(uintptr_t)0x5a5a5a5a5a50));
    return got_through("a free of a wild pointer went unnoticed");
}

static int realloc_after_free(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    void *q = realloc(launder(p), size * 2);
    (void)launder(q);
    return got_through("a realloc of a freed block went unnoticed");
}

static int realloc_interior(size_t size)
{
    char *p = filled(size, 'a');
    void *q = realloc(launder(p + interior_offset(size)), size * 2);
    (void)launder(q);
    return got_through("a realloc of a pointer inside a block went unnoticed");
}

static int realloc_static(size_t size)
{
    (void)size;
    void *q = realloc(launder(not_from_malloc + 64), 64);
    (void)launder(q);
    return got_through("a realloc of static memory went unnoticed");
}

static int usable_size_after_free(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    volatile size_t usable = malloc_usable_size(launder(p));
    (void)usable;
    return got_through("malloc_usable_size of a freed block went unnoticed");
}

static int usable_size_static(size_t size)
{
    (void)size;
    volatile size_t usable = malloc_usable_size(launder(not_from_malloc + 64));
    (void)usable;
    return got_through("malloc_usable_size of static memory went unnoticed");
}

/* ---- use after free ----------------------------------------------------- */

/* The program's data at byte i of a block: no two neighbours alike, so
 * that four bytes in a row match it by chance once in 2^32. */
static char data_byte(size_t i)
{
    return (char)(0x41 + (i * 29) % 53);
}

/* Freed memory read back: do four bytes in a row of what the program wrote
 * remain (a free list's random words match a byte now and then)? */
static int read_after_free(size_t size)
{
    char *p = filled(size, 0);
    for (size_t i = 0; i < size; i++)
        p[i] = data_byte(i);
    free(p);
    volatile char *stale = launder(p);
    size_t run = 0;
    for (size_t i = 0; i < size; i++) {
        run = stale[i] == data_byte(i) ? run + 1 : 0;
        if (run == 4)
            return got_through("the freed block still held the program's data");
    }
    return neutralised("the freed block no longer held the program's data");
}

/* A write through a stale pointer, then the allocations a program goes on
 * making. */
static int write_after_free(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    memset(launder(p), 'W', size);
    carry_on(size);
    return got_through("the write after free went unnoticed");
}

/* A write through a stale pointer: does a new block come with it? */
static int write_after_free_reuse(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    memset(launder(p), 'X', size);
    for (int i = 0; i < 4096; i++) {
        char *q = malloc(size);
        if (q == NULL)
            return 2;
        if (q == p && q[size - 1] == 'X')
            return got_through("a new block came with the stale write in it");
        free(q);
    }
    return neutralised("no new block had the stale write in it");
}

/* The block is freed, handed out again and written by its new owner, and
 * then the stale pointer writes: does the new owner's data change? */
static int stale_write_after_reuse(size_t size)
{
    char *p = filled(size, 'a');
    free(p);
    char *q = filled(size, 'n');
    memset(launder(p), 'S', size);
    for (size_t i = 0; i < size; i++)
        if (q[i] != 'n')
            return got_through("the stale pointer changed the new owner's data");
    return neutralised("the new owner's data was untouched");
}

/* A freed block's first word overwritten with an address of the attacker's
 * choosing: will malloc hand that address out? */
static int free_list_forgery(size_t size)
{
    char *p = filled(size, 'a'), *q = filled(size, 'b');
    free(q);
    free(p);
    *(void **)launder(p) = not_from_malloc; /* the link to the next free block */
    for (int i = 0; i < 64; i++) {
        void *r = malloc(size);
        if (r == (void *)not_from_malloc)
            return got_through("malloc handed out the forged address");
    }
    return neutralised("the forged address was never handed out");
}

/* ---- writes outside the block ------------------------------------------- */

static int overflowed(char *p, size_t size)
{
    free(p);
    carry_on(size);
    return got_through("the write outside the block went unnoticed");
}

static int overflow_1(size_t size)
{
    char *p = filled(size, 'a');
    p[size] = 'O';
    return overflowed(p, size);
}

static int overflow_8(size_t size)
{
    char *p = filled(size, 'a');
    memset(p + size, 'O', 8);
    return overflowed(p, size);
}

static int overflow_memcpy(size_t size)
{
    char *p = filled(size, 'a');
    char *source = filled(size + 32, 'O');
    memcpy(launder(p), source, size + 32);
    free(source);
    return overflowed(p, size);
}

/* A string of `size` characters copied into `size` bytes: the terminator
 * lands one past the end. */
static int overflow_string(size_t size)
{
    char *p = filled(size, 'a');
    char *source = filled(size + 1, 'O');
    source[size] = '\0';
    strcpy(launder(p), source);
    free(source);
    return overflowed(p, size);
}

static int underflow_1(size_t size)
{
    char *p = filled(size, 'a');
    *((char *)launder(p) - 1) = 'U';
    return overflowed(p, size);
}

static int underflow_32(size_t size)
{
    char *p = filled(size, 'a');
    memset((char *)launder(p) - 32, 'U', 32);
    return overflowed(p, size);
}

static int underflow_memcpy(size_t size)
{
    char *p = filled(size, 'a');
    char source[16];
    memset(source, 'U', sizeof source);
    memcpy((char *)launder(p) - 16, source, sizeof source);
    return overflowed(p, size);
}

static int overflow_far(size_t size)
{
    char *p = filled(size, 'a');
    *((volatile char *)launder(p) + size - 1 + FAR) = 'F';
    return overflowed(p, size);
}

static int underflow_far(size_t size)
{
    char *p = filled(size, 'a');
    *((volatile char *)launder(p) - FAR) = 'F';
    return overflowed(p, size);
}

/* ---- zero-size blocks --------------------------------------------------- */

static int zero_size_read(size_t size)
{
    (void)size;
    volatile char *p = launder(malloc(0));
    volatile char byte = p[0];
    (void)byte;
    return got_through("a read through malloc(0)'s pointer went unnoticed");
}

static int zero_size_write(size_t size)
{
    (void)size;
    volatile char *p = launder(malloc(0));
    for (int i = 0; i < 8; i++)
        p[i] = 'Z';
    free((void *)p);
    carry_on(0); /* the allocations of its size */
    return got_through("a write through malloc(0)'s pointer went unnoticed");
}

static int zero_size_read_after_free(size_t size)
{
    (void)size;
    volatile char *p = launder(malloc(0));
    free((void *)p);
    volatile char byte = p[0];
    (void)byte;
    return got_through("a read through a freed malloc(0) pointer went unnoticed");
}

static int zero_size_write_after_free(size_t size)
{
    (void)size;
    volatile char *p = launder(malloc(0));
    free((void *)p);
    for (int i = 0; i < 8; i++)
        p[i] = 'Z';
    carry_on(0); /* the allocations of its size */
    return got_through("a write through a freed malloc(0) pointer went unnoticed");
}

/* ---- what a freed and a new block hold ---------------------------------- */

static int freed_reads_zero(size_t size)
{
    char *p = filled(size, 'z');
    free(p);
    volatile char *stale = launder(p);
    for (size_t i = 0; i < size; i++)
        if (stale[i] != 0)
            return got_through("a freed block did not read as zero");
    return neutralised("the freed block read as zero");
}

/* Blocks freed full of data, then new ones of the size: does any come with
 * data in it? */
static int new_block_zero(size_t size)
{
    char *blocks[64];
    for (int i = 0; i < 64; i++)
        blocks[i] = filled(size, 'n');
    for (int i = 0; i < 64; i++)
        free(blocks[i]);
    for (int i = 0; i < 64; i++) {
        blocks[i] = launder(malloc(size));
        for (size_t j = 0; j < size; j++)
            if (blocks[i][j] != 0)
                return got_through("a new block held an old block's data");
    }
    return neutralised("every new block read as zero");
}

static const struct kind {
    const char *name;
    int sized;
    int (*run)(size_t);
} kinds[] = {
    {"double-free", 1, double_free},
    {"double-free-delayed", 1, double_free_delayed},
    {"double-free-later", 1, double_free_later},
    {"double-free-thread", 1, double_free_thread},
    {"double-free-foreign", 1, double_free_foreign},
    {"free-unaligned", 1, free_unaligned},
    {"free-interior", 1, free_interior},
    {"free-never-allocated", 1, free_never_allocated},
    {"free-static", 0, free_static},
    {"free-stack", 0, free_stack},
    {"free-wild", 0, free_wild},
    {"realloc-after-free", 1, realloc_after_free},
    {"realloc-interior", 1, realloc_interior},
    {"realloc-static", 0, realloc_static},
    {"usable-size-after-free", 1, usable_size_after_free},
    {"usable-size-static", 0, usable_size_static},
    {"read-after-free", 1, read_after_free},
    {"write-after-free", 1, write_after_free},
    {"write-after-free-reuse", 1, write_after_free_reuse},
    {"stale-write-after-reuse", 1, stale_write_after_reuse},
    {"free-list-forgery", 1, free_list_forgery},
    {"overflow-1", 1, overflow_1},
    {"overflow-8", 1, overflow_8},
    {"overflow-memcpy", 1, overflow_memcpy},
    {"overflow-string", 1, overflow_string},
    {"underflow-1", 1, underflow_1},
    {"underflow-32", 1, underflow_32},
    {"underflow-memcpy", 1, underflow_memcpy},
    {"overflow-far", 1, overflow_far},
    {"underflow-far", 1, underflow_far},
    {"zero-size-read", 0, zero_size_read},
    {"zero-size-write", 0, zero_size_write},
    {"zero-size-read-after-free", 0, zero_size_read_after_free},
    {"zero-size-write-after-free", 0, zero_size_write_after_free},
    {"freed-reads-zero", 1, freed_reads_zero},
    {"new-block-zero", 1, new_block_zero},
};

static const char usage[] = "usage: attacks KIND [SIZE] | attacks --list | attacks -h\n"
                            "  KIND   a kind of misuse (--list names them, \"sized\" beside those that take SIZE)\n"
                            "  SIZE   the block's size in bytes (default 64)\n";

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
            printf("%s%s\n", kinds[k].name, kinds[k].sized ? " sized" : "");
        return 0;
    }
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage, stdout);
        return 0;
    }
    if (argc >= 2 && argv[1][0] == '-') {
        fprintf(stderr, "attacks: unknown flag %s\n%s", argv[1], usage);
        return 2;
    }
    if (argc < 2 || argc > 3) {
        fputs(usage, stderr);
        return 2;
    }
    size_t size = argc == 3 ? strtoul(argv[2], NULL, 10) : 64;
    if (size == 0) {
        fprintf(stderr, "attacks: a size of at least 1 byte\n");
        return 2;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        if (strcmp(argv[1], kinds[k].name) == 0) {
            carry_on(size); /* as a program that has run a while: the size's fast paths warm */
            return kinds[k].run(size);
        }
    fprintf(stderr, "attacks: no kind %s (attacks --list)\n", argv[1]);
    return 2;
}
