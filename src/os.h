/* os.h: the OS layer, the bottom of strata, which every other file may use
 * and which uses nothing above it: every system call strata makes (os.c).
 * With report.h and options.h it is all the arenas need. */
#ifndef STRATA_OS_H
#define STRATA_OS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "platform.h"

/* ---- os.c: every system call ------------------------------------------
 * Contract: addresses and sizes are page multiples and non-zero; mapping
 * functions return NULL on failure and never allocate; errno is kept. */
/* The page size, read once (inline: large realloc asks it at every step). */
extern STRATA_INTERNAL size_t os_page_bytes;
size_t os_page_size_slow(void);
static inline size_t os_page_size(void)
{
    size_t bytes = os_page_bytes;
    return likely(bytes != 0) ? bytes : os_page_size_slow();
}
/* The memory limit (STRATA_LIMIT_MB) counts charged bytes: a charge that
 * would take them past `bytes` fails (0: no limit, and nothing is
 * counted). What is charged: the whole of a mapping made by os_map,
 * os_map_aligned and os_remap, until it is unmapped; of a reserved mapping
 * (os_reserve), what its user charges with os_charge and takes back with
 * os_uncharge (the segments: what pages have carved, segment.c). Set once,
 * at start-up. */
void os_set_limit(size_t bytes);
extern STRATA_INTERNAL size_t os_limit_bytes;
/* Whether there is a limit, and so anything to charge. */
static inline bool os_limited(void)
{
    return os_limit_bytes != 0;
}
/* Counts `bytes` more against the limit; false, counting nothing, past it. */
bool os_charge(size_t bytes);
/* Whether `bytes` more would fit under the limit now (another thread may
 * charge first: a hint, for not preparing what could not be charged). */
bool os_charge_room(size_t bytes);
void os_uncharge(size_t bytes);
/* Bytes charged now (0 without a limit). */
size_t os_charged_bytes(void);
/* Maps `size` bytes of fresh zeroed memory, charged; NULL on failure or
 * past the limit. */
void *os_map(size_t size);
/* Maps `size` bytes aligned to `alignment` (power of two >= page size),
 * charged. */
void *os_map_aligned(size_t size, size_t alignment);
/* Unmaps a mapping of os_map or os_map_aligned, and its charge. */
void os_unmap(void *addr, size_t size);
/* Maps `size` bytes (aligned to `alignment`) that the limit does not count:
 * address space whose user charges what it uses, or strata's own
 * structures. NULL on failure. */
void *os_reserve(size_t size);
void *os_reserve_aligned(size_t size, size_t alignment);
/* Reserves `size` bytes of address space that no page backs and no
 * touch may reach, for its user to open (os_protect) and charge piece by
 * piece; uncounted. NULL on failure. */
void *os_reserve_inaccessible(size_t size);
void os_release_inaccessible(void *addr, size_t size);
/* Unmaps a reserved mapping (its user has taken back its charges). */
void os_unreserve(void *addr, size_t size);
/* Gives the pages back to the OS; their contents read as zero afterwards.
 * `counted` of the bytes were resident until now (os_purged_bytes counts
 * them): the rest were given back before. */
void os_purge(void *addr, size_t size, size_t counted);
/* Makes the pages inaccessible (`access` false: a touch faults) or
 * readable and writable again; false when the kernel refuses. */
bool os_protect(void *addr, size_t size, bool access);
/* A segment's free slices closed and opened again (a touch of a closed
 * one faults, its pages are the OS's): by guard markers where the kernel
 * has them (Linux 6.13's MADV_GUARD_INSTALL; not under strict overcommit,
 * where a closed range would count as committed), which neither split the
 * mapping nor take the address space's lock for writing, so that other
 * threads' page faults go on meanwhile; else by mprotect. A close by
 * guard markers gives the range's pages back, one by mprotect keeps them
 * resident: callers close only ranges purged or never touched. False
 * when the system refuses (mprotect: too many mappings). */
bool os_close(void *addr, size_t size);
bool os_open(void *addr, size_t size);
/* Whether os_close uses guard markers in this process. */
bool os_closes_by_guards(void);
/* Asks for transparent huge pages on the range, or for none. */
void os_huge_pages(void *addr, size_t size, bool wanted);
/* Whether the kernel offers transparent huge pages to a range asked for
 * them (its setting "always" or "madvise", not "never"). */
bool os_huge_pages_offered(void);
/* Whether it gives them to ranges that did not ask (its setting
 * "always"): only then need a range say it wants none. */
bool os_huge_pages_unasked(void);
/* Makes the range (whole huge pages) huge pages now, copying what is
 * resident, the rest zero; the range is then asked for huge pages
 * (os_huge_pages) as `wanted_after` says. False when the kernel cannot or
 * will not (older than 6.1, no huge page free, a range of two
 * protections). */
bool os_huge_collapse(void *addr, size_t size, bool wanted_after);
/* Faults in the OS pages that [addr, addr + size) lies on, now, in one
 * call rather than one trap per page. */
void os_populate(void *addr, size_t size);
/* How many of the OS pages of [addr, addr + size) (page-aligned) are
 * resident, at most OS_RESIDENT_MAX_PAGES of them looked at; SIZE_MAX when
 * the kernel does not say. */
#define OS_RESIDENT_MAX_PAGES 256
size_t os_resident_pages(const void *addr, size_t size);
/* Which of the `pages` OS pages from addr (page-aligned; at most
 * OS_RESIDENT_MAX_PAGES) are resident: bit 0 of resident[i] for the i-th;
 * false when the kernel does not say. */
