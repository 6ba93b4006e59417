/* tests/programs/profile_sites.c: allocation sites whose figures the heap
 * profiler's test knows (tests/test_profile.sh runs it with STRATA_PROFILE
 * and a fixed seed):
 *   site_three  48 MiB in 96-byte blocks, held together with site_one's,
 *               then freed: three times site_one's bytes, at the peak and
 *               allocated;
 *   site_one    16 MiB in 32-byte blocks;
 *   site_leak   4000-byte blocks (4000 of them) and 1 MiB blocks (10),
 *               never freed: 26 MB held at exit;
 *   site_handed 1 MiB blocks two threads make and exit, which the main
 *               thread frees (threads exiting with samples live, a sample
 *               freed by another thread);
 *   site_grown  200 KiB blocks reallocated larger and smaller, then freed;
 *   site_child  a forked child's blocks (its own profile, at path.PID).
 * It prints the child's pid as "child=PID". With an argument, it writes
 * the profile there while site_three's and site_one's blocks are held
 * (strata_profile_dump, found with dlsym) and prints "dump=ERRNO"; with a
 * second, it raises SIGUSR2 there (STRATA_PROFILE_SIGNAL=12 in the test),
 * waits up to ten seconds for that file to appear and prints
 * "signal=written" or "signal=not written". */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define THREE_BLOCKS (48 * MIB / 96)
#define ONE_BLOCKS THREE_BLOCKS /* 16 MiB in 32-byte blocks */

static void *three[THREE_BLOCKS], *one[ONE_BLOCKS];

__attribute__((noinline)) static void *site_three(void)
{
    char *p = malloc(96);
    p[0] = 3;
    return p;
}

__attribute__((noinline)) static void *site_one(void)
{
    char *p = malloc(32);
    p[0] = 1;
    return p;
}

__attribute__((noinline)) static void *site_leak(size_t size)
{
    char *p = malloc(size);
    memset(p, 7, size);
    return p;
}

__attribute__((noinline)) static void *site_handed(void)
{
    char *p = malloc(MIB);
    p[0] = 4;
    return p;
}

__attribute__((noinline)) static void *site_grown(void)
{
    char *p = malloc(200 << 10);
    p[0] = 5;
    return p;
}

__attribute__((noinline)) static void *site_child(void)
{
    char *p = malloc(64 << 10);
    p[0] = 6;
    return p;
}

enum { HANDED = 64 };

static void *make_handed(void *arg)
{
    void **blocks = arg;
    for (int i = 0; i < HANDED / 2; i++)
        blocks[i] = site_handed();
    return NULL;
}

int main(int argc, char **argv)
{
    /* Held together, then freed: the peak's shares are 3 to 1. */
    for (size_t i = 0; i < THREE_BLOCKS; i++) {
        three[i] = site_three();
        one[i] = site_one();
    }
    if (argc > 1) {
        int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "strata_profile_dump");
        printf("dump=%d\n", dump != NULL ? dump(argv[1]) : -1);
    }
    if (argc > 2) { /* STRATA_PROFILE_SIGNAL=12: the dump's last file appears */
        raise(SIGUSR2);
        int waited = 0;
        while (access(argv[2], F_OK) != 0 && waited++ < 1000)
            usleep(10000);
        printf("signal=%s\n", waited <= 1000 ? "written" : "not written");
    }
    for (size_t i = 0; i < THREE_BLOCKS; i++)
        free(three[i]);
    for (size_t i = 0; i < ONE_BLOCKS; i++)
        free(one[i]);

    /* Two threads make blocks and exit; this thread frees them. */
    void *handed[HANDED];
    pthread_t threads[2];
    for (int t = 0; t < 2; t++)
        pthread_create(&threads[t], NULL, make_handed, handed + t * (HANDED / 2));
    for (int t = 0; t < 2; t++)
        pthread_join(threads[t], NULL);
    for (int i = 0; i < HANDED; i++)
        free(handed[i]);

    /* Reallocated both ways, then freed. */
    for (int i = 0; i < 200; i++) {
        char *p = site_grown();
        p = realloc(p, 600 << 10);
        p[(600 << 10) - 1] = 1;
        p = realloc(p, 40);
        p = realloc(p, 300 << 10);
        free(p);
    }

    /* A child's profile is its own. */
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 200; i++)
            (void)site_child();
        exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    printf("child=%ld\n", (long)child);

    /* Never freed. */
    for (int i = 0; i < 4000; i++)
        (void)site_leak(4000);
    for (int i = 0; i < 10; i++)
        (void)site_leak(MIB);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
