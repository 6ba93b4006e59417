/* profile.c: the heap profiler's records and reports (profile.h). A
 * sample's record (its stack's entry and the estimate it stands for) lives
 * with its block; a stack's entry adds up its samples' estimates: held now,
 * held when the estimated bytes held last peaked, allocated since start.
 * Stacks live in memory mapped for them, never in strata's heaps, found
 * without a lock (made under the profile lock, never removed). A sample
 * and a sampled block's free each add an event to their thread's log, with
 * no lock and no atomic read-modify-write; the log is added up under the
 * profile lock once full, at its thread's exit and by a dump, which reads
 * every thread's. (With the profile lock taken at each sample and each
 * free, the threads table ran 1.10x the time profiled: a locked
 * instruction waits for the program's streaming stores to drain.) A
 * thread inside the profiler (its unwinding, its dump) samples nothing, so
 * the profiler never calls itself. */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <unwind.h>

#include "layout.h"
#include "options.h"
#include "os.h"
#include "profile.h"
#include "report.h"
#include "stack_walk.h"

STRATA_INTERNAL bool profile_on;

/* The deepest stack a sample keeps, in frames (the outermost are cut). */
#define PROFILE_DEPTH 64
/* Stack entries' hash buckets (a power of two). */
#define PROFILE_BUCKETS 4096
/* Memory for records is mapped this much at a time. */
#define PROFILE_CHUNK ((size_t)256 << 10)

struct profile_stack {
    struct profile_stack *next_in_bucket;
    struct profile_stack *next_made; /* every stack, newest first */
    uint64_t hash;
    uint32_t depth;
    double held_bytes, held_blocks;   /* estimates, now */
    double peak_bytes, peak_blocks;   /* at the last peak of all held bytes */
    double total_bytes, total_blocks; /* allocated since start */
    uintptr_t frames[];               /* innermost first */
};

/* A sample taken or released: its record, the size negated at a
 * release. The estimates are worked out as the log is added up, many at
 * a time (worked out at each sample, their exponential's series cost
 * about 120 cycles of a chain of dependent multiplications). */
struct profile_event {
    struct profile_stack *stack;
    int64_t size;
    size_t chance_bytes;
};

/* Events a thread's log holds before they are added up. */
#define LOG_EVENTS 64

/* A walk remembered: the stack entry a walk from this start found, and
 * the stack words it read (stack_walk.h). A later sample from the same
 * start (the same code at the same stack depth, as a loop's samples are;
 * its frame pointer too where the walk used it) whose words still hold
 * what was read would walk to the same frames:
 * it takes the entry with neither the walk nor the stack's hash and
 * probe (together about 350 instructions of a sample's 900 on the
 * threads table). pc 0: none. Its thread's alone. */
struct walk_remembered {
    uintptr_t pc, sp, bp;
    struct profile_stack *stack;
    struct stack_reads reads;
};

/* Walks a thread's log remembers: sets of two by their start (a power
 * of two sets), so that two sites a loop takes turns at, at the same
 * start (two callers of one allocating function at one depth), are both
 * kept; a new walk takes its set's first place and moves the one there
 * to the second. */
#define WALK_SETS 4
#define WALKS_REMEMBERED (2 * WALK_SETS)

/* A thread's events not yet added up. Its thread writes events[count] and
 * then publishes count + 1 (a release store, no lock); whoever adds them up
 * holds the profile lock, takes those from `done` to the published count
 * and moves `done`; its thread, holding the lock, empties it (count and
 * done 0). A log whose thread has exited is free for another. */
struct profile_log {
    struct profile_log *next; /* every log, newest first */
    bool owned;               /* a thread's (profile lock) */
    uint32_t done;            /* added up so far (profile lock) */
    _Atomic uint32_t count;   /* written so far (its thread alone writes it) */
    struct profile_event events[LOG_EVENTS];
    /* Its thread's (the words read lie in that thread's stack): emptied
     * when another thread claims the log. */
    struct walk_remembered walks[WALKS_REMEMBERED];
};

static struct os_lock profile_lock;
static struct profile_stack *_Atomic buckets[PROFILE_BUCKETS];
static struct profile_stack *stacks_made;
static struct profile_log *logs;
static char *chunk_next, *chunk_end;
static double held_bytes, held_blocks, peak_bytes;
static double sample_mean; /* STRATA_PROFILE_SAMPLE, in bytes */
static uintptr_t own_text_start, own_text_end; /* frames to leave out: strata's own */
static _Atomic bool exit_dumped;
static _Atomic bool dump_asked;
static unsigned dumps_asked; /* written on request so far (the purger's) */
static long profiled_pid; /* a forked child's exit writes path.PID */
static _Atomic uint64_t threads_seeded;

