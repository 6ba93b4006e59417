/* check.h: the tests' small assertion layer and test runner. CHECK counts a
 * pass or prints the failing expression, CHECK_CMP prints both values of a
 * failed comparison, and each failure names the test it is in. A program
 * lists its tests as a table of names and functions and ends in
 * check_main, which runs them all or those named on the command line,
 * prints a line per test and, last, the totals in the line tests/run.sh
 * adds up. A program that runs cases in child processes (check_spawn)
 * lists them in a table too, which check_main dispatches. */
#ifndef STRATA_TEST_CHECK_H
#define STRATA_TEST_CHECK_H

#ifndef __cplusplus
#include <float.h>
#endif
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../bench/common.h"

/* Built on the secure flavour's objects (make's tests-secure): where its
 * behaviour differs by design, a test checks the secure flavour's. */
#if defined(STRATA_SECURE) && STRATA_SECURE
#define TEST_SECURE 1
#define TEST_FLAVOUR " (secure flavour)"
#else
#define TEST_SECURE 0
#define TEST_FLAVOUR ""
#endif

/* Counted by the thread that runs the tests (a worker thread reports to it
 * instead of checking itself). */
static int check_passed, check_failed;
/* What is running, for the failure messages: "test NAME" or, in a child,
 * "case NAME"; none in the programs that do not use check_main. */
static const char *check_kind = "test", *check_name;

/* Counts a failure and starts its message: where, and in which test. What
 * this program printed so far comes first, not after it. */
static inline void check_failure_at(const char *file, int line)
{
    check_failed++;
    fflush(stdout);
    if (check_name != NULL)
        fprintf(stderr, "%s:%d: in %s %s: ", file, line, check_kind, check_name);
    else
        fprintf(stderr, "%s:%d: ", file, line);
}

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            check_passed++;                                                      \
        } else {                                                                 \
            check_failure_at(__FILE__, __LINE__);                                \
            fprintf(stderr, "CHECK failed: %s\n", #cond);                        \
        }                                                                        \
    } while (0)

/* An invariant checker's verdict (checkers.h: NULL when sound); on a broken
 * invariant, prints which one. */
