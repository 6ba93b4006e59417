/* os.c: every system call strata makes, and nothing else: the one file a
 * port or a fault-injecting test replaces. Contract (os.h): addresses and
 * sizes given here are page multiples and non-zero; mapping functions return
 * NULL on failure and never call malloc; errno is as the caller left it. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "os.h"

size_t os_page_bytes;
static _Atomic size_t map_calls;
static _Atomic size_t purge_calls;
static STRATA_TLS size_t purge_calls_here;
static _Atomic size_t mapped_bytes;
static _Atomic size_t purged_bytes;
/* What the memory limit counts (os.h, os_charge): charged mappings whole,
 * and what the users of reserved ones charged. */
static _Atomic size_t charged_bytes;
size_t os_limit_bytes; /* STRATA_LIMIT_MB in bytes, 0: none; set at start-up */

void os_set_limit(size_t bytes)
{
    os_limit_bytes = bytes;
}

bool os_charge(size_t bytes)
{
    size_t limit = os_limit_bytes;
    if (limit == 0)
        return true;
    size_t old = atomic_load_explicit(&charged_bytes, memory_order_relaxed);
    do {
        if (bytes > limit || old > limit - bytes)
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&charged_bytes, &old, old + bytes, memory_order_relaxed,
                                                    memory_order_relaxed));
    return true;
}

bool os_charge_room(size_t bytes)
{
    size_t limit = os_limit_bytes;
    return limit == 0 || (bytes <= limit && atomic_load_explicit(&charged_bytes, memory_order_relaxed) <= limit - bytes);
}

void os_uncharge(size_t bytes)
{
    if (os_limit_bytes != 0)
        atomic_fetch_sub_explicit(&charged_bytes, bytes, memory_order_relaxed);
}

size_t os_charged_bytes(void)
{
    return atomic_load_explicit(&charged_bytes, memory_order_relaxed);
}

size_t os_page_size_slow(void)
{
    long size = sysconf(_SC_PAGESIZE);
    os_page_bytes = size > 0 ? (size_t)size : 4096;
    return os_page_bytes;
}

size_t os_map_count(void)
{
    return atomic_load_explicit(&map_calls, memory_order_relaxed);
}

size_t os_purge_count(void)
{
    return atomic_load_explicit(&purge_calls, memory_order_relaxed);
}

size_t os_purge_count_here(void)
{
    return purge_calls_here;
}

size_t os_purged_bytes(void)
{
    return atomic_load_explicit(&purged_bytes, memory_order_relaxed);
}

size_t os_mapped_bytes(void)
{
    return atomic_load_explicit(&mapped_bytes, memory_order_relaxed);
}

/* ---- fault injection (tests) --------------------------------------------- */
struct fault_plan {
    _Atomic unsigned long countdown; /* fail when it reaches 0 from 1; 0: off */
    _Atomic unsigned long one_in;    /* fail one call in this many; 0: off */
    _Atomic unsigned long calls;
    _Atomic unsigned long failed;
};

static struct fault_plan faults[OS_FAULT_CALLS];
static _Atomic bool faults_armed;
static _Atomic uint64_t fault_seed; /* set by a test while the purger may be calling */

void os_fault_inject(enum os_fault_call call, unsigned long nth, unsigned long one_in, uint64_t seed)
{
    atomic_store(&fault_seed, seed);
    atomic_store(&faults[call].countdown, nth);
    atomic_store(&faults[call].one_in, one_in);
    bool any = false;
    for (int i = 0; i < OS_FAULT_CALLS; i++)
        any |= atomic_load(&faults[i].countdown) != 0 || atomic_load(&faults[i].one_in) != 0;
    atomic_store(&faults_armed, any);
}

unsigned long os_fault_count(enum os_fault_call call)
{
    return atomic_load(&faults[call].failed);
}

