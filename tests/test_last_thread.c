/* test_last_thread.c: a process ends with its program's last thread, as
 * POSIX says, whatever strata's purger thread is doing: main ending with
 * pthread_exit after one thread, after many, or while threads still run,
 * while a thread that never allocated still runs, and a child forked from
 * a thread other than main whose thread returns; exit handlers run.
 * Each runs in a child process that must exit with status 0 within a few
 * seconds, in checked mode too, with the purger from the start, and with a
 * purge delay of an hour (so that the process ends because its threads
 * did, not because the purger ran out of work); built on the secure
 * flavour's objects as well. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "check.h"
#include "strata.h"

/* How long a process may take to end once its last thread has. */
#define DEADLINE_SECONDS 5.0

/* A thread's work: blocks of many sizes allocated, written, freed, some
 * left for another thread, so its heap has pages, free memory and other
 * heaps' blocks. */
static _Atomic(void *) handed[64];

static void *work(void *arg)
{
    size_t seed = (size_t)(uintptr_t)arg;
    void *held[256];
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < 256; i++) {
            size_t size = 16 + (seed * 2654435761u + i * 40503u) % 20000;
            held[i] = strata_malloc(size);
            memset(held[i], (int)i, size < 64 ? size : 64);
        }
        for (size_t i = 0; i < 256; i++) {
            void *theirs = atomic_exchange(&handed[(seed + i) % 64], i % 8 == 0 ? held[i] : NULL);
            if (i % 8 != 0)
                strata_free(held[i]);
            strata_free(theirs);
        }
    }
    void *big = strata_malloc(8 << 20); /* a large block, freed: a cached mapping */
    memset(big, 1, 1 << 20);
    strata_free(big);
    return NULL;
}

static void run_threads(int count)
{
    pthread_t threads[32];
    for (int i = 0; i < count; i++)
        pthread_create(&threads[i], NULL, work, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < count; i++)
        pthread_join(threads[i], NULL);
}

/* Run at the process's end, as exit runs its handlers when the last
 * thread ends: the program's own exit work still happens. */
static void say_exit(void)
{
    printf("exit handlers ran\n");
}

/* main: one thread joined, then pthread_exit. */
static int exit_after_one(void)
{
    atexit(say_exit);
    work((void *)(uintptr_t)99);
    run_threads(1);
    pthread_exit(NULL);
}

/* main: many threads joined, then pthread_exit. */
static int exit_after_many(void)
{
    work((void *)(uintptr_t)99);
    run_threads(16);
    pthread_exit(NULL);
}

/* main: pthread_exit while its threads still run (detached); the last of
 * them to end ends the process. */
static void *work_then_linger(void *arg)
{
    work(arg);
    usleep(200000);
    return NULL;
}

static int exit_before_threads(void)
{
    work((void *)(uintptr_t)99);
    for (int i = 0; i < 4; i++) {
        pthread_t thread;
        pthread_create(&thread, NULL, work_then_linger, (void *)(uintptr_t)(i + 1));
        pthread_detach(thread);
    }
    pthread_exit(NULL);
}

/* main: pthread_exit while a thread that never allocated sleeps; its end
 * rings no bell, and the purger sees it by looking. */
static void *sleep_without_heap(void *arg)
{
    (void)arg;
    usleep(300000);
    return NULL;
}

static int exit_before_thread_without_heap(void)
{
    work((void *)(uintptr_t)99);
    pthread_t thread;
    pthread_create(&thread, NULL, sleep_without_heap, NULL);
    pthread_detach(thread);
    pthread_exit(NULL);
}

/* AddressSanitizer's runtime (GCC 12) does not hold its allocator's locks
 * across fork: a thread inside it at the fork (the purger, whose start-up
 * the runtime allocates for) leaves them held in the child, which then
 * waits forever in the runtime, not in strata. Under a sanitizer the fork
 * waits (a second at most) until the purger has named itself, its start-up
 * done; strata's own locks are taken across the fork either way. */
static void wait_for_sanitizer_fork(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer == NULL || *sanitizer == '\0')
        return;
    char path[320];
    for (int waited_ms = 0; waited_ms < 1000 && !purger_task_status(path, sizeof path); waited_ms++)
        usleep(1000);
}

/* A thread forks; in the child, that thread (the child's only one) starts
 * and joins another, then returns: the child ends. The parent waits for it
 * with the deadline and says how it ended. */
