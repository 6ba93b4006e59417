/* strata.h: the whole public API of the strata allocator suite.
 * Every function here is safe to call from any thread unless its comment
 * says otherwise. Nothing in this header depends on strata's internals but
 * the views the inline fast paths read (struct strata_arena_head,
 * strata_ctx_head, strata_ctx_pool_head): they are compiled into callers,
 * so a program built against one minor version links that version. */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version this header belongs to: major.minor.patch, as a string and
 * as one number (major * 10000 + minor * 100 + patch) for #if. The patch
 * level changes for fixes; the minor version when the API grows or the
 * layout of an inline view changes (see the SONAME in INSTALL.md); the
 * major version when a call's meaning changes. */
#define STRATA_VERSION_MAJOR 0
#define STRATA_VERSION_MINOR 3
#define STRATA_VERSION_PATCH 0
#define STRATA_VERSION "0.3.0"
#define STRATA_VERSION_NUMBER (STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH)

/* The version of the library the program runs with, "major.minor.patch",
 * which may be newer than the header it was built with. */
const char *strata_version(void);

/* The inline fast paths write through these views of the library's own
 * structures, which the library reads through its types: may_alias keeps
 * type-based alias analysis (say, across link-time optimisation) honest. */
#define STRATA_MAY_ALIAS __attribute__((__may_alias__))

/* ---- General allocator -------------------------------------------------
 * Thread-caching allocator: each thread allocates and frees from its own
 * heap without locks; a block freed by another thread is handed back to its
 * owner with one atomic operation. Blocks larger than STRATA_MMAP_THRESHOLD
 * are mapped directly and grown with mremap. Empty pages are returned to the
 * operating system, and a heap's memory is returned when its thread exits.
 *
 * libstrata.so and libstrata.a also export the standard names (malloc, free,
 * calloc, realloc, posix_memalign, ...), which forward to these functions. */

/* Blocks above this many bytes are mapped directly from the OS. */
#define STRATA_MMAP_THRESHOLD ((size_t)128 * 1024)

/* Returns a block of at least `size` bytes aligned for any object that fits
 * in it (16 bytes when size is a multiple of 16, 8 bytes otherwise), or NULL
 * with errno = ENOMEM. malloc(0) returns a unique, freeable pointer. */
void *strata_malloc(size_t size);

/* Returns `count * size` zeroed bytes, or NULL with errno = ENOMEM when the
 * product overflows or cannot be met. */
void *strata_calloc(size_t count, size_t size);

/* Resizes `ptr` to `size` bytes keeping its contents up to the smaller size.
 * realloc(NULL, n) is malloc(n); realloc(p, 0) frees p and returns NULL (as
 * glibc does). On failure returns NULL with errno = ENOMEM and leaves `ptr`
 * untouched; a shrink never fails (the block stays where it is if a smaller
 * one cannot be had). Large blocks grow with mremap, without copying. */
void *strata_realloc(void *ptr, size_t size);

/* realloc(ptr, count * size) with overflow detection (ENOMEM). */
void *strata_reallocarray(void *ptr, size_t count, size_t size);

/* Frees a block from any strata allocation function; NULL is ignored.
 * By default the checks are the cheap ones: freeing the block that was just
 * freed, or memory that holds no block, aborts with the address; a pointer
 * strata did not allocate is reported once and ignored. In checked mode
 * (STRATA_CHECK=1) every free is validated (start of a live block, any
 * earlier double free) and any misuse aborts with the address. */
void strata_free(void *ptr);

/* Returns `size` bytes aligned to `alignment`, which must be a power of two
 * (else NULL with errno = EINVAL; the override's memalign and aligned_alloc
 * round other alignments up, as glibc's do). Any power-of-two alignment is
 * served while memory lasts, size 0 included. */
void *strata_aligned_alloc(size_t alignment, size_t size);

/* POSIX: stores the block in *out and returns 0, or returns EINVAL when
 * `alignment` is not a power of two multiple of sizeof(void *), or ENOMEM.
 * errno is not changed. */
