/* address_space.c: what a program's address space holds, for
 * tests/test_programs.sh to compare with strata preloaded and without.
 * `address_space start` prints the address space in use (VmSize, KiB)
 * once the program has made its first block; `address_space fill` makes
 * written 10 MB blocks until one fails (under `ulimit -v`) and prints how
 * many it had, then frees them and prints whether a small block is had. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long address_space_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "VmSize: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "start") != 0 && strcmp(argv[1], "fill") != 0)) {
        fprintf(stderr, "usage: address_space start|fill\n");
        return 2;
    }
    free(malloc(100));
    if (strcmp(argv[1], "start") == 0) {
        printf("%ld\n", address_space_kib());
        return 0;
    }
    enum { BIG = 10 << 20, MOST = 64 };
    void *big[MOST];
    int n = 0;
    errno = 0;
    while (n < MOST && (big[n] = malloc(BIG)) != NULL)
        memset(big[n++], 1, BIG);
    int had = n, enomem = errno == ENOMEM;
    while (n > 0)
        free(big[--n]);
    void *small = malloc(100);
    printf("%d %s %s\n", had, enomem ? "enomem" : "other", small != NULL ? "small" : "none");
    free(small);
    return 0;
}
