/* strdup_only.c: names no malloc function and nothing of strata's; only
 * libc calls malloc for it. Linked against strata, it must still run on
 * strata: STRATA_SHOW_STATS=1 makes strata print its table at exit. */
#include <stdio.h>
#include <string.h>

int main(void)
{
    char *s = strdup("only strdup");
    int ok = s != NULL && strcmp(s, "only strdup") == 0;
    puts(ok ? "strdup: ok" : "strdup: FAILED");
    return ok ? 0 : 1;
}