/* Whether this call of the kind is to fail (one relaxed load when unarmed). */
static bool fault_now(enum os_fault_call call)
{
    if (likely(!atomic_load_explicit(&faults_armed, memory_order_relaxed)))
        return false;
    struct fault_plan *plan = &faults[call];
    bool fail = false;
    unsigned long left = atomic_load(&plan->countdown);
    while (left != 0 && !atomic_compare_exchange_weak(&plan->countdown, &left, left - 1))
        ;
    fail = left == 1;
    unsigned long one_in = atomic_load(&plan->one_in);
    if (one_in != 0) {
        uint64_t x = (atomic_fetch_add(&plan->calls, 1) + 1) * 0x9e3779b97f4a7c15u ^ atomic_load(&fault_seed);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9u;
        x ^= x >> 29;
        fail |= x % one_in == 0;
    }
    if (fail)
        atomic_fetch_add(&plan->failed, 1);
    return fail;
}

/* mmap itself, counted, at `hint` if that range is free (NULL: anywhere);
 * no limit, no injected failure. */
static void *map_raw_at(void *hint, size_t size)
{
    atomic_fetch_add_explicit(&map_calls, 1, memory_order_relaxed);
    int saved = errno;
    void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    if (p == MAP_FAILED)
        return NULL;
    atomic_fetch_add_explicit(&mapped_bytes, size, memory_order_relaxed);
    return p;
}

static void *map_raw(size_t size)
{
    return map_raw_at(NULL, size);
}

/* Unmaps the trimmed ends of an aligned mapping: not memory given back. */
static void unmap_trimmed(void *addr, size_t size)
{
    int saved = errno;
    if (munmap(addr, size) == 0)
        atomic_fetch_sub_explicit(&mapped_bytes, size, memory_order_relaxed);
    errno = saved;
}

/* Where the address space is too short for the padding (an address-space
 * limit): the mapping of `size` bytes alone, kept if the kernel happened to
 * align it, else tried once more at the aligned address below it. */
static void *map_aligned_unpadded(size_t size, size_t alignment)
{
    char *raw = map_raw(size);
    if (raw == NULL || ((uintptr_t)raw & (alignment - 1)) == 0)
        return raw;
    unmap_trimmed(raw, size);
    char *hint = (char *)((uintptr_t)raw & ~(uintptr_t)(alignment - 1));
    char *again = map_raw_at(hint, size);
    if (again == hint || again == NULL)
        return again;
    unmap_trimmed(again, size);
    return NULL;
}

/* A mapping of `size` bytes aligned to `alignment`, padded while it is made
 * and trimmed to its size; NULL on failure, injected ones included. */
static void *map_aligned(size_t size, size_t alignment)
{
    if (fault_now(OS_FAULT_MAP))
        return NULL;
    if (alignment <= os_page_size())
        return map_raw(size);
    size_t padded = size + alignment - os_page_size();
    if (padded < size)
        return NULL;
    char *raw = map_raw(padded);
    if (raw == NULL)
        return map_aligned_unpadded(size, alignment);
    uintptr_t aligned = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
    size_t head = aligned - (uintptr_t)raw;
    size_t tail = padded - head - size;
    if (head)
        unmap_trimmed(raw, head);
    if (tail)
        unmap_trimmed((char *)aligned + size, tail);
    return (void *)aligned;
}

/* Unmaps a mapping; false, leaving it mapped, when the unmap fails. */
static bool unmap(void *addr, size_t size)
{
    if (fault_now(OS_FAULT_UNMAP))
        return false;
    int saved = errno;
    bool done = munmap(addr, size) == 0;
    errno = saved;
    if (done) {
        atomic_fetch_sub_explicit(&mapped_bytes, size, memory_order_relaxed);
        atomic_fetch_add_explicit(&purged_bytes, size, memory_order_relaxed);
    }
    return done;
}

void *os_map(size_t size)
{
    return os_map_aligned(size, os_page_size());
}

void *os_map_aligned(size_t size, size_t alignment)
{
    /* The limit counts what stays mapped, not the padding trimmed off. */
    if (!os_charge(size))
        return NULL;
    void *p = map_aligned(size, alignment);
    if (p == NULL)
        os_uncharge(size);
    return p;
}

void os_unmap(void *addr, size_t size)
{
    if (unmap(addr, size)) /* else the mapping stays, and stays charged */
        os_uncharge(size);
}

void *os_reserve(size_t size)
{
    return map_aligned(size, os_page_size());
}

void *os_reserve_aligned(size_t size, size_t alignment)
{
    return map_aligned(size, alignment);
}

