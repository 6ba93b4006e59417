/* report.c: how strata tells the user about misuse. Messages are formatted
 * on the stack and written with one write(2): reporting never allocates. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

static void report(const char *kind, const char *what, const void *address)
{
    char line[192];
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
