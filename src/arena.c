/* arena.c: zsh-style arenas. Allocation bumps `cur` in the current chunk;
 * chunks form a stack (newest on top), big blocks a second stack; a mark is
 * a position in both, and releasing it pops everything above. Invariants:
 * memory between cur and end is released (poisoned); chunks above the
 * current one do not exist; the live-mark stack holds the serials of marks
 * not yet released, in increasing order; at most keep_chunks empty chunks
 * are cached, the rest are unmapped at release. One thread at a time. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define STRATA_BUILDING_LIBRARY 1 /* the out-of-line strata_arena_alloc */
#include "checkers.h"
#include "instrument.h"
#include "options.h"
#include "os.h"
#include "report.h"
#include "strata.h"



#define ARENA_ALIGN ((size_t)16) /* _Alignof(max_align_t) on the targets */
#define ARENA_DEFAULT_CHUNK ((size_t)64 * 1024) /* strata.h documents both defaults */
#define ARENA_DEFAULT_KEEP 2
#define CHUNK_HEADER ((size_t)32)
#define BIG_HEADER ((size_t)32)

struct chunk {
    struct chunk *below; /* the chunk under this one on the stack */
    size_t size;         /* the whole mapping */
    char *top;           /* where allocation stopped when a chunk went on top */
};

struct big {
    struct big *below;
    size_t map_size;
    size_t size;   /* as asked */
    size_t pinned; /* a mark points at it: it must not move */
};

struct strata_arena {
    /* struct strata_arena_head, which strata.h's inline bump reads: */
    char *cur, *end;
    char *last;          /* the newest allocation in a chunk (grow in place): it
                          * ends at cur */
    size_t inline_threshold; /* big_threshold, or 0 to keep strata.h's inline
                              * bump out (sanitizers, Valgrind) */
    struct chunk *chunk; /* the current chunk, or NULL */
    struct big *big;     /* the newest big block, or NULL */
    struct chunk *cache; /* empty chunks kept for reuse */
    size_t big_threshold; /* larger blocks get their own mapping */
    size_t cached, keep, chunk_size;
    size_t big_bytes;    /* asked for in live big blocks */
    size_t mapped, high_water, chunks, bigs;
    unsigned long serial;
    unsigned long *live; /* serials of live marks, increasing */
    size_t live_count, live_capacity;
};

_Static_assert(offsetof(struct strata_arena, cur) == offsetof(struct strata_arena_head, cur) &&
                   offsetof(struct strata_arena, end) == offsetof(struct strata_arena_head, end) &&
                   offsetof(struct strata_arena, last) == offsetof(struct strata_arena_head, last) &&
                   offsetof(struct strata_arena, inline_threshold) ==
                       offsetof(struct strata_arena_head, big_threshold),
               "strata.h's inline bump reads the arena's first members");

static size_t round_up(size_t n, size_t to)
{
    return (n + to - 1) & ~(to - 1);
}

static char *chunk_data(struct chunk *c)
{
    return (char *)c + CHUNK_HEADER;
}

static char *chunk_end(struct chunk *c)
{
    return (char *)c + c->size;
}

static void count_mapped(strata_arena *a, long delta)
{
    a->mapped += (size_t)delta;
    if (a->mapped > a->high_water)
        a->high_water = a->mapped;
}

STRATA_EXPORT strata_arena *strata_arena_new(const strata_arena_opts *opts)
{
    config_init();
    strata_arena *a = strata_calloc(1, sizeof *a);
    if (a == NULL)
        return NULL;
    size_t chunk = opts && opts->chunk_size ? opts->chunk_size : ARENA_DEFAULT_CHUNK;
    if (chunk < 4096 || chunk > ((size_t)1 << 30)) {
        strata_free(a);
        errno = EINVAL;
        return NULL;
    }
    a->chunk_size = round_up(chunk, os_page_size());
    a->keep = opts && opts->keep_chunks ? opts->keep_chunks : ARENA_DEFAULT_KEEP;
    /* Blocks above a quarter chunk get their own mapping: a chunk never
     * wastes more than a quarter on a block that did not fit. */
    a->big_threshold = a->chunk_size / 4;
    a->inline_threshold = instrument_active() ? 0 : a->big_threshold;
    return a;
}

/* Poison outlives a mapping in ASan's shadow: clear it before unmapping, or
 * the next mapping at this address would start poisoned. */
static void chunk_unmap(struct chunk *c)
{
    size_t size = c->size; /* read before Valgrind is told it is undefined */
    memory_usable(c, size);
    os_unmap(c, size);
}

static void chunk_drop(strata_arena *a, struct chunk *c)
{
    a->chunks--;
    if (a->cached < a->keep) {
        memory_released(chunk_data(c), c->size - CHUNK_HEADER);
        c->below = a->cache;
        a->cache = c;
        a->cached++;
        return;
    }
    count_mapped(a, -(long)c->size);
    chunk_unmap(c);
}