int strata_posix_memalign(void **out, size_t alignment, size_t size);

/* Returns the number of bytes usable in the block at `ptr` (at least the size
 * asked for), 0 for NULL or for memory strata did not allocate. A freed
 * block, or a pointer into strata's memory of blocks above 128 KiB that is
 * not one's start (inside one, or its memory freed), stops the program
 * with a report and the address, as glibc stops it where the chunk is
 * gone. The secure flavour (libstrata-secure) stops any pointer strata did
 * not hand out. */
size_t strata_usable_size(const void *ptr);

/* ---- Memory back to the OS, statistics ---------------------------------
 * Free memory goes back to the OS after it has been unused for a purge delay
 * (STRATA_PURGE_DELAY_MS, 10 ms by default; stretched up to 32 times while
 * the program takes back soon what went back), checked on the allocator's
 * slow paths and, once a heap holds 4 MiB of free pages, by a purger thread
 * (STRATA_BACKGROUND_PURGE). */

/* Returns everything that can be returned now: the calling thread's cached
 * blocks and empty pages, every heap's free pages, the cached empty segments
 * and large mappings. Other threads' caches are left to them. */
void strata_trim(void);

/* The heap profiler (docs/usage.md, "Where the memory goes"): with
 * STRATA_PROFILE set, one allocation in about every STRATA_PROFILE_SAMPLE
 * bytes (512 KiB) is sampled with its call stack. Writes the profile now to
 * `path`: the blocks and bytes each call stack holds and has allocated,
 * estimated from the samples, in the gperftools heap-profile text that
 * google-pprof and jeprof read (with the process's mappings, for their
 * symbols); beside it `path`.peak (held when the held bytes peaked),
 * `path`.folded and `path`.peak.folded (folded stacks of addresses and the
 * bytes they hold, for flame graphs). Returns 0, or an errno value: ENOTSUP
 * with the profiler off, or the error that stopped a file's write. */
int strata_profile_dump(const char *path);

#define STRATA_STATS_CLASSES 96

/* A snapshot of strata's memory. Other threads' caches are read without
 * stopping them, so while they run the figures are approximate; with them
 * quiet, `allocated` is exactly the sum of the usable sizes of live blocks.
 * A block freed by another thread counts until its owner collects it. */
struct strata_stats {
    size_t allocated;       /* bytes in live blocks (usable sizes; in the secure flavour, their slots, canaries included, and not the blocks its quarantines hold, which the table and the JSON count) */
    size_t allocated_peak;  /* highest `allocated` seen by the slow paths */
    size_t resident;        /* the process's resident bytes (/proc/self/statm) */
    size_t mapped;          /* bytes strata holds mapped, resident or not */
    size_t purged;          /* free bytes returned to the OS (madvise) so far, whether or not they were ever touched */
    size_t cached;          /* bytes in thread caches, free pages and cached mappings */
    size_t large_blocks;    /* live blocks above 128 KiB: to 3.75 MiB in segments, above mapped directly */
    size_t large_bytes;
    size_t live_heaps;      /* heaps with a live thread (an exited thread's heap kept for the next is not one; its memory is counted) */
    size_t abandoned_segments; /* segments of exited threads still holding blocks */
    size_t classes;         /* entries used in size_class */
    struct {
        size_t block_size;
        size_t blocks_in_use;
        size_t pages;
    } size_class[STRATA_STATS_CLASSES];
};

/* Fills *stats; returns 0, or EINVAL for NULL. */
int strata_stats_get(struct strata_stats *stats);

/* Prints the statistics as a readable table (STRATA_SHOW_STATS=1 does this
 * on stderr at exit), and as JSON. */
void strata_stats_print(FILE *out);
void strata_stats_json(FILE *out);

