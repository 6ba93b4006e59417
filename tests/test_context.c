/* test_context.c: contexts (talloc-style trees). Tree shape (parents, sizes,
 * block counts) and the white-box invariant checker after every operation,
 * destructor order and refusal, steal, talloc's pool reclaim cases,
 * realloc in a pool, limits, misuse in child processes, a subtree handed to
 * another thread, and a random operation sequence checked against a model. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#include "check.h"
#include "checkers.h"
#include "bins.h"
#include "core.h"
#include "strata.h"

#define TREE_OK(p) tree_ok((p), __LINE__)

/* ctx_check's verdict inside a larger condition (alone, CHECK_SOUND says
 * it): on a broken invariant, says which, where and in which test. */
static int tree_ok(const void *p, int line)
{
    const char *problem = ctx_check(p);
    if (problem != NULL)
        fprintf(stderr, "%s:%d: in %s %s: tree check: %s\n", __FILE__, line, check_kind,
                check_name != NULL ? check_name : "(a thread)", problem);
    return problem == NULL;
}

static size_t allocated_now(void)
{
    struct strata_stats s;
    strata_stats_get(&s);
    return s.allocated;
}

static int in_block(const void *p, const void *block, size_t size)
{
    return (const char *)p >= (const char *)block && (const char *)p < (const char *)block + size;
}

/* ---- shape ------------------------------------------------------------------- */

static void test_shape(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    CHECK(root != NULL && strata_ctx_parent(root) == NULL);
    CHECK_CMP(strata_ctx_size(root), ==, 0);
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 1);
    char *a = strata_ctx_alloc(root, 100);
    char *b = strata_ctx_zalloc(root, 40);
    char *a1 = strata_ctx_strdup(a, "hello");
    char *a2 = strata_ctx_alloc_array(a, 10, sizeof(int));
    CHECK(a && b && a1 && a2);
    CHECK_CMP(((uintptr_t)a | (uintptr_t)b | (uintptr_t)a1 | (uintptr_t)a2) % 16, ==, 0);
    CHECK_CMP(b[0], ==, 0);
    CHECK_CMP(b[39], ==, 0);
    CHECK(strcmp(a1, "hello") == 0);
    CHECK_CMP(strata_ctx_parent(a), ==, root);
    CHECK_CMP(strata_ctx_parent(b), ==, root);
    CHECK_CMP(strata_ctx_parent(a1), ==, a);
    CHECK_CMP(strata_ctx_parent(a2), ==, a);
    CHECK_CMP(strata_ctx_size(a), ==, 100);
    CHECK_CMP(strata_ctx_size(a1), ==, 6);
    CHECK_CMP(strata_ctx_size(a2), ==, 40);
    CHECK_CMP(strata_ctx_total_size(root), ==, 100 + 40 + 6 + 40);
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 5);
    CHECK_CMP(strata_ctx_total_blocks(a), ==, 3);
    CHECK_SOUND(ctx_check(root));

    char *s = strata_ctx_asprintf(b, "%d-%s-%0300d", 42, "x", 7); /* longer than the stack buffer */
    CHECK(s != NULL && strncmp(s, "42-x-000", 8) == 0);
    CHECK_CMP(s != NULL ? strlen(s) : 0, ==, 305);
    char *n = strata_ctx_strndup(b, "abcdef", 3);
    CHECK(n != NULL && strcmp(n, "abc") == 0);
    CHECK_CMP(strata_ctx_size(n), ==, 4);
    char *m = strata_ctx_memdup(b, "\0\1\2", 3);
    CHECK(m != NULL && m[2] == 2);
    CHECK_CMP(strata_ctx_parent(m), ==, b);
    CHECK_CMP(strata_ctx_total_blocks(b), ==, 4);
    CHECK_SOUND(ctx_check(root));

    errno = 0;
    CHECK(strata_ctx_alloc_array(root, SIZE_MAX / 2, 3) == NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    errno = 0;
    CHECK(strata_ctx_alloc(root, SIZE_MAX - 8) == NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 8);
    CHECK_SOUND(ctx_check(root));

    strata_ctx_set_name(a, "a");
    CHECK(strcmp(strata_ctx_name(a), "a") == 0 && strata_ctx_name(b) == NULL);

    /* Freeing a middle node takes its subtree and leaves its siblings. */
    CHECK_CMP(strata_ctx_free(a), ==, 0);
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 5);
    CHECK_CMP(strata_ctx_total_size(root), ==, 40 + 306 + 4 + 3);
    CHECK_CMP(strata_ctx_parent(b), ==, root);
    CHECK_SOUND(ctx_check(root));
    strata_ctx_free_children(b);
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 2);
    CHECK_CMP(strata_ctx_total_blocks(b), ==, 1);
    CHECK_SOUND(ctx_check(root));
    CHECK_CMP(strata_ctx_free(root), ==, 0);
    CHECK_CMP(strata_ctx_free(NULL), ==, -1);
    CHECK(strata_ctx_steal(root, NULL) == NULL);
}

struct point {
    int x, y;
};
struct circle {
    struct point *centre;
    double radius;
};

/* Typed contexts: named after their type, checked on the way back. */
static void test_typed(void)
{
    struct circle *c = strata_ctx_new(NULL, struct circle);
    CHECK(c != NULL && c->centre == NULL);
    CHECK_CMP(c->radius, ==, 0.0);
    CHECK_CMP(strata_ctx_size(c), ==, sizeof *c);
    CHECK(strcmp(strata_ctx_name(c), "struct circle") == 0);
    c->centre = strata_ctx_new(c, struct point);
    void *opaque = c->centre;
    CHECK_CMP(strata_ctx_get_type(opaque, struct point), ==, c->centre);
    CHECK_CMP(strata_ctx_get_type((void *)c, struct circle), ==, c);
    CHECK(strata_ctx_get_type(NULL, struct circle) == NULL);
    /* A name set by hand, equal but not the same pointer, matches too. */
    char *named = strata_ctx_alloc(c, 8);
    char type_name[] = "struct point";
    strata_ctx_set_name(named, type_name);
    CHECK_CMP(strata_ctx_get_type(named, struct point), ==, (void *)named);
    CHECK_SOUND(ctx_check(c));
    strata_ctx_free(c);
}