bool os_resident_map(const void *addr, size_t pages, unsigned char *resident);
/* Resizes a charged mapping, moving it if needed, its growth charged;
 * NULL on failure or past the limit. */
void *os_remap(void *addr, size_t old_size, size_t new_size);
void os_write_stderr(const char *text, size_t length);
/* Calls `handler` on the signal from now on (system calls it interrupts
 * restart); false when the signal cannot be caught. */
bool os_catch_signal(int signal, void (*handler)(int));
_Noreturn void os_abort(void);
/* The definition of `name` the dynamic linker finds after strata's own
 * (libstdc++'s operator new, say); NULL when there is none, as in a fully
 * static program. */
void *os_next_symbol(const char *name);
/* The process's definition of a symbol, first in the global scope (the
 * malloc a program's calls reach). */
void *os_default_symbol(const char *name);
/* Fault injection, for tests: from now, the `nth` call of the kind fails
 * (0: none), and one in `one_in` at random (0: none), as the OS could fail
 * it: a map or remap returns NULL, a purge leaves the pages resident, an
 * unmap leaves the mapping. */
enum os_fault_call { OS_FAULT_MAP, OS_FAULT_REMAP, OS_FAULT_PURGE, OS_FAULT_UNMAP, OS_FAULT_CALLS };
void os_fault_inject(enum os_fault_call call, unsigned long nth, unsigned long one_in, uint64_t seed);
/* How many calls of the kind failed by injection so far. */
unsigned long os_fault_count(enum os_fault_call call);
/* Number of mappings made so far, charged or reserved (for white-box
 * tests). */
size_t os_map_count(void);
/* Number of purge calls (madvise) made so far (for white-box tests). */
size_t os_purge_count(void);
/* Those the calling thread made. */
size_t os_purge_count_here(void);
/* Bytes strata holds mapped now (resident or not). */
size_t os_mapped_bytes(void);
/* Bytes given back with madvise or munmap so far. */
size_t os_purged_bytes(void);
/* The whole process's resident bytes (0 if /proc cannot be read). */
size_t os_resident_bytes(void);
/* 64 random bits from the kernel (a mix of the clock and addresses if it
 * has none to give). */
uint64_t os_random(void);
/* The thread's random numbers (xorshift, seeded from os_random at its first
 * use): not for secrets, for orders an attacker should not predict (the
 * secure flavour's carving order). */
extern STRATA_INTERNAL STRATA_TLS uint64_t thread_random_state;
uint64_t thread_random_seed(void);
static inline uint64_t thread_random(void)
{
    uint64_t x = thread_random_state;
    if (unlikely(x == 0))
        x = thread_random_seed();
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    thread_random_state = x;
    return x;
}
/* Monotonic time in nanoseconds (a vDSO call, no system call). */
uint64_t os_now_ns(void);
void os_sleep_ns(uint64_t ns);
/* Sleeps up to `ns` while `word` still holds `seen`: returns once another
 * thread has changed it and called os_wake, at once if it has changed
 * already, or when the time is up. */
void os_wait_ns(_Atomic uint32_t *word, uint32_t seen, uint64_t ns);
void os_wake(_Atomic uint32_t *word);
/* A lock of one futex word (the heaps'): 0 free, 1 held, 2 held with a
 * thread waiting. Taking and giving it free costs an atomic instruction
 * each; a pthread mutex's bookkeeping doubled the instructions of the bin
 * refills and flushes that take it (a heap's owner, on every one). A
 * process-wide zero is a free lock; a forked child sets its own free
 * again (os_lock_init), whatever the parent's threads held. */
struct os_lock {
    _Atomic uint32_t word;
};
void os_lock_wait(struct os_lock *lock);
void os_lock_wake(struct os_lock *lock);
static inline void os_lock_init(struct os_lock *lock)
{
    atomic_store_explicit(&lock->word, 0, memory_order_relaxed);
}
static inline bool os_lock_try(struct os_lock *lock)
{
    uint32_t free_word = 0;
    return atomic_compare_exchange_strong_explicit(&lock->word, &free_word, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}
static inline void os_lock_take(struct os_lock *lock)
{
    if (unlikely(!os_lock_try(lock)))
        os_lock_wait(lock);
}
/* Takes the lock, spinning a while before sleeping on it: for locks held
 * a few hundred nanoseconds by threads that are running (the heap
 * profiler's), where a futex sleep and wake cost far more than the wait. */
void os_lock_take_spinning(struct os_lock *lock);
static inline void os_lock_give(struct os_lock *lock)
{
    if (unlikely(atomic_exchange_explicit(&lock->word, 0, memory_order_release) == 2))
        os_lock_wake(lock);
}
/* The threads of this process still running (a main thread that ended
 * with pthread_exit is not); 0 when /proc cannot be read. */
unsigned os_live_threads(void);
void os_yield(void);
/* Names the calling thread (ps and top -H show it; at most 15 bytes). */
void os_name_thread(const char *name);
long os_pid(void);
/* The process's peak resident bytes (VmHWM; 0 if /proc cannot be read). */
size_t os_resident_peak_bytes(void);
/* Appends text to a file (made if need be) with one write; false on failure. */
bool os_append(const char *path, const char *text, size_t length);
/* The program's name, as its command line gave it, without the directory. */
const char *os_program_name(void);

#endif /* STRATA_OS_H */
