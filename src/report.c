/* report.c: how strata tells the user about misuse and, in the debug build,
 * about a broken invariant. Messages are formatted on the stack and written
 * with one write(2): reporting never allocates. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "os.h"
#include "report.h"

static void report(const char *kind, const char *what, const void *address)
{
    char line[640];
    int n = address ? snprintf(line, sizeof line, "strata: %s: %s (address %p)\n", kind, what, address)
                    : snprintf(line, sizeof line, "strata: %s: %s\n", kind, what);
    if (n > 0)
        os_write_stderr(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

_Noreturn void report_fatal(const char *what, const void *address)
{
    report("error", what, address);
    os_abort();
}

void report_warning(const char *what, const void *address)
{
    report("warning", what, address);
}

_Noreturn void report_guard_overwritten(const void *address, const void *below)
{
    if (below == NULL)
        report_fatal("write before the start of a block (the guard word before it is overwritten)", address);
    char what[192];
    snprintf(what, sizeof what,
             "write before the start of a block, or past the end of the block below it at %p (the guard "
             "word between them is overwritten)",
             below);
    report_fatal(what, address);
}

_Noreturn void report_assert(const char *file, int line, const char *expression,
                             const char *format, ...)
{
    char values[160];
    va_list args;
    va_start(args, format);
    vsnprintf(values, sizeof values, format, args);
    va_end(args);
    char text[448];
    int n = snprintf(text, sizeof text, "strata: invariant broken at %s:%d: %s %s\n", file, line,
                     expression, values);
    if (n > 0)
        os_write_stderr(text, (size_t)n < sizeof text ? (size_t)n : sizeof text - 1);
    os_abort();
}