/* Siblings in every position are unlinked correctly (head, middle, tail). */
static void test_sibling_positions(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    char *kids[6];
    for (int i = 0; i < 6; i++)
        kids[i] = strata_ctx_alloc(root, (size_t)i + 1);
    for (int i = 0; i < 6; i++)
        CHECK_CMP(strata_ctx_parent(kids[i]), ==, root);
    strata_ctx_free(kids[5]); /* newest: the head */
    strata_ctx_free(kids[2]); /* middle */
    strata_ctx_free(kids[0]); /* oldest: the tail */
    CHECK_CMP(strata_ctx_total_blocks(root), ==, 4);
    CHECK_CMP(strata_ctx_total_size(root), ==, 2 + 4 + 5);
    CHECK_CMP(strata_ctx_parent(kids[1]), ==, root);
    CHECK_CMP(strata_ctx_parent(kids[4]), ==, root);
    CHECK_SOUND(ctx_check(root));
    strata_ctx_free(root);
}

/* ---- destructors ---------------------------------------------------------------- */

static char order[64];
static size_t order_length;
static int refuse_b;
static void *grow_under;

static int log_destructor(void *p)
{
    order[order_length++] = *(char *)p;
    order[order_length] = '\0';
    if (*(char *)p == 'b' && refuse_b)
        return -1;
    if (*(char *)p == 'g' && grow_under != NULL) {
        /* allocating while the tree is freed: freed with it */
        char *late = strata_ctx_alloc(grow_under, 1);
        *late = 'L';
        strata_ctx_set_destructor(late, log_destructor);
    }
    return 0;
}

static char *named(const void *parent, char tag)
{
    char *p = strata_ctx_alloc(parent, 1);
    *p = tag;
    strata_ctx_set_destructor(p, log_destructor);
    return p;
}

static void test_destructors(void)
{
    /* r has children a (older) and b; a has a1 (older) and a2. A context's
     * destructor runs before its children are freed; newest child first. */
    char *r = named(NULL, 'r');
    char *a = named(r, 'a');
    named(a, '1');
    named(a, '2');
    char *b = named(r, 'b');
    order_length = 0;
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK(strcmp(order, "rba21") == 0);

    /* The destructor of the context itself refuses: nothing is freed. */
    r = named(NULL, 'r');
    a = named(r, 'a');
    b = named(r, 'b');
    refuse_b = 1;
    order_length = 0;
    CHECK_CMP(strata_ctx_free(b), ==, -1);
    CHECK(strcmp(order, "b") == 0);
    CHECK_CMP(strata_ctx_total_blocks(r), ==, 3);
    CHECK_CMP(strata_ctx_parent(b), ==, r);
    CHECK_SOUND(ctx_check(r));

    /* A descendant refuses: it stays, with its subtree, under the freed
     * context's parent; the rest goes. */
    char *top = strata_ctx_alloc(NULL, 0);
    strata_ctx_steal(top, r);
    char *b_child = strata_ctx_strdup(b, "kept");
    order_length = 0;
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK(strcmp(order, "rba") == 0);
    CHECK_CMP(strata_ctx_parent(b), ==, top);
    CHECK_CMP(strata_ctx_parent(b_child), ==, b);
    CHECK_CMP(strata_ctx_total_blocks(top), ==, 3);
    CHECK(strcmp(b_child, "kept") == 0 && TREE_OK(top));
    refuse_b = 0;
    strata_ctx_set_destructor(b, NULL);
    order_length = 0;
    CHECK_CMP(strata_ctx_free(top), ==, 0);
    CHECK_CMP(order_length, ==, 0);

    /* A refusing descendant of a root becomes a root. */
    r = named(NULL, 'r');
    b = named(r, 'b');
    refuse_b = 1;
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK(strata_ctx_parent(b) == NULL && TREE_OK(b));
    refuse_b = 0;
    CHECK_CMP(strata_ctx_free(b), ==, 0);

    /* A destructor that allocates under the context being freed. */
    r = named(NULL, 'r');
    named(r, 'g');
    grow_under = r;
    order_length = 0;
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK(strcmp(order, "rgL") == 0);
    grow_under = NULL;

    /* free_children keeps the context and its destructor. */
    r = named(NULL, 'r');
    named(r, 'x');
    named(r, 'y');
    order_length = 0;
    strata_ctx_free_children(r);
    CHECK(strcmp(order, "yx") == 0);
    CHECK_CMP(strata_ctx_total_blocks(r), ==, 1);
    CHECK_SOUND(ctx_check(r));
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK(strcmp(order, "yxr") == 0);
}

/* A destructor freeing its own context, or the context being freed: -1. */
static int self_free_result;
static int free_self(void *p)
{
    self_free_result = strata_ctx_free(p);
    return 0;
}

/* From a destructor, freeing an ancestor of the context being freed (which
 * would meet it half freed) is refused; freeing its own children is not. */
static void *ancestor_to_free;
static int ancestor_free_result, ancestor_free_errno;
static int free_ancestor(void *p)
{
    (void)p;
    errno = 0;
    ancestor_free_result = strata_ctx_free(ancestor_to_free);
    ancestor_free_errno = errno;
    return 0;
}

static int free_own_children(void *p)
{
    return strata_ctx_free_children(p);
}

