/* options.c: run-time options, read once from STRATA_* environment variables
 * at start-up (before any heap exists) and never changed afterwards, and the
 * configuration every layer reads (config_init). One table holds each
 * option's name, default, range and documentation; docs/usage.md's table is
 * this one. A malformed value is reported once on stderr, with what is
 * accepted, and the default is used; so is a STRATA_ name that is no
 * option, with the nearest one. Flags take 1/0, yes/no, on/off or
 * true/false, in any case. */
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "instrument.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "sizeclass.h"
#include "strata.h"

struct options strata_options;

struct option_row {
    const char *name;
    long fallback, min, max; /* flags: 0..1 */
    long *target;            /* NULL for a text option */
    const char *doc;
    const char **text;       /* a text option's value (NULL: unset) */
    char *copy;              /* a text option's copy (TEXT_OPTION_MAX bytes) */
};

/* A text option is kept as a copy: programs that set their title
 * (setproctitle: redis-server, nginx, postgres) overwrite the environment
 * strings getenv returned, and a path read later from them would be
 * gone. Paths longer than this are refused. */
#define TEXT_OPTION_MAX 4096
static char stats_file_text[TEXT_OPTION_MAX], profile_path_text[TEXT_OPTION_MAX];

static long check_value, verbose_value, show_stats_value, thp_value;

static const struct option_row rows[] = {
    {"STRATA_PURGE_DELAY_MS", 10, 0, 3600000, &strata_options.purge_delay_ms,
     "free memory unused for this long goes back to the OS (0: at once); a heap or the large-block cache whose memory is taken back soon after it went stretches its own delay, up to 32 times", NULL, NULL},
    {"STRATA_BACKGROUND_PURGE", BACKGROUND_PURGE_AUTO, BACKGROUND_PURGE_NEVER, BACKGROUND_PURGE_AUTO, &strata_options.background_purge,
     "purger thread: 0 never, 1 from the start, 2 once there is something for it (a heap holding 4 MiB free, "
     "an exited thread's heap, a freed large block, a block freed to another thread)", NULL, NULL},
    {"STRATA_LIMIT_MB", 0, 0, 1L << 40, &strata_options.limit_mb,
     "allocations that would map more than this return NULL, ENOMEM (0: none)", NULL, NULL},
    {"STRATA_CHECK", 0, 0, 1, &check_value,
     "checked mode: every free validated, misuse aborts with the address", NULL, NULL},
    {"STRATA_VERBOSE", 0, 0, 1, &verbose_value,
     "say at start that strata is in force, with its options; report every ignored foreign free and the purger's start", NULL, NULL},
    {"STRATA_SHOW_STATS", 0, 0, 1, &show_stats_value, "print the statistics table at exit", NULL, NULL},
    {"STRATA_THP", HUGE_PAGES_NEVER, HUGE_PAGES_NEVER, HUGE_PAGES_DENSE, &thp_value,
     "transparent huge pages: 0 never, 1 for every segment (their free slices open), 2 for the segments of a heap "
     "that writes what it allocates, a 2 MiB range at a time (that range's free slices open)", NULL, NULL},
    {"STRATA_STATS_FILE", 0, 0, 0, NULL,
     "at exit, append the statistics as one JSON line to this file (what strata-run reads)",
     &strata_options.stats_file, stats_file_text},
    {"STRATA_SAMPLE_MS", 0, 0, 60000, &strata_options.sample_ms,
     "with STRATA_STATS_FILE, append the resident and allocated memory to it every this many ms (0: never)", NULL, NULL},
    {"STRATA_QUARANTINE_BLOCKS", 256, 0, QUARANTINE_MAX_BLOCKS, &strata_options.quarantine_blocks,
     "secure flavour: freed blocks a thread holds back from reuse, at most (0: none)", NULL, NULL},
    {"STRATA_QUARANTINE_KB", 256, 0, 1L << 20, &strata_options.quarantine_kb,
     "secure flavour: bytes of freed blocks a thread holds back from reuse, at most, in KiB", NULL, NULL},
    {"STRATA_PROFILE", 0, 0, 0, NULL,
     "the heap profiler: sample allocations and, at exit, write the profile to this path (and .peak, .folded)",
     &strata_options.profile_path, profile_path_text},
    {"STRATA_PROFILE_SAMPLE", 512 * 1024, 1, 1L << 40, &strata_options.profile_sample,
     "with STRATA_PROFILE, one allocation sampled in about every this many bytes", NULL, NULL},
    {"STRATA_PROFILE_SEED", 0, 0, 1L << 62, &strata_options.profile_seed,
     "with STRATA_PROFILE, the samples drawn from this seed, the same each run (0: a fresh seed)", NULL, NULL},
    {"STRATA_PROFILE_SIGNAL", 0, 0, 64, &strata_options.profile_signal,
     "with STRATA_PROFILE, this signal (a number: 12 is SIGUSR2) writes the profile now, to the path with .dumpN", NULL, NULL},
};

