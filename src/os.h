/* os.h: the bottom of strata, which every other file may use and which uses
 * nothing above it: every system call (os.c), how strata reports misuse and
 * broken invariants (report.c), and the options with the start-up
 * configuration derived from them (options.c). The arenas need nothing else. */
#ifndef STRATA_OS_H
#define STRATA_OS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* ---- os.c: every system call ------------------------------------------
 * Contract: addresses and sizes are page multiples and non-zero; mapping
 * functions return NULL on failure and never allocate; errno is kept. */
/* The page size, read once (inline: large realloc asks it at every step). */
extern size_t os_page_bytes;
size_t os_page_size_slow(void);
static inline size_t os_page_size(void)
{
    size_t bytes = os_page_bytes;
    return likely(bytes != 0) ? bytes : os_page_size_slow();
}
/* Mappings that would take strata past `bytes` fail (0: no limit). */
void os_set_map_limit(size_t bytes);
/* Maps `size` bytes of fresh zeroed memory; NULL on failure. */
void *os_map(size_t size);
/* Maps `size` bytes aligned to `alignment` (power of two >= page size). */
void *os_map_aligned(size_t size, size_t alignment);
void os_unmap(void *addr, size_t size);
/* Gives the pages back to the OS; their contents read as zero afterwards. */
void os_purge(void *addr, size_t size);
/* Asks for transparent huge pages on the range, or for none. */
void os_huge_pages(void *addr, size_t size, bool wanted);
/* Faults the pages in now, in one call rather than one trap per page. */
void os_populate(void *addr, size_t size);
/* Resizes a mapping, moving it if needed; NULL on failure. */
void *os_remap(void *addr, size_t old_size, size_t new_size);
void os_write_stderr(const char *text, size_t length);
_Noreturn void os_abort(void);
/* Number of os_map/os_map_aligned calls so far (for white-box tests). */
size_t os_map_count(void);
/* Bytes strata holds mapped now (resident or not). */
size_t os_mapped_bytes(void);
/* Bytes given back with madvise or munmap so far. */
size_t os_purged_bytes(void);
/* The whole process's resident bytes (0 if /proc cannot be read). */
size_t os_resident_bytes(void);
/* Monotonic time in nanoseconds (a vDSO call, no system call). */
uint64_t os_now_ns(void);
void os_sleep_ns(uint64_t ns);
void os_yield(void);

/* ---- report.c: messages, formatted on the stack, one write each --------- */
STRATA_COLD _Noreturn void report_fatal(const char *what, const void *address);
STRATA_COLD void report_warning(const char *what, const void *address);
/* A broken invariant in the debug build: file, line, expression, values. */
STRATA_COLD _Noreturn void report_assert(const char *file, int line, const char *expression,
                                         const char *format, ...) STRATA_PRINTF(4, 5);

/* strata_assert(cond) and strata_assert_cmp(a, op, b) guard invariants in
 * the debug build (STRATA_DEBUG) and compile to nothing elsewhere; the
 * comparison form prints both values. Neither may have side effects. */
#if STRATA_DEBUG_BUILD
#define strata_assert(cond) \
    ((void)(likely(cond) || (report_assert(__FILE__, __LINE__, #cond, " "), 0)))
#define strata_assert_cmp(a, op, b)                                                           \
    ((void)(likely((a)op(b)) ||                                                               \
            (report_assert(__FILE__, __LINE__, #a " " #op " " #b, "(%lld " #op " %lld)",      \
                           (long long)(a), (long long)(b)),                                   \
             0)))
#else
#define strata_assert(cond) ((void)sizeof(cond))
#define strata_assert_cmp(a, op, b) ((void)sizeof((a)op(b)))
#endif

/* ---- options.c: run-time options and start-up configuration ----------- */
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
    bool thp;              /* STRATA_THP */
    uint64_t purge_delay_ns; /* derived: purge_delay_ms in nanoseconds */
};
extern struct options strata_options;
/* Reads the options and sets up what every layer reads but never changes:
 * the page size, the size-class tables, the memory limit, whether Valgrind
 * runs us. Idempotent and cheap once done; any layer calls it before it
 * reads strata_options. (Threads, fork and exit are init.c's.) */
void config_init(void);
size_t options_count(void);
/* The i-th option's name, value in force and documentation line. */
const char *options_describe(size_t i, long *value, const char **doc);

/* ---- Growth policy, shared by the large blocks and the arenas ----------
 * A block that grows tends to grow again: a remap keeps this fraction of
 * headroom, so a string grown in small steps costs a system call per 12%
 * of growth rather than one per page. */
#define GROWTH_HEADROOM_DIVISOR 8
static inline size_t growth_headroom(size_t size)
{
    return size / GROWTH_HEADROOM_DIVISOR;
}

#endif /* STRATA_OS_H */
