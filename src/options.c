/* options.c: run-time options, read once from STRATA_* environment variables
 * at start-up (before any heap exists) and never changed afterwards, and the
 * configuration every layer reads (config_init). One table holds each
 * option's name, default, range and documentation; the README's table is
 * this one. A malformed value is reported once on stderr and the default is
 * used. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "instrument.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "layout.h"
#include "sizeclass.h"

struct options strata_options;

struct option_row {
    const char *name;
    long fallback, min, max; /* flags: 0..1 */
    long *target;
    const char *doc;
};

static long check_value, verbose_value, show_stats_value, thp_value;

static const struct option_row rows[] = {
    {"STRATA_PURGE_DELAY_MS", 10, 0, 3600000, &strata_options.purge_delay_ms,
     "free memory unused for this long goes back to the OS (0: at once)"},
    {"STRATA_BACKGROUND_PURGE", BACKGROUND_PURGE_AUTO, BACKGROUND_PURGE_NEVER, BACKGROUND_PURGE_AUTO, &strata_options.background_purge,
     "purger thread: 0 never, 1 from the start, 2 once a heap holds 4 MiB free or a thread exits"},
    {"STRATA_LIMIT_MB", 0, 0, 1L << 40, &strata_options.limit_mb,
     "allocations that would map more than this return NULL, ENOMEM (0: none)"},
    {"STRATA_CHECK", 0, 0, 1, &check_value,
     "checked mode: every free validated, misuse aborts with the address"},
    {"STRATA_VERBOSE", 0, 0, 1, &verbose_value,
     "report every ignored foreign free and the purger's start, not just the first"},
    {"STRATA_SHOW_STATS", 0, 0, 1, &show_stats_value, "print the statistics table at exit"},
    {"STRATA_THP", 0, 0, 1, &thp_value, "transparent huge pages for segments (off: never)"},
};

static bool parse(const char *text, long *out)
{
    if (strcmp(text, "yes") == 0 || strcmp(text, "on") == 0 || strcmp(text, "true") == 0) {
        *out = 1;
        return true;
    }
    if (strcmp(text, "no") == 0 || strcmp(text, "off") == 0 || strcmp(text, "false") == 0) {
        *out = 0;
        return true;
    }
    char *end;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0')
        return false;
    *out = value;
    return true;
}

static void report_malformed(const struct option_row *row, const char *value)
{
    char message[160];
    size_t n = 0;
    const char *parts[] = {row->name, "=", value, " is malformed or out of range; default used"};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const char *c = parts[i]; *c && n + 1 < sizeof message; c++)
            message[n++] = *c;
    message[n] = '\0';
    report_warning(message, NULL);
}

static void options_read(void)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct option_row *row = &rows[i];
        *row->target = row->fallback;
        const char *text = getenv(row->name);
        if (text == NULL || *text == '\0')
            continue;
        long value;
        if (parse(text, &value) && value >= row->min && value <= row->max)
            *row->target = value;
        else
            report_malformed(row, text);
    }
    strata_options.check = check_value != 0;
    strata_options.verbose = verbose_value != 0;
    strata_options.show_stats = show_stats_value != 0;
    strata_options.thp = thp_value != 0;
    strata_options.purge_delay_ns = (uint64_t)strata_options.purge_delay_ms * 1000000u;
}

bool once_begin_slow(struct once *once, bool *running_here)
{
    int expected = 0;
    if (atomic_compare_exchange_strong(&once->state, &expected, 1)) {
        *running_here = true;
        return true;
    }
    while (!*running_here && atomic_load(&once->state) != 2)
        os_yield();
    return false;
}

void once_end(struct once *once, bool *running_here)
{
    *running_here = false;
    atomic_store_explicit(&once->state, 2, memory_order_release);
}

struct block_secrets block_secret;

static struct once config_once;
static STRATA_TLS bool config_running_here;

void config_init(void)
{
    if (!once_begin(&config_once, &config_running_here))
        return;
    os_page_size();
    instrument_detect();
    options_read();
    os_set_map_limit((size_t)strata_options.limit_mb << 20);
    block_secret.link = (uintptr_t)os_random();
    block_secret.check = (uintptr_t)os_random();
    sizeclass_init();
    once_end(&config_once, &config_running_here);
}

size_t options_count(void)
{
    return sizeof rows / sizeof rows[0];
}

const char *options_describe(size_t i, long *value, const char **doc)
{
    *value = *rows[i].target;
    *doc = rows[i].doc;
    return rows[i].name;
}