static void test_destructor_frees_ancestor(void)
{
    char *grand = strata_ctx_alloc(NULL, 0);
    char *sibling = strata_ctx_alloc(grand, 8); /* a plain leaf, released first by a free */
    char *parent = strata_ctx_alloc(grand, 0);
    char *kid = strata_ctx_alloc(parent, 0);
    strata_ctx_set_destructor(kid, free_ancestor);
    ancestor_to_free = grand;
    CHECK_CMP(strata_ctx_free(parent), ==, 0);
    CHECK_CMP(ancestor_free_result, ==, -1);
    CHECK_CMP(ancestor_free_errno, ==, EBUSY);
    CHECK_CMP(strata_ctx_total_blocks(grand), ==, 2);
    CHECK_CMP(strata_ctx_parent(sibling), ==, grand);
    CHECK_SOUND(ctx_check(grand));
    /* The same from free_children of the grandparent's parent. */
    char *top = strata_ctx_alloc(NULL, 0);
    strata_ctx_steal(top, grand);
    parent = strata_ctx_alloc(grand, 0);
    kid = strata_ctx_alloc(parent, 0);
    strata_ctx_set_destructor(kid, free_ancestor);
    ancestor_to_free = top;
    CHECK_CMP(strata_ctx_free_children(grand), ==, 0);
    CHECK_CMP(ancestor_free_result, ==, -1);
    CHECK_CMP(strata_ctx_total_blocks(top), ==, 2);
    CHECK_SOUND(ctx_check(top));
    /* A destructor freeing its own context's children: allowed. */
    strata_ctx_set_destructor(grand, free_own_children);
    strata_ctx_alloc(grand, 10);
    strata_ctx_alloc(grand, 20);
    CHECK_CMP(strata_ctx_free(grand), ==, 0);
    CHECK_CMP(strata_ctx_total_blocks(top), ==, 1);
    CHECK_SOUND(ctx_check(top));
    CHECK_CMP(strata_ctx_free(top), ==, 0);
    /* NULL is "no context" for the getters and setters. */
    strata_ctx_set_name(NULL, "x");
    strata_ctx_set_destructor(NULL, free_own_children);
    errno = 0;
    CHECK_CMP(strata_ctx_size(NULL), ==, 0);
    CHECK_CMP(strata_ctx_total_size(NULL), ==, 0);
    CHECK_CMP(strata_ctx_total_blocks(NULL), ==, 0);
    CHECK(strata_ctx_name(NULL) == NULL && strata_ctx_parent(NULL) == NULL);
    CHECK_CMP(strata_ctx_set_limit(NULL, 10), ==, -1);
    CHECK_CMP(errno, ==, EINVAL);
    CHECK_CMP(strata_ctx_free_children(NULL), ==, -1);
}

/* A context being freed cannot be moved away by its destructor. */
static void *steal_target;
static int steal_errno;
static int steal_self(void *p)
{
    errno = 0;
    steal_errno = strata_ctx_steal(steal_target, p) == NULL ? errno : 0;
    return 0;
}

static void test_reentrant_free(void)
{
    char *elsewhere = strata_ctx_alloc(NULL, 0);
    char *doomed = strata_ctx_alloc(NULL, 0);
    char *mover = strata_ctx_alloc(doomed, 4);
    strata_ctx_set_destructor(mover, steal_self);
    steal_target = elsewhere;
    CHECK_CMP(strata_ctx_free(doomed), ==, 0);
    CHECK_CMP(steal_errno, ==, EBUSY);
    CHECK_CMP(strata_ctx_total_blocks(elsewhere), ==, 1);
    CHECK_SOUND(ctx_check(elsewhere));
    strata_ctx_free(elsewhere);

    char *r = strata_ctx_alloc(NULL, 8);
    strata_ctx_set_destructor(r, free_self);
    self_free_result = 0;
    CHECK_CMP(strata_ctx_free(r), ==, 0);
    CHECK_CMP(self_free_result, ==, -1);
}

/* ---- steal ------------------------------------------------------------------------- */

static void test_steal(void)
{
    char *r1 = strata_ctx_alloc(NULL, 0), *r2 = strata_ctx_alloc(NULL, 0);
    char *a = strata_ctx_alloc(r1, 10);
    char *a1 = strata_ctx_alloc(a, 20);
    char *b = strata_ctx_alloc(r1, 30);
    CHECK_CMP(strata_ctx_steal(r2, a), ==, a);
    CHECK_CMP(strata_ctx_parent(a), ==, r2);
    CHECK_CMP(strata_ctx_parent(a1), ==, a);
    CHECK_CMP(strata_ctx_parent(b), ==, r1);
    CHECK_CMP(strata_ctx_total_size(r1), ==, 30);
    CHECK_CMP(strata_ctx_total_size(r2), ==, 30);
    CHECK(TREE_OK(r1) && TREE_OK(r2));
    CHECK_CMP(strata_ctx_steal(NULL, a), ==, a);
    CHECK(strata_ctx_parent(a) == NULL);
    CHECK_CMP(strata_ctx_total_blocks(r2), ==, 1);
    CHECK_SOUND(ctx_check(a));
    CHECK_CMP(strata_ctx_steal(b, a), ==, a);
    CHECK_CMP(strata_ctx_parent(a), ==, b);
    CHECK_SOUND(ctx_check(r1));
    strata_ctx_free(r1); /* takes a and a1 with b */
    CHECK_CMP(strata_ctx_total_blocks(r2), ==, 1);
    strata_ctx_free(r2);
}

/* ---- realloc ------------------------------------------------------------------------ */

