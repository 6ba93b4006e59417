/* context.c: talloc-style context trees over the general allocator. Each
 * context is an 80-byte header followed by its payload; siblings form a
 * doubly linked list, newest first, each pointing to the parent, so linking,
 * unlinking, finding the parent and checking a steal are O(1) or O(depth).
 * Invariants: a live header's magic is CTX_MAGIC, a freed one's CTX_FREED;
 * a pool's `chunks` counts its live carved chunks; a limit's `used` is the
 * payload bytes of its owner's subtree. One thread per tree (no locks). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define STRATA_BUILDING_LIBRARY 1 /* the out-of-line strata_ctx_alloc */
#include "api.h"
#include "checkers.h"
#include "instrument.h"
#include "report.h"
#include "strata.h"

#define CTX_MAGIC 0x5c7a7a11u
#define CTX_FREED 0xf7eedc7au
#define CTX_ALIGN ((size_t)16)
/* Above this a payload is refused before any size arithmetic can wrap. */
#define CTX_MAX_PAYLOAD ((size_t)PTRDIFF_MAX / 2)

enum {
    CTX_POOL = 1u,      /* this context is a pool: `pool` is its own */
    CTX_IN_POOL = 2u,   /* carved from `pool` */
    CTX_FREEING = 4u,   /* its destructor has run or is running; being freed */
    CTX_OWN_LIMIT = 8u, /* `limit` was set on this context */
    CTX_LIMITED = 16u,  /* `limit` is not NULL */
    CTX_DESTRUCTOR = 32u, /* `destructor` is set (else it is not read) */
    CTX_NAMED = 64u,      /* `name` is set (else it is not read) */
};
/* So that the free path decides from one word: a chunk is released without
 * further checks when its flags are exactly CTX_IN_POOL, or 0. */

struct ctx_limit {
    size_t max;
    size_t used;           /* payload bytes of the owner's subtree */
    struct ctx_limit *up;  /* the limit above the owner, or NULL */
};

/* Sits just before a pool's own header, in the same block. Its first
 * members are strata.h's struct strata_ctx_pool_counts. */
struct ctx_pool {
    char *cursor;     /* next free byte */
    char *inline_end; /* `end`, or NULL to keep strata.h's inline path out */
    size_t chunks;    /* live chunks carved from the pool */
    char *end;
    size_t alive;     /* the pool context itself is not freed yet */
    size_t unused;
};

struct ctx {
    struct ctx *next, *prev; /* siblings, newest first */
    struct ctx *parent;      /* NULL for a root */
    struct ctx *child;       /* the newest child */
    size_t size;             /* payload bytes asked for */
    strata_ctx_destructor destructor; /* read only under CTX_DESTRUCTOR */
    const char *name;                 /* read only under CTX_NAMED */
    struct ctx_pool *pool;   /* pool this context allocates from, or NULL */
    struct ctx_limit *limit; /* the nearest limit at or above, or NULL */
    uint32_t flags;
    uint32_t magic;          /* last, next to the payload: an allocator's
                              * free list never overwrites it */
};

#define CTX_HEADER sizeof(struct ctx)
_Static_assert(sizeof(struct ctx) == sizeof(struct strata_ctx_head) &&
                   offsetof(struct ctx, next) == offsetof(struct strata_ctx_head, next) &&
                   offsetof(struct ctx, prev) == offsetof(struct strata_ctx_head, prev) &&
                   offsetof(struct ctx, parent) == offsetof(struct strata_ctx_head, parent) &&
                   offsetof(struct ctx, child) == offsetof(struct strata_ctx_head, child) &&
                   offsetof(struct ctx, size) == offsetof(struct strata_ctx_head, size) &&
                   offsetof(struct ctx, destructor) == offsetof(struct strata_ctx_head, destructor) &&
                   offsetof(struct ctx, name) == offsetof(struct strata_ctx_head, name) &&
                   offsetof(struct ctx, pool) == offsetof(struct strata_ctx_head, pool) &&
                   offsetof(struct ctx, limit) == offsetof(struct strata_ctx_head, limit) &&
                   offsetof(struct ctx, flags) == offsetof(struct strata_ctx_head, flags) &&
                   offsetof(struct ctx, magic) == offsetof(struct strata_ctx_head, magic),
               "strata.h's inline allocation writes the header it describes");
_Static_assert(offsetof(struct ctx_pool, cursor) == offsetof(struct strata_ctx_pool_counts, head.cursor) &&
                   offsetof(struct ctx_pool, inline_end) ==
                       offsetof(struct strata_ctx_pool_counts, head.inline_end) &&
                   offsetof(struct ctx_pool, chunks) == offsetof(struct strata_ctx_pool_counts, chunks),
               "strata.h's inline allocation bumps the pool it describes");
_Static_assert(CTX_MAGIC == STRATA_CTX_MAGIC && CTX_IN_POOL == STRATA_CTX_IN_POOL,
               "strata.h's inline allocation marks chunks as the library does");
