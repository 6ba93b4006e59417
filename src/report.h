/* report.h: how strata tells the user about misuse and, in the debug build,
 * about a broken invariant (report.c); the assertions of the debug build. */
#ifndef STRATA_REPORT_H
#define STRATA_REPORT_H

#include "platform.h"

STRATA_COLD _Noreturn void report_fatal(const char *what, const void *address);
STRATA_COLD void report_warning(const char *what, const void *address);
/* A small block's guard word is overwritten (layout.h, small_guard_word):
 * by a write before it, or past the end of the block `below` it in its
 * page (NULL for a page's first block, whose guard lies in the lead). */
STRATA_COLD _Noreturn void report_guard_overwritten(const void *address, const void *below);
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

#endif /* STRATA_REPORT_H */