/* A failed mapping, or remapping (`old` non-NULL), at the memory limit,
 * the address-space limit or wherever the OS refused it, is tried once
 * more after the general allocator has given back what its caches hold
 * (strata_trim), as its own allocations are. */
static void *map_or_trim(size_t size, size_t align, void *old, size_t old_size)
{
    for (int attempt = 0;; attempt++) {
        void *p = old != NULL ? os_remap(old, old_size, size)
                  : align > os_page_size() ? os_map_aligned(size, align) : os_map(size);
        if (p != NULL || attempt == 1)
            return p;
        strata_trim();
    }
}

static bool chunk_push(strata_arena *a)
{
    struct chunk *c = a->cache;
    if (c != NULL) {
        a->cache = c->below;
        a->cached--;
    } else {
        c = map_or_trim(a->chunk_size, 0, NULL, 0);
        if (c == NULL)
            return false;
        c->size = a->chunk_size;
        count_mapped(a, (long)c->size);
        memory_released(chunk_data(c), c->size - CHUNK_HEADER);
    }
    if (a->chunk != NULL)
        a->chunk->top = a->cur;
    c->below = a->chunk;
    c->top = NULL;
    a->chunk = c;
    a->cur = chunk_data(c);
    a->end = chunk_end(c);
    a->chunks++;
    return true;
}