void *os_reserve_inaccessible(size_t size)
{
    if (fault_now(OS_FAULT_MAP))
        return NULL;
    int saved = errno;
    void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

void os_release_inaccessible(void *addr, size_t size)
{
    int saved = errno;
    munmap(addr, size);
    errno = saved;
}

void os_unreserve(void *addr, size_t size)
{
    unmap(addr, size);
}

void os_purge(void *addr, size_t size, size_t counted)
{
    if (fault_now(OS_FAULT_PURGE))
        return; /* the pages stay resident, with their contents */
    int saved = errno;
    atomic_fetch_add_explicit(&purge_calls, 1, memory_order_relaxed);
    purge_calls_here++;
    if (madvise(addr, size, MADV_DONTNEED) == 0)
        atomic_fetch_add_explicit(&purged_bytes, counted, memory_order_relaxed);
    errno = saved;
}

bool os_protect(void *addr, size_t size, bool access)
{
    int saved = errno;
    bool done = mprotect(addr, size, access ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
    errno = saved;
    return done;
}

/* Linux 6.13's advice; older headers lack its numbers. */
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#define MADV_GUARD_REMOVE 103
#endif

/* A small /proc or /sys file's text, NUL-terminated; false when it cannot be read.
 * errno is as the caller left it. */
static bool kernel_file_read(const char *path, char *text, size_t size)
{
    int saved = errno;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, text, size - 1);
    if (fd >= 0)
        close(fd);
    errno = saved;
    if (n <= 0)
        return false;
    text[n] = '\0';
    return true;
}

/* Whether guard markers may close ranges here: the kernel takes the advice
 * (tried on a page of its own) and overcommit is not strict (mode 2 counts
 * a writable private mapping as committed whole, closed or not). */
static bool guards_usable(void)
{
    char text[8];
    if (kernel_file_read("/proc/sys/vm/overcommit_memory", text, sizeof text) && text[0] == '2')
        return false;
    size_t page = os_page_size();
    void *probe = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED)
        return false;
    bool usable = madvise(probe, page, MADV_GUARD_INSTALL) == 0 && madvise(probe, page, MADV_GUARD_REMOVE) == 0;
    munmap(probe, page);
    return usable;
}

/* 0 undecided, 1 guard markers, 2 mprotect. */
static _Atomic int close_method;
/* A range was closed by mprotect where guard markers failed (a locked
 * mapping, say): opens then undo both. */
static _Atomic bool closed_by_protection;

bool os_closes_by_guards(void)
{
    int method = atomic_load_explicit(&close_method, memory_order_relaxed);
    if (method == 0) {
        int saved = errno;
        method = guards_usable() ? 1 : 2;
        errno = saved;
        atomic_store_explicit(&close_method, method, memory_order_relaxed);
    }
    return method == 1;
}

bool os_close(void *addr, size_t size)
{
    if (os_closes_by_guards()) {
        int saved = errno;
        bool done = madvise(addr, size, MADV_GUARD_INSTALL) == 0;
        errno = saved;
        if (done)
            return true;
        atomic_store_explicit(&closed_by_protection, true, memory_order_relaxed);
    }
    return os_protect(addr, size, false);
}

bool os_open(void *addr, size_t size)
{
    if (!os_closes_by_guards())
        return os_protect(addr, size, true);
    int saved = errno;
    bool done = madvise(addr, size, MADV_GUARD_REMOVE) == 0;
    errno = saved;
    if (done && !atomic_load_explicit(&closed_by_protection, memory_order_relaxed))
        return true;
    return os_protect(addr, size, true);
}

/* Cleared when the kernel does not know MADV_POPULATE_WRITE (before Linux
 * 5.14: EINVAL), so that the touches trap as they would have, with no
 * call first. */
static _Atomic bool populate_known = true;

void os_populate(void *addr, size_t size)
{
    if (!atomic_load_explicit(&populate_known, memory_order_relaxed))
        return;
    uintptr_t page = os_page_size(), from = (uintptr_t)addr & ~(page - 1);
    size_t length = (((uintptr_t)addr + size + page - 1) & ~(page - 1)) - from;
    int saved = errno;
    if (madvise((void *)from, length, MADV_POPULATE_WRITE) != 0 && errno == EINVAL)
        atomic_store_explicit(&populate_known, false, memory_order_relaxed);
    errno = saved;
}

