/* probe.c: run under LD_PRELOAD=libstrata.so, or linked with libstrata.a;
 * checks that the standard names reach strata and keep their contracts. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../check.h"
#include "strata.h"

/* Weak: resolved from the preloaded library, or from libstrata.a. */
extern size_t strata_usable_size(const void *ptr) __attribute__((weak));

static void *before_main;

/* Runs before main, maybe before strata's own constructor. */
__attribute__((constructor)) static void allocate_early(void)
{
    before_main = malloc(100);
    if (before_main != NULL)
        memset(before_main, 3, 100);
}

int main(int argc, char **argv)
{
    CHECK(before_main != NULL && ((unsigned char *)before_main)[99] == 3);
    free(before_main);
    const char *expect = argc > 1 ? argv[1] : "libstrata.so";
    Dl_info info;
    void *(*volatile malloc_fn)(size_t) = malloc;
    /* A fully static program has no dynamic symbols to ask about; the
     * usable sizes below still tell strata's malloc from glibc's. */
    if (strcmp(expect, "static") != 0)
        CHECK(dladdr((void *)malloc_fn, &info) != 0 && info.dli_fname != NULL &&
              strstr(info.dli_fname, expect) != NULL);
    void *p = malloc(1000);
    CHECK(p != NULL && malloc_usable_size(p) == 1016); /* strata's 1024-byte slot short of its guard word, not glibc's 1000 */
    CHECK(strata_usable_size != NULL && strata_usable_size(p) == 1016);
    free(p);
    void *q = NULL;
    CHECK(posix_memalign(&q, 4096, 10) == 0 && ((uintptr_t)q & 4095) == 0);
    free(q);
    q = aligned_alloc(1 << 20, 100);
    CHECK(q != NULL && ((uintptr_t)q & ((1 << 20) - 1)) == 0);
    free(q);
    q = memalign(256, 1000);
    CHECK(q != NULL && ((uintptr_t)q & 255) == 0);
    free(q);
    /* glibc's memalign and aligned_alloc take any alignment: up to 16 is
     * malloc's, others round up to a power of two; only an impossible one
     * fails, with EINVAL. */
    volatile size_t odd_alignment = 24, no_alignment = 0, odd_page = 3000;
    q = memalign(no_alignment, 10);
    CHECK(q != NULL);
    free(q);
    q = memalign(odd_alignment, 10);
    CHECK(q != NULL && ((uintptr_t)q & 31) == 0);
    free(q);
    q = aligned_alloc(no_alignment, 10);
    CHECK(q != NULL);
    free(q);
    q = memalign(16, 24);
    CHECK(q != NULL && ((uintptr_t)q & 15) == 0);
    free(q);
    q = memalign(odd_page, 10);
    CHECK(q != NULL && ((uintptr_t)q & 4095) == 0);
    free(q);
    volatile size_t impossible = SIZE_MAX;
    errno = 0;
    void *volatile refused = memalign(impossible, 10);
    CHECK(refused == NULL && errno == EINVAL);
    q = valloc(100);
    CHECK(q != NULL && ((uintptr_t)q & 4095) == 0 && malloc_usable_size(q) >= 100);
    free(q);
    volatile size_t huge = SIZE_MAX / 4; /* hidden from the compiler's size checks */
    void *volatile result; /* kept, so the compiler cannot drop the call */
    errno = 0;
    result = calloc(huge, 8);
    CHECK(result == NULL && errno == ENOMEM);
    errno = 0;
    result = reallocarray(NULL, huge, 8);
    CHECK(result == NULL && errno == ENOMEM);
    char *s = strdup("strata"); /* libc's own allocation goes through strata */
    CHECK(s != NULL && strata_usable_size != NULL && strata_usable_size(s) == 16); /* the smallest slot: two words and the guard word */
    free(s);
    char *r = realloc(NULL, 300000);
    CHECK(r != NULL);
    memset(r, 7, 300000);
    r = realloc(r, 3000000);
    CHECK(r != NULL && r[299999] == 7);
    CHECK(realloc(r, 0) == NULL);
    /* dlsym and dlerror allocate inside libc (the error string). */
    if (strcmp(expect, "static") != 0) {
        CHECK(dlsym(RTLD_DEFAULT, "strata_no_such_symbol") == NULL);
        const char *error = dlerror();
        CHECK(error != NULL && strstr(error, "strata_no_such_symbol") != NULL);
        CHECK(dlsym(RTLD_NEXT, "malloc") != NULL);
    }
    return check_finish();
}