_Static_assert(sizeof(struct ctx) % CTX_ALIGN == 0, "payloads stay 16-aligned");
_Static_assert(sizeof(struct ctx_pool) % CTX_ALIGN == 0, "pool headers stay 16-aligned");

static inline void *payload_of(const struct ctx *c)
{
    return (char *)c + CTX_HEADER;
}

static inline size_t extent_of(size_t payload)
{
    return (CTX_HEADER + payload + CTX_ALIGN - 1) & ~(CTX_ALIGN - 1);
}

static _Noreturn void ctx_bad(const struct ctx *c, const void *p)
{
    /* The secure flavour zeroes a block at its free, the mark with it. */
    if (c->magic == CTX_FREED || (STRATA_SECURE_BUILD && secure_block_is_free(c)))
        report_fatal("context used after it was freed (double free?)", p);
    report_fatal("pointer is not a strata context", p);
}

/* Every public entry point goes through here: one load and one compare. */
static inline struct ctx *ctx_of(const void *p)
{
    struct ctx *c = (struct ctx *)((char *)(uintptr_t)p - CTX_HEADER);
    if (unlikely(c->magic != CTX_MAGIC))
        ctx_bad(c, p);
    return c;
}

static inline struct ctx *ctx_or_root(const void *p)
{
    return p == NULL ? NULL : ctx_of(p);
}

static inline struct ctx *parent_of(const struct ctx *c)
{
    return c->parent;
}

static inline void link_under(struct ctx *c, struct ctx *parent)
{
    c->prev = NULL;
    c->parent = parent;
    c->next = NULL;
    if (parent == NULL)
        return;
    struct ctx *head = parent->child;
    if (head != NULL) {
        head->prev = c;
        c->next = head;
    }
    parent->child = c;
}

/* Takes c out of its sibling list; c's own links are left as they were. */
static inline void detach(struct ctx *c)
{
    if (c->prev != NULL) {
        c->prev->next = c->next;
        if (c->next != NULL)
            c->next->prev = c->prev;
    } else {
        if (c->parent != NULL)
            c->parent->child = c->next;
        if (c->next != NULL)
            c->next->prev = NULL;
    }
}

static inline void unlink_node(struct ctx *c)
{
    detach(c);
    c->next = c->prev = c->parent = NULL;
}

/* After a header moved (copied to `fresh`), points its neighbours and its
 * children at it: O(children), which growth in geometric steps (size
 * classes, mremap headroom) amortises. */
static void relink_moved(struct ctx *fresh)
{
    if (fresh->prev != NULL)
        fresh->prev->next = fresh;
    else if (fresh->parent != NULL)
        fresh->parent->child = fresh;
    if (fresh->next != NULL)
        fresh->next->prev = fresh;
    for (struct ctx *child = fresh->child; child != NULL; child = child->next)
        child->parent = fresh;
}

static inline void set_flag(struct ctx *c, uint32_t flag, bool on)
{
    c->flags = on ? c->flags | flag : c->flags & ~flag;
}

/* ---- limits ---------------------------------------------------------------- */

/* Adds n to every limit from `limit` up, whether or not they have room. */
static void limit_force(struct ctx_limit *limit, size_t n)
{
    for (struct ctx_limit *l = limit; l != NULL; l = l->up)
        l->used += n;
}

static bool limit_take(struct ctx_limit *limit, size_t n)
{
    for (struct ctx_limit *l = limit; l != NULL; l = l->up)
        if (l->used > l->max || n > l->max - l->used)
            return false;
    limit_force(limit, n);
    return true;
}

static void limit_give(struct ctx_limit *limit, size_t n)
{
    for (struct ctx_limit *l = limit; l != NULL; l = l->up)
        l->used -= n;
}

/* The limit that applies above c (its parent's), whatever c has itself. */
static inline struct ctx_limit *limit_above(const struct ctx *c)
{
    return (c->flags & CTX_OWN_LIMIT) ? c->limit->up : c->limit;
}

/* ---- walking a subtree ---------------------------------------------------- */

/* Visits top and each descendant, parents before children, newest sibling
 * first, with the depth below top. The tree must not change meanwhile. */
static void walk(struct ctx *top, void (*visit)(struct ctx *, unsigned, void *), void *arg)
{
    struct ctx *x = top;
    unsigned depth = 0;
    visit(x, 0, arg);
    for (;;) {
        if (x->child != NULL) {
            x = x->child;
            visit(x, ++depth, arg);
            continue;
        }
        while (x != top && x->next == NULL) {
            x = parent_of(x);
            depth--;
        }
        if (x == top)
            return;
        x = x->next;
        visit(x, depth, arg);
    }
}

struct totals {
    size_t bytes, blocks;
};

static void add_to_totals(struct ctx *c, unsigned depth, void *arg)
{
    struct totals *t = arg;
    (void)depth;
    t->bytes += c->size;
    t->blocks++;
}

static struct totals totals_of(struct ctx *c)
{
    struct totals t = {0, 0};
    walk(c, add_to_totals, &t);
    return t;
}

struct retarget {
    struct ctx_limit *from, *to;
};