static void test_realloc(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    char *p = strata_ctx_realloc(root, NULL, 10);
    CHECK(p != NULL);
    CHECK_CMP(strata_ctx_parent(p), ==, root);
    memcpy(p, "0123456789", 10);
    char *kid1 = strata_ctx_alloc(p, 5), *kid2 = strata_ctx_alloc(p, 6);
    strata_ctx_set_name(p, "grown");
    strata_ctx_set_destructor(p, log_destructor);
    char *q = strata_ctx_realloc(root, p, 100000);
    CHECK(q != NULL && memcmp(q, "0123456789", 10) == 0);
    CHECK_CMP(strata_ctx_size(q), ==, 100000);
    CHECK_CMP(strata_ctx_parent(kid1), ==, q);
    CHECK_CMP(strata_ctx_parent(kid2), ==, q);
    CHECK_CMP(strata_ctx_parent(q), ==, root);
    CHECK(strcmp(strata_ctx_name(q), "grown") == 0 && TREE_OK(root));
    q = strata_ctx_realloc(NULL, q, 1000000); /* large: mremap */
    CHECK(q != NULL && memcmp(q, "0123456789", 10) == 0);
    CHECK_CMP(strata_ctx_parent(kid2), ==, q);
    CHECK_SOUND(ctx_check(root));
    char *same = strata_ctx_realloc(NULL, q, 5); /* shrinking stays in place */
    CHECK_CMP(same, ==, q);
    CHECK_CMP(strata_ctx_size(q), ==, 5);
    CHECK_CMP(strata_ctx_total_size(root), ==, 5 + 5 + 6);
    CHECK_CMP(strata_ctx_realloc(NULL, q, 0), ==, q);
    CHECK_CMP(strata_ctx_size(q), ==, 0);
    CHECK_SOUND(ctx_check(root));
    errno = 0;
    CHECK(strata_ctx_realloc(NULL, q, SIZE_MAX - 100) == NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    CHECK_CMP(strata_ctx_size(q), ==, 0);
    strata_ctx_set_destructor(q, NULL);
    /* A moved context with many children: every child follows, the oldest
     * (last in the sibling list) too. */
    char *many = strata_ctx_alloc(root, 16);
    char *oldest = strata_ctx_alloc(many, 1);
    for (int i = 0; i < 999; i++)
        strata_ctx_alloc(many, 1);
    char *moved = strata_ctx_realloc(NULL, many, 5000);
    CHECK_CMP(moved, !=, many);
    CHECK_CMP(strata_ctx_parent(oldest), ==, moved);
    CHECK_CMP(strata_ctx_total_blocks(moved), ==, 1001);
    CHECK_SOUND(ctx_check(root));
    strata_ctx_free(root);
}

/* ---- pools ------------------------------------------------------------------------- */

static void test_pool_reclaim(void)
{
    /* talloc's pool rule: allocate 2048 / free in a 4096 pool, over and
     * over: one allocation from the system (the pool), none per iteration. */
    size_t before = allocated_now();
    char *pool = strata_ctx_pool(NULL, 4096);
    CHECK(pool != NULL);
    CHECK_CMP(strata_ctx_size(pool), ==, 0);
    size_t with_pool = allocated_now();
    CHECK_CMP(with_pool, >, before);
    char *first = NULL;
    int same_place = 1, inside = 1;
    for (int i = 0; i < 1000; i++) {
        char *mem = strata_ctx_alloc(pool, 2048);
        memset(mem, i, 2048);
        if (first == NULL)
            first = mem;
        same_place &= mem == first;
        inside &= in_block(mem, pool, 4096);
        strata_ctx_free(mem);
        inside &= ctx_pool_used(pool) == 0 && ctx_pool_chunks(pool) == 0;
    }
    CHECK(same_place && inside);
    CHECK_CMP(allocated_now(), ==, with_pool);

    /* Freeing the newest chunk moves the cursor back; an older one does not;
     * with every chunk freed the pool starts again from the beginning. */
    char *a = strata_ctx_alloc(pool, 100), *b = strata_ctx_alloc(pool, 200), *c = strata_ctx_alloc(pool, 300);
    size_t used_abc = ctx_pool_used(pool), used_ab;
    CHECK_CMP(ctx_pool_chunks(pool), ==, 3);
    CHECK(in_block(c, pool, 4096) && TREE_OK(pool));
    strata_ctx_free(c);
    used_ab = ctx_pool_used(pool);
    CHECK_CMP(used_ab, <, used_abc);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 2);
    strata_ctx_free(a);
    CHECK_CMP(ctx_pool_used(pool), ==, used_ab);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 1);
    strata_ctx_free(b);
    CHECK_CMP(ctx_pool_used(pool), ==, 0);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 0);
    CHECK_SOUND(ctx_check(pool));

    /* Descendants of pool chunks come from the pool too. */
    a = strata_ctx_alloc(pool, 64);
    b = strata_ctx_strdup(a, "in the pool");
    CHECK(in_block(b, pool, 4096));
    CHECK_CMP(ctx_pool_chunks(pool), ==, 2);
    /* What does not fit comes from the general allocator, freed with the tree. */
    char *big = strata_ctx_alloc(a, 8192);
    CHECK(big != NULL && !in_block(big, pool, 4096));
    CHECK_CMP(ctx_pool_chunks(pool), ==, 2);
    memset(big, 1, 8192);
    char *under_big = strata_ctx_alloc(big, 16);
    CHECK(!in_block(under_big, pool, 4096) && TREE_OK(pool));
    strata_ctx_free(a);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 0);
    CHECK_CMP(ctx_pool_used(pool), ==, 0);
    CHECK_CMP(allocated_now(), ==, with_pool);

    /* A free gives its newest children back straight to the pool, then
     * meets an older one that is not the pool's: every one still ends. */
    a = strata_ctx_alloc(pool, 64);
    char *outside = strata_ctx_alloc(a, 8192);
    char *one = strata_ctx_strdup(a, "one"), *two = strata_ctx_strdup(a, "two");
    CHECK(outside != NULL && !in_block(outside, pool, 4096) && in_block(one, pool, 4096) &&
          in_block(two, pool, 4096));
    CHECK_CMP(ctx_pool_chunks(pool), ==, 3);
    CHECK_CMP(strata_ctx_free(a), ==, 0);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 0);
    CHECK_CMP(ctx_pool_used(pool), ==, 0);
    CHECK_CMP(allocated_now(), ==, with_pool);
    CHECK_SOUND(ctx_check(pool));
    strata_ctx_free(pool);
    CHECK_CMP(allocated_now(), ==, before);
}

static void test_pool_realloc(void)
{
    char *pool = strata_ctx_pool(NULL, 4096);
    char *a = strata_ctx_alloc(pool, 100);
    char *b = strata_ctx_alloc(pool, 100);
    memset(b, 'b', 100);
    size_t used = ctx_pool_used(pool);
    /* The newest chunk grows in place while the pool has room. */
    char *b2 = strata_ctx_realloc(NULL, b, 1000);
    CHECK_CMP(b2, ==, b);
    CHECK_CMP(ctx_pool_used(pool), ==, used + 896);
    CHECK(b2 != NULL && b2[99] == 'b');
    CHECK_SOUND(ctx_check(pool));
    /* An older chunk moves, within the pool when it fits. */
    memset(a, 'a', 100);
    char *kid = strata_ctx_alloc(a, 8);
    char *a2 = strata_ctx_realloc(NULL, a, 500);
    CHECK_CMP(a2, !=, a);
    CHECK(in_block(a2, pool, 4096) && a2[99] == 'a');
    CHECK_CMP(strata_ctx_parent(kid), ==, a2);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 3);
    CHECK_SOUND(ctx_check(pool));
    /* Beyond the pool: the general allocator. */
    char *a3 = strata_ctx_realloc(NULL, a2, 10000);
    CHECK(a3 != NULL && !in_block(a3, pool, 4096) && a3[99] == 'a');
    CHECK_CMP(strata_ctx_parent(kid), ==, a3);
    CHECK_CMP(ctx_pool_chunks(pool), ==, 2);
    CHECK_SOUND(ctx_check(pool));
    /* Shrinking the newest chunk moves the cursor back. */
    used = ctx_pool_used(pool);
    CHECK_CMP(strata_ctx_realloc(NULL, kid, 8), ==, kid);
    CHECK_CMP(strata_ctx_realloc(NULL, b2, 10), ==, b2);
    CHECK_CMP(ctx_pool_used(pool), <=, used);
    CHECK_SOUND(ctx_check(pool));
    errno = 0;
    CHECK(strata_ctx_realloc(NULL, pool, 10) == NULL);
    CHECK_CMP(errno, ==, EINVAL);
    strata_ctx_free(pool);
}