#define CHECK_SOUND(verdict)                                                     \
    do {                                                                         \
        const char *broken_ = (verdict);                                         \
        if (broken_ == NULL) {                                                   \
            check_passed++;                                                      \
        } else {                                                                 \
            check_failure_at(__FILE__, __LINE__);                                \
            fprintf(stderr, "%s: %s\n", #verdict, broken_);                      \
        }                                                                        \
    } while (0)

#ifndef __cplusplus
/* A value as text, for CHECK_CMP's message: each integer by its sign, each
 * floating type to the digits that tell it from its neighbours, pointers
 * as %p. */
#define CHECK_SHOWN 64
static inline void check_show_signed(char *text, long long value)
{
    snprintf(text, CHECK_SHOWN, "%lld", value);
}
static inline void check_show_unsigned(char *text, unsigned long long value)
{
    snprintf(text, CHECK_SHOWN, "%llu", value);
}
static inline void check_show_float(char *text, float value)
{
    snprintf(text, CHECK_SHOWN, "%.*g", FLT_DECIMAL_DIG, (double)value);
}
static inline void check_show_double(char *text, double value)
{
    snprintf(text, CHECK_SHOWN, "%.*g", DBL_DECIMAL_DIG, value);
}
static inline void check_show_long_double(char *text, long double value)
{
    snprintf(text, CHECK_SHOWN, "%.*Lg", LDBL_DECIMAL_DIG, value);
}
static inline void check_show_pointer(char *text, const void *value)
{
    snprintf(text, CHECK_SHOWN, "%p", value);
}
#define CHECK_SHOW(text, value)                                                  \
    _Generic((value),                                                            \
        _Bool: check_show_unsigned,                                              \
        char: check_show_signed,                                                 \
        signed char: check_show_signed,                                          \
        short: check_show_signed,                                                \
        int: check_show_signed,                                                  \
        long: check_show_signed,                                                 \
        long long: check_show_signed,                                            \
        unsigned char: check_show_unsigned,                                      \
        unsigned short: check_show_unsigned,                                     \
        unsigned: check_show_unsigned,                                           \
        unsigned long: check_show_unsigned,                                      \
        unsigned long long: check_show_unsigned,                                 \
        float: check_show_float,                                                 \
        double: check_show_double,                                               \
        long double: check_show_long_double,                                     \
        default: check_show_pointer)(text, value)

/* `CHECK_CMP(a, op, b)` checks `a op b`, evaluating a and b once; on failure
 * it prints the expression and both values. The comparison runs on copies,
 * which are no longer constants (`n >= 100` would warn of signedness): the
 * sign-compare warning is silenced there and raised instead by the
 * expression as written, in a branch never taken, so that with gcc a
 * comparison warns exactly when the plain one would (clang says nothing
 * in a branch never taken). Arrays are no operands: pass a pointer. */
#define CHECK_CMP(a, op, b)                                                      \
    do {                                                                         \
        if (0)                                                                   \
            (void)((a) op (b));                                                  \
        __typeof__(a) check_a_ = (a);                                            \
        __typeof__(b) check_b_ = (b);                                            \
        _Pragma("GCC diagnostic push")                                           \
        _Pragma("GCC diagnostic ignored \"-Wsign-compare\"")                     \
        int check_holds_ = check_a_ op check_b_;                                 \
        _Pragma("GCC diagnostic pop")                                            \
        if (check_holds_) {                                                      \
            check_passed++;                                                      \
        } else {                                                                 \
            char check_shown_a_[CHECK_SHOWN], check_shown_b_[CHECK_SHOWN];       \
            CHECK_SHOW(check_shown_a_, check_a_);                                \
            CHECK_SHOW(check_shown_b_, check_b_);                                \
            check_failure_at(__FILE__, __LINE__);                                \
            fprintf(stderr, "CHECK_CMP failed: %s %s %s (%s = %s, %s = %s)\n",  \
                    #a, #op, #b, #a, check_shown_a_, #b, check_shown_b_);        \
        }                                                                        \
    } while (0)
#endif

static inline int check_finish(void)
{
    printf("checks: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
}

/* A program's tests: `static const struct check_test tests[] = {{"malloc",
 * test_malloc}, ...}`, in the order they run. A test's name is its
 * function's without test_. */
struct check_test {
    const char *name;
    void (*run)(void);
};

/* What a child process of this program runs (check_spawn): returns its exit
 * status. A table of them is an array of struct check_case, or of rows
 * that hold one (CHECK_CASES_IN). */
struct check_case {
    const char *name;
    int (*run)(void);
};

#define CHECK_COUNT(array) (sizeof(array) / sizeof((array)[0]))
/* check_main's arguments: the tests, then the child cases. */
#define CHECK_TESTS(tests) &(tests)[0], CHECK_COUNT(tests)
#define CHECK_CASES(cases) &(cases)[0], CHECK_COUNT(cases), sizeof((cases)[0])
#define CHECK_CASES_IN(rows, member) &(rows)[0].member, CHECK_COUNT(rows), sizeof((rows)[0])
#define CHECK_NO_CASES NULL, 0, 0

static inline const struct check_case *check_case_at(const struct check_case *cases, size_t stride,
                                                     size_t i)
{
    return (const struct check_case *)(const void *)((const char *)cases + i * stride);
}

static inline void check_run_test(const struct check_test *test)
{
    int passed = check_passed, failed = check_failed;
    check_kind = "test";
    check_name = test->name;
    test->run();
    check_name = NULL;
    passed = check_passed - passed;
    failed = check_failed - failed;
    if (failed > 0)
        printf("FAIL %s (%d of %d failed)\n", test->name, failed, passed + failed);
    else if (passed == 0) /* it said why */
        printf("skip %s (no checks ran)\n", test->name);
    else
        printf("ok   %s (%d check%s)\n", test->name, passed, passed == 1 ? "" : "s");
    fflush(stdout);
}

/* The main of a test program: `return check_main(argc, argv,
 * CHECK_TESTS(tests), CHECK_CASES(cases))` (or CHECK_NO_CASES).
 *   (no argument)    every test, in order
 *   NAME...          those tests, in the table's order; an unknown name
 *                    lists the tests on stderr and exits with 2
 *   --list           the tests' names
 *   --case NAME      the child case NAME (check_spawn runs it); an unknown
 *                    one exits with 2
 * Ends with the line of totals. */
static inline int check_main(int argc, char **argv, const struct check_test *tests, size_t test_count,
                             const struct check_case *cases, size_t case_count, size_t case_stride)
{
    const char *program = strrchr(argv[0], '/') != NULL ? strrchr(argv[0], '/') + 1 : argv[0];
    if (argc >= 2 && strcmp(argv[1], "--case") == 0) {
        for (size_t i = 0; argc == 3 && i < case_count; i++) {
            const struct check_case *child = check_case_at(cases, case_stride, i);
            if (strcmp(child->name, argv[2]) == 0) {
                check_kind = "case";
                check_name = child->name;
                return child->run();
            }
        }
        if (argc == 3)
            fprintf(stderr, "%s: no case named '%s'; its cases:\n", program, argv[2]);
        else
            fprintf(stderr, "%s: --case takes one case's name; its cases:\n", program);
        for (size_t i = 0; i < case_count; i++)
            fprintf(stderr, "  %s\n", check_case_at(cases, case_stride, i)->name);
        return 2;
    }
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < test_count; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    for (int a = 1; a < argc; a++) {
        size_t i = 0;
        while (i < test_count && strcmp(tests[i].name, argv[a]) != 0)
            i++;
        if (i == test_count) {
            fprintf(stderr, "%s: no test named '%s'; its tests:\n", program, argv[a]);
            for (i = 0; i < test_count; i++)
                fprintf(stderr, "  %s\n", tests[i].name);
            return 2;
        }
    }
    for (size_t i = 0; i < test_count; i++) {
        int chosen = argc == 1;
        for (int a = 1; a < argc && !chosen; a++)
            chosen = strcmp(tests[i].name, argv[a]) == 0;
        if (chosen)
            check_run_test(&tests[i]);
    }
    return check_finish();
}

/* Resident memory of this process in bytes, from /proc/self/statm. */
static inline size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f != NULL) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

/* A number of a /proc status file ("Name: N ..."): "VmSize" of
 * /proc/self/status in KiB, say; -1 when it has none. */
static inline long status_field(const char *path, const char *name)
{
    char format[64], line[256];
    snprintf(format, sizeof format, "%s: %%ld", name);
    FILE *f = fopen(path, "r");
    long value = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, format, &value) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return value;
}

/* The /proc/self/task entry of strata's purger thread, found by the name
 * it gives itself once its start-up is done: its status file's path is
 * written to `status_path`. Returns whether it runs. */
static inline bool purger_task_status(char *status_path, size_t size)
{
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    bool found = false;
    while (tasks != NULL && !found && (task = readdir(tasks)) != NULL) {
        char path[300], text[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", task->d_name);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        found = fgets(text, sizeof text, f) != NULL && strcmp(text, "strata-purger\n") == 0;
        fclose(f);
        if (found)
            snprintf(status_path, size, "/proc/self/task/%s/status", task->d_name);
    }
    if (tasks != NULL)
        closedir(tasks);
    return found;
}

/* Whether this process's resident size reflects strata's memory: not under a
 * sanitizer (tests/run.sh exports SANITIZER), whose shadow memory swamps it.
 * Tests then rely on strata's own mapping count and say what they skipped. */
static inline int resident_is_meaningful(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (getenv("TEST_UNDER_VALGRIND") != NULL)
        sanitizer = "valgrind";
    if (sanitizer == NULL || *sanitizer == '\0')
        return 1;
    printf("resident-size checks not run under %s\n", sanitizer);
    return 0;
}

/* A child run of this test program: `check_spawn(case, "A=1 B=2")` execs
 * /proc/self/exe with `--case CASE` as its arguments (check_main runs the
 * case of that name), the STRATA_* variables of this process removed and
 * the given ones set; returns how it ended and what it wrote on stdout and
 * stderr. check_spawn_within gives it `seconds` (0: as long as it takes)
 * to end, then kills it (SIGKILL) and says it timed out: a child that
 * never ends fails its test instead of hanging the suite. */
struct outcome {
    int status;
    bool timed_out;
    double seconds; /* from the start to its end, or to the kill */
    char output[8192];
};

static inline struct outcome check_spawn_within(const char *name, const char *env, double seconds)
{
    struct outcome result = {0, false, 0, ""};
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        return result;
    fflush(stdout);
    double start = bench_now();
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipe_fds[1], 1);
        dup2(pipe_fds[1], 2);
        close(pipe_fds[0]);
        extern char **environ;
        for (size_t i = 0; environ[i] != NULL;) { /* every STRATA_ variable */
            if (strncmp(environ[i], "STRATA_", 7) == 0) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(environ[i], "="), environ[i]);
                unsetenv(name);
            } else {
                i++;
            }
        }
        char copy[512];
        snprintf(copy, sizeof copy, "%s", env ? env : "");
        for (char *item = strtok(copy, " "); item != NULL; item = strtok(NULL, " "))
            putenv(item);
        execl("/proc/self/exe", "test", "--case", name, (char *)NULL);
        _exit(127);
    }
    close(pipe_fds[1]);
    size_t length = 0;
    for (;;) {
        struct pollfd readable = {pipe_fds[0], POLLIN, 0};
        double left = seconds > 0 ? start + seconds - bench_now() : 1;
        int ready = left > 0 ? poll(&readable, 1, seconds > 0 ? (int)(left * 1000) + 1 : -1) : 0;
        if (ready == 0 && seconds > 0 && bench_now() >= start + seconds) { /* its time is up */
            result.timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        if (ready < 0)
            continue;
        char discard[256]; /* what does not fit is read and dropped */
        bool room = length < sizeof result.output - 1;
        ssize_t n = room ? read(pipe_fds[0], result.output + length, sizeof result.output - 1 - length)
                         : read(pipe_fds[0], discard, sizeof discard);
        if (n <= 0) /* every holder of the pipe has closed it */
            break;
        if (room)
            length += (size_t)n;
    }
    result.output[length] = '\0';
    close(pipe_fds[0]);
    /* A child that closed its output may still be running: the deadline
     * holds for its end too. */
    while (waitpid(pid, &result.status, seconds > 0 ? WNOHANG : 0) == 0) {
        if (bench_now() >= start + seconds) {
            result.timed_out = true;
            kill(pid, SIGKILL);
            waitpid(pid, &result.status, 0);
            break;
        }
        usleep(10000);
    }
    result.seconds = bench_now() - start;
    return result;
}

