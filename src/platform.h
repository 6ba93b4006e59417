/* platform.h: the one place for compiler and platform variants (branch
 * hints, TLS model, symbol visibility), so hot code carries no #ifdefs. */
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
#define STRATA_NOINLINE __attribute__((noinline))
#define STRATA_EXPORT __attribute__((visibility("default")))
/* initial-exec: a thread-local access is one load from %fs, also when the
 * library is preloaded (it is then in the static TLS block). */
#define STRATA_TLS __thread __attribute__((tls_model("initial-exec")))

#endif /* STRATA_PLATFORM_H */