/* Flags take one syntax, in any case: 1, yes, on, true; 0, no, off, false. */
static const char *const flag_words[2][4] = {{"0", "no", "off", "false"}, {"1", "yes", "on", "true"}};
#define FLAG_SYNTAX "1/0, yes/no, on/off or true/false, in any case"

static bool is_flag(const struct option_row *row)
{
    return row->min == 0 && row->max == 1;
}

static bool parse(const struct option_row *row, const char *text, long *out)
{
    if (is_flag(row)) {
        for (long value = 0; value <= 1; value++)
            for (size_t i = 0; i < sizeof flag_words[0] / sizeof flag_words[0][0]; i++)
                if (strcasecmp(text, flag_words[value][i]) == 0) {
                    *out = value;
                    return true;
                }
        return false;
    }
    char *end;
    long value = strtol(text, &end, 10);
    if (end == text || *end != '\0' || value < row->min || value > row->max)
        return false;
    *out = value;
    return true;
}

static void report_malformed(const struct option_row *row, const char *value)
{
    char message[320];
    if (row->target == NULL)
        snprintf(message, sizeof message, "%s is longer than %d bytes; it is ignored", row->name,
                 TEXT_OPTION_MAX - 1);
    else if (is_flag(row))
        snprintf(message, sizeof message, "%s=%s is not valid (a flag: " FLAG_SYNTAX "); using the default, %ld",
                 row->name, value, row->fallback);
    else
        snprintf(message, sizeof message,
                 "%s=%s is not valid (a whole number from %ld to %ld); using the default, %ld", row->name,
                 value, row->min, row->max, row->fallback);
    report_warning(message, NULL);
}

/* Edit distance, for the nearest option to a misspelt name. */
static size_t distance(const char *a, const char *b)
{
    size_t row[64];
    size_t lb = strlen(b);
    if (lb >= sizeof row / sizeof row[0] || strlen(a) >= sizeof row / sizeof row[0])
        return (size_t)-1;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; a[i - 1] != '\0'; i++) {
        size_t diagonal = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t above = row[j];
            size_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best)
                best = above + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[lb];
}

/* A STRATA_ variable that names no option is a typo strata would
 * otherwise ignore without a word: said once, with the nearest name. */
static void report_unknown(const char *entry)
{
    char name[64];
    size_t length = strcspn(entry, "=");
    if (length >= sizeof name)
        length = sizeof name - 1;
    memcpy(name, entry, length);
    name[length] = '\0';
    const char *nearest = NULL;
    size_t best = (size_t)-1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (strcmp(name, rows[i].name) == 0)
            return;
        size_t d = distance(name, rows[i].name);
        if (d < best) {
            best = d;
            nearest = rows[i].name;
        }
    }
    char message[480];
    if (best <= 3 && 2 * best < strlen(name) - 7) { /* close to the part after STRATA_ */
        snprintf(message, sizeof message, "%s is not a strata option (did you mean %s?); it is ignored", name,
                 nearest);
    } else {
        int n = snprintf(message, sizeof message, "%s is not a strata option; it is ignored (the options:", name);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0] && n > 0 && (size_t)n < sizeof message; i++)
            n += snprintf(message + n, sizeof message - (size_t)n, " %s", rows[i].name);
        if (n > 0 && (size_t)n < sizeof message)
            snprintf(message + n, sizeof message - (size_t)n, ")");
    }
    report_warning(message, NULL);
}