static void *fork_here(void *arg)
{
    (void)arg;
    work((void *)(uintptr_t)7);
    wait_for_sanitizer_fork();
    pid_t child = fork();
    if (child == 0) {
        work((void *)(uintptr_t)8);
        run_threads(2);
        return NULL; /* the child's last thread ends */
    }
    int status = 0;
    double start = bench_now();
    bool ended = false;
    while (!ended && bench_now() - start < DEADLINE_SECONDS) {
        ended = waitpid(child, &status, WNOHANG) == child;
        if (!ended)
            usleep(10000);
    }
    if (!ended) {
        kill(child, SIGKILL);
        waitpid(child, &status, 0);
    }
    printf("child_ended=%d\nchild_status=%d\nchild_seconds=%.2f\n", ended,
           ended && WIFEXITED(status) ? WEXITSTATUS(status) : -1, bench_now() - start);
    fflush(stdout);
    return NULL;
}

static int fork_from_thread(void)
{
    /* main's heap goes to the child too, where no thread holds it. */
    work((void *)(uintptr_t)99);
    pthread_t thread;
    pthread_create(&thread, NULL, fork_here, NULL);
    pthread_join(thread, NULL);
    return 0;
}

static const struct check_case cases[] = {
    {"exit-after-one", exit_after_one},
    {"exit-after-many", exit_after_many},
    {"exit-before-threads", exit_before_threads},
    {"exit-before-thread-without-heap", exit_before_thread_without_heap},
    {"fork-from-thread", fork_from_thread},
};

/* The modes each case runs in. */
static const char *const modes[] = {
    "",
    "STRATA_CHECK=1",
    "STRATA_BACKGROUND_PURGE=1",
    "STRATA_PURGE_DELAY_MS=3600000",
    "STRATA_PURGE_DELAY_MS=0",
};

/* The case ends, cleanly, within the deadline, in every mode. */
static void check_ends(const char *name)
{
    for (size_t i = 0; i < CHECK_COUNT(modes); i++) {
        struct outcome o = check_spawn_within(name, modes[i], DEADLINE_SECONDS);
        printf("%s%s%s: %s in %.2f s\n", name, *modes[i] ? " with " : "", modes[i],
               o.timed_out ? "still running, killed" : "ended", o.seconds);
        CHECK(!o.timed_out);
        CHECK(exited_cleanly(&o));
        if (!exited_cleanly(&o))
            printf("  it said: %.400s\n", o.output);
    }
}

static void test_exit_after_one(void)
{
    check_ends("exit-after-one");
    struct outcome o = check_spawn_within("exit-after-one", "", DEADLINE_SECONDS);
    CHECK(strstr(o.output, "exit handlers ran\n") != NULL);
}

static void test_exit_after_many(void)
{
    check_ends("exit-after-many");
}

static void test_exit_before_threads(void)
{
    check_ends("exit-before-threads");
}

static void test_exit_before_thread_without_heap(void)
{
    check_ends("exit-before-thread-without-heap");
}

/* The forked child ends too, and the process that forked it. */
static void test_fork_from_thread(void)
{
    for (size_t i = 0; i < CHECK_COUNT(modes); i++) {
        struct outcome o = check_spawn_within("fork-from-thread", modes[i], 2 * DEADLINE_SECONDS);
        printf("fork from a thread%s%s: the child %s\n", *modes[i] ? " with " : "", modes[i],
               strstr(o.output, "child_ended=1") ? "ended" : "did not end");
        CHECK(!o.timed_out);
        CHECK(exited_cleanly(&o));
        CHECK(strstr(o.output, "child_ended=1\nchild_status=0\n") != NULL);
        if (strstr(o.output, "child_ended=1\nchild_status=0\n") == NULL)
            printf("  it said: %.400s\n", o.output);
    }
}

static const struct check_test tests[] = {
    {"exit_after_one", test_exit_after_one},
    {"exit_after_many", test_exit_after_many},
    {"exit_before_threads", test_exit_before_threads},
    {"exit_before_thread_without_heap", test_exit_before_thread_without_heap},
    {"fork_from_thread", test_fork_from_thread},
};

int main(int argc, char **argv)
{
    if (argc == 1 && !children_runnable())
        return check_finish();
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
