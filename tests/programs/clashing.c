/* clashing.c: a program whose own global names are those of strata's
 * internals (a user may well call a function os_map or page_new). Linked
 * with libstrata.a or libstrata-api.a it must link and run, with strata's
 * own calls reaching strata, not these. */
#include <stdio.h>
#include <stdlib.h>
#include <strata.h>

int thread_heap = 1;
int segment_map_root[4] = {1, 2, 3, 4};
void *os_map(size_t size) { return size ? NULL : &thread_heap; }
int heap_check(void) { return thread_heap + segment_map_root[3]; }
long page_new(long n) { return n * 2; }
void report_fatal(const char *what) { fputs(what, stderr); }

int main(void)
{
    char *p = strata_malloc(100);
    if (p == NULL)
        return 1;
    p[0] = 1;
    int ok = strata_usable_size(p) >= 100; /* 0 for a block strata did not hand out */
    strata_free(p);
    ok &= os_map(0) == &thread_heap && heap_check() == 5 && page_new(21) == 42;
    puts(ok ? "clashing names: ok" : "clashing names: FAILED");
    return ok ? 0 : 1;
}
