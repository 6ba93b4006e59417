/* check.h: the tests' tiny assertion layer. CHECK counts a pass or prints
 * the failing expression; check_finish prints this program's totals in the
 * line tests/run.sh adds up. */
#ifndef STRATA_TEST_CHECK_H
#define STRATA_TEST_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
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

static int check_passed, check_failed;

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (cond) {                                                              \
            check_passed++;                                                      \
        } else {                                                                 \
            check_failed++;                                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
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
            check_failed++;                                                      \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #verdict, broken_); \
        }                                                                        \
    } while (0)

static inline int check_finish(void)
{
    printf("checks: %d passed, %d failed\n", check_passed, check_failed);
    return check_failed == 0 ? 0 : 1;
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
 * /proc/self/exe with the case as its argument, the STRATA_* variables of
 * this process removed and the given ones set; returns how it ended and
 * what it wrote on stdout and stderr. */
struct outcome {
    int status;
    char output[8192];
};

static inline struct outcome check_spawn(const char *name, const char *env)
{
    struct outcome result = {0, ""};
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0)
        return result;
    fflush(stdout);
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
        execl("/proc/self/exe", "test", name, (char *)NULL);
        _exit(127);
    }
    close(pipe_fds[1]);
    size_t length = 0;
    ssize_t n;
    while ((n = read(pipe_fds[0], result.output + length, sizeof result.output - 1 - length)) > 0)
        length += (size_t)n;
    result.output[length] = '\0';
    close(pipe_fds[0]);
    waitpid(pid, &result.status, 0);
    return result;
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