static STRATA_TLS bool inside_profiler;
static STRATA_TLS struct profile_log *thread_log;
/* The thread may keep a log: from its heap's binding (whose exit hook
 * gives the log back) to its exit; events are added up at once outside. */
static STRATA_TLS bool thread_logs;
static STRATA_TLS uint64_t random_state;
static STRATA_TLS double big_bytes_left; /* profile_big_due's countdown, 0: not drawn yet */

extern char __ehdr_start[] __attribute__((visibility("hidden")));
extern char __etext[] __attribute__((visibility("hidden")));
/* The bounds of strata's code in a program linked with libstrata.a (the
 * Makefile puts it in a section of its own); absent elsewhere. */
extern char __start_strata_text[] __attribute__((weak, visibility("hidden")));
extern char __stop_strata_text[] __attribute__((weak, visibility("hidden")));

/* ---- numbers ------------------------------------------------------------- */
/* ln(x) for x > 0, from its exponent and atanh's series on the mantissa
 * (relative error under 1e-9), so that strata needs no libm. */
static double profile_ln(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int exponent = (int)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & ~((uint64_t)0x7ff << 52)) | ((uint64_t)1023 << 52);
    double m;
    memcpy(&m, &bits, sizeof m); /* in [1, 2) */
    if (m > 1.4142135623730951) {
        m /= 2;
        exponent++;
    }
    double t = (m - 1) / (m + 1), t2 = t * t, term = t, sum = 0;
    for (int k = 1; k < 24; k += 2) {
        sum += term / k;
        term *= t2;
    }
    return exponent * 0.6931471805599453 + 2 * sum;
}

/* ln(x) for x > 0 by a table: x = 2^e m, m within 1/256 of a point c of
 * 128 in [1, 2), ln m = ln c + ln(1 + r), r = (m - c) / c, whose series
 * to r^5 is exact to 1e-15 for |r| < 1/256; ln c from profile_ln. The
 * next sample's gap takes one at every sample (profile_ln's 12 divisions
 * cost about 100 cycles of the sample's path). */
#define LN_POINTS 128
static double ln_point[LN_POINTS], ln_point_inverse[LN_POINTS];

static void ln_table_init(void)
{
    for (int i = 0; i < LN_POINTS; i++) {
        double c = 1 + (i + 0.5) / LN_POINTS;
        ln_point[i] = profile_ln(c);
        ln_point_inverse[i] = 1 / c;
    }
}

static double fast_ln(double x)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int exponent = (int)((bits >> 52) & 0x7ff) - 1023;
    unsigned i = (unsigned)(bits >> (52 - 7)) & (LN_POINTS - 1);
    bits = (bits & (((uint64_t)1 << 52) - 1)) | ((uint64_t)1023 << 52);
    double m;
    memcpy(&m, &bits, sizeof m); /* in [1, 2) */
    double r = (m - (1 + (i + 0.5) / LN_POINTS)) * ln_point_inverse[i];
    double series = r * (1 + r * (-0.5 + r * (1.0 / 3 + r * (-0.25 + r * 0.2))));
    return exponent * 0.6931471805599453 + ln_point[i] + series;
}

/* e^-x for x >= 0: 2^-k e^-r with r below ln 2, r's by its series. */
static double profile_exp_neg(double x)
{
    if (x > 700)
        return 0;
    int k = (int)(x / 0.6931471805599453);
    double r = x - k * 0.6931471805599453, term = 1, sum = 1;
    for (int i = 1; i < 18; i++) {
        term *= -r / i;
        sum += term;
    }
    while (k-- > 0)
        sum /= 2;
    return sum;
}