/* A chunk stolen out of a freed pool keeps the block alive. */
static void test_pool_outlived(void)
{
    size_t before = allocated_now();
    char *root = strata_ctx_alloc(NULL, 0);
    char *pool = strata_ctx_pool(root, 1024);
    char *kept = strata_ctx_strdup(pool, "outlives its pool");
    strata_ctx_steal(root, kept);
    CHECK_CMP(strata_ctx_free(pool), ==, 0);
    CHECK(strcmp(kept, "outlives its pool") == 0);
    CHECK_CMP(strata_ctx_parent(kept), ==, root);
    CHECK_SOUND(ctx_check(root));
    char *under = strata_ctx_strdup(kept, "still carved");
    CHECK(strcmp(under, "still carved") == 0 && TREE_OK(root));
    /* The freed pool's block goes when its last chunk does, a free of
     * that chunk's children first. */
    size_t with_kept = allocated_now();
    CHECK_CMP(strata_ctx_free(kept), ==, 0);
    CHECK_CMP(allocated_now(), <, with_kept);
    CHECK_SOUND(ctx_check(root));
    strata_ctx_free(root);
    CHECK_CMP(allocated_now(), ==, before);
}

/* ---- limits -------------------------------------------------------------------------- */

static void test_limits(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    char *limited = strata_ctx_alloc(root, 100);
    CHECK_CMP(strata_ctx_set_limit(limited, 1000), ==, 0);
    CHECK_SOUND(ctx_check(root));
    char *x = strata_ctx_alloc(limited, 600);
    CHECK(x != NULL);
    errno = 0;
    CHECK(strata_ctx_alloc(limited, 301) == NULL);
    CHECK_CMP(errno, ==, ENOMEM);
    char *y = strata_ctx_alloc(x, 300); /* under a descendant: the same limit */
    CHECK(y != NULL);
    CHECK_CMP(strata_ctx_total_size(limited), ==, 1000);
    CHECK_SOUND(ctx_check(root));
    CHECK(strata_ctx_alloc(x, 1) == NULL && strata_ctx_realloc(NULL, y, 301) == NULL);
    CHECK_CMP(strata_ctx_size(y), ==, 300);
    CHECK_SOUND(ctx_check(root));
    strata_ctx_free(y);
    x = strata_ctx_realloc(NULL, x, 900);
    CHECK(x != NULL && TREE_OK(root));
    x = strata_ctx_realloc(NULL, x, 100);

    /* Nested: the inner limit and the outer one both apply. */
    char *inner = strata_ctx_alloc(limited, 0);
    CHECK_CMP(strata_ctx_set_limit(inner, 5000), ==, 0);
    CHECK_SOUND(ctx_check(root));
    CHECK(strata_ctx_alloc(inner, 900) == NULL); /* outer: 200 + 900 > 1000 */
    CHECK(strata_ctx_alloc(inner, 700) != NULL && TREE_OK(root));
    /* A subtree stolen in counts towards the limit, even past it. */
    char *outside = strata_ctx_alloc(root, 500);
    strata_ctx_steal(inner, outside);
    CHECK_CMP(strata_ctx_total_size(limited), ==, 1400);
    CHECK_SOUND(ctx_check(root));
    CHECK(strata_ctx_alloc(limited, 1) == NULL);
    strata_ctx_steal(root, outside);
    CHECK(strata_ctx_alloc(limited, 1) != NULL && TREE_OK(root));
    /* Removing a limit, raising one. */
    CHECK_CMP(strata_ctx_set_limit(limited, 0), ==, 0);
    CHECK_SOUND(ctx_check(root));
    CHECK(strata_ctx_alloc(inner, 4000) != NULL && TREE_OK(root));
    CHECK_CMP(strata_ctx_set_limit(inner, 100000), ==, 0);
    CHECK(strata_ctx_alloc(inner, 50000) != NULL);
    CHECK_SOUND(ctx_check(root));
    /* A limit inside a pool. */
    char *pool = strata_ctx_pool(root, 2048);
    char *pl = strata_ctx_alloc(pool, 0);
    strata_ctx_set_limit(pl, 300);
    CHECK(strata_ctx_alloc(pl, 200) != NULL && strata_ctx_alloc(pl, 200) == NULL && TREE_OK(root));
    strata_ctx_free(root);
}

/* ---- report ---------------------------------------------------------------------------- */

static void test_report(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    strata_ctx_set_name(root, "root");
    char *child = strata_ctx_alloc(root, 123);
    strata_ctx_set_name(child, "child");
    strata_ctx_strdup(child, "x");
    char *text = NULL;
    size_t length = 0;
    FILE *out = open_memstream(&text, &length);
    strata_ctx_report(root, out);
    fclose(out);
    CHECK(text != NULL && strncmp(text, "root ", 5) == 0);
    CHECK(strstr(text, "\n    child ") != NULL && strstr(text, "\n        (unnamed)") != NULL);
    CHECK(strstr(text, "125 in      3 contexts") != NULL && strstr(text, "123 bytes own") != NULL);
    free(text);
    strata_ctx_free(root);
}

/* ---- threads: a subtree handed to another thread by stealing it there ------------------- */