/* ---- Arenas --------------------------------------------------------------
 * zsh-style heaps: allocation bumps a pointer in the current chunk; marks
 * record a position and releasing one frees everything allocated after it
 * at once. Blocks too big for a chunk get their own mapping, returned at
 * release. A bounded number of empty chunks is kept for reuse, so a loop of
 * mark / allocate / release neither maps nor unmaps each time, and what a
 * spike leaves beyond that bound goes back to the OS at release.
 * An arena is used by one thread at a time (no locking inside). */

typedef struct strata_arena strata_arena;

typedef struct strata_arena_opts {
    size_t chunk_size;  /* bytes per chunk (0: 64 KiB); rounded to pages */
    size_t keep_chunks; /* empty chunks kept for reuse (0: 2) */
} strata_arena_opts;

/* A position in an arena. Marks nest: releasing one releases the marks made
 * after it, which are then no longer live. */
typedef struct strata_mark {
    strata_arena *arena;
    void *chunk;
    size_t offset;
    void *big;
    unsigned long serial;
} strata_mark;

/* Creates an arena (opts NULL: defaults); NULL with ENOMEM on failure. */
strata_arena *strata_arena_new(const strata_arena_opts *opts);
/* Frees everything the arena holds, its cached chunks and the arena. */
void strata_arena_destroy(strata_arena *a);

/* n bytes aligned to max_align_t; NULL with ENOMEM for an impossible size.
 * Inline below (a pointer bump), out of line in the library. */