static uint64_t next_random(void)
{
    uint64_t x = random_state;
    if (unlikely(x == 0)) {
        /* STRATA_PROFILE_SEED: each thread's numbers from the seed and its
         * order of arrival, so that a run repeats. */
        uint64_t z = strata_options.profile_seed != 0
                         ? (uint64_t)strata_options.profile_seed + 0x9e3779b97f4a7c15u * (atomic_fetch_add(&threads_seeded, 1) + 1)
                         : os_random();
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
        x = (z ^ (z >> 31)) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    random_state = x;
    return x;
}

/* A gap of the exponential distribution of mean sample_mean, in bytes. */
static double exponential_gap(void)
{
    double u = ((double)(next_random() >> 11) + 1) * (1.0 / 9007199254740992.0); /* (0, 1] */
    return -fast_ln(u) * sample_mean;
}

int32_t profile_next_pops(size_t block_size)
{
    if (!profile_on)
        return INT32_MAX;
    /* Whole blocks past a gap in bytes: a geometric count, each block's
     * chance 1 - e^(-block_size / mean), as the bytes' gaps give it. */
    double pops = exponential_gap() / (double)block_size;
    return pops >= INT32_MAX - 1 ? INT32_MAX - 1 : (int32_t)pops;
}

bool profile_big_due(size_t size)
{
    if (unlikely(big_bytes_left == 0)) /* the thread's first: a gap of its own */
        big_bytes_left = exponential_gap() + 1;
    big_bytes_left -= (double)size;
    if (big_bytes_left > 0)
        return false;
    /* The gaps are memoryless: the next sample's distance from this
     * block's end is a fresh gap, however far past the last one it ran
     * (an impossible size among them). */
    big_bytes_left = exponential_gap();
    return true;
}

/* ---- start-up ------------------------------------------------------------ */
static void dump_at_exit_handler(void)
{
    profile_dump_at_exit();
}

void profile_init(void)
{
    if (strata_options.profile_path == NULL)
        return;
    sample_mean = (double)strata_options.profile_sample;
    ln_table_init();
    os_lock_init(&profile_lock);
    /* strata's own frames, the innermost of each stack, are left out: the
     * range of its code in a program linked with libstrata.a (its own
     * section), or of the library's, when it is one (the program's would
     * be the program's own: a program built from strata's objects keeps
     * them whole). */
    const ElfW(Ehdr) *own = (const ElfW(Ehdr) *)__ehdr_start;
    if (__start_strata_text != NULL && __stop_strata_text != NULL) {
        own_text_start = (uintptr_t)__start_strata_text;
        own_text_end = (uintptr_t)__stop_strata_text;
    } else if ((uintptr_t)own + own->e_phoff != (uintptr_t)getauxval(AT_PHDR)) {
        own_text_start = (uintptr_t)__ehdr_start;
        own_text_end = (uintptr_t)__etext;
    }
    profiled_pid = os_pid();
    profile_on = true;
    atexit(dump_at_exit_handler);
}

/* ---- records ------------------------------------------------------------- */
static void *record_memory(size_t bytes)
{
    bytes = (bytes + 15) & ~(size_t)15;
    if ((size_t)(chunk_end - chunk_next) < bytes) {
        char *chunk = os_map(PROFILE_CHUNK);
        if (chunk == NULL)
            return NULL;
        chunk_next = chunk;
        chunk_end = chunk + PROFILE_CHUNK;
    }
    void *p = chunk_next;
    chunk_next += bytes;
    return p;
}

struct unwinding {
    uintptr_t frames[PROFILE_DEPTH];
    uint32_t depth;
};

static _Unwind_Reason_Code unwind_step(struct _Unwind_Context *context, void *arg)
{
    struct unwinding *u = arg;
    uintptr_t ip = (uintptr_t)_Unwind_GetIP(context);
    if (ip == 0)
        return _URC_END_OF_STACK;
    if (ip >= own_text_start && ip < own_text_end && u->depth == 0)
        return _URC_NO_REASON; /* strata's own frames, innermost */
    u->frames[u->depth++] = ip;
    return u->depth == PROFILE_DEPTH ? _URC_END_OF_STACK : _URC_NO_REASON;
}

static uint64_t stack_hash(const uintptr_t *frames, uint32_t depth)
{
    uint64_t h = 0x243f6a8885a308d3u ^ depth;
    for (uint32_t i = 0; i < depth; i++)
        h = (h ^ frames[i]) * 0x9e3779b97f4a7c15u;
    return h ^ (h >> 29);
}

/* Compared a word at a time: the walk has just stored the frames a word at
 * a time, and a wider load of them (memcmp's) cannot take them from the
 * store buffer, so it waits for every store before them, the program's
 * too, to reach the cache (a tenth of a sample's cost in the threads
 * table). */
static bool same_stack(const struct profile_stack *s, uint64_t hash, const struct unwinding *u)
{
    if (s->hash != hash || s->depth != u->depth)
        return false;
    for (uint32_t i = 0; i < u->depth; i++)
        if (s->frames[i] != u->frames[i])
            return false;
    return true;
}

/* The stack's entry, made if new; NULL without memory. Entries are found
 * without a lock: each is complete before a release store links it at its
 * bucket's head, and none is ever unlinked. */
static struct profile_stack *stack_entry(const struct unwinding *u)
{
    uint64_t h = stack_hash(u->frames, u->depth);
    struct profile_stack *_Atomic *bucket = &buckets[h & (PROFILE_BUCKETS - 1)];
    struct profile_stack *head = atomic_load_explicit(bucket, memory_order_acquire);
    for (struct profile_stack *s = head; s != NULL; s = s->next_in_bucket)
        if (same_stack(s, h, u))
            return s;
    os_lock_take_spinning(&profile_lock);
    /* Made meanwhile by another thread? */
    struct profile_stack *s = atomic_load_explicit(bucket, memory_order_relaxed);
    for (; s != head && s != NULL; s = s->next_in_bucket)
        if (same_stack(s, h, u))
            break;
    if (s == head || s == NULL) {
        s = record_memory(sizeof *s + u->depth * sizeof u->frames[0]);
        if (s != NULL) {
            memset(s, 0, sizeof *s);
            s->hash = h;
            s->depth = u->depth;
            memcpy(s->frames, u->frames, u->depth * sizeof u->frames[0]);
            s->next_in_bucket = atomic_load_explicit(bucket, memory_order_relaxed);
            s->next_made = stacks_made;
            stacks_made = s;
            atomic_store_explicit(bucket, s, memory_order_release);
        }
    }
    os_lock_give(&profile_lock);
    return s;
}

/* The held bytes passed their peak by a 64th: every stack's held figures
 * become its peak's (profile lock held). */
static void peak_moved(void)
{
    if (held_bytes < peak_bytes + peak_bytes / 64)
        return;
    peak_bytes = held_bytes;
    for (struct profile_stack *s = stacks_made; s != NULL; s = s->next_made) {
        s->peak_bytes = s->held_bytes;
        s->peak_blocks = s->held_blocks;
    }
}

/* The blocks a sample stands for: 1 / its chance, 1 - e^(-chance_bytes /
 * mean), remembered by chance_bytes (a class's size, most often) in a
 * small table (profile lock held): the series is a chain of about 120
 * cycles, and a log adds up 64 events at a time. */
#define ESTIMATES_KEPT 64
static struct {
    size_t chance_bytes;
    double blocks;
} estimates_kept[ESTIMATES_KEPT];

static double blocks_estimated(size_t chance_bytes)
{
    size_t slot = (size_t)(((uint64_t)chance_bytes * 0x9e3779b97f4a7c15u) >> 58); /* ESTIMATES_KEPT = 2^6 */
    if (estimates_kept[slot].chance_bytes == chance_bytes && chance_bytes != 0)
        return estimates_kept[slot].blocks;
    double chance = 1 - profile_exp_neg((double)chance_bytes / sample_mean);
    double blocks = chance > 0 ? 1 / chance : 1;
    estimates_kept[slot].chance_bytes = chance_bytes;
    estimates_kept[slot].blocks = blocks;
    return blocks;
}

/* An event added up (profile lock held). */
static void event_add(const struct profile_event *e)
{
    struct profile_stack *stack = e->stack;
    double blocks = blocks_estimated(e->chance_bytes);
    double bytes = blocks * (double)(e->size < 0 ? -e->size : e->size);
    if (e->size < 0) {
        blocks = -blocks;
        bytes = -bytes;
    }
    stack->held_bytes += bytes;
    stack->held_blocks += blocks;
    held_bytes += bytes;
    held_blocks += blocks;
    if (blocks > 0) {
        stack->total_bytes += bytes;
        stack->total_blocks += blocks;
        peak_moved();
    }
}

/* The log's events written since the last adding up, added up (profile
 * lock held). */
static void log_add_up(struct profile_log *log)
{
    uint32_t count = atomic_load_explicit(&log->count, memory_order_acquire);
    for (uint32_t i = log->done; i < count; i++)
        event_add(&log->events[i]);
    log->done = count;
}

/* The log's events added up and the log emptied for its thread to write
 * from the start again (profile lock held). */
static void log_emptied(struct profile_log *log)
{
    log_add_up(log);
    log->done = 0;
    atomic_store_explicit(&log->count, 0, memory_order_relaxed);
}

/* The calling thread's log: a free one, or one made; NULL when the thread
 * may keep none or no memory is to be had (its events are then added up
 * at once). */
static struct profile_log *log_claim(void)
{
    if (!thread_logs)
        return NULL;
    os_lock_take_spinning(&profile_lock);
    struct profile_log *log = logs;
    while (log != NULL && log->owned)
        log = log->next;
    if (log == NULL) {
        log = record_memory(sizeof *log);
        if (log != NULL) {
            memset(log, 0, sizeof *log);
            log->next = logs;
            logs = log;
        }
    }
    if (log != NULL) {
        log->owned = true;
        for (size_t i = 0; i < WALKS_REMEMBERED; i++)
            log->walks[i].pc = 0;
    }
    os_lock_give(&profile_lock);
    thread_log = log;
    return log;
}

/* event_write's other cases: the thread has no log yet, or none to have
 * (the event is added up at once), or its log is full (added up, then
 * written from the start); the count to write at, or -1 when done. Out
 * of line, so that the write itself saves no registers. */
static STRATA_NOINLINE int64_t event_write_slow(struct profile_stack *stack, int64_t size, size_t chance_bytes)
{
    struct profile_log *log = thread_log;
    if (log == NULL && (log = log_claim()) == NULL) {
        struct profile_event e = {stack, size, chance_bytes};
        os_lock_take_spinning(&profile_lock);
        event_add(&e);
        os_lock_give(&profile_lock);
        return -1;
    }
    uint32_t count = atomic_load_explicit(&log->count, memory_order_relaxed);
    if (count == LOG_EVENTS) {
        os_lock_take_spinning(&profile_lock);
        log_emptied(log);
        os_lock_give(&profile_lock);
        count = 0;
    }
    return count;
}

/* The event goes straight into the log, field by field: built on the
 * stack and copied, it was read back by wider loads than its stores,
 * which wait for the store buffer to drain (as same_stack's comment says). */
static inline void event_write(struct profile_stack *stack, int64_t size, size_t chance_bytes)
{
    struct profile_log *log = thread_log;
    uint32_t count;
    if (unlikely(log == NULL || (count = atomic_load_explicit(&log->count, memory_order_relaxed)) == LOG_EVENTS)) {
        int64_t at = event_write_slow(stack, size, chance_bytes);
        if (at < 0)
            return;
        log = thread_log;
        count = (uint32_t)at;
    }
    struct profile_event *e = &log->events[count];
    e->stack = stack;
    e->size = size;
    e->chance_bytes = chance_bytes;
    atomic_store_explicit(&log->count, count + 1, memory_order_release);
}

/* Whether a walk from `start` would find what `walk` found: the same
 * start (its rbp only where the walk used it) and the stack words it
 * read unchanged. */
static inline bool walk_holds(const struct walk_remembered *walk, const struct stack_start *start)
{
    return walk->pc == start->pc && walk->sp == start->sp && (walk->bp == start->bp || !walk->reads.start_bp_used) &&
           stack_reads_unchanged(&walk->reads);
}

bool profile_sample_take(size_t size, size_t chance_bytes, const struct stack_start *start,
                         struct profile_sample *sample)
{
    if (!profile_on || inside_profiler)
        return false;
    inside_profiler = true;
    struct profile_log *log = thread_log;
    if (log == NULL && thread_logs)
        log = log_claim();
    struct walk_remembered *set = NULL;
    if (log != NULL) {
        size_t index = (size_t)(((start->pc ^ start->sp) * 0x9e3779b97f4a7c15u) >> 62); /* WALK_SETS = 2^2 */
        set = &log->walks[2 * index];
    }
    struct profile_stack *stack = NULL;
    for (int way = 0; set != NULL && way < 2 && stack == NULL; way++)
        if (walk_holds(&set[way], start))
            stack = set[way].stack;
    if (stack == NULL) {
        struct unwinding u;
        struct stack_reads reads;
        int walked = stack_walk_from(start, u.frames, PROFILE_DEPTH, own_text_start, own_text_end, &reads);
        u.depth = walked > 0 ? (uint32_t)walked : 0;
        if (walked < 0) /* a frame the walk does not follow: libgcc's unwinder follows every one */
            _Unwind_Backtrace(unwind_step, &u);
        stack = stack_entry(&u);
        if (set != NULL && walked >= 0 && reads.complete && stack != NULL) {
            set[1] = set[0];
            set[0] = (struct walk_remembered){start->pc, start->sp, start->bp, stack, reads};
        }
    }
    if (stack != NULL) {
        *sample = (struct profile_sample){stack, size, chance_bytes};
        event_write(stack, (int64_t)size, chance_bytes);
    }
    inside_profiler = false;
    return stack != NULL;
}

void profile_sample_release(const struct profile_sample *sample)
{
    bool was_inside = inside_profiler;
    inside_profiler = true;
    event_write(sample->stack, -(int64_t)sample->size, sample->chance_bytes);
    inside_profiler = was_inside;
}

/* ---- kept records --------------------------------------------------------
 * A sample's record kept apart from its block: a large block's (its
 * registry entry points to it) and a sampled bin block's, whose guard word
 * holds the record's address keyed with a secret (profile_sample_mark). So
 * that a free tells a mark from an overwrite without following a wild
 * pointer, every record lies in one region, reserved at the first and
 * opened a piece at a time: a word that decodes to no record's address
 * there, or to a record of another block, is no mark. Each thread keeps a
 * few free records of its own, taken and given back with no lock and no
 * atomic read-modify-write (the opening comment: a locked instruction at
 * every sample and every free cost the threads table 10%); the profile
 * lock guards the shared list and the region's growth. */
#define KEPT_REGION ((size_t)256 << 20)
#define KEPT_PIECE ((size_t)64 << 10)
#define KEPT_BATCH 32         /* records moved between a thread and the shared list at a time */
#define KEPT_THREAD_MAX 64    /* free records a thread keeps at most */

struct kept_sample {
    struct profile_sample sample; /* first: a record's address is its copy's */
    _Atomic(const void *) block;  /* the sampled bin block marked with it; NULL otherwise */
    struct kept_sample *next_free;
};
_Static_assert(KEPT_REGION % KEPT_PIECE == 0 && KEPT_PIECE >= sizeof(struct kept_sample),
               "the kept records' region opens in whole pieces of whole records");

static _Atomic uintptr_t kept_base;    /* the region; 0 until the first record */
static _Atomic size_t kept_carved;     /* its bytes made into records so far, from its base */
static size_t kept_opened;             /* its bytes opened so far (profile lock) */
static struct kept_sample *kept_free;  /* the shared free records (profile lock) */
static STRATA_TLS struct kept_sample *thread_kept;
static STRATA_TLS uint32_t thread_kept_count;

/* A new record from the region; NULL when it is full or not to be had
 * (profile lock held). */
static struct kept_sample *kept_carve(void)
{
    uintptr_t base = atomic_load_explicit(&kept_base, memory_order_relaxed);
    if (base == 0) {
        void *region = os_reserve_inaccessible(KEPT_REGION);
        if (region == NULL)
            return NULL;
        base = (uintptr_t)region;
        atomic_store_explicit(&kept_base, base, memory_order_release);
    }
    size_t carved = atomic_load_explicit(&kept_carved, memory_order_relaxed);
    if (KEPT_REGION - carved < sizeof(struct kept_sample))
        return NULL;
    if (kept_opened - carved < sizeof(struct kept_sample)) {
        /* Charged as the profiler's other memory is (os_map's), for good. */
        if (!os_charge(KEPT_PIECE))
            return NULL;
        if (!os_protect((void *)(base + kept_opened), KEPT_PIECE, true)) {
            os_uncharge(KEPT_PIECE);
            return NULL;
        }
        kept_opened += KEPT_PIECE;
    }
    atomic_store_explicit(&kept_carved, carved + sizeof(struct kept_sample), memory_order_release);
    return (struct kept_sample *)(base + carved);
}

/* A free record for the calling thread; NULL without memory for one. */
static struct kept_sample *kept_take(void)
{
    if (unlikely(thread_kept == NULL || !thread_logs)) {
        /* A thread without a heap, or past its exit hook, keeps none. */
        uint32_t want = thread_logs ? KEPT_BATCH : 1;
        os_lock_take_spinning(&profile_lock);
        for (uint32_t i = 0; i < want; i++) {
            struct kept_sample *more = kept_free;
            if (more != NULL)
                kept_free = more->next_free;
            else if ((more = kept_carve()) == NULL)
                break;
            more->next_free = thread_kept;
            thread_kept = more;
            thread_kept_count++;
        }
        os_lock_give(&profile_lock);
        if (thread_kept == NULL)
            return NULL;
    }
    struct kept_sample *kept = thread_kept;
    thread_kept = kept->next_free;
    thread_kept_count--;
    return kept;
}

/* The calling thread's free records past `keep` to the shared list. */
static void kept_share(uint32_t keep)
{
    os_lock_take_spinning(&profile_lock);
    while (thread_kept_count > keep) {
        struct kept_sample *kept = thread_kept;
        thread_kept = kept->next_free;
        thread_kept_count--;
        kept->next_free = kept_free;
        kept_free = kept;
    }
    os_lock_give(&profile_lock);
}

static void kept_give(struct kept_sample *kept)
{
    kept->next_free = thread_kept;
    thread_kept = kept;
    thread_kept_count++;
    if (unlikely(!thread_logs))
        kept_share(0);
    else if (unlikely(thread_kept_count > KEPT_THREAD_MAX))
        kept_share(KEPT_THREAD_MAX - KEPT_BATCH);
}

struct profile_sample *profile_sample_keep(const struct profile_sample *sample)
{
    struct kept_sample *kept = kept_take();
    if (kept == NULL)
        return NULL;
    kept->sample = *sample;
    atomic_store_explicit(&kept->block, NULL, memory_order_relaxed);
    return &kept->sample;
}

void profile_sample_drop(struct profile_sample *kept)
{
    profile_sample_release(kept);
    kept_give((struct kept_sample *)kept);
}

bool profile_sample_mark(void *block, const struct profile_sample *sample)
{
    struct kept_sample *kept = kept_take();
    if (kept == NULL)
        return false;
    kept->sample = *sample;
    atomic_store_explicit(&kept->block, block, memory_order_relaxed);
    small_guard_write(block, small_guard_mark(kept));
    return true;
}

/* The record whose place `address` is, within the first `bound` bytes of
 * the region, or NULL. */
static struct kept_sample *kept_at(uintptr_t address, size_t bound)
{
    uintptr_t base = atomic_load_explicit(&kept_base, memory_order_acquire);
    uintptr_t offset = address - base;
    if (base == 0 || offset >= bound || offset % sizeof(struct kept_sample) != 0)
        return NULL;
    return (struct kept_sample *)address;
}

/* The record whose mark the guard word below `block` holds, or NULL: one
 * carved already (its page opened) and naming this block. The block's
 * allocation marked it before the program had the block, and the program
 * passed it to this free: the record and the region's bounds are seen as
 * written. */
static struct kept_sample *kept_of_mark(const void *block)
{
    struct kept_sample *kept =
        kept_at(small_guard_marked(block), atomic_load_explicit(&kept_carved, memory_order_acquire));
    return kept != NULL && atomic_load_explicit(&kept->block, memory_order_relaxed) == block ? kept : NULL;
}

bool profile_kept_record_at(uintptr_t address)
{
    return kept_at(address, KEPT_REGION) != NULL;
}

bool profile_sample_unmark(void *block)
{
    if (!profile_on)
        return false;
    struct kept_sample *kept = kept_of_mark(block);
    if (kept == NULL)
        return false;
    small_guard_write(block, small_guard_word(block));
    atomic_store_explicit(&kept->block, NULL, memory_order_relaxed);
    profile_sample_release(&kept->sample);
    kept_give(kept);
    return true;
}

bool profile_unsampled_begin(void)
{
    bool was = inside_profiler;
    inside_profiler = true;
    return was;
}

void profile_unsampled_end(bool was_unsampled)
{
    inside_profiler = was_unsampled;
}

void profile_thread_begin(void)
{
    thread_logs = profile_on;
}

void profile_thread_exit(void)
{
    if (!profile_on)
        return;
    thread_logs = false;
    if (thread_kept_count != 0)
        kept_share(0);
    struct profile_log *log = thread_log;
    if (log == NULL)
        return;
    thread_log = NULL;
    os_lock_take_spinning(&profile_lock);
    log_emptied(log);
    log->owned = false;
    os_lock_give(&profile_lock);
}

/* Every thread's log added up (profile lock held). */
static void logs_add_up(void)
{
    for (struct profile_log *log = logs; log != NULL; log = log->next)
        log_add_up(log);
}

/* ---- reports ------------------------------------------------------------- */
struct out {
    int fd;
    size_t used;
    bool failed;
    char buffer[4096];
};

static void out_flush(struct out *o)
{
    size_t done = 0;
    while (done < o->used && !o->failed) {
        ssize_t n = write(o->fd, o->buffer + done, o->used - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            o->failed = true;
        else
            done += (size_t)n;
    }
    o->used = 0;
}

static void out_text(struct out *o, const char *text, size_t length)
{
    while (length > 0) {
        if (o->used == sizeof o->buffer)
            out_flush(o);
        size_t room = sizeof o->buffer - o->used, take = length < room ? length : room;
        memcpy(o->buffer + o->used, text, take);
        o->used += take;
        text += take;
        length -= take;
    }
}

static __attribute__((format(printf, 2, 3))) void out_format(struct out *o, const char *format, ...)
{
    char line[256];
    va_list args;
    va_start(args, format);
    int n = vsnprintf(line, sizeof line, format, args);
    va_end(args);
    if (n > 0)
        out_text(o, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static unsigned long rounded(double x)
{
    return x <= 0 ? 0 : (unsigned long)(x + 0.5);
}

/* The gperftools heap profile: held (or, `peak`, held at the peak) and
 * allocated blocks and bytes by stack, then the process's mappings. */
static void write_heap_profile(struct out *o, bool peak)
{
    double blocks = 0, bytes = 0, total_blocks = 0, total_bytes = 0;
    for (struct profile_stack *s = stacks_made; s != NULL; s = s->next_made) {
        blocks += peak ? s->peak_blocks : s->held_blocks;
        bytes += peak ? s->peak_bytes : s->held_bytes;
        total_blocks += s->total_blocks;
        total_bytes += s->total_bytes;
    }
    out_format(o, "heap profile: %lu: %lu [%lu: %lu] @ heapprofile\n", rounded(blocks), rounded(bytes),
               rounded(total_blocks), rounded(total_bytes));
    for (struct profile_stack *s = stacks_made; s != NULL; s = s->next_made) {
        out_format(o, "%lu: %lu [%lu: %lu] @", rounded(peak ? s->peak_blocks : s->held_blocks),
                   rounded(peak ? s->peak_bytes : s->held_bytes), rounded(s->total_blocks), rounded(s->total_bytes));
        for (uint32_t i = 0; i < s->depth; i++)
            out_format(o, " 0x%lx", (unsigned long)s->frames[i]);
        out_text(o, "\n", 1);
    }
    out_text(o, "\nMAPPED_LIBRARIES:\n", 19);
    int maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (maps >= 0) {
        char chunk[4096];
        ssize_t n;
        while ((n = read(maps, chunk, sizeof chunk)) > 0)
            out_text(o, chunk, (size_t)n);
        close(maps);
    }
}

/* Folded stacks (outermost first, ';' between frames) and the bytes each
 * holds, the frames as addresses (strata-run names them). */
static void write_folded(struct out *o, bool peak)
{
    for (struct profile_stack *s = stacks_made; s != NULL; s = s->next_made) {
        unsigned long bytes = rounded(peak ? s->peak_bytes : s->held_bytes);
        if (bytes == 0)
            continue;
        for (uint32_t i = s->depth; i-- > 0;)
            out_format(o, i + 1 == s->depth ? "0x%lx" : ";0x%lx", (unsigned long)s->frames[i]);
        out_format(o, " %lu\n", bytes);
    }
}

static int write_file(const char *path, const char *suffix, void (*writer)(struct out *, bool), bool peak)
{
    char name[4096];
    int n = snprintf(name, sizeof name, "%s%s", path, suffix);
    if (n < 0 || (size_t)n >= sizeof name)
        return ENAMETOOLONG;
    struct out o;
    o.fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o.fd < 0)
        return errno;
    o.used = 0;
    o.failed = false;
    writer(&o, peak);
    out_flush(&o);
    int error = o.failed ? (errno ? errno : EIO) : 0;
    if (close(o.fd) != 0 && error == 0)
        error = errno;
    return error;
}

int profile_dump(const char *path)
{
    if (!profile_on)
        return ENOTSUP;
    bool was_inside = inside_profiler;
    inside_profiler = true;
    os_lock_take_spinning(&profile_lock);
    logs_add_up();
    int error = write_file(path, "", write_heap_profile, false);
    if (error == 0)
        error = write_file(path, ".peak", write_heap_profile, true);
    if (error == 0)
        error = write_file(path, ".folded", write_folded, false);
    if (error == 0)
        error = write_file(path, ".peak.folded", write_folded, true);
    os_lock_give(&profile_lock);
    inside_profiler = was_inside;
    return error;
}

/* STRATA_PROFILE's path for this process: each "%p" in it becomes the
 * pid (so that every process of a pipeline or a shell script writes its
 * own); without one, a forked child appends its pid, and a process that
 * exec'd from another writes the path itself. False if it is too long. */
static bool exit_path(char *path, size_t room)
{
    const char *from = strata_options.profile_path;
    long pid = os_pid();
    bool has_pid = false;
    size_t used = 0;
    for (; *from != '\0'; from++) {
        int n;
        if (from[0] == '%' && from[1] == 'p') {
            n = snprintf(path + used, room - used, "%ld", pid);
            has_pid = true;
            from++;
        } else {
            n = snprintf(path + used, room - used, "%c", *from);
        }
        if (n < 0 || (size_t)n >= room - used)
            return false;
        used += (size_t)n;
    }
    path[used] = '\0';
    if (!has_pid && pid != profiled_pid) {
        int n = snprintf(path + used, room - used, ".%ld", pid);
        if (n < 0 || (size_t)n >= room - used)
            return false;
    }
    return true;
}

void profile_ask_dump(void)
{
    if (profile_on)
        atomic_store_explicit(&dump_asked, true, memory_order_release);
}

/* Writes the profile to this process's STRATA_PROFILE path with `suffix`
 * added; one that cannot be written is reported, naming `option`. */
static void dump_to_own_path(const char *option, const char *suffix)
{
    char path[4096];
    int error = ENAMETOOLONG;
    if (exit_path(path, sizeof path)) {
        size_t length = strlen(path);
        int n = snprintf(path + length, sizeof path - length, "%s", suffix);
        if (n >= 0 && (size_t)n < sizeof path - length)
            error = profile_dump(path);
    }
    if (error != 0) {
        char message[4096 + 128];
        snprintf(message, sizeof message, "%s: the profile could not be written to %s (%s)", option, path,
                 strerror(error));
        report_warning(message, NULL);
    }
}

void profile_dump_if_asked(void)
{
    if (!atomic_load_explicit(&dump_asked, memory_order_acquire) || !atomic_exchange(&dump_asked, false))
        return;
    char suffix[32];
    snprintf(suffix, sizeof suffix, ".dump%u", ++dumps_asked);
    dump_to_own_path("STRATA_PROFILE_SIGNAL", suffix);
}

void profile_dump_at_exit(void)
{
    if (!profile_on || atomic_exchange(&exit_dumped, true))
        return;
    dump_to_own_path("STRATA_PROFILE", "");
}

/* ---- fork ------------------------------------------------------------------ */
void profile_lock_all(void)
{
    if (profile_on)
        os_lock_take_spinning(&profile_lock);
}

void profile_unlock_all(void)
{
    if (profile_on)
        os_lock_give(&profile_lock);
}

void profile_fork_child(void)
{
    if (!profile_on)
        return;
    os_lock_init(&profile_lock);
    /* The other threads are gone: their logs are free (their events still
     * count). */
    for (struct profile_log *log = logs; log != NULL; log = log->next)
        log->owned = log == thread_log;
}