static inline struct outcome check_spawn(const char *name, const char *env)
{
    return check_spawn_within(name, env, 0);
}

/* Under Valgrind (tests/test_valgrind.sh) /proc/self/exe is Valgrind
 * itself, so the cases that run in child processes are left out, and said so. */
static inline int children_runnable(void)
{
    if (getenv("TEST_UNDER_VALGRIND") == NULL)
        return 1;
    printf("child-process cases not run under Valgrind\n");
    return 0;
}

/* A misuse case prints the address it misuses, alone on its first line. */
static inline void say_address(const void *p)
{
    printf("%p\n", p);
    fflush(stdout);
}

/* Whether the child's output has a report starting with `prefix` (say,
 * "strata: error: ") that names `what` and the address from its first line. */
static inline int check_reports(const struct outcome *o, const char *prefix, const char *what)
{
    char address[64] = "";
    sscanf(o->output, "%63s", address);
    const char *line = strstr(o->output, prefix);
    return line != NULL && strstr(line, what) != NULL && strstr(line, address) != NULL;
}

static inline int aborted(const struct outcome *o)
{
    return WIFSIGNALED(o->status) && WTERMSIG(o->status) == SIGABRT;
}

static inline int exited_cleanly(const struct outcome *o)
{
    return WIFEXITED(o->status) && WEXITSTATUS(o->status) == 0;
}

/* A deterministic per-test random generator: the benchmarks' xorshift. */
#define check_random bench_random

#endif