static void *adopt_and_free(void *arg)
{
    char *mine = strata_ctx_alloc(NULL, 0);
    strata_ctx_steal(mine, arg);
    for (int i = 0; i < 100; i++)
        strata_ctx_strdup(arg, "more");
    /* mine, the subtree (its root and pool), its 1000 strings, 100 more */
    int ok = strata_ctx_total_blocks(mine) == 3 + 1000 + 100 &&  TREE_OK(mine);
    strata_ctx_free(mine);
    return (void *)(intptr_t)ok;
}

static void test_handoff(void)
{
    char *built = strata_ctx_alloc(NULL, 0);
    char *pool = strata_ctx_pool(built, 16384);
    for (int i = 0; i < 1000; i++)
        strata_ctx_asprintf(i % 2 ? built : pool, "item %d", i);
    CHECK_CMP(strata_ctx_total_blocks(built), ==, 1002);
    pthread_t t;
    void *ok = NULL;
    pthread_create(&t, NULL, adopt_and_free, built);
    pthread_join(t, &ok);
    CHECK_CMP(ok, ==, (void *)1);
}

/* Four threads each build trees (some in pools) and hand every other one to
 * the next thread through a one-slot mailbox; the receiver steals it under
 * its own root, checks its contents and shape, and frees it, so chunks are
 * freed by threads that did not allocate them. */
#define RING 4
#define TREES 300

struct mailbox {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    char *tree;
    int done;
};

static struct mailbox boxes[RING];

static void post(struct mailbox *box, char *tree)
{
    pthread_mutex_lock(&box->lock);
    while (box->tree != NULL)
        pthread_cond_wait(&box->changed, &box->lock);
    box->tree = tree;
    pthread_cond_broadcast(&box->changed);
    pthread_mutex_unlock(&box->lock);
}

static char *collect(struct mailbox *box, int wait)
{
    pthread_mutex_lock(&box->lock);
    while (wait && box->tree == NULL && !box->done)
        pthread_cond_wait(&box->changed, &box->lock);
    char *tree = box->tree;
    box->tree = NULL;
    pthread_cond_broadcast(&box->changed);
    pthread_mutex_unlock(&box->lock);
    return tree;
}

/* Takes a tree built by thread `from` and checks its shape and sizes. */
static int adopt(char *mine, char *tree, int from)
{
    strata_ctx_steal(mine, tree);
    int i = *(int *)tree;
    size_t bytes = sizeof(int);
    for (int k = 0; k < 20; k++)
        bytes += (size_t)snprintf(NULL, 0, "%d/%d/%d", from, i, k) + 1;
    int ok = strata_ctx_parent(tree) == mine && strata_ctx_total_blocks(tree) == 22 &&
             strata_ctx_total_size(tree) == bytes && TREE_OK(mine);
    return ok & (strata_ctx_free(tree) == 0);
}

static void *ring_worker(void *arg)
{
    int me = (int)(intptr_t)arg, ok = 1;
    char *mine = strata_ctx_alloc(NULL, 0);
    for (int i = 0; i < TREES; i++) {
        /* a tree: its root, a string, and 20 children, 1 in 3 in a pool */
        char *tree = strata_ctx_alloc(mine, sizeof(int));
        *(int *)tree = i;
        char *holder = i % 3 == 0 ? strata_ctx_pool(tree, 4096) : strata_ctx_alloc(tree, 0);
        for (int k = 0; k < 20; k++)
            strata_ctx_asprintf(holder, "%d/%d/%d", me, i, k);
        ok &= strata_ctx_total_blocks(tree) == 22;
        if (i % 2 == 0) {
            strata_ctx_steal(NULL, tree); /* a root: the next thread adopts it */
            post(&boxes[(me + 1) % RING], tree);
        } else {
            ok &= strata_ctx_free(tree) == 0;
        }
        char *received = collect(&boxes[me], 0);
        if (received != NULL)
            ok &= adopt(mine, received, (me + RING - 1) % RING);
    }
    pthread_mutex_lock(&boxes[(me + 1) % RING].lock);
    boxes[(me + 1) % RING].done = 1;
    pthread_cond_broadcast(&boxes[(me + 1) % RING].changed);
    pthread_mutex_unlock(&boxes[(me + 1) % RING].lock);
    for (char *received; (received = collect(&boxes[me], 1)) != NULL;)
        ok &= adopt(mine, received, (me + RING - 1) % RING);
    ok &= strata_ctx_total_blocks(mine) == 1;
    strata_ctx_free(mine);
    return (void *)(intptr_t)ok;
}

static void test_threads(void)
{
    pthread_t threads[RING];
    for (int i = 0; i < RING; i++) {
        pthread_mutex_init(&boxes[i].lock, NULL);
        pthread_cond_init(&boxes[i].changed, NULL);
    }
    for (int i = 0; i < RING; i++)
        pthread_create(&threads[i], NULL, ring_worker, (void *)(intptr_t)i);
    int all_ok = 1;
    for (int i = 0; i < RING; i++) {
        void *ok = NULL;
        pthread_join(threads[i], &ok);
        all_ok &= ok == (void *)1;
    }
    CHECK(all_ok);
}

/* ---- random operations against a model ---------------------------------------------------- */

#define MODEL_SLOTS 300

struct model_node {
    char *p;
    int parent; /* slot, or -1 for a root */
    size_t size;
    unsigned char fill;
};

static struct model_node model[MODEL_SLOTS];

static int model_is_under(int slot, int ancestor)
{
    for (int s = slot; s != -1; s = model[s].parent)
        if (s == ancestor)
            return 1;
    return 0;
}

static void model_free(int slot)
{
    for (int i = 0; i < MODEL_SLOTS; i++)
        if (model[i].p != NULL && i != slot && model_is_under(i, slot))
            model[i].p = NULL;
    model[slot].p = NULL;
}

