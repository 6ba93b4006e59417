/* linked.c: a user's program built against an installed strata (through
 * pkg-config or CMake, shared or static), with the inline paths of strata.h
 * (arena bump, pool allocation, strdup) compiled into it as any user's would
 * be. Its argument says which library it was linked with: "override" (malloc
 * is strata's) or "api" (malloc stays the C library's). */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strata.h>

struct item {
    int id;
    char *label;
};

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "override") != 0 && strcmp(argv[1], "api") != 0)) {
        fprintf(stderr, "usage: linked override|api\n");
        return 2;
    }
    int override = strcmp(argv[1], "override") == 0;

    char *p = strata_malloc(1000);
    if (p == NULL || strata_usable_size(p) != 1016) /* strata's 1024-byte slot for 1000 bytes, short of its guard */
        return 1;
    strcpy(p, "linked");
    p = strata_realloc(p, 1 << 20);
    int ok = p != NULL && strcmp(p, "linked") == 0;
    strata_free(p);

    /* malloc is strata's exactly when the override is linked: strata counts
     * the block and rounds it to its class, glibc gives 1000 bytes' worth. */
    struct strata_stats before, after;
    strata_stats_get(&before);
    char *m = malloc(1000);
    strata_stats_get(&after);
    int on_strata = m != NULL && malloc_usable_size(m) == 1016 && after.allocated >= before.allocated + 1016;
    free(m);
    if (on_strata != override) {
        printf("malloc is %s, expected %s\n", on_strata ? "strata's" : "glibc's", override ? "strata's" : "glibc's");
        ok = 0;
    }

    strata_arena *a = strata_arena_new(NULL);
    char *s = strata_arena_strdup(a, "arena");
    ok &= s != NULL && strcmp(s, "arena") == 0;
    strata_arena_destroy(a);

    void *pool = strata_ctx_pool(NULL, 4096);
    struct item *it = strata_ctx_new(pool, struct item);
    it->label = strata_ctx_strdup(it, "context");
    ok &= strata_ctx_get_type(it, struct item) == it && strcmp(it->label, "context") == 0 &&
          strata_ctx_total_blocks(pool) == 3 && strata_ctx_free(pool) == 0;

    printf("strata %s (%s): %s\n", strata_version(), argv[1], ok ? "works" : "broken");
    return ok ? 0 : 1;
}
