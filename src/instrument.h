/* instrument.h: telling memory checkers which arena memory is usable.
 * Released arena memory is poisoned for AddressSanitizer and marked
 * no-access for Valgrind, so a use after release is caught; both compile to
 * nothing (or to Valgrind's few no-op instructions) when not in use. */
#ifndef STRATA_INSTRUMENT_H
#define STRATA_INSTRUMENT_H

#include <stddef.h>

#include "platform.h"

#if defined(__SANITIZE_ADDRESS__)
#define STRATA_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define STRATA_ASAN 1
#endif
#endif

#ifdef STRATA_ASAN
#define STRATA_ASAN_ACTIVE 1
#include <sanitizer/asan_interface.h>
#define asan_poison(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define asan_unpoison(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define STRATA_ASAN_ACTIVE 0
#define asan_poison(p, n) ((void)(p), (void)(n))
#define asan_unpoison(p, n) ((void)(p), (void)(n))
#endif

#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define STRATA_VALGRIND 1
#endif
#endif

/* Valgrind's client requests cost a stack frame and a stall each, more than
 * a pool chunk's whole life: they are made out of line (instrument.c), and
 * only when start-up (config_init) found the program under Valgrind. */
extern STRATA_INTERNAL _Bool instrument_valgrind;
void instrument_valgrind_mark(void *p, size_t n, _Bool usable);
/* Sets instrument_valgrind: whether the program runs under Valgrind. */
void instrument_detect(void);

#define valgrind_noaccess(p, n) \
    ((void)(__builtin_expect(instrument_valgrind, 0) && (instrument_valgrind_mark((p), (n), 0), 1)))
#define valgrind_undefined(p, n) \
    ((void)(__builtin_expect(instrument_valgrind, 0) && (instrument_valgrind_mark((p), (n), 1), 1)))

/* Whether released memory is being marked (ASan, or Valgrind found at
 * start): strata.h's inline paths must then step aside, since they hand out
 * memory without unmarking it. */
static inline _Bool instrument_active(void)
{
    return STRATA_ASAN_ACTIVE || instrument_valgrind;
}

/* Memory handed out: usable. Memory released: any access is an error. */
static inline void memory_usable(void *p, size_t n)
{
    asan_unpoison(p, n);
    valgrind_undefined(p, n);
}

static inline void memory_released(void *p, size_t n)
{
    asan_poison(p, n);
    valgrind_noaccess(p, n);
}

#endif /* STRATA_INSTRUMENT_H */
