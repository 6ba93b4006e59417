/* installed.c: built against an installed strata through pkg-config. */
#include <stdio.h>
#include <string.h>
#include <strata.h>

int main(void)
{
    char *p = strata_malloc(100);
    if (p == NULL || strata_usable_size(p) < 100)
        return 1;
    strcpy(p, "installed");
    p = strata_realloc(p, 1 << 20);
    int ok = p != NULL && strcmp(p, "installed") == 0;
    strata_free(p);
    puts(ok ? "installed strata works" : "installed strata broken");
    return ok ? 0 : 1;
}