static int model_matches(void)
{
    for (int i = 0; i < MODEL_SLOTS; i++) {
        if (model[i].p == NULL)
            continue;
        struct model_node *m = &model[i];
        void *parent = m->parent == -1 ? NULL : model[m->parent].p;
        if (strata_ctx_parent(m->p) != parent || strata_ctx_size(m->p) != m->size)
            return 0;
        for (size_t k = 0; k < m->size; k++)
            if ((unsigned char)m->p[k] != m->fill)
                return 0;
        size_t blocks = 0, bytes = 0;
        for (int j = 0; j < MODEL_SLOTS; j++)
            if (model[j].p != NULL && model_is_under(j, i)) {
                blocks++;
                bytes += model[j].size;
            }
        if (strata_ctx_total_blocks(m->p) != blocks || strata_ctx_total_size(m->p) != bytes)
            return 0;
        if (m->parent == -1 && ctx_check(m->p) != NULL)
            return 0;
    }
    return 1;
}

static int random_slot(unsigned long long *rng, int alive)
{
    for (int tries = 0; tries < 4 * MODEL_SLOTS; tries++) {
        int s = (int)(check_random(rng) % MODEL_SLOTS);
        if ((model[s].p != NULL) == alive)
            return s;
    }
    return -1;
}

static void test_model(void)
{
    unsigned long long rng = 6004;
    int mismatches = 0;
    for (int step = 0; step < 6000; step++) {
        unsigned op = (unsigned)(check_random(&rng) % 10);
        int s = random_slot(&rng, op < 4 ? 0 : 1);
        if (s < 0)
            continue;
        if (op < 4) { /* allocate (sometimes a pool) under a live node or as a root */
            int parent = check_random(&rng) % 5 ? random_slot(&rng, 1) : -1;
            void *pp = parent < 0 ? NULL : model[parent].p;
            size_t size = (size_t)(check_random(&rng) % 300);
            char *p = op == 0 && check_random(&rng) % 4 == 0 ? strata_ctx_pool(pp, 2048 + size)
                                                               : strata_ctx_alloc(pp, size);
            if (strata_ctx_size(p) == 0)
                size = 0;
            model[s] = (struct model_node){p, parent, size, (unsigned char)step};
            memset(p, model[s].fill, size);
        } else if (op < 6) {
            mismatches += strata_ctx_free(model[s].p) != 0;
            model_free(s);
        } else if (op < 8) { /* steal under a node that is not in s's subtree */
            int to = check_random(&rng) % 4 ? random_slot(&rng, 1) : -1;
            if (to >= 0 && model_is_under(to, s))
                continue;
            strata_ctx_steal(to < 0 ? NULL : model[to].p, model[s].p);
            model[s].parent = to;
        } else { /* realloc, keeping the pattern; children follow the node */
            size_t size = (size_t)(check_random(&rng) % 600);
            char *p = strata_ctx_realloc(NULL, model[s].p, size);
            if (p == NULL) { /* only a pool refuses (EINVAL) */
                mismatches += errno != EINVAL || strata_ctx_size(model[s].p) != 0;
                continue;
            }
            if (size > model[s].size)
                memset(p + model[s].size, model[s].fill, size - model[s].size);
            model[s].p = p;
            model[s].size = size;
        }
        if (step % 50 == 0 || step > 5900)
            mismatches += !model_matches();
    }
    CHECK_CMP(mismatches, ==, 0);
    for (int i = 0; i < MODEL_SLOTS; i++)
        if (model[i].p != NULL && model[i].parent == -1) {
            strata_ctx_free(model[i].p);
            model_free(i);
        }
    int left = 0;
    for (int i = 0; i < MODEL_SLOTS; i++)
        left += model[i].p != NULL;
    CHECK_CMP(left, ==, 0);
}

/* ---- destructors that change the tree while it is freed ---------------------------
 * Every context under a world root W has a destructor that records its
 * death, and at random refuses, allocates, frees another context, or tries
 * to steal itself (refused: EBUSY). After each free from outside, the
 * contexts the destructors say are alive must be exactly W's subtree, with
 * their contents intact and the tree's invariants holding. */
#define STORM_SLOTS 400

struct storm_node {
    char *p;
    unsigned char fill;
};

static struct storm_node storm[STORM_SLOTS];
static char *storm_world;
static unsigned long long storm_rng;
static int storm_budget, storm_errors;

static int storm_destructor(void *p);

static int storm_find(const void *p)
{
    for (int i = 0; i < STORM_SLOTS; i++)
        if (storm[i].p == p)
            return i;
    return -1;
}

static int storm_pick(void)
{
    for (int tries = 0; tries < 8; tries++) {
        int s = (int)(check_random(&storm_rng) % STORM_SLOTS);
        if (storm[s].p != NULL)
            return s;
    }
    return -1;
}

static void storm_add(void *parent)
{
    for (int i = 0; i < STORM_SLOTS; i++)
        if (storm[i].p == NULL) {
            size_t size = 1 + (size_t)(check_random(&storm_rng) % 64);
            char *p = strata_ctx_alloc(parent, size);
            storm[i].p = p;
            storm[i].fill = (unsigned char)(i + 1);
            memset(p, storm[i].fill, size);
            strata_ctx_set_destructor(p, storm_destructor);
            return;
        }
}

static int storm_destructor(void *p)
{
    int self = storm_find(p);
    if (self < 0) {
        storm_errors++;
        return 0;
    }
    unsigned action = (unsigned)(check_random(&storm_rng) % 16);
    if (action == 0)
        return -1; /* refused: it stays, moved up */
    if (storm_budget > 0) {
        storm_budget--;
        int other = storm_pick();
        if (action == 1 && other >= 0)
            storm_add(storm[other].p); /* may be under the tree being freed */
        else if (action == 2 && other >= 0 && other != self)
            strata_ctx_free(storm[other].p); /* 0, or -1 when refused or an ancestor */
        else if (action == 3) {
            errno = 0;
            if (strata_ctx_steal(storm_world, p) != NULL || errno != EBUSY)
                storm_errors++;
        }
    }
    storm[self].p = NULL; /* it goes once this returns 0 */
    return 0;
}

static int storm_consistent(void)
{
    size_t alive = 0;
    for (int i = 0; i < STORM_SLOTS; i++) {
        if (storm[i].p == NULL)
            continue;
        alive++;
        size_t size = strata_ctx_size(storm[i].p);
        for (size_t k = 0; k < size; k++)
            if ((unsigned char)storm[i].p[k] != storm[i].fill)
                return 0;
        void *a = storm[i].p;
        while (a != NULL && a != storm_world)
            a = strata_ctx_parent(a);
        if (a != storm_world)
            return 0;
    }
    return strata_ctx_total_blocks(storm_world) == alive + 1 && ctx_check(storm_world) == NULL;
}

