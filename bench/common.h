/* bench/common.h: what every benchmark program shares: a clock, a random
 * generator, memory readings from /proc/self/status, and the parser of its
 * command line. C11 and C++ (bench/cxx.cc) alike. */
#ifndef STRATA_BENCH_COMMON_H
#define STRATA_BENCH_COMMON_H

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline unsigned long long bench_random(unsigned long long *state)
{
    unsigned long long x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline int bench_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of n values (sorts them in place). */
static inline double bench_median(double *values, size_t n)
{
    qsort(values, n, sizeof *values, bench_compare_doubles);
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

struct bench_memory {
    double resident_mb;
    double virtual_mb;
};

/* Reads two "Name: N kB" fields of /proc/self/status, in MB. */
static inline struct bench_memory bench_status(const char *rss_field, const char *vm_field)
{
    struct bench_memory m = {0, 0};
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        double kb;
        if (strncmp(line, rss_field, strlen(rss_field)) == 0 &&
            sscanf(line + strlen(rss_field), " %lf", &kb) == 1)
            m.resident_mb = kb / 1024.0;
        if (strncmp(line, vm_field, strlen(vm_field)) == 0 &&
            sscanf(line + strlen(vm_field), " %lf", &kb) == 1)
            m.virtual_mb = kb / 1024.0;
    }
    if (f != NULL)
        fclose(f);
    return m;
}

static inline struct bench_memory bench_peak_memory(void)
{
    return bench_status("VmHWM:", "VmPeak:");
}

static inline struct bench_memory bench_current_memory(void)
{
    return bench_status("VmRSS:", "VmSize:");
}

/* ---- the command line --------------------------------------------------
 * Each program lists its flags in a table and hands argv to
 * bench_parse_command_line. A flag the table lacks, a flag without its
 * value, a value that is not a number or is below the flag's minimum is
 * refused with the usage on stderr and exit status 2, before the program
 * measures anything: a mistyped run would otherwise measure the defaults
 * and look like a result. -h and --help print the usage on stdout. */

enum bench_flag_kind { BENCH_INT, BENCH_LONG, BENCH_SIZE, BENCH_DOUBLE, BENCH_STRING, BENCH_SWITCH };

struct bench_flag {
    const char *flag;       /* "-n" */
    enum bench_flag_kind kind;
    void *target;           /* the variable of the kind's type that the value goes to */
    const char *value_name; /* the value as the usage shows it: "-n rounds"; NULL for a switch */
    long minimum;           /* the least number accepted (numbers only) */
    const char *help;       /* one line, its default included */
};

/* Typed on purpose: a table entry whose variable is not of the kind's type
 * does not compile, rather than writing a long into an int. */
static inline void *bench_int_target(int *target) { return target; }
static inline void *bench_long_target(long *target) { return target; }
static inline void *bench_size_target(size_t *target) { return target; }
static inline void *bench_double_target(double *target) { return target; }
static inline void *bench_string_target(const char **target) { return target; }

#define BENCH_INT_FLAG(flag, value_name, target, minimum, help) \
    {flag, BENCH_INT, bench_int_target(target), value_name, minimum, help}
#define BENCH_LONG_FLAG(flag, value_name, target, minimum, help) \
    {flag, BENCH_LONG, bench_long_target(target), value_name, minimum, help}
#define BENCH_SIZE_FLAG(flag, value_name, target, minimum, help) \
    {flag, BENCH_SIZE, bench_size_target(target), value_name, minimum, help}
#define BENCH_DOUBLE_FLAG(flag, value_name, target, minimum, help) \
    {flag, BENCH_DOUBLE, bench_double_target(target), value_name, minimum, help}
#define BENCH_STRING_FLAG(flag, value_name, target, help) \
    {flag, BENCH_STRING, bench_string_target(target), value_name, 0, help}
#define BENCH_SWITCH_FLAG(flag, target, help) \
    {flag, BENCH_SWITCH, bench_int_target(target), NULL, 0, help}

struct bench_command_line {
    const char *program;
    /* The words besides the flags, as the usage shows them
     * ("command|spike|string|kinds"); NULL where the program takes none. */
    const char *operands;
    /* peakrss: the first operand starts a command whose own flags are not
     * the program's, so parsing stops there. */
    int operands_end_flags;
    const char *description; /* lines after the usage line; NULL for none */
    const struct bench_flag *flags;
    size_t flag_count;
};

#define BENCH_FLAG_COUNT(table) (sizeof(table) / sizeof((table)[0]))

static inline void bench_print_usage(const struct bench_command_line *line, FILE *out)
{
    fprintf(out, "usage: %s [-h]", line->program);
    int width = (int)strlen("-h, --help");
    for (size_t i = 0; i < line->flag_count; i++) {
        const struct bench_flag *f = &line->flags[i];
        if (f->value_name != NULL)
            fprintf(out, " [%s %s]", f->flag, f->value_name);
        else
            fprintf(out, " [%s]", f->flag);
        int shown = (int)strlen(f->flag) + (f->value_name != NULL ? 1 + (int)strlen(f->value_name) : 0);
        if (shown > width)
            width = shown;
    }
    fprintf(out, "%s%s\n", line->operands != NULL ? " " : "", line->operands != NULL ? line->operands : "");
    if (line->description != NULL)
        fprintf(out, "%s\n", line->description);
    for (size_t i = 0; i < line->flag_count; i++) {
        const struct bench_flag *f = &line->flags[i];
        char shown[128];
        snprintf(shown, sizeof shown, "%s%s%s", f->flag, f->value_name != NULL ? " " : "",
                 f->value_name != NULL ? f->value_name : "");
        fprintf(out, "  %-*s  %s\n", width, shown, f->help);
    }
    fprintf(out, "  %-*s  %s\n", width, "-h, --help", "print this and exit");
}

/* Says what is wrong, prints the usage on stderr and exits with status 2.
 * For the programs' own checks of their operands and of flags that
 * depend on each other, too. */
__attribute__((noreturn, format(printf, 2, 3))) static inline void
bench_usage_error(const struct bench_command_line *line, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "%s: ", line->program);
    vfprintf(stderr, format, args);
    fputc('\n', stderr);
    va_end(args);
    bench_print_usage(line, stderr);
    exit(2);
}

