/* installed.c: built against an installed strata through pkg-config, with
 * the inline paths of strata.h (arena bump, pool allocation, strdup) compiled
 * into this program as any user's would be. */
#include <stdio.h>
#include <string.h>
#include <strata.h>

struct item {
    int id;
    char *label;
};

int main(void)
{
    char *p = strata_malloc(100);
    if (p == NULL || strata_usable_size(p) < 100)
        return 1;
    strcpy(p, "installed");
    p = strata_realloc(p, 1 << 20);
    int ok = p != NULL && strcmp(p, "installed") == 0;
    strata_free(p);

    strata_arena *a = strata_arena_new(NULL);
    char *s = strata_arena_strdup(a, "arena");
    ok &= s != NULL && strcmp(s, "arena") == 0;
    strata_arena_destroy(a);

    void *pool = strata_ctx_pool(NULL, 4096);
    struct item *it = strata_ctx_new(pool, struct item);
    it->label = strata_ctx_strdup(it, "context");
    ok &= strata_ctx_get_type(it, struct item) == it && strcmp(it->label, "context") == 0 &&
          strata_ctx_total_blocks(pool) == 3 && strata_ctx_free(pool) == 0;

    puts(ok ? "installed strata works" : "installed strata broken");
    return ok ? 0 : 1;
}
