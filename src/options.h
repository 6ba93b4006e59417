/* options.h: the run-time options (STRATA_*), the configuration every layer
 * reads and the once-only start-up steps (options.c); the growth policy the
 * large blocks and the arenas share. */
#ifndef STRATA_OPTIONS_H
#define STRATA_OPTIONS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

enum huge_pages_mode {
    HUGE_PAGES_NEVER = 0,
    HUGE_PAGES_ALWAYS = 1, /* every segment, its free slices open */
    HUGE_PAGES_DENSE = 2,  /* a dense heap's segments, a range at a time (segment.c) */
};

enum background_purge_mode {
    BACKGROUND_PURGE_NEVER = 0,
    BACKGROUND_PURGE_ALWAYS = 1, /* the purger thread starts with the first heap */
    BACKGROUND_PURGE_AUTO = 2,   /* once a heap holds PURGER_WANTED_SLICES free */
};

struct options {
    long purge_delay_ms;   /* STRATA_PURGE_DELAY_MS */
    long background_purge; /* STRATA_BACKGROUND_PURGE: an enum background_purge_mode */
    long limit_mb;         /* STRATA_LIMIT_MB, 0: none */
    bool check;            /* STRATA_CHECK: validate every free, abort on misuse */
    bool verbose;          /* STRATA_VERBOSE */
    bool show_stats;       /* STRATA_SHOW_STATS */
    bool thp;              /* derived: STRATA_THP=1, every segment huge */
    bool thp_dense;        /* derived: STRATA_THP=2, a dense heap's segments huge */
    const char *stats_file; /* STRATA_STATS_FILE, NULL: none */
    long sample_ms;        /* STRATA_SAMPLE_MS, 0: never (always 0 without a stats file) */
    long quarantine_blocks; /* STRATA_QUARANTINE_BLOCKS (secure flavour) */
    long quarantine_kb;     /* STRATA_QUARANTINE_KB (secure flavour) */
    const char *profile_path; /* STRATA_PROFILE, NULL: the heap profiler off */
    long profile_sample;      /* STRATA_PROFILE_SAMPLE: bytes between samples, on average */
    long profile_seed;        /* STRATA_PROFILE_SEED, 0: none (the samples differ run to run) */
    long profile_signal;      /* STRATA_PROFILE_SIGNAL, 0: none */
    uint64_t purge_delay_ns; /* derived: purge_delay_ms in nanoseconds */
    uint64_t sample_ns;      /* derived: sample_ms in nanoseconds */
    /* derived: the purger thread starts with the first heap, to purge
     * (STRATA_BACKGROUND_PURGE=1) or to sample (STRATA_SAMPLE_MS). */
    bool purger_at_start;
};
extern STRATA_INTERNAL struct options strata_options;

/* Whether freed memory waits for the purger thread to give it back (a
 * purger and a purge delay): exited threads' heaps are parked, and
 * abandoned segments' emptied pages age; else both go back at once. */
static inline bool purger_gives_back_later(void)
{
    return strata_options.purge_delay_ns != 0 && strata_options.background_purge != BACKGROUND_PURGE_NEVER;
}
/* STRATA_QUARANTINE_BLOCKS's largest value: the slots of each thread's
 * quarantine (heap.h). */
#define QUARANTINE_MAX_BLOCKS 2048

/* The bits of the small guard words' secret that are fixed, and their
 * values. A block's address has its top two bytes zero (user space) and
 * its low four bits fixed by its class (0, or 8 in the smallest class), so
 * these bits of the guard word are the same at every block of a class:
 * the top bit of each of its two top bytes set, so that a byte of text
 * written just below a block (an underflow by one or two) always changes
 * it, and its low nibble 0xb (0x3 in the smallest class), so that a
 * string's terminator or a character run one byte past the block below
 * (any whose low nibble differs: NUL, 'O', 'U') does too; with a random
 * secret there, one such write in 256 went unseen (test_security.sh's
 * underflow-1 once in a full run). 58 bits stay random. */
#define GUARD_SECRET_FIXED_MASK ((uintptr_t)0x808000000000000full)
#define GUARD_SECRET_FIXED_BITS ((uintptr_t)0x808000000000000bull)

/* The secrets free blocks are encoded with (layout.h, struct block), random
 * at start-up (config_init) and read-only afterwards. The secure flavour
 * keys the canaries after blocks and large blocks' size words with three
 * more (block_guards.h, keys_of: `address` is mixed with the block's). */
struct block_secrets {
    uintptr_t link, check;
    uintptr_t address, canary, size;
    uintptr_t guard;   /* the default flavour's small guard words (layout.h); GUARD_SECRET_FIXED_MASK's bits fixed */
    uintptr_t sampled; /* their marks of the heap profiler's samples (layout.h) */
};
extern STRATA_INTERNAL struct block_secrets block_secret;
/* How the library names itself where it says what it is: the version, then
 * this ("" in the default flavour). */
#define STRATA_FLAVOUR (STRATA_SECURE_BUILD ? " (secure flavour)" : "")
/* Reads the options and sets up what every layer reads but never changes:
 * the page size, the size-class tables, the memory limit, whether Valgrind
 * runs us. Idempotent and cheap once done; any layer calls it before it
 * reads strata_options. (Threads, fork and exit are init.c's.) */
void config_init(void);
size_t options_count(void);
/* The i-th option's name, value in force (*text for a text option, else
 * NULL) and documentation line. */
const char *options_describe(size_t i, long *value, const char **text, const char **doc);
/* " NAME=value" for every option in force (a text option only when set),
 * as the in-force line and the statistics table print them; cut short to
 * fit `size`, which OPTIONS_TEXT_MAX leaves room for (a path included). */
#define OPTIONS_TEXT_MAX 4608
void options_format(char *out, size_t size);

/* A start-up step run once, by the first thread to call; the others wait,
 * except a call from within the step itself (a libc call that allocates),
 * which goes on with what is set so far. `once_begin` is true when the
 * caller is to run the step, then call `once_end`. */
struct once {
    _Atomic int state; /* 0 not run, 1 running, 2 done */
};
bool once_begin_slow(struct once *once, bool *running_here);
void once_end(struct once *once, bool *running_here);
static inline bool once_begin(struct once *once, bool *running_here)
{
    if (likely(atomic_load_explicit(&once->state, memory_order_acquire) == 2))
        return false;
    return once_begin_slow(once, running_here);
}

/* ---- Growth policy, shared by the large blocks and the arenas ----------
 * A block that grows tends to grow again: a remap keeps this fraction of
 * headroom, so a string grown in small steps costs a system call per 12%
 * of growth rather than one per page. */
#define GROWTH_HEADROOM_DIVISOR 8
static inline size_t growth_headroom(size_t size)
{
    return size / GROWTH_HEADROOM_DIVISOR;
}

#endif /* STRATA_OPTIONS_H */