/* The index of `word` among the '|'-separated `choices`; anything else is
 * a usage error, `what` naming where the word came from ("-m"). */
static inline int bench_choice(const struct bench_command_line *line, const char *what, const char *word,
                               const char *choices)
{
    size_t length = strlen(word);
    int index = 0;
    for (const char *choice = choices;; index++) {
        const char *end = strchr(choice, '|');
        size_t choice_length = end != NULL ? (size_t)(end - choice) : strlen(choice);
        if (length == choice_length && strncmp(word, choice, length) == 0)
            return index;
        if (end == NULL)
            break;
        choice = end + 1;
    }
    bench_usage_error(line, "%s %s: not one of %s", what, word, choices);
}

/* Stores the value `text` of flag `f`, or refuses it. Only digits (and a
 * sign) may start a number: strtol and strtod would skip blanks, and
 * strtoul would turn "-1" into a huge size. */
static inline void bench_set_flag(const struct bench_command_line *line, const struct bench_flag *f,
                                  const char *text)
{
    int numeric = f->kind == BENCH_INT || f->kind == BENCH_LONG || f->kind == BENCH_SIZE || f->kind == BENCH_DOUBLE;
    if (!numeric) {
        *(const char **)f->target = text;
        return;
    }
    const char *digits = text[0] == '-' || text[0] == '+' ? text + 1 : text;
    int whole = f->kind != BENCH_DOUBLE;
    if (!(digits[0] >= '0' && digits[0] <= '9') && !(!whole && digits[0] == '.'))
        bench_usage_error(line, "%s %s: not a %s", f->flag, text, whole ? "whole number" : "number");
    char *end;
    errno = 0;
    if (f->kind == BENCH_DOUBLE) {
        double value = strtod(text, &end);
        if (*end != '\0')
            bench_usage_error(line, "%s %s: not a number", f->flag, text);
        if (errno == ERANGE)
            bench_usage_error(line, "%s %s: out of range", f->flag, text);
        if (value < (double)f->minimum)
            bench_usage_error(line, "%s %s: less than %ld", f->flag, text, f->minimum);
        *(double *)f->target = value;
        return;
    }
    long long value = strtoll(text, &end, 10);
    if (*end != '\0')
        bench_usage_error(line, "%s %s: not a whole number", f->flag, text);
    long least = f->kind == BENCH_SIZE && f->minimum < 0 ? 0 : f->minimum;
    if (errno != ERANGE && value < least)
        bench_usage_error(line, "%s %s: less than %ld", f->flag, text, least);
    long long maximum = f->kind == BENCH_INT ? INT_MAX : f->kind == BENCH_LONG ? LONG_MAX : LLONG_MAX;
    if (errno == ERANGE || value > maximum || (f->kind == BENCH_SIZE && (size_t)value != (unsigned long long)value))
        bench_usage_error(line, "%s %s: too large", f->flag, text);
    if (f->kind == BENCH_INT)
        *(int *)f->target = (int)value;
    else if (f->kind == BENCH_LONG)
        *(long *)f->target = (long)value;
    else
        *(size_t *)f->target = (size_t)value;
}

/* Parses argv against the program's flags, exiting on a usage error or on
 * -h. The words that are not flags (everything after "--", and with
 * operands_end_flags everything from the first such word on) are moved,
 * in order, to argv[1], argv[2], ..., followed by NULL; returns how many
 * there are. */
static inline int bench_parse_command_line(const struct bench_command_line *line, int argc, char **argv)
{
    int operand_count = 0;
    int flags_done = 0;
    for (int i = 1; i < argc; i++) {
        const char *word = argv[i];
        if (flags_done || word[0] != '-' || word[1] == '\0') {
            if (line->operands == NULL)
                bench_usage_error(line, "unexpected word %s", word);
            argv[++operand_count] = argv[i];
            if (line->operands_end_flags)
                flags_done = 1;
            continue;
        }
        if (strcmp(word, "--") == 0) {
            flags_done = 1;
            continue;
        }
        if (strcmp(word, "-h") == 0 || strcmp(word, "--help") == 0) {
            bench_print_usage(line, stdout);
            exit(0);
        }
        const struct bench_flag *f = NULL;
        for (size_t k = 0; k < line->flag_count && f == NULL; k++)
            if (strcmp(line->flags[k].flag, word) == 0)
                f = &line->flags[k];
        if (f == NULL)
            bench_usage_error(line, "unknown flag %s", word);
        if (f->kind == BENCH_SWITCH) {
            *(int *)f->target = 1;
            continue;
        }
        if (i + 1 >= argc)
            bench_usage_error(line, "%s needs a value (%s)", f->flag, f->value_name);
        bench_set_flag(line, f, argv[++i]);
    }
    if (argc > 0)
        argv[operand_count + 1] = NULL;
    return operand_count;
}

#endif
