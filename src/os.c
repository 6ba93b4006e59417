/* os.c: every system call strata makes, and nothing else: the one file a
 * port or a fault-injecting test replaces. Contract (os.h): addresses and
 * sizes given here are page multiples and non-zero; mapping functions return
 * NULL on failure and never call malloc; errno is as the caller left it. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "os.h"

size_t os_page_bytes;
static _Atomic size_t map_calls;
static _Atomic size_t mapped_bytes;
static _Atomic size_t purged_bytes;
static size_t map_limit; /* STRATA_LIMIT_MB in bytes, 0: none; set at start-up */

void os_set_map_limit(size_t bytes)
{
    map_limit = bytes;
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

size_t os_purged_bytes(void)
{
    return atomic_load_explicit(&purged_bytes, memory_order_relaxed);
}

size_t os_mapped_bytes(void)
{
    return atomic_load_explicit(&mapped_bytes, memory_order_relaxed);
}

void *os_map(size_t size)
{
    atomic_fetch_add_explicit(&map_calls, 1, memory_order_relaxed);
    size_t limit = map_limit;
    if (unlikely(limit != 0) &&
        atomic_load_explicit(&mapped_bytes, memory_order_relaxed) + size > limit)
        return NULL; /* STRATA_LIMIT_MB */
    int saved = errno;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    errno = saved;
    if (p == MAP_FAILED)
        return NULL;
    atomic_fetch_add_explicit(&mapped_bytes, size, memory_order_relaxed);
    return p;
}

void *os_map_aligned(size_t size, size_t alignment)
{
    if (alignment <= os_page_size())
        return os_map(size);
    size_t padded = size + alignment;
    if (padded < size)
        return NULL;
    char *raw = os_map(padded);
    if (raw == NULL)
        return NULL;
    uintptr_t aligned = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
    size_t head = aligned - (uintptr_t)raw;
    size_t tail = padded - head - size;
    if (head)
        os_unmap(raw, head);
    if (tail)
        os_unmap((char *)aligned + size, tail);
    return (void *)aligned;
}

void os_unmap(void *addr, size_t size)
{
    int saved = errno;
    if (munmap(addr, size) == 0) {
        atomic_fetch_sub_explicit(&mapped_bytes, size, memory_order_relaxed);
        atomic_fetch_add_explicit(&purged_bytes, size, memory_order_relaxed);
    }
    errno = saved;
}

void os_purge(void *addr, size_t size)
{
    int saved = errno;
    if (madvise(addr, size, MADV_DONTNEED) == 0)
        atomic_fetch_add_explicit(&purged_bytes, size, memory_order_relaxed);
    errno = saved;
}

void os_populate(void *addr, size_t size)
{
    int saved = errno;
    madvise(addr, size, MADV_POPULATE_WRITE); /* before Linux 5.14: EINVAL, harmless */
    errno = saved;
}

void os_huge_pages(void *addr, size_t size, bool wanted)
{
    int saved = errno;
    madvise(addr, size, wanted ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    errno = saved;
}

void *os_remap(void *addr, size_t old_size, size_t new_size)
{
    int saved = errno;
    void *p = mremap(addr, old_size, new_size, MREMAP_MAYMOVE);
    errno = saved;
    if (p == MAP_FAILED)
        return NULL;
    atomic_fetch_add_explicit(&mapped_bytes, new_size - old_size, memory_order_relaxed);
    return p;
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

void os_yield(void)
{
    sched_yield();
}

size_t os_resident_bytes(void)
{
    int saved = errno;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = saved;
        return 0;
    }
    char text[96];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    errno = saved;
    if (n <= 0)
        return 0;
    text[n] = '\0';
    unsigned long size = 0, resident = 0;
    if (sscanf(text, "%lu %lu", &size, &resident) != 2)
        return 0;
    return (size_t)resident * os_page_size();
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