static void retarget_limit(struct ctx *c, unsigned depth, void *arg)
{
    struct retarget *r = arg;
    (void)depth;
    if (c->limit == r->from) {
        c->limit = r->to;
        set_flag(c, CTX_LIMITED, r->to != NULL);
    } else if ((c->flags & CTX_OWN_LIMIT) && c->limit->up == r->from)
        c->limit->up = r->to;
}

/* Points c's subtree, wherever it now uses the limit `from`, at `to`. */
static void retarget_subtree(struct ctx *c, struct ctx_limit *from, struct ctx_limit *to)
{
    struct retarget r = {from, to};
    walk(c, retarget_limit, &r);
}

/* Moves c (with its subtree) under new_parent, carrying its bytes from the
 * limits above it to new_parent's. */
static void move_under(struct ctx *c, struct ctx *new_parent)
{
    struct ctx_limit *from = limit_above(c);
    struct ctx_limit *to = new_parent != NULL ? new_parent->limit : NULL;
    if (unlikely(from != to)) {
        size_t bytes = totals_of(c).bytes;
        limit_give(from, bytes);
        limit_force(to, bytes);
        retarget_subtree(c, from, to);
    }
    unlink_node(c);
    link_under(c, new_parent);
}

/* ---- pools ------------------------------------------------------------------ */

static inline char *pool_start(struct ctx_pool *pool)
{
    return (char *)pool + sizeof(struct ctx_pool) + CTX_HEADER;
}

static inline struct ctx *pool_carve(struct ctx_pool *pool, size_t extent)
{
    if (extent > (size_t)(pool->end - pool->cursor))
        return NULL;
    struct ctx *c = (struct ctx *)pool->cursor;
    strata_assert(extent % CTX_ALIGN == 0);
    pool->cursor += extent;
    pool->chunks++;
    memory_usable(c, extent);
    return c;
}

static STRATA_NOINLINE void pool_free_block(struct ctx_pool *pool)
{
    /* The general allocator will hand these bytes out again: unpoison. */
    memory_usable(pool_start(pool), (size_t)(pool->end - pool_start(pool)));
    api_free(pool);
}

/* The pool's last chunk is gone: start again from the beginning, or, when
 * the pool context was freed before its chunks, return the block. */
static inline void pool_emptied(struct ctx_pool *pool)
{
    if (likely(pool->alive))
        pool->cursor = pool_start(pool);
    else
        pool_free_block(pool);
}

/* The pool's count and cursor for a chunk given back: the newest chunk's
 * space is the pool's again at once; an older one's, when the pool empties
 * (pool_give_back). */
static STRATA_ALWAYS_INLINE void pool_chunk_returned(struct ctx_pool *pool, struct ctx *c, size_t extent)
{
    strata_assert_cmp(pool->chunks, >, 0);
    strata_assert((char *)c >= pool_start(pool) && (char *)c + extent <= pool->cursor);
    if ((char *)c + extent == pool->cursor)
        pool->cursor = (char *)c;
    pool->chunks--;
}

/* A chunk's header stays readable after it is freed (so a double free is
 * seen); its payload is poisoned until the space is carved again. */
static inline void pool_give_back(struct ctx_pool *pool, struct ctx *c, size_t extent)
{
    if (STRATA_ASAN_ACTIVE || unlikely(pool->inline_end == NULL)) /* instrumented */
        memory_released(payload_of(c), extent - CTX_HEADER);
    pool_chunk_returned(pool, c, extent);
    if (unlikely(pool->chunks == 0))
        pool_emptied(pool);
}

/* ---- allocation ------------------------------------------------------------ */

static inline void header_init(struct ctx *c, struct ctx *parent, size_t n, struct ctx_pool *pool,
                               uint32_t flags)
{
    c->child = NULL;
    c->size = n;
    c->pool = pool;
    c->limit = parent != NULL ? parent->limit : NULL;
    c->flags = c->limit != NULL ? flags | CTX_LIMITED : flags;
    c->magic = CTX_MAGIC;
    link_under(c, parent);
}

/* Everything but the two common cases: a limit to respect, a pool without
 * room, memory exhausted, an impossible size. */