bool os_resident_map(const void *addr, size_t pages, unsigned char *resident)
{
    int saved = errno;
    int failed = mincore((void *)addr, pages * os_page_size(), resident);
    errno = saved;
    return failed == 0;
}

size_t os_resident_pages(const void *addr, size_t size)
{
    unsigned char resident[OS_RESIDENT_MAX_PAGES];
    size_t pages = size / os_page_size();
    if (pages > OS_RESIDENT_MAX_PAGES)
        pages = OS_RESIDENT_MAX_PAGES;
    if (!os_resident_map(addr, pages, resident))
        return SIZE_MAX;
    size_t count = 0;
    for (size_t i = 0; i < pages; i++)
        count += resident[i] & 1;
    return count;
}

/* The kernel's transparent huge page setting, read once: 1 "always", 2
 * "madvise", 3 "never" (or not said). */
static int huge_pages_setting(void)
{
    static _Atomic int known;
    int state = atomic_load_explicit(&known, memory_order_relaxed);
    if (state == 0) {
        char text[128];
        if (!kernel_file_read("/sys/kernel/mm/transparent_hugepage/enabled", text, sizeof text))
            text[0] = '\0';
        state = strstr(text, "[always]") != NULL ? 1 : strstr(text, "[madvise]") != NULL ? 2 : 3;
        atomic_store_explicit(&known, state, memory_order_relaxed);
    }
    return state;
}

bool os_huge_pages_offered(void)
{
    return huge_pages_setting() != 3;
}

bool os_huge_pages_unasked(void)
{
    return huge_pages_setting() == 1;
}

/* Linux 6.1's advice; older headers lack its number. */
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

bool os_huge_collapse(void *addr, size_t size, bool wanted_after)
{
    /* 0 unknown, 1 the kernel takes the advice, 2 it does not (a range
     * of length 0 is checked for its advice only). */
    static _Atomic int known;
    int saved = errno;
    int state = atomic_load_explicit(&known, memory_order_relaxed);
    if (state == 0) {
        state = madvise(addr, 0, MADV_COLLAPSE) == 0 ? 1 : 2;
        atomic_store_explicit(&known, state, memory_order_relaxed);
    }
    bool collapsed = false;
    if (state == 1) {
        /* A range marked for no huge pages (os_huge_pages) refuses the
         * advice: the mark leaves it for the call and, unless huge pages
         * are `wanted_after`, comes back, which the huge page outlives. */
        madvise(addr, size, MADV_HUGEPAGE);
        collapsed = madvise(addr, size, MADV_COLLAPSE) == 0;
        if (!wanted_after)
            madvise(addr, size, MADV_NOHUGEPAGE);
    }
    errno = saved;
    return collapsed;
}

void os_huge_pages(void *addr, size_t size, bool wanted)
{
    int saved = errno;
    madvise(addr, size, wanted ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    errno = saved;
}

void *os_remap(void *addr, size_t old_size, size_t new_size)
{
    size_t growth = new_size > old_size ? new_size - old_size : 0;
    if (growth != 0 && !os_charge(growth))
        return NULL; /* STRATA_LIMIT_MB applies to growth too */
    void *p = MAP_FAILED;
    if (!fault_now(OS_FAULT_REMAP)) {
        int saved = errno;
        p = mremap(addr, old_size, new_size, MREMAP_MAYMOVE);
        errno = saved;
    }
    if (p == MAP_FAILED) {
        os_uncharge(growth);
        return NULL;
    }
    atomic_fetch_add_explicit(&mapped_bytes, new_size - old_size, memory_order_relaxed);
    if (new_size < old_size)
        os_uncharge(old_size - new_size);
    return p;
}

uint64_t os_random(void)
{
    uint64_t value = 0;
    int saved = errno;
    ssize_t n = getrandom(&value, sizeof value, GRND_NONBLOCK);
    errno = saved;
    if (n != (ssize_t)sizeof value) {
        value ^= os_now_ns() * 0x9e3779b97f4a7c15u ^ (uint64_t)(uintptr_t)&value;
        value ^= value >> 29;
        value *= 0xbf58476d1ce4e5b9u;
        value ^= value >> 32;
    }
    return value;
}

STRATA_TLS uint64_t thread_random_state;

uint64_t thread_random_seed(void)
{
    return os_random() | 1; /* xorshift's state is never 0 */
}

uint64_t os_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

void os_sleep_ns(uint64_t ns)
{
    struct timespec pause = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    int saved = errno;
    while (nanosleep(&pause, &pause) != 0 && errno == EINTR)
        ;
    errno = saved;
}

void os_wait_ns(_Atomic uint32_t *word, uint32_t seen, uint64_t ns)
{
    struct timespec pause = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    int saved = errno;
    /* Returns at once if the word has changed: no wake is lost. */
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, seen, &pause, NULL, 0);
    errno = saved;
}

