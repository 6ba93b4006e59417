/* tests/programs/memcheck_errors.c: one memory error a run, for Valgrind's
 * memcheck to find in a program running on a preloaded strata, or (built
 * with -DUSE_STRATA_API) calling strata_malloc and strata_free
 * (tests/test_valgrind.sh): a write after free, a leak, an invalid free. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef USE_STRATA_API
#include <strata.h>
#define malloc strata_malloc
#define free strata_free
#endif

int main(int argc, char **argv)
{
    const char *error = argc > 1 ? argv[1] : "";
    char *p = malloc(64);
    if (p == NULL)
        return 1;
    strcpy(p, "a block");
    if (strcmp(error, "use-after-free") == 0) {
        char *volatile stale = p; /* hidden from the compiler's own check */
        free(p);
        stale[40] = 'x'; /* the write memcheck reports */
        return 0;
    }
    if (strcmp(error, "leak") == 0) {
        p = NULL; /* the last pointer to it is gone */
        return 0;
    }
    if (strcmp(error, "invalid-free") == 0) {
        char *volatile inside = p + 8; /* hidden from the compiler's own check */
        free(inside);
        return 0;
    }
    printf("%s\n", p);
    free(p);
    return 0;
}