void *strata_arena_alloc(strata_arena *a, size_t n);
/* n bytes aligned to `align` (a power of two, else NULL with EINVAL). */
void *strata_arena_alloc_aligned(strata_arena *a, size_t n, size_t align);
char *strata_arena_strdup(strata_arena *a, const char *s);
char *strata_arena_strndup(strata_arena *a, const char *s, size_t n);
/* printf into the arena; NULL on an encoding error (errno from vsnprintf). */
char *strata_arena_printf(strata_arena *a, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Grows (or shrinks) the block p to n bytes: in place when it is the most
 * recent allocation and the chunk has room (zsh's hrealloc), else moved with
 * its contents. p NULL is strata_arena_alloc. */
void *strata_arena_grow(strata_arena *a, void *p, size_t n);

/* A mark of what the arena holds now. When memory runs out for the stack
 * of live marks: a mark with arena NULL and errno = ENOMEM, whose release
 * does nothing. */
strata_mark strata_arena_mark(strata_arena *a);
/* Frees everything allocated after the mark. A mark that is not live
 * (released already, or from another arena) is reported on stderr and the
 * call does nothing; in checked mode (STRATA_CHECK=1) it aborts. */
void strata_arena_release(strata_arena *a, strata_mark mark);
/* Frees everything (marks included), keeping the bounded chunk cache. */
void strata_arena_reset(strata_arena *a);

struct strata_arena_stats {
    size_t in_use;     /* bytes handed out and not released */
    size_t mapped;     /* bytes of chunks (in use and cached) and big blocks */
    size_t high_water; /* the highest `mapped` so far */
    size_t chunks;     /* chunks in use */
    size_t cached_chunks;
    size_t big_blocks;
};

void strata_arena_stats(const strata_arena *a, struct strata_arena_stats *stats);

/* The first members of every arena, exposed so that the bump can be inline
 * in the caller; never write them. Under AddressSanitizer the library's
 * strata_arena_alloc runs instead, to unpoison what it hands out. */
struct STRATA_MAY_ALIAS strata_arena_head {
    char *cur;            /* next free byte of the current chunk (16-aligned) */
    char *end;            /* end of the current chunk */
    char *last;           /* the newest allocation, which ends at cur */
    size_t big_threshold; /* larger blocks get their own mapping; 0 when
                           * every allocation must go through the library */
};

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ARENA_INLINE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ARENA_INLINE 0
#endif
#endif
#ifndef STRATA_ARENA_INLINE
#define STRATA_ARENA_INLINE 1
#endif

#if STRATA_ARENA_INLINE && !defined(STRATA_BUILDING_LIBRARY)
static inline void *strata_arena_alloc_inline(strata_arena *a, size_t n)
{
    struct strata_arena_head *h = (struct strata_arena_head *)(void *)a;
    size_t need = (n + 15 + !n) & ~(size_t)15;
    char *p = h->cur;
    /* n - 1: a zero threshold keeps every size out, 0 included */
    if (__builtin_expect(n - 1 < h->big_threshold && need <= (size_t)(h->end - p), 1)) {
        h->cur = p + need;
        h->last = p;
        return p;
    }
    return strata_arena_alloc(a, n);
}
#define strata_arena_alloc(a, n) strata_arena_alloc_inline((a), (n))
#endif

/* ---- Contexts ------------------------------------------------------------
 * talloc-style trees: every allocation can be the parent of others, and
 * freeing one frees its whole subtree. A pointer from these functions is
 * aligned to 16 bytes; its header (80 bytes) sits just before it and is
 * checked on every call: a pointer that is not a live context (never one, or
 * freed already) is reported on stderr with its address and the program
 * aborts, in every mode. (A freed context of more than 128 KiB has gone back
 * to the OS with its header: using it faults instead.) The getters and
 * setters take NULL as "no context": sizes 0, name NULL, nothing set.
 *
 * Threads: one tree is used by one thread at a time (there are no locks in
 * it). A subtree can be handed to another thread by stealing it under a
 * context that thread owns (strata_ctx_steal), or as a new root, after which
 * only that thread touches it. The memory comes from strata_malloc, so it
 * may be freed on any thread. Pools are the exception: see strata_ctx_pool.
 *
 * Order of freeing: strata_ctx_free(p) first calls p's destructor; if that
 * refuses nothing is freed. Then p's children are freed, newest first, each
 * the same way (destructor, then its children, then itself), and p last. */

/* A destructor runs before its context's children are freed; returning -1
 * refuses the free (the context stays, with its subtree), 0 allows it. */
typedef int (*strata_ctx_destructor)(void *ptr);

/* n bytes under `parent` (NULL: a new root). Under a pool (or under a
 * context carved from one) the bytes come from the pool when they fit.
 * n = 0 gives a context with no payload, for use as a parent (talloc_new).
 * NULL with ENOMEM when memory or a limit (strata_ctx_set_limit) refuses. */
void *strata_ctx_alloc(const void *parent, size_t n);
/* strata_ctx_alloc, zeroed. */
void *strata_ctx_zalloc(const void *parent, size_t n);
/* count * size bytes; NULL with ENOMEM when the product overflows. */
void *strata_ctx_alloc_array(const void *parent, size_t count, size_t size);

/* Resizes p to n bytes keeping its contents, its place in the tree, its
 * children, name and destructor; returns the new address (p itself when it
 * grew in place: always when shrinking, and in a pool when p is the pool's
 * newest chunk and the pool has room). p NULL is strata_ctx_alloc(parent, n);
 * otherwise `parent` is not used (as in talloc; steal to move p). n = 0
 * keeps p with no payload. On failure NULL, p unchanged: ENOMEM (memory or
 * a limit), EINVAL for a pool (its block is not a payload), EBUSY when p is
 * being freed (from a destructor) and would have to move. */
void *strata_ctx_realloc(const void *parent, void *p, size_t n);

/* Frees p and its subtree (see "Order of freeing"). Returns 0, or -1 when
 * p's destructor refused (nothing freed), or, from a destructor, when p is
 * being freed already or is an ancestor of a context whose destructor is
 * running (errno EBUSY; nothing freed). A descendant whose destructor
 * refuses is kept with its subtree and moved under p's parent (a root if p
 * was one). NULL returns -1. */
int strata_ctx_free(void *p);
/* Frees p's children (as strata_ctx_free does) and keeps p; 0, or -1 as
 * strata_ctx_free (a destructor may free its own context's children). */
int strata_ctx_free_children(void *p);

/* Moves p with its subtree under new_parent (NULL: p becomes a root) and
 * returns p; NULL returns NULL. Moving a context under itself or under one
 * of its own descendants is reported with the address and aborts. The
 * subtree's bytes count towards new_parent's limits from then on, even past
 * them (a steal never fails for a limit). A context that is being freed
 * (from a destructor) cannot be moved: NULL with EBUSY. */
void *strata_ctx_steal(const void *new_parent, const void *p);
/* p's parent, NULL for a root. */
void *strata_ctx_parent(const void *p);

/* fn NULL removes the destructor. */
void strata_ctx_set_destructor(const void *p, strata_ctx_destructor fn);

/* Names p (for strata_ctx_report); the string is not copied, so it must
 * outlive p: a literal, or a string allocated under p (not p's own payload,
 * which a realloc may move), such as
 * strata_ctx_set_name(p, strata_ctx_asprintf(p, "conn %d", fd)).
 * strata_ctx_name returns the name, or NULL when there is none. */
void strata_ctx_set_name(const void *p, const char *name);
const char *strata_ctx_name(const void *p);

/* Typed contexts, as talloc(ctx, type) and talloc_get_type_abort:
 * strata_ctx_new allocates a zeroed `type` under parent, named after the
 * type; strata_ctx_get_type returns p as a `type *` when p was named so (by
 * strata_ctx_new or strata_ctx_set_name), and otherwise reports the address
 * and both names and aborts. NULL stays NULL. */
#define strata_ctx_new(parent, type) ((type *)strata_ctx_typed((parent), sizeof(type), #type))
#define strata_ctx_get_type(p, type) ((type *)strata_ctx_check_name((p), #type))
void *strata_ctx_typed(const void *parent, size_t n, const char *name);
void *strata_ctx_check_name(const void *p, const char *name);

/* Copies under parent. strndup copies at most n bytes and terminates. */
char *strata_ctx_strdup(const void *parent, const char *s);
char *strata_ctx_strndup(const void *parent, const char *s, size_t n);
void *strata_ctx_memdup(const void *parent, const void *src, size_t n);
/* printf under parent; NULL on failure (ENOMEM, or errno from vsnprintf). */
char *strata_ctx_asprintf(const void *parent, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* p's own payload size (as last asked for; 0 for a pool). */
size_t strata_ctx_size(const void *p);
/* Bytes asked for in p's whole subtree, p included (talloc_total_size). */
size_t strata_ctx_total_size(const void *p);
/* Contexts in p's whole subtree, p included (talloc_total_blocks). */
size_t strata_ctx_total_blocks(const void *p);

/* Prints p's subtree, one line per context, indented by depth, with its
 * name, own size, and its subtree's bytes and contexts. */
void strata_ctx_report(const void *p, FILE *out);

/* Caps p's subtree: an allocation or growth under p that would take
 * strata_ctx_total_size(p) above `bytes` fails with ENOMEM. Limits nest (an
 * allocation must fit every limit above it). bytes = 0 removes p's limit.
 * Returns 0, or -1 with ENOMEM (or EINVAL for NULL). */
int strata_ctx_set_limit(const void *p, size_t bytes);

/* A context whose descendants are carved from one block of `size` bytes:
 * one malloc for many small allocations. Freeing the pool's newest chunk
 * moves its cursor back, and when every chunk is freed it starts again from
 * the beginning (talloc's pool rule), so a loop that frees what it allocates,
 * newest first, never goes back to the system; space freed out of order
 * (or given up by shrinking a chunk that is not the newest) is reused once
 * the pool is empty. What does not fit comes from strata_malloc and is freed
 * with the tree. The block lives until the pool and every chunk carved from
 * it are freed (chunks stolen out of the tree keep it alive, and contexts
 * allocated under them are carved from it too). A pool's chunks belong to
 * the pool's thread: hand them to another thread only with the pool (steal
 * the pool, or a context above it). NULL with ENOMEM. */
void *strata_ctx_pool(const void *parent, size_t size);

/* The first members of a context header and of a pool, exposed so that
 * allocation from a pool (a pointer bump) can be inline in the caller; never
 * write them. Anything but the plain case (no pool, a limit, no room, an
 * invalid parent) goes to the library, which also reports misuse. */
struct STRATA_MAY_ALIAS strata_ctx_pool_head {
    char *cursor;     /* next free byte of the pool */
    char *inline_end; /* end of the pool, or NULL when every allocation must
                       * go through the library (sanitizers, Valgrind) */
};

struct STRATA_MAY_ALIAS strata_ctx_head {
    struct strata_ctx_head *next, *prev, *parent, *child;
    size_t size;
    strata_ctx_destructor destructor; /* read only when a flag says it is set */
    const char *name;                 /* likewise */
    struct strata_ctx_pool_head *pool;
    void *limit;
    unsigned int flags;
    unsigned int magic;
};

#define STRATA_CTX_MAGIC 0x5c7a7a11u
#define STRATA_CTX_IN_POOL 2u
/* Larger payloads always go through the library. */
#define STRATA_CTX_INLINE_MAX ((size_t)1 << 20)

/* strata_ctx_alloc's out-of-line part; call strata_ctx_alloc instead. */
void *strata_ctx_alloc_slow(const void *parent, size_t n);
/* The count of chunks carved from a pool lives after its head. */
struct STRATA_MAY_ALIAS strata_ctx_pool_counts {
    struct strata_ctx_pool_head head;
    size_t chunks;
};

static inline void *strata_ctx_alloc_inline(const void *parent, size_t n)
{
    if (__builtin_expect(parent != NULL && n <= STRATA_CTX_INLINE_MAX, 1)) {
        struct strata_ctx_head *p = (struct strata_ctx_head *)(void *)((char *)(size_t)parent -
                                                                       sizeof(struct strata_ctx_head));
        struct strata_ctx_pool_head *pool = p->pool;
        if (__builtin_expect(p->magic == STRATA_CTX_MAGIC && pool != NULL && p->limit == NULL, 1)) {
            size_t extent = (sizeof(struct strata_ctx_head) + n + 15) & ~(size_t)15;
            char *at = pool->cursor;
            if (__builtin_expect(at + extent <= pool->inline_end, 1)) {
                struct strata_ctx_head *c = (struct strata_ctx_head *)(void *)at;
                struct strata_ctx_head *head = p->child;
                pool->cursor = at + extent;
                ((struct strata_ctx_pool_counts *)(void *)pool)->chunks++;
                c->child = NULL;
                c->size = n;
                c->pool = pool;
                c->limit = NULL;
                c->flags = STRATA_CTX_IN_POOL;
                c->magic = STRATA_CTX_MAGIC;
                c->prev = NULL;
                c->parent = p;
                c->next = head;
                if (head != NULL)
                    head->prev = c;
                p->child = c;
                return c + 1;
            }
        }
    }
    return strata_ctx_alloc_slow(parent, n);
}

/* Inline too, so that copying a string literal costs one bump and a few
 * stores: its length is known at compile time. */
static inline char *strata_ctx_strdup_inline(const void *parent, const char *s)
{
    size_t n = __builtin_strlen(s) + 1;
    char *p = (char *)strata_ctx_alloc_inline(parent, n);
    if (__builtin_expect(p != NULL, 1))
        __builtin_memcpy(p, s, n);
    return p;
}

/* The same rule as the arena's inline bump: not under AddressSanitizer. */
#if STRATA_ARENA_INLINE && !defined(STRATA_BUILDING_LIBRARY)
#define strata_ctx_alloc(parent, n) strata_ctx_alloc_inline((parent), (n))
#define strata_ctx_strdup(parent, s) strata_ctx_strdup_inline((parent), (s))
#endif

#ifdef __cplusplus
}
#endif

#endif /* STRATA_H */