void os_wake(_Atomic uint32_t *word)
{
    int saved = errno;
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    errno = saved;
}

void os_lock_wait(struct os_lock *lock)
{
    /* Marked as waited on (2), then asleep until it is given; a taker that
     * finds it free takes it marked 2, as another may still wait. */
    while (atomic_exchange_explicit(&lock->word, 2, memory_order_acquire) != 0) {
        int saved = errno;
        syscall(SYS_futex, (uint32_t *)&lock->word, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
        errno = saved;
    }
}

void os_lock_take_spinning(struct os_lock *lock)
{
    for (int spin = 0; spin < 200; spin++) {
        if (atomic_load_explicit(&lock->word, memory_order_relaxed) == 0 && os_lock_try(lock))
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    os_lock_take(lock);
}

void os_lock_wake(struct os_lock *lock)
{
    int saved = errno;
    syscall(SYS_futex, (uint32_t *)&lock->word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    errno = saved;
}

void os_yield(void)
{
    sched_yield();
}

void os_name_thread(const char *name)
{
    int saved = errno;
    prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0);
    errno = saved;
}

unsigned os_live_threads(void)
{
    char text[1024];
    if (!kernel_file_read("/proc/self/stat", text, sizeof text))
        return 0;
    /* After the command's name, which may hold anything but ends at the
     * last ')': the state (the main thread's), then num_threads 17 fields
     * on. An ended main thread stays a zombie, counted, until the process
     * ends. */
    const char *at = strrchr(text, ')');
    char state = 0;
    unsigned long threads = 0;
    if (at == NULL ||
        sscanf(at + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lu", &state,
               &threads) != 2)
        return 0;
    return threads > 0 && state == 'Z' ? (unsigned)threads - 1 : (unsigned)threads;
}

size_t os_resident_peak_bytes(void)
{
    char text[4096];
    if (!kernel_file_read("/proc/self/status", text, sizeof text))
        return 0;
    const char *at = strstr(text, "VmHWM:");
    unsigned long kib = 0;
    if (at == NULL || sscanf(at + 6, "%lu", &kib) != 1)
        return 0;
    return (size_t)kib * 1024;
}

bool os_append(const char *path, const char *text, size_t length)
{
    int saved = errno;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    bool written = false;
    if (fd >= 0) {
        written = write(fd, text, length) == (ssize_t)length;
        close(fd);
    }
    errno = saved;
    return written;
}

long os_pid(void)
{
    return (long)getpid();
}

const char *os_program_name(void)
{
    /* glibc's, set before any constructor runs; never allocates. */
    return program_invocation_short_name != NULL && *program_invocation_short_name != '\0'
               ? program_invocation_short_name
               : "?";
}

size_t os_resident_bytes(void)
{
    char text[96];
    if (!kernel_file_read("/proc/self/statm", text, sizeof text))
        return 0;
    unsigned long size = 0, resident = 0;
    if (sscanf(text, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (size_t)resident * os_page_size();
}

bool os_catch_signal(int signal, void (*handler)(int))
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    int saved = errno;
    bool caught = sigaction(signal, &action, NULL) == 0;
    errno = saved;
    return caught;
}

void os_write_stderr(const char *text, size_t length)
{
    while (length > 0) {
        ssize_t n = write(STDERR_FILENO, text, length);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return;
        }
        text += n;
        length -= (size_t)n;
    }
}

_Noreturn void os_abort(void)
{
    abort();
}

void *os_next_symbol(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

void *os_default_symbol(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}