static STRATA_NOINLINE void *ctx_alloc_slow(struct ctx *parent, size_t n)
{
    struct ctx_limit *limit = parent != NULL ? parent->limit : NULL;
    if (n > CTX_MAX_PAYLOAD || !limit_take(limit, n)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t extent = extent_of(n);
    struct ctx_pool *pool = parent != NULL ? parent->pool : NULL;
    uint32_t flags = CTX_IN_POOL;
    struct ctx *c = pool != NULL ? pool_carve(pool, extent) : NULL;
    if (c == NULL) {
        pool = NULL;
        flags = 0;
        c = alloc_inline(extent);
        if (c == NULL) {
            limit_give(limit, n);
            errno = ENOMEM;
            return NULL;
        }
    }
    header_init(c, parent, n, pool, flags);
    return payload_of(c);
}

/* strata.h's inline path failed: a parent without a pool (the common case
 * here: a block from the thread's bin, with no call out, so this stays a
 * leaf function), a pool without room or kept from the inline path
 * (sanitizers, Valgrind), a limit, or an invalid parent (ctx_of reports). */
STRATA_EXPORT void *strata_ctx_alloc_slow(const void *parent, size_t n)
{
    struct ctx *p = ctx_or_root(parent);
    if (likely(n <= SMALL_REQUEST_MAX - CTX_HEADER) && likely(p == NULL || (p->pool == NULL && p->limit == NULL))) {
        struct ctx *c = bin_try_pop(extent_of(n));
        if (likely(c != NULL)) {
            header_init(c, p, n, NULL, 0);
            return payload_of(c);
        }
    }
    return ctx_alloc_slow(p, n);
}

STRATA_EXPORT void *strata_ctx_alloc(const void *parent, size_t n)
{
    return strata_ctx_alloc_inline(parent, n);
}

STRATA_EXPORT void *strata_ctx_zalloc(const void *parent, size_t n)
{
    void *p = strata_ctx_alloc(parent, n);
    if (p != NULL)
        memset(p, 0, n);
    return p;
}

STRATA_EXPORT void *strata_ctx_alloc_array(const void *parent, size_t count, size_t size)
{
    size_t n;
    if (__builtin_mul_overflow(count, size, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return strata_ctx_alloc(parent, n);
}

STRATA_EXPORT void *strata_ctx_pool(const void *parent, size_t size)
{
    struct ctx *p = ctx_or_root(parent);
    if (size > CTX_MAX_PAYLOAD) {
        errno = ENOMEM;
        return NULL;
    }
    size = (size + CTX_ALIGN - 1) & ~(CTX_ALIGN - 1);
    struct ctx_pool *pool = alloc_inline(sizeof(struct ctx_pool) + CTX_HEADER + size);
    if (pool == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    struct ctx *c = (struct ctx *)(pool + 1);
    pool->cursor = pool_start(pool);
    pool->end = pool->cursor + size;
    pool->inline_end = instrument_active() ? NULL : pool->end;
    pool->chunks = 0;
    pool->alive = 1;
    memory_released(pool->cursor, size);
    header_init(c, p, 0, pool, CTX_POOL);
    return payload_of(c);
}

/* ---- freeing --------------------------------------------------------------- */

/* Pools, limits and the pool context itself. */
static STRATA_NOINLINE void release_slow(struct ctx *c)
{
    limit_give(c->limit, c->size);
    if (c->flags & CTX_OWN_LIMIT)
        api_free(c->limit);
    if (c->flags & CTX_IN_POOL) {
        pool_give_back(c->pool, c, extent_of(c->size));
    } else if (c->flags & CTX_POOL) {
        struct ctx_pool *pool = c->pool;
        pool->alive = 0;
        if (pool->chunks == 0)
            pool_free_block(pool);
    } else {
        free_inline(c);
    }
}

/* A pool's chunk back to its pool: out of line, so that release, whose
 * other common case is a block back to the thread's bin, saves no
 * register on that path. */
static STRATA_NOINLINE void release_in_pool(struct ctx *c)
{
    pool_give_back(c->pool, c, extent_of(c->size));
}

/* Returns the memory of c, which has no children and is unlinked. */
static STRATA_ALWAYS_INLINE void release(struct ctx *c)
{
    uint32_t flags = c->flags & ~(uint32_t)(CTX_FREEING | CTX_DESTRUCTOR | CTX_NAMED);
    c->magic = CTX_FREED;
    if (likely(flags == CTX_IN_POOL)) {
        release_in_pool(c);
        return;
    }
    if (likely(flags == 0)) {
        free_inline(c);
        return;
    }
    release_slow(c);
}

/* The contexts whose destructors are running on this thread, innermost
 * first. Such a context and its ancestors up to the top of its free are
 * marked CTX_FREEING; a destructor may free anything but an ancestor of one
 * (that free would meet the path half freed), which is refused instead. */
struct destructor_frame {
    struct ctx *running;
    struct destructor_frame *outer;
};
static STRATA_TLS struct destructor_frame *destructors_running;

static int run_destructor(struct ctx *c)
{
    struct destructor_frame frame = {c, destructors_running};
    destructors_running = &frame;
    int result = c->destructor(payload_of(c));
    destructors_running = frame.outer;
    return result;
}

/* Whether freeing p (or its children) would meet a context whose destructor
 * is running below p. Costs a thread-local load when none is running. */
static inline bool frees_a_running_destructor(struct ctx *p)
{
    if (likely(destructors_running == NULL))
        return false;
    for (struct destructor_frame *f = destructors_running; f != NULL; f = f->outer)
        for (struct ctx *a = parent_of(f->running); a != NULL; a = parent_of(a))
            if (a == p)
                return true;
    return false;
}

static inline bool plain_leaf(const struct ctx *c)
{
    return c->child == NULL && !(c->flags & (CTX_DESTRUCTOR | CTX_FREEING));
}

/* Frees every descendant of top, which stays. Each context's destructor runs
 * before its children are freed; the path from top down to the context in
 * hand is marked CTX_FREEING, so none of it can be freed, moved or resized
 * meanwhile. A child whose destructor refuses is moved under top's parent. */
static void free_descendants(struct ctx *top)
{
    struct ctx *x = top;
    for (;;) {
        struct ctx *c = x->child;
        /* Leaves without destructors run no user code: release a run of
         * them and relink once. */
        if (c != NULL && plain_leaf(c)) {
            do {
                struct ctx *next = c->next;
                release(c);
                c = next;
            } while (c != NULL && plain_leaf(c));
            x->child = c;
            if (c != NULL)
                c->prev = NULL;
        }
        if (c != NULL) {
            if (unlikely(c->flags & CTX_FREEING)) /* frees_a_running_destructor refuses this */
                report_fatal("context freed while one of its descendants is being freed",
                             payload_of(x));
            c->flags |= CTX_FREEING;
            if (unlikely(c->flags & CTX_DESTRUCTOR) && run_destructor(c) != 0) {
                c->flags &= ~CTX_FREEING;
                move_under(c, parent_of(top));
                continue;
            }
            x = c;
            continue;
        }
        if (x == top)
            return;
        struct ctx *up = x->parent;
        detach(x);
        release(x);
        x = up;
    }
}

static STRATA_NOINLINE int ctx_free_with_destructor(struct ctx *c)
{
    if (c->flags & CTX_FREEING)
        return -1;
    c->flags |= CTX_FREEING;
    if ((c->flags & CTX_DESTRUCTOR) && run_destructor(c) != 0) {
        c->flags &= ~CTX_FREEING;
        return -1;
    }
    if (c->child != NULL)
        free_descendants(c);
    detach(c);
    release(c);
    return 0;
}

static const char *ctx_check_near(struct ctx *c, bool in_free);

/* Whether c is a pool's chunk that a free gives back with no call: no
 * name, destructor or limit; not the last chunk of a pool already freed
 * (whose return frees the pool's block); no instrumentation to tell. */
static STRATA_ALWAYS_INLINE bool quick_pool_chunk(const struct ctx *c)
{
    const struct ctx_pool *pool = c->pool;
    return !STRATA_ASAN_ACTIVE && c->flags == CTX_IN_POOL && pool->inline_end != NULL &&
           (pool->chunks > 1 || pool->alive);
}

/* pool_give_back for a quick chunk: its pool, emptied, is alive. */
static STRATA_ALWAYS_INLINE void release_quick_pool_chunk(struct ctx *c)
{
    struct ctx_pool *pool = c->pool;
    c->magic = CTX_FREED;
    pool_chunk_returned(pool, c, extent_of(c->size));
    if (pool->chunks == 0)
        pool->cursor = pool_start(pool);
}

static STRATA_NOINLINE int ctx_free_general(struct ctx *c, struct ctx *child);

/* The free of a context, its children first. A pool's chunk whose children
 * are all quick leaves (talloc's pool pattern: a parent and its strings)
 * takes no call and saves no register; anything else goes on from where
 * the quick loop stopped. */
static inline int ctx_free(struct ctx *c)
{
    if (unlikely(frees_a_running_destructor(c))) {
        errno = EBUSY;
        return -1;
    }
    struct ctx *child = c->child;
    if (likely(quick_pool_chunk(c))) {
        while (child != NULL && child->child == NULL && quick_pool_chunk(child)) {
            struct ctx *next = child->next;
            release_quick_pool_chunk(child);
            child = next;
        }
        if (likely(child == NULL) && likely(quick_pool_chunk(c))) {
            detach(c);
            release_quick_pool_chunk(c);
            return 0;
        }
    }
    return ctx_free_general(c, child);
}

/* ctx_free's every other case: child is c's newest child not yet freed. */
static STRATA_NOINLINE int ctx_free_general(struct ctx *c, struct ctx *child)
{
    c->child = child;
    if (child != NULL)
        child->prev = NULL;
    if (unlikely(c->flags & (CTX_DESTRUCTOR | CTX_FREEING)))
        return ctx_free_with_destructor(c);
    /* Children that are leaves without destructors run no user code: they
     * are released without relinking their siblings one by one. */
    while (child != NULL && plain_leaf(child)) {
        struct ctx *next = child->next;
        release(child);
        child = next;
    }
    if (unlikely(child != NULL)) {
        c->child = child;
        child->prev = NULL;
        c->flags |= CTX_FREEING;
        free_descendants(c);
    }
    detach(c);
    release(c);
    return 0;
}

/* The debug build's checkpoint: what the free left behind, the parent and
 * its children (where refusing descendants went), or a refused context. */
static STRATA_NOINLINE int ctx_free_checked(struct ctx *c)
{
    struct ctx *parent = parent_of(c);
    int result = ctx_free(c);
    /* Inside a destructor, the outer free's contexts are marked freeing. */
    bool in_free = destructors_running != NULL;
    const char *broken = parent != NULL ? ctx_check_near(parent, in_free) : NULL;
    if (broken == NULL && result != 0)
        broken = ctx_check_near(c, in_free);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "ctx_check at the end of strata_ctx_free", "%s", broken);
    return result;
}

STRATA_EXPORT int strata_ctx_free(void *p)
{
    if (unlikely(p == NULL))
        return -1;
    struct ctx *c = ctx_of(p);
    if (STRATA_DEBUG_BUILD)
        return ctx_free_checked(c);
    return ctx_free(c);
}

STRATA_EXPORT int strata_ctx_free_children(void *p)
{
    if (p == NULL)
        return -1;
    struct ctx *c = ctx_of(p);
    if (unlikely(frees_a_running_destructor(c))) {
        errno = EBUSY;
        return -1;
    }
    uint32_t was_freeing = c->flags & CTX_FREEING;
    c->flags |= CTX_FREEING;
    free_descendants(c);
    c->flags = (c->flags & ~CTX_FREEING) | was_freeing;
    return 0;
}

/* ---- moving and resizing ---------------------------------------------------- */

STRATA_EXPORT void *strata_ctx_steal(const void *new_parent, const void *p)
{
    if (p == NULL)
        return NULL;
    struct ctx *c = ctx_of(p);
    struct ctx *target = ctx_or_root(new_parent);
    if (unlikely(c->flags & CTX_FREEING)) {
        errno = EBUSY;
        return NULL;
    }
    for (struct ctx *a = target; a != NULL; a = parent_of(a))
        if (unlikely(a == c))
            report_fatal("context stolen under itself or one of its descendants", p);
    move_under(c, target);
    return (void *)(uintptr_t)p;
}

/* strata_ctx_realloc's steps. A shrink: the payload stays where it is, and
 * a pool's newest chunk gives the room back to its pool. */
static void ctx_shrink(struct ctx *c, size_t n)
{
    size_t old = c->size;
    limit_give(c->limit, old - n);
    c->size = n;
    if (c->flags & CTX_IN_POOL) {
        struct ctx_pool *pool = c->pool;
        size_t was = extent_of(old), now = extent_of(n);
        memory_released((char *)c + now, was - now);
        if ((char *)c + was == pool->cursor)
            pool->cursor = (char *)c + now;
    }
}

/* Growth in place: a pool's newest chunk takes the room after it, when
 * its pool has that much left; false, doing nothing, otherwise. */
static bool ctx_grow_in_place(struct ctx *c, size_t n)
{
    struct ctx_pool *pool = (c->flags & CTX_IN_POOL) ? c->pool : NULL;
    size_t was = extent_of(c->size), now = extent_of(n);
    if (pool == NULL || (char *)c + was != pool->cursor || now - was > (size_t)(pool->end - pool->cursor))
        return false;
    memory_usable((char *)c + was, now - was);
    pool->cursor = (char *)c + now;
    c->size = n;
    return true;
}

/* A pool's chunk moved: to a new chunk of the pool, else out of it to the
 * general allocator; its old chunk goes back to the pool. NULL, leaving
 * it where it was, without memory. */
static struct ctx *ctx_move_from_pool(struct ctx *c, size_t n)
{
    struct ctx_pool *pool = c->pool;
    size_t was = extent_of(c->size), now = extent_of(n);
    struct ctx *fresh = pool_carve(pool, now);
    bool carved = fresh != NULL;
    if (!carved) {
        fresh = alloc_inline(now);
        if (fresh == NULL)
            return NULL;
    }
    memcpy(fresh, c, CTX_HEADER + c->size);
    if (!carved) {
        fresh->flags &= ~CTX_IN_POOL;
        fresh->pool = NULL;
    }
    c->magic = CTX_FREED;
    pool_give_back(pool, c, was);
    return fresh;
}

/* A context of the general allocator moved by its realloc. NULL, leaving it
 * where it was, without memory. */
static struct ctx *ctx_move_in_heap(struct ctx *c, size_t n)
{
    /* A stale pointer to the old block must not look live. */
    c->magic = CTX_FREED;
    struct ctx *fresh = api_realloc(c, extent_of(n));
    if (fresh == NULL) {
        c->magic = CTX_MAGIC;
        return NULL;
    }
    fresh->magic = CTX_MAGIC;
    return fresh;
}

/* Steps: a shrink in place; growth in place within a pool; else a move
 * (within or out of a pool, or by the general allocator's realloc), with
 * the tree relinked to the new address. A limit is charged before growth
 * and refunded when it fails. */
STRATA_EXPORT void *strata_ctx_realloc(const void *parent, void *p, size_t n)
{
    if (p == NULL)
        return strata_ctx_alloc(parent, n);
    struct ctx *c = ctx_of(p);
    size_t old = c->size;
    if (c->flags & CTX_POOL) {
        errno = EINVAL; /* a pool's block is not a payload */
        return NULL;
    }
    if (n <= old) {
        ctx_shrink(c, n);
        return p;
    }
    if (n > CTX_MAX_PAYLOAD || (c->limit != NULL && !limit_take(c->limit, n - old))) {
        errno = ENOMEM;
        return NULL;
    }
    if (ctx_grow_in_place(c, n))
        return p;
    struct ctx *fresh = NULL;
    int error = ENOMEM;
    if (unlikely(c->flags & CTX_FREEING))
        error = EBUSY; /* moving would pull it from under the free in progress */
    else if (c->flags & CTX_IN_POOL)
        fresh = ctx_move_from_pool(c, n);
    else
        fresh = ctx_move_in_heap(c, n);
    if (fresh == NULL) {
        limit_give(c->limit, n - old);
        errno = error;
        return NULL;
    }
    relink_moved(fresh);
    fresh->size = n;
    return payload_of(fresh);
}

/* ---- naming, copies ----------------------------------------------------------- */

STRATA_EXPORT void *strata_ctx_parent(const void *p)
{
    if (p == NULL)
        return NULL;
    struct ctx *parent = parent_of(ctx_of(p));
    return parent != NULL ? payload_of(parent) : NULL;
}

STRATA_EXPORT void strata_ctx_set_destructor(const void *p, strata_ctx_destructor fn)
{
    if (p == NULL)
        return;
    struct ctx *c = ctx_of(p);
    c->destructor = fn;
    set_flag(c, CTX_DESTRUCTOR, fn != NULL);
}

STRATA_EXPORT void strata_ctx_set_name(const void *p, const char *name)
{
    if (p == NULL)
        return;
    struct ctx *c = ctx_of(p);
    c->name = name;
    set_flag(c, CTX_NAMED, name != NULL);
}

STRATA_EXPORT const char *strata_ctx_name(const void *p)
{
    if (p == NULL)
        return NULL;
    struct ctx *c = ctx_of(p);
    return (c->flags & CTX_NAMED) ? c->name : NULL;
}

STRATA_EXPORT void *strata_ctx_typed(const void *parent, size_t n, const char *name)
{
    void *p = strata_ctx_zalloc(parent, n);
    strata_ctx_set_name(p, name);
    return p;
}

STRATA_EXPORT void *strata_ctx_check_name(const void *p, const char *name)
{
    if (p == NULL)
        return NULL;
    struct ctx *c = ctx_of(p);
    const char *has = (c->flags & CTX_NAMED) ? c->name : NULL;
    if (likely(has == name || (has != NULL && strcmp(has, name) == 0)))
        return (void *)(uintptr_t)p;
    char what[160];
    snprintf(what, sizeof what, "context of type '%.60s' used as '%.60s'", has != NULL ? has : "(unnamed)",
             name);
    report_fatal(what, p);
}

STRATA_EXPORT void *strata_ctx_memdup(const void *parent, const void *src, size_t n)
{
    void *p = strata_ctx_alloc(parent, n);
    if (p != NULL && n != 0)
        memcpy(p, src, n);
    return p;
}

STRATA_EXPORT char *strata_ctx_strndup(const void *parent, const char *s, size_t n)
{
    size_t length = strnlen(s, n);
    char *p = strata_ctx_alloc(parent, length + 1);
    if (p != NULL) {
        memcpy(p, s, length);
        p[length] = '\0';
    }
    return p;
}

STRATA_EXPORT char *strata_ctx_strdup(const void *parent, const char *s)
{
    return strata_ctx_strdup_inline(parent, s);
}

STRATA_EXPORT char *strata_ctx_asprintf(const void *parent, const char *format, ...)
{
    char small[256];
    va_list args;
    va_start(args, format);
    int length = vsnprintf(small, sizeof small, format, args);
    va_end(args);
    if (length < 0)
        return NULL;
    char *p = strata_ctx_alloc(parent, (size_t)length + 1);
    if (p == NULL)
        return NULL;
    if ((size_t)length < sizeof small) {
        memcpy(p, small, (size_t)length + 1);
    } else {
        va_start(args, format);
        vsnprintf(p, (size_t)length + 1, format, args);
        va_end(args);
    }
    return p;
}

/* ---- sizes, limits, report -------------------------------------------------- */

STRATA_EXPORT size_t strata_ctx_size(const void *p)
{
    return p != NULL ? ctx_of(p)->size : 0;
}

STRATA_EXPORT size_t strata_ctx_total_size(const void *p)
{
    return p != NULL ? totals_of(ctx_of(p)).bytes : 0;
}

STRATA_EXPORT size_t strata_ctx_total_blocks(const void *p)
{
    return p != NULL ? totals_of(ctx_of(p)).blocks : 0;
}

STRATA_EXPORT int strata_ctx_set_limit(const void *p, size_t bytes)
{
    if (p == NULL) {
        errno = EINVAL;
        return -1;
    }
    struct ctx *c = ctx_of(p);
    if (c->flags & CTX_OWN_LIMIT) {
        struct ctx_limit *own = c->limit;
        if (bytes != 0) {
            own->max = bytes;
            return 0;
        }
        retarget_subtree(c, own, own->up);
        c->flags &= ~CTX_OWN_LIMIT;
        api_free(own);
        return 0;
    }
    if (bytes == 0)
        return 0;
    struct ctx_limit *own = alloc_inline(sizeof *own);
    if (own == NULL) {
        errno = ENOMEM;
        return -1;
    }
    own->max = bytes;
    own->used = totals_of(c).bytes;
    own->up = c->limit;
    retarget_subtree(c, own->up, own);
    c->flags |= CTX_OWN_LIMIT;
    return 0;
}

struct report_state {
    FILE *out;
};

static void report_line(struct ctx *c, unsigned depth, void *arg)
{
    struct report_state *r = arg;
    struct totals t = totals_of(c);
    fprintf(r->out, "%*s%-*s %8zu bytes own, %10zu in %6zu context%s%s%s%s\n", (int)(depth * 4), "",
            depth * 4 < 28 ? 28 - (int)(depth * 4) : 1, (c->flags & CTX_NAMED) ? c->name : "(unnamed)",
            c->size, t.bytes, t.blocks, t.blocks == 1 ? "" : "s",
            (c->flags & CTX_POOL) ? " [pool]" : "", (c->flags & CTX_OWN_LIMIT) ? " [limit]" : "",
            (c->flags & CTX_DESTRUCTOR) ? " [destructor]" : "");
}

STRATA_EXPORT void strata_ctx_report(const void *p, FILE *out)
{
    if (p == NULL)
        return;
    struct ctx *c = ctx_of(p);
    struct report_state r = {out};
    walk(c, report_line, &r);
    fflush(out);
}

/* ---- white-box check --------------------------------------------------------- */

struct check_state {
    const char *problem;
    struct ctx *top;
    bool in_free; /* top is being freed: its descendants may be marked so */
};

static void check_node(struct ctx *c, unsigned depth, void *arg)
{
    struct check_state *s = arg;
    (void)depth;
    if (s->problem != NULL)
        return;
    if (c->magic != CTX_MAGIC)
        s->problem = "a context in the tree is not live";
    else if (c->next != NULL && c->next->prev != c)
        s->problem = "next's prev does not point back";
    else if (c->next != NULL && c->next->parent != c->parent)
        s->problem = "siblings disagree about their parent";
    else if (c->child != NULL && (c->child->prev != NULL || c->child->parent != c))
        s->problem = "the newest child does not point to its parent";
    else if (!(c->flags & CTX_LIMITED) != (c->limit == NULL) ||
             ((c->flags & CTX_DESTRUCTOR) && c->destructor == NULL) ||
             ((c->flags & CTX_NAMED) && c->name == NULL))
        s->problem = "a context's flags disagree with its limit, destructor or name";
    else if (c != s->top && (c->flags & CTX_FREEING) && !s->in_free)
        s->problem = "a context outside any free is marked as being freed";
    else if ((c->flags & CTX_OWN_LIMIT) && c->limit->used != totals_of(c).bytes)
        s->problem = "a limit's used bytes differ from its subtree's size";
    else if ((c->flags & CTX_IN_POOL) &&
             ((char *)c < pool_start(c->pool) || (char *)c + extent_of(c->size) > c->pool->cursor))
        s->problem = "a pool chunk lies outside its pool's used part";
    else if ((c->flags & CTX_POOL) && c->pool != (struct ctx_pool *)c - 1)
        s->problem = "a pool does not allocate from its own block";
    else if (c != s->top) {
        struct ctx *parent = parent_of(c);
        struct ctx_limit *expected = parent->limit;
        if ((c->flags & CTX_OWN_LIMIT) ? c->limit->up != expected : c->limit != expected)
            s->problem = "a context's limit is not its parent's";
    }
}

const char *ctx_check(const void *p)
{
    struct check_state s = {NULL, ctx_of(p), false};
    walk(s.top, check_node, &s);
    return s.problem;
}

/* Children of one context the debug build's checkpoint looks at: enough to
 * see a broken link, few enough to keep a free of one of many cheap. */
#define CHECK_NEAR_CHILDREN 64

/* c itself and its newest children, not their subtrees. */
static const char *ctx_check_near(struct ctx *c, bool in_free)
{
    struct check_state s = {NULL, c, in_free || (c->flags & CTX_FREEING) != 0};
    check_node(c, 0, &s);
    unsigned n = 0;
    for (struct ctx *child = c->child; child != NULL && n < CHECK_NEAR_CHILDREN && s.problem == NULL;
         child = child->next, n++) {
        if (child->parent != c)
            s.problem = "a child does not point to its parent";
        else
            check_node(child, 1, &s);
    }
    return s.problem;
}

size_t ctx_pool_chunks(const void *pool)
{
    struct ctx *c = ctx_of(pool);
    return (c->flags & CTX_POOL) ? c->pool->chunks : 0;
}

size_t ctx_pool_used(const void *pool)
{
    struct ctx *c = ctx_of(pool);
    return (c->flags & CTX_POOL) ? (size_t)(c->pool->cursor - pool_start(c->pool)) : 0;
}