extern char **environ;

void options_format(char *out, size_t size)
{
    size_t n = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof rows / sizeof rows[0] && n < size; i++) {
        int added = 0;
        if (rows[i].target != NULL)
            added = snprintf(out + n, size - n, " %s=%ld", rows[i].name, *rows[i].target);
        else if (*rows[i].text != NULL)
            added = snprintf(out + n, size - n, " %s=%s", rows[i].name, *rows[i].text);
        if (added < 0)
            break;
        n += (size_t)added;
    }
}

/* STRATA_VERBOSE's first line: that strata is in force here, and how. */
static void report_in_force(void)
{
    char options[OPTIONS_TEXT_MAX], line[OPTIONS_TEXT_MAX + 80];
    options_format(options, sizeof options);
    int n = snprintf(line, sizeof line, "strata %s%s in force in %s (pid %ld):%s\n", STRATA_VERSION,
                     STRATA_FLAVOUR, os_program_name(), os_pid(), options);
    if (n > 0 && (size_t)n < sizeof line)
        os_write_stderr(line, (size_t)n);
}

static void options_read(void)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const struct option_row *row = &rows[i];
        const char *text = getenv(row->name);
        if (row->target == NULL) { /* text: taken as it is, copied */
            *row->text = NULL;
            if (text == NULL || *text == '\0')
                continue;
            size_t length = strlen(text);
            if (length < TEXT_OPTION_MAX) {
                memcpy(row->copy, text, length + 1);
                *row->text = row->copy;
            } else {
                report_malformed(row, text);
            }
            continue;
        }
        *row->target = row->fallback;
        if (text == NULL || *text == '\0')
            continue;
        long value;
        if (parse(row, text, &value))
            *row->target = value;
        else
            report_malformed(row, text);
    }
    for (char **entry = environ; entry != NULL && *entry != NULL; entry++)
        if (strncmp(*entry, "STRATA_", 7) == 0)
            report_unknown(*entry);
    strata_options.check = check_value != 0;
    strata_options.verbose = verbose_value != 0;
    strata_options.show_stats = show_stats_value != 0;
    strata_options.thp = thp_value == HUGE_PAGES_ALWAYS;
    strata_options.thp_dense = thp_value == HUGE_PAGES_DENSE;
    strata_options.purge_delay_ns = (uint64_t)strata_options.purge_delay_ms * 1000000u;
    if (strata_options.stats_file == NULL)
        strata_options.sample_ms = 0;
    strata_options.sample_ns = (uint64_t)strata_options.sample_ms * 1000000u;
    strata_options.purger_at_start =
        strata_options.background_purge == BACKGROUND_PURGE_ALWAYS || strata_options.sample_ns != 0;
    if (strata_options.verbose)
        report_in_force();
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
    os_set_limit((size_t)strata_options.limit_mb << 20);
    block_secret.link = (uintptr_t)os_random();
    block_secret.check = (uintptr_t)os_random();
    block_secret.address = (uintptr_t)os_random();
    block_secret.canary = (uintptr_t)os_random();
    block_secret.size = (uintptr_t)os_random();
    block_secret.guard = ((uintptr_t)os_random() & ~GUARD_SECRET_FIXED_MASK) | GUARD_SECRET_FIXED_BITS;
    block_secret.sampled = (uintptr_t)os_random();
    sizeclass_init();
    once_end(&config_once, &config_running_here);
}

size_t options_count(void)
{
    return sizeof rows / sizeof rows[0];
}

const char *options_describe(size_t i, long *value, const char **text, const char **doc)
{
    *value = rows[i].target != NULL ? *rows[i].target : 0;
    *text = rows[i].target != NULL ? NULL : *rows[i].text != NULL ? *rows[i].text : "";
    *doc = rows[i].doc;
    return rows[i].name;
}
