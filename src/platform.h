/* platform.h: the one place for compiler and platform variants (branch
 * hints, function attributes, TLS model, symbol visibility) and for the
 * build variants (STRATA_DEBUG), so hot code carries no #ifdefs. */
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
#define STRATA_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#define STRATA_EXPORT __attribute__((visibility("default")))
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

#endif /* STRATA_PLATFORM_H */