static void *big_alloc(strata_arena *a, size_t n, size_t align)
{
    size_t offset = round_up(BIG_HEADER, align);
    if (n > (size_t)PTRDIFF_MAX - offset - os_page_size()) {
        errno = ENOMEM;
        return NULL;
    }
    size_t map_size = round_up(n + offset, os_page_size());
    struct big *b = map_or_trim(map_size, align, NULL, 0);
    if (b == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    b->below = a->big;
    b->map_size = map_size;
    b->size = n;
    b->pinned = 0;
    a->big = b;
    a->bigs++;
    a->big_bytes += n;
    count_mapped(a, (long)map_size);
    return (char *)b + offset;
}

static void *alloc_aligned(strata_arena *a, size_t n, size_t align)
{
    if (unlikely(n > (size_t)PTRDIFF_MAX)) {
        errno = ENOMEM;
        return NULL;
    }
    size_t need = n ? round_up(n, ARENA_ALIGN) : ARENA_ALIGN;
    if (need > a->big_threshold || align > a->big_threshold)
        return big_alloc(a, n, align);
    char *p = (char *)round_up((uintptr_t)a->cur, align);
    if (unlikely(a->chunk == NULL || p + need > a->end)) {
        if (!chunk_push(a)) {
            errno = ENOMEM;
            return NULL;
        }
        p = (char *)round_up((uintptr_t)a->cur, align);
    }
    a->cur = p + need;
    a->last = p;
    strata_assert(a->cur <= a->end && p >= chunk_data(a->chunk));
    memory_usable(p, need);
    return p;
}

STRATA_EXPORT void *strata_arena_alloc(strata_arena *a, size_t n)
{
    /* The bump itself; cur stays 16-aligned, so no rounding of it. */
    size_t need = (n + ARENA_ALIGN - 1 + !n) & ~(ARENA_ALIGN - 1);
    char *p = a->cur;
    if (likely(n <= a->big_threshold && need <= (size_t)(a->end - p))) {
        a->cur = p + need;
        a->last = p;
        memory_usable(p, need);
        return p;
    }
    return alloc_aligned(a, n, ARENA_ALIGN);
}

STRATA_EXPORT void *strata_arena_alloc_aligned(strata_arena *a, size_t n, size_t align)
{
    if (align == 0 || (align & (align - 1)) != 0) {
        errno = EINVAL;
        return NULL;
    }
    return alloc_aligned(a, n, align < ARENA_ALIGN ? ARENA_ALIGN : align);
}

STRATA_EXPORT char *strata_arena_strndup(strata_arena *a, const char *s, size_t n)
{
    size_t length = strnlen(s, n);
    char *copy = strata_arena_alloc(a, length + 1);
    if (copy != NULL) {
        memcpy(copy, s, length);
        copy[length] = '\0';
    }
    return copy;
}

STRATA_EXPORT char *strata_arena_strdup(strata_arena *a, const char *s)
{
    return strata_arena_strndup(a, s, strlen(s));
}

STRATA_EXPORT char *strata_arena_printf(strata_arena *a, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int length = vsnprintf(NULL, 0, format, args);
    va_end(args);
    if (length < 0)
        return NULL;
    char *text = strata_arena_alloc(a, (size_t)length + 1);
    if (text == NULL)
        return NULL;
    va_start(args, format);
    vsnprintf(text, (size_t)length + 1, format, args);
    va_end(args);
    return text;
}

/* How many bytes from p on belong to allocations: p's block and the ones
 * after it in the same chunk or big block; a moved block copies no more. */
static size_t bytes_after(strata_arena *a, const char *p)
{
    for (struct big *b = a->big; b != NULL; b = b->below)
        if (p > (char *)b && p < (char *)b + b->map_size)
            return (size_t)((char *)b + b->map_size - p);
    for (struct chunk *c = a->chunk; c != NULL; c = c->below) {
        char *top = c == a->chunk ? a->cur : c->top;
        if (p >= chunk_data(c) && p < top)
            return (size_t)(top - p);
    }
    report_fatal("strata_arena_grow of a pointer this arena did not allocate", p);
}

STRATA_EXPORT void *strata_arena_grow(strata_arena *a, void *p, size_t n)
{
    if (p == NULL)
        return strata_arena_alloc(a, n);
    size_t need = n ? round_up(n, ARENA_ALIGN) : ARENA_ALIGN;
    if (p == a->last && (char *)p + need <= a->end && need <= a->big_threshold) {
        /* The newest allocation, with room after it: grow in place. */
        size_t size = (size_t)(a->cur - (char *)p);
        if (need > size)
            memory_usable((char *)p + size, need - size);
        else
            memory_released((char *)p + need, size - need);
        a->cur = (char *)p + need;
        return p;
    }
    struct big *b = a->big;
    size_t offset = round_up(BIG_HEADER, ARENA_ALIGN);
    if (b != NULL && p == (char *)b + offset && n > a->big_threshold && !b->pinned) {
        /* The newest big block: remap it, with headroom for more growth. */
        if (n + offset > b->map_size) {
            size_t map_size = round_up(n + growth_headroom(n) + offset, os_page_size());
            struct big *moved = map_or_trim(map_size, 0, b, b->map_size);
            if (moved == NULL) {
                errno = ENOMEM;
                return NULL;
            }
            count_mapped(a, (long)map_size - (long)moved->map_size);
            moved->map_size = map_size;
            a->big = b = moved;
        }
        a->big_bytes = a->big_bytes - b->size + n;
        b->size = n;
        return (char *)b + offset;
    }
    size_t old = bytes_after(a, p);
    void *q = strata_arena_alloc(a, n);
    if (q != NULL)
        memcpy(q, p, old < n ? old : n);
    return q;
}

STRATA_EXPORT strata_mark strata_arena_mark(strata_arena *a)
{
    if (a->live_count == a->live_capacity) {
        size_t capacity = a->live_capacity ? a->live_capacity * 2 : 16;
        unsigned long *live = strata_realloc(a->live, capacity * sizeof *live);
        if (live == NULL) { /* errno = ENOMEM; releasing this mark does nothing */
            strata_mark none = {0};
            return none;
        }
        a->live = live;
        a->live_capacity = capacity;
    }
    strata_mark m = {a, a->chunk, a->chunk ? (size_t)(a->cur - (char *)a->chunk) : 0, a->big,
                     ++a->serial};
    a->live[a->live_count++] = m.serial;
    /* What came before the mark stays as it is: growing it in place would
     * cross the mark, and moving the newest big block would leave the mark
     * pointing at its old address. Such blocks grow by moving instead. */
    a->last = NULL;
    if (a->big != NULL)
        a->big->pinned = 1;
    return m;
}

static void release_to(strata_arena *a, struct chunk *chunk, size_t offset, struct big *big)
{
    while (a->chunk != chunk && a->chunk != NULL) {
        struct chunk *c = a->chunk;
        a->chunk = c->below;
        chunk_drop(a, c);
    }
    if (a->chunk != NULL) {
        a->cur = (char *)a->chunk + offset;
        a->end = chunk_end(a->chunk);
        memory_released(a->cur, (size_t)(a->end - a->cur));
    } else {
        a->cur = a->end = NULL;
    }
    while (a->big != big && a->big != NULL) {
        struct big *b = a->big;
        a->big = b->below;
        a->bigs--;
        a->big_bytes -= b->size;
        count_mapped(a, -(long)b->map_size);
        os_unmap(b, b->map_size);
    }
    a->last = NULL;
}

/* ---- invariant checker (tests and the debug build) ----------------------- */
static STRATA_TLS char arena_broken[192];

#define BROKEN(...) (snprintf(arena_broken, sizeof arena_broken, __VA_ARGS__), arena_broken)

const char *arena_check(const strata_arena *a)
{
    size_t mapped = 0, chunks = 0, cached = 0, bigs = 0, big_bytes = 0;
    for (const struct chunk *c = a->chunk; c != NULL; c = c->below, chunks++) {
        if (c->size != a->chunk_size)
            return BROKEN("arena %p: chunk %p of %zu bytes, chunks are %zu", (const void *)a,
                          (const void *)c, c->size, a->chunk_size);
        const char *top = c == a->chunk ? a->cur : c->top;
        if (top < (const char *)c + CHUNK_HEADER || top > (const char *)c + c->size)
            return BROKEN("arena %p: chunk %p stops at %p, outside it", (const void *)a,
                          (const void *)c, (const void *)top);
        mapped += c->size;
    }
    if (a->chunk != NULL ? a->end != chunk_end(a->chunk) : a->cur != a->end)
        return BROKEN("arena %p: end %p is not the current chunk's end", (const void *)a,
                      (const void *)a->end);
    if (a->last != NULL && (a->chunk == NULL || a->last < chunk_data(a->chunk) || a->last > a->cur))
        return BROKEN("arena %p: the newest block %p is not in the current chunk below %p",
                      (const void *)a, (const void *)a->last, (const void *)a->cur);
    for (const struct chunk *c = a->cache; c != NULL; c = c->below, cached++)
        mapped += c->size;
    for (const struct big *b = a->big; b != NULL; b = b->below, bigs++) {
        if (b->size + BIG_HEADER > b->map_size)
            return BROKEN("arena %p: big block %p of %zu bytes in a mapping of %zu", (const void *)a,
                          (const void *)b, b->size, b->map_size);
        mapped += b->map_size;
        big_bytes += b->size;
    }
    if (chunks != a->chunks || cached != a->cached || bigs != a->bigs || cached > a->keep)
        return BROKEN("arena %p: %zu chunks, %zu cached, %zu big counted as %zu, %zu (keep %zu), %zu",
                      (const void *)a, chunks, cached, bigs, a->chunks, a->cached, a->keep, a->bigs);
    if (mapped != a->mapped || big_bytes != a->big_bytes || a->high_water < a->mapped)
        return BROKEN("arena %p: %zu bytes mapped and %zu in big blocks, counted as %zu, %zu (high %zu)",
                      (const void *)a, mapped, big_bytes, a->mapped, a->big_bytes, a->high_water);
    for (size_t i = 0; i < a->live_count; i++)
        if ((i > 0 && a->live[i] <= a->live[i - 1]) || a->live[i] > a->serial)
            return BROKEN("arena %p: live mark %zu has serial %lu after %lu (last given %lu)",
                          (const void *)a, i, a->live[i], i > 0 ? a->live[i - 1] : 0, a->serial);
    return NULL;
}

static void arena_debug_check(const strata_arena *a)
{
    const char *broken = arena_check(a);
    if (broken != NULL)
        report_assert(__FILE__, __LINE__, "arena_check at a release", "%s", broken);
}

STRATA_EXPORT void strata_arena_release(strata_arena *a, strata_mark mark)
{
    if (mark.arena == NULL && mark.serial == 0)
        return; /* a mark that could not be taken */
    size_t i = a->live_count;
    if (mark.arena == a)
        while (i > 0 && a->live[i - 1] > mark.serial)
            i--;
    if (mark.arena != a || i == 0 || a->live[i - 1] != mark.serial) {
        char what[96];
        snprintf(what, sizeof what, "release to a mark that is not live (serial %lu, arena %p)",
                 mark.serial, (void *)mark.arena);
        if (strata_options.check)
            report_fatal(what, a);
        report_warning(what, a);
        return;
    }
    a->live_count = i - 1;
    release_to(a, mark.chunk, mark.offset, mark.big);
    if (STRATA_DEBUG_BUILD)
        arena_debug_check(a);
}

STRATA_EXPORT void strata_arena_reset(strata_arena *a)
{
    a->live_count = 0;
    release_to(a, NULL, 0, NULL);
    if (STRATA_DEBUG_BUILD)
        arena_debug_check(a);
}

STRATA_EXPORT void strata_arena_destroy(strata_arena *a)
{
    if (a == NULL)
        return;
    strata_arena_reset(a);
    while (a->cache != NULL) {
        struct chunk *c = a->cache;
        a->cache = c->below;
        chunk_unmap(c);
    }
    strata_free(a->live);
    strata_free(a);
}

STRATA_EXPORT void strata_arena_stats(const strata_arena *a, struct strata_arena_stats *stats)
{
    /* In use: every chunk up to where allocation stopped, and big blocks. */
    size_t in_use = a->big_bytes;
    for (const struct chunk *c = a->chunk; c != NULL; c = c->below)
        in_use += (size_t)((c == a->chunk ? a->cur : c->top) - ((const char *)c + CHUNK_HEADER));
    stats->in_use = in_use;
    stats->mapped = a->mapped;
    stats->high_water = a->high_water;
    stats->chunks = a->chunks;
    stats->cached_chunks = a->cached;
    stats->big_blocks = a->bigs;
}
