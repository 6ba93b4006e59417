/* platform.h: the one place for compiler and platform variants (branch
 * hints, function attributes, TLS model, symbol visibility) and for the
 * build variants (STRATA_DEBUG, STRATA_SECURE), so hot code carries no
 * #ifdefs: it tests constants that the compiler folds away. */
#ifndef STRATA_PLATFORM_H
#define STRATA_PLATFORM_H

#if !defined(__GNUC__) && !defined(__clang__)
#error "strata needs GCC or Clang (builtins, TLS model, visibility attributes)"
#endif
#if !defined(__linux__)
#error "strata targets Linux first: os.c uses mmap, mremap and madvise"
#endif

#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
/* Slow paths stay out of the fast ones' callers; the ones that report
 * misuse are also cold, so the compiler moves them out of the hot text. */
#define STRATA_NOINLINE __attribute__((noinline))
#define STRATA_COLD __attribute__((noinline, cold))
/* The fast paths' pieces: inlined wherever they are used, however many
 * callers a file has (the override calls the free path from five). */
#define STRATA_ALWAYS_INLINE inline __attribute__((always_inline))
#define STRATA_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#define STRATA_EXPORT __attribute__((visibility("default")))
/* A function whose reads AddressSanitizer must not check: a read, meant
 * and safe (within an OS page the pointer's own), of words that may
 * belong to no object of the program's. */
#define STRATA_NO_ADDRESS_CHECK __attribute__((no_sanitize_address))
/* On the library's own variables declared in headers: reached PC-relative,
 * not through the GOT (-fvisibility=hidden covers definitions only). */
#define STRATA_INTERNAL __attribute__((visibility("hidden")))
/* initial-exec: a thread-local access is one load from %fs, also when the
 * library is preloaded (it is then in the static TLS block). */
#define STRATA_TLS __thread __attribute__((tls_model("initial-exec")))

/* The line size that shared counters and cross-thread fields are spaced by. */
#define CACHE_LINE 64

/* The debug build (make test-debug) asserts invariants at their checkpoints. */
#ifdef STRATA_DEBUG
#define STRATA_DEBUG_BUILD 1
#else
#define STRATA_DEBUG_BUILD 0
#endif

/* The secure flavour (libstrata-secure): STRATA_SECURE is the set of its
 * protections (SECURE_ALL in the library; a build with some left out, or
 * with SECURE_PATHS alone, measures what each costs: bench/README.md, "The
 * secure flavour's cost"). Every secure build validates each free and catches every
 * double free it can see. secure_has(SECURE_X) is a constant, 0 in the
 * default flavour. */
enum secure_protection {
    SECURE_QUARANTINE = 1,  /* freed blocks wait in a per-thread quarantine */
    SECURE_ZERO = 2,        /* freed blocks zeroed, checked zero when handed out again */
    SECURE_CANARY = 4,      /* a canary after each block's end, checked at free and realloc */
    SECURE_RANDOM = 8,      /* blocks handed out in a random order within a page */
    SECURE_LARGE_GUARD = 16, /* large blocks end at a guard page; freed ones inaccessible */
    SECURE_META_GUARD = 32, /* a guard page before each segment's header */
    SECURE_PATHS = 64,      /* the secure flavour's own paths, with whatever of the above */
    SECURE_ALL = 127,
};
#if defined(STRATA_SECURE) && STRATA_SECURE
#define STRATA_SECURE_BUILD 1
#define STRATA_SECURE_SET (STRATA_SECURE | SECURE_PATHS)
#else
#define STRATA_SECURE_BUILD 0
#define STRATA_SECURE_SET 0
#endif
#define secure_has(protection) ((STRATA_SECURE_SET & (protection)) != 0)

/* Both flavours: a segment's free slices once given back to the OS, and
 * slices never used, are inaccessible (segment.c, "closed slices"), so a
 * write far from a block faults as glibc's would outside its heap (in
 * the default flavour not where STRATA_THP asks for huge pages: core.h,
 * slices_closed). 0 builds the measure of what closing them costs. */
#define CLOSED_SLICES 1

#endif /* STRATA_PLATFORM_H */