static void test_destructor_storm(void)
{
    storm_rng = 2011;
    storm_world = strata_ctx_alloc(NULL, 0);
    int inconsistent = 0;
    for (int step = 0; step < 3000; step++) {
        int s = storm_pick();
        if (s < 0 || check_random(&storm_rng) % 3 != 0) {
            int parent = storm_pick();
            storm_add(parent < 0 || check_random(&storm_rng) % 4 == 0 ? storm_world : storm[parent].p);
            continue;
        }
        storm_budget = 8;
        strata_ctx_free(storm[s].p);
        if (step % 10 == 0)
            inconsistent += !storm_consistent();
    }
    CHECK_CMP(inconsistent, ==, 0);
    CHECK_CMP(storm_errors, ==, 0);
    CHECK(storm_consistent());
    for (int i = 0; i < STORM_SLOTS; i++)
        if (storm[i].p != NULL)
            strata_ctx_set_destructor(storm[i].p, NULL);
    CHECK_CMP(strata_ctx_free(storm_world), ==, 0);
}

/* ---- misuse: each in a child process, which must abort naming the address ------------------ */

static char not_a_context[256];

static int double_free(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    char *p = strata_ctx_alloc(root, 50);
    say_address(p);
    strata_ctx_free(p);
    strata_ctx_free(p);
    return 0;
}

static int double_free_pool_chunk(void)
{
    char *pool = strata_ctx_pool(NULL, 1024);
    char *p = strata_ctx_alloc(pool, 50);
    strata_ctx_alloc(pool, 50);
    say_address(p);
    strata_ctx_free(p);
    strata_ctx_free(p);
    return 0;
}

static int freed_parent(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    say_address(root);
    strata_ctx_free(root);
    strata_ctx_alloc(root, 10);
    return 0;
}

static int foreign(void)
{
    say_address(not_a_context + 128);
    strata_ctx_free(not_a_context + 128);
    return 0;
}

static int malloc_block(void)
{
    char *p = strata_malloc(200);
    memset(p, 0, 200);
    say_address(p);
    strata_ctx_free(p);
    return 0;
}

static int steal_under_descendant(void)
{
    char *root = strata_ctx_alloc(NULL, 0);
    char *a = strata_ctx_alloc(root, 1);
    char *a1 = strata_ctx_alloc(a, 1);
    char *a11 = strata_ctx_alloc(a1, 1);
    say_address(a);
    strata_ctx_steal(a11, a);
    return 0;
}

static int steal_under_itself(void)
{
    char *a = strata_ctx_alloc(NULL, 1);
    say_address(a);
    strata_ctx_steal(a, a);
    return 0;
}

static int wrong_type(void)
{
    struct point *p = strata_ctx_new(NULL, struct point);
    say_address(p);
    strata_ctx_get_type((void *)p, struct circle);
    return 0;
}

static int untyped(void)
{
    char *p = strata_ctx_alloc(NULL, 16);
    say_address(p);
    strata_ctx_get_type(p, struct circle);
    return 0;
}

static int use_after_free_in_pool(void)
{
    char *pool = strata_ctx_pool(NULL, 1024);
    char *keep = strata_ctx_alloc(pool, 50);
    char *p = strata_ctx_alloc(pool, 50);
    strata_ctx_free(p);
    p[10] = 1; /* poisoned until carved again */
    (void)keep;
    return 0;
}

static const struct check_case cases[] = {
    {"double-free", double_free},
    {"double-free-pool-chunk", double_free_pool_chunk},
    {"freed-parent", freed_parent},
    {"foreign", foreign},
    {"malloc-block", malloc_block},
    {"steal-under-descendant", steal_under_descendant},
    {"steal-under-itself", steal_under_itself},
    {"wrong-type", wrong_type},
    {"untyped", untyped},
    {"use-after-free-in-pool", use_after_free_in_pool},
};

static void test_misuse(void)
{
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("double-free", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "context used after it was freed"));
    o = check_spawn("double-free-pool-chunk", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "context used after it was freed"));
    o = check_spawn("freed-parent", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "context used after it was freed"));
    o = check_spawn("foreign", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "not a strata context"));
    o = check_spawn("malloc-block", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ", "not a strata context"));
    o = check_spawn("steal-under-descendant", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ",
                                       "stolen under itself or one of its descendants"));
    o = check_spawn("wrong-type", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ",
                                       "context of type 'struct point' used as 'struct circle'"));
    o = check_spawn("untyped", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ",
                                       "context of type '(unnamed)' used as 'struct circle'"));
    o = check_spawn("steal-under-itself", NULL);
    CHECK(aborted(&o) && check_reports(&o, "strata: error: ",
                                       "stolen under itself or one of its descendants"));
}

static void test_use_after_free_in_pool(void)
{
    const char *sanitizer = getenv("SANITIZER");
    if (sanitizer == NULL || strcmp(sanitizer, "asan") != 0) {
        printf("use after free in a pool is checked in the ASan build (make test-asan)\n");
        return;
    }
    if (!children_runnable())
        return;
    struct outcome o = check_spawn("use-after-free-in-pool", NULL);
    CHECK(!exited_cleanly(&o) && strstr(o.output, "use-after-poison") != NULL);
}

static const struct check_test tests[] = {
    {"shape", test_shape},
    {"typed", test_typed},
    {"sibling_positions", test_sibling_positions},
    {"destructors", test_destructors},
    {"reentrant_free", test_reentrant_free},
    {"destructor_frees_ancestor", test_destructor_frees_ancestor},
    {"steal", test_steal},
    {"realloc", test_realloc},
    {"pool_reclaim", test_pool_reclaim},
    {"pool_realloc", test_pool_realloc},
    {"pool_outlived", test_pool_outlived},
    {"limits", test_limits},
    {"report", test_report},
    {"handoff", test_handoff},
    {"threads", test_threads},
    {"model", test_model},
    {"destructor_storm", test_destructor_storm},
    {"misuse", test_misuse},
    {"use_after_free_in_pool", test_use_after_free_in_pool},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
