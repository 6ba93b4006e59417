/* test_fork.c: fork from a threaded program while other threads allocate and
 * free (and so may hold strata's locks): the child must be able to allocate,
 * free and exit normally, every time. */
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "check.h"
#include "strata.h"

static _Atomic int stop;
static int child_threads = 1;

static void *churn(void *arg)
{
    unsigned long long rng = (unsigned long long)(uintptr_t)arg + 99;
    void *held[64] = {0};
    while (!atomic_load(&stop)) {
        unsigned i = (unsigned)(check_random(&rng) % 64);
        strata_free(held[i]);
        size_t r = check_random(&rng);
        held[i] = strata_malloc(r % 7 == 0 ? 200000 + r % 100000 : 16 + r % 4000);
    }
    for (int i = 0; i < 64; i++)
        strata_free(held[i]);
    return NULL;
}

static void *short_lived(void *arg)
{
    strata_free(strata_malloc(100));
    return arg;
}

static int child_work(void)
{
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        blocks[i] = strata_malloc((size_t)(i * 37 % 5000) + 1);
        if (blocks[i] == NULL)
            return 2;
        memset(blocks[i], i, (size_t)(i * 37 % 5000) + 1);
    }
    void *big = strata_realloc(NULL, 1 << 20);
    big = strata_realloc(big, 3 << 20);
    if (big == NULL)
        return 3;
    strata_free(big);
    for (int i = 0; i < 1000; i++)
        strata_free(blocks[i]);
    if (!child_threads)
        return 0;
    pthread_t t; /* threads in the child work too */
    if (pthread_create(&t, NULL, short_lived, NULL) != 0)
        return 4;
    pthread_join(t, NULL);
    return 0;
}

/* 200 forks while 4 threads allocate and free: every child exits cleanly. */
static void test_fork_while_allocating(void)
{
    /* The sanitizers' own allocators are not fork-safe: a child thread can
     * block on a lock that a parent thread held inside ASan or TSan. */
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer != NULL && *sanitizer != '\0') {
        child_threads = 0;
        printf("children start no threads under %s\n", sanitizer);
    }
    pthread_t threads[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, churn, (void *)i);
    int clean_exits = 0;
    const int forks = 200;
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        if (pid == 0)
            _exit(child_work());
        int status = 0;
        if (pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
            WEXITSTATUS(status) == 0)
            clean_exits++;
        else if (clean_exits == i) /* the first child that did not */
            printf("fork %d: child ended with status 0x%x\n", i, (unsigned)status);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    CHECK_CMP(clean_exits, ==, forks);
}

static const struct check_test tests[] = {
    {"fork_while_allocating", test_fork_while_allocating},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
