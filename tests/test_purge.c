/* test_purge.c: memory that comes back, and a user who can see it. Each case
 * runs in a child with its own STRATA_* options: a freed burst leaves the
 * process by itself (purger thread) or at once (delay 0), strata_trim()
 * returns what is left, the memory limit refuses and recovers, statistics
 * add up and print as a table and as JSON, and every option's malformed
 * value is reported. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <time.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "layout.h"
#include "os.h"
#include "strata.h"

#define MB ((size_t)1 << 20)

static void **burst(size_t bytes, size_t *count)
{
    size_t capacity = bytes / 16;
    void **blocks = strata_malloc(capacity * sizeof *blocks);
    size_t total = 0, n = 0;
    unsigned long long rng = 77;
    while (total < bytes) {
        size_t size = 16 + (size_t)(check_random(&rng) % 1000);
        blocks[n] = strata_malloc(size);
        memset(blocks[n], 1, size);
        total += size;
        n++;
    }
    *count = n;
    return blocks;
}

static void free_burst(void **blocks, size_t count)
{
    for (size_t i = 0; i < count; i++)
        strata_free(blocks[i]);
    strata_free(blocks);
}

static void quiet(long ms)
{
    struct timespec pause = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&pause, NULL);
}

/* Prints "start=KiB after=KiB" (resident) and what strata's statistics say
 * it keeps (KiB of free pages and caches), for the parent to judge. */
static int report_resident(size_t start)
{
    struct strata_stats stats;
    strata_stats_get(&stats);
    printf("start=%zu after=%zu cached=%zu\n", start / 1024, resident_bytes() / 1024,
           stats.cached / 1024);
    return 0;
}

/* The secure flavour's slot for an 8-byte block: the block, its canary and
 * its slot's guard word (docs/safety.md), 32 bytes; its states' array. */
#define STATES_SHIFT 5

/* OS pages resident among the secure flavour's states of 32-byte slots in
 * the segment of p (mincore; none once the segment is unmapped). */
static size_t resident_states(const void *p)
{
    char *array = (char *)((uintptr_t)p & ~(uintptr_t)SEGMENT_MASK) + SLICE_SIZE + state_array_offset(STATES_SHIFT);
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (SEGMENT_SIZE >> STATES_SHIFT) * sizeof(uint16_t);
    static unsigned char in_core[(SEGMENT_SIZE >> STATES_SHIFT) * sizeof(uint16_t) / 4096];
    if (bytes / page > sizeof in_core || mincore(array, bytes, in_core) != 0)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < bytes / page; i++)
        n += in_core[i] & 1;
    return n;
}

/* A segment of 8-byte blocks (32-byte slots) freed but one: its states go
 * back with its slices. */
static int states(void)
{
    enum { COUNT = 150000 }; /* 4.8 MB of slots: a segment's pages full */
    void **blocks = strata_malloc(COUNT * sizeof *blocks);
    for (size_t i = 0; i < COUNT; i++)
        blocks[i] = strata_malloc(8);
    size_t before = resident_states(blocks[0]);
    for (size_t i = 1; i < COUNT; i++)
        strata_free(blocks[i]);
    strata_trim();
    printf("states_before=%zu states_after=%zu\n", before, resident_states(blocks[0]));
    strata_free(blocks[0]);
    strata_free(blocks);
    return 0;
}

/* "rw" when a write at p goes through, "--" when it faults: tried in a
 * child, so that a write that goes through changes nothing here (closed
 * slices are closed by guard markers or by mprotect, which /proc/self/maps
 * shows and guard markers do not). */
static void write_access(const void *p, char access[3])
{
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        *(volatile char *)p = 1;
        _exit(0);
    }
    int status = 0;
    bool went = child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    strcpy(access, went ? "rw" : "--");
}

/* The lines of /proc/self/maps: the process's mappings. */
static long mapping_count(void)
{
    FILE *maps = fopen("/proc/self/maps", "r");
    if (maps == NULL)
        return -1;
    long lines = 0;
    for (int c; (c = fgetc(maps)) != EOF;)
        lines += c == '\n';
    fclose(maps);
    return lines;
}

/* A page's slices once given back are closed (segment.c, closed slices),
 * and open again when pages take them: every new block is written. Prints
 * too the mappings before and after the closing, and whether guard
 * markers closed them (os_closes_by_guards: no mapping split). */
static int closed(void)
{
    enum { COUNT = 20000 }; /* 1.3 MB of 64-byte blocks: many pages */
    void **blocks = strata_malloc(COUNT * sizeof *blocks);
    for (size_t i = 0; i < COUNT; i++)
        blocks[i] = strata_malloc(64);
    char *first = blocks[0]; /* its page is not the class's current one */
    char before[3], after[3], again[3];
    write_access(first, before);
    long mappings_before = mapping_count();
    for (size_t i = 0; i < COUNT; i++)
        strata_free(blocks[i]);
    strata_trim();
    long mappings_after = mapping_count();
    write_access(first, after);
    for (size_t i = 0; i < COUNT; i++) {
        blocks[i] = strata_malloc(64);
        memset(blocks[i], 1, 64);
    }
    write_access(first, again);
    printf("before=%s after=%s again=%s mappings_before=%ld mappings_after=%ld guards=%d\n", before, after, again,
           mappings_before, mappings_after, os_closes_by_guards());
    for (size_t i = 0; i < COUNT; i++)
        strata_free(blocks[i]);
    strata_free(blocks);
    return 0;
}

/* 16 MB of 256-byte blocks written; prints the process's anonymous memory
 * in huge pages, in KiB. */
static int huge(void)
{
    enum { COUNT = 64 * 1024 };
    void **blocks = strata_malloc(COUNT * sizeof *blocks);
    for (size_t i = 0; i < COUNT; i++) {
        blocks[i] = strata_malloc(256);
        memset(blocks[i], 1, 256);
    }
    printf("huge_kib=%ld\n", status_field("/proc/self/smaps_rollup", "AnonHugePages"));
    for (size_t i = 0; i < COUNT; i++)
        strata_free(blocks[i]);
    strata_free(blocks);
    return 0;
}

/* The kernel's count of huge pages it could not give (a fault or a
 * collapse that found none free: memory too fragmented). */
static long huge_pages_refused(void)
{
    long total = 0;
    char line[128];
    FILE *f = fopen("/proc/vmstat", "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        long value;
        if (sscanf(line, "thp_fault_fallback %ld", &value) == 1 ||
            sscanf(line, "thp_collapse_alloc_failed %ld", &value) == 1)
            total += value;
    }
    if (f != NULL)
        fclose(f);
    return total;
}

/* 48 MB of blocks, written whole (256 bytes each) or at their two ends
 * only (12 KiB each: their middle pages never written); prints the
 * process's anonymous memory in huge pages, in KiB, and how many huge
 * pages the kernel refused meanwhile. */
static int dense_of(size_t size, bool whole)
{
    long refused = huge_pages_refused();
    size_t count = 48 * MB / size;
    char **blocks = strata_malloc(count * sizeof *blocks);
    for (size_t i = 0; i < count; i++) {
        blocks[i] = strata_malloc(size);
        if (whole)
            memset(blocks[i], 1, size);
        else
            blocks[i][0] = blocks[i][size - 1] = 1;
    }
    printf("huge_kib=%ld refused=%ld\n", status_field("/proc/self/smaps_rollup", "AnonHugePages"),
           huge_pages_refused() - refused);
    /* A medium block grown in place, into whatever slices follow it
     * (a dense range's among them: the debug build checks the segments
     * at each step). */
    char *grown = strata_malloc(256 * 1024);
    for (size_t at = 320 * 1024; grown != NULL && at <= 3 * MB; at += 64 * 1024) {
        grown = strata_realloc(grown, at);
        if (grown != NULL)
            grown[at - 1] = 1;
    }
    strata_free(grown);
    for (size_t i = 0; i < count; i++)
        strata_free(blocks[i]);
    strata_free(blocks);
    return 0;
}

static int dense_written(void)
{
    return dense_of(256, true);
}

static int dense_ends(void)
{
    return dense_of(12 * 1024, false);
}

/* The other cases start from strata in place and this resident size. */
static size_t started(void)
{
    strata_free(strata_malloc(1));
    return resident_bytes();
}

/* A 200 MB burst freed, then `ms` milliseconds without an allocator call. */
static int burst_then_quiet(long ms)
{
    size_t start = started(), count;
    void **blocks = burst(200 * MB, &count);
    free_burst(blocks, count);
    quiet(ms);
    return report_resident(start);
}

/* Phases that free what they built and, after a pause without a call that
 * is longer than two purge delays, build it again: prints the bytes purged
 * during the first three phases and during the last six, then, after a
 * quiet second, what strata keeps and the resident size. */
#define PHASES 12
static int phases_of(size_t bytes)
{
    size_t start = started();
    size_t purged[PHASES + 1];
    struct strata_stats stats;
    strata_stats_get(&stats);
    purged[0] = stats.purged;
    for (int phase = 1; phase <= PHASES; phase++) {
        size_t count;
        void **blocks = burst(bytes, &count);
        free_burst(blocks, count);
        quiet(40);
        strata_stats_get(&stats);
        purged[phase] = stats.purged;
    }
    printf("first=%zu last=%zu\n", (purged[3] - purged[0]) / 1024,
           (purged[PHASES] - purged[PHASES - 6]) / 1024);
    quiet(1000);
    strata_free(strata_malloc(1)); /* the heap's own check */
    quiet(100);
    return report_resident(start);
}

static int phases(void)
{
    return phases_of(8 * MB);
}

/* Phases past the most free memory a heap keeps before purging it all at
 * once (layout.h, HEAP_DIRTY_LIMIT: 32 MiB): that limit stretches too. */
static int phases_big(void)
{
    return phases_of(48 * MB);
}

static int quiet_after_burst(void)
{
    return burst_then_quiet(200);
}

static int burst_freed(void)
{
    return burst_then_quiet(0);
}

static int trim(void)
{
    size_t start = started(), count;
    void **blocks = burst(200 * MB, &count);
    void *big = strata_malloc(20 * MB);
    memset(big, 1, 20 * MB);
    free_burst(blocks, count);
    strata_free(big);
    strata_trim();
    return report_resident(start);
}

static int limit(void)
{
    started();
    errno = 0;
    void *huge = strata_malloc(100 * MB);
    printf("huge=%d errno=%d\n", huge != NULL, errno == ENOMEM);
    void **blocks = strata_malloc(100000 * sizeof *blocks);
    size_t n = 0;
    while (n < 100000 && (blocks[n] = strata_malloc(1000)) != NULL)
        n++;
    printf("small_mb=%zu errno=%d\n", n * 1000 / MB, errno == ENOMEM);
    for (size_t i = 0; i < n; i++)
        strata_free(blocks[i]);
    void *again = strata_malloc(30 * MB);
    printf("recovered=%d\n", again != NULL);
    strata_free(again);
    strata_free(blocks);
    return 0;
}

/* A segment's aligned mapping is padded while it is made: only what stays
 * mapped counts against the limit. */
static int limit_small(void)
{
    started();
    void *small = strata_malloc(16);
    errno = 0;
    void *big = strata_malloc(16 * MB);
    printf("small=%d big=%d errno=%d\n", small != NULL, big != NULL, errno == ENOMEM);
    strata_free(small);
    return 0;
}

static int stats(void)
{
    started();
    struct strata_stats before, during, after;
    strata_stats_get(&before);
    static const size_t sizes[] = {8, 100, 1000, 5000, 40000, 100000, 300000, 2000000};
    void *held[8][10];
    size_t usable = 0;
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 10; i++) {
            held[s][i] = strata_malloc(sizes[s]);
            usable += strata_usable_size(held[s][i]);
        }
    strata_stats_get(&during);
    printf("added=%zu usable=%zu large=%zu heaps=%zu peak_ok=%d eimval=%d\n",
           during.allocated - before.allocated, usable, during.large_blocks - before.large_blocks,
           during.live_heaps, during.allocated_peak >= during.allocated,
           strata_stats_get(NULL) == EINVAL);
    size_t class_1000 = 0;
    for (size_t c = 0; c < during.classes; c++)
        if (during.size_class[c].block_size == 1024)
            class_1000 = during.size_class[c].blocks_in_use - before.size_class[c].blocks_in_use;
    printf("class1024=%zu\n", class_1000);
    for (int s = 0; s < 8; s++)
        for (int i = 0; i < 10; i++)
            strata_free(held[s][i]);
    strata_stats_get(&after);
    printf("back=%d mapped=%d\n", after.allocated == before.allocated, after.mapped > 0);
    strata_stats_json(stdout);
    strata_stats_print(stdout);
    return 0;
}

/* What setproctitle does (redis-server, nginx, postgres): the environment
 * copied to the heap, its first strings wiped to make room for a title.
 * An option strata read as text must not change under it. */
static void wipe_environment(void)
{
    extern char **environ;
    size_t count = 0;
    while (environ[count] != NULL)
        count++;
    char **copy = malloc((count + 1) * sizeof *copy);
    if (copy == NULL)
        exit(3);
    for (size_t i = 0; i < count; i++) {
        copy[i] = strdup(environ[i]);
        if (copy[i] == NULL)
            exit(3);
    }
    copy[count] = NULL;
    char **old = environ;
    environ = copy;
    for (size_t i = 0; i < count; i++)
        memset(old[i], 0, strlen(old[i]));
}

/* 8 MB held 60 ms, then freed for 60 ms, the environment wiped first. */
static int sample(void)
{
    started();
    wipe_environment();
    size_t count;
    void **blocks = burst(8 * MB, &count);
    quiet(60);
    free_burst(blocks, count);
    quiet(60);
    return 0;
}

static int idle(void)
{
    started();
    return 0;
}

/* ---- memory back while the program idles ----------------------------------
 * The cases below run on strata or, with ALLOCATOR=glibc, on glibc's malloc,
 * and print the resident memory at their start, at their peak and after
 * the default purge delay plus 100 ms (`after`), and what strata says it
 * keeps cached then. */
static bool on_glibc(void)
{
    const char *name = getenv("ALLOCATOR");
    return name != NULL && strcmp(name, "glibc") == 0;
}

static void *chosen_malloc(size_t size)
{
    return on_glibc() ? malloc(size) : strata_malloc(size);
}

static void chosen_free(void *p)
{
    if (on_glibc())
        free(p);
    else
        strata_free(p);
}

/* The wait: the default purge delay (10 ms) plus 100 ms; WAIT_MS sets
 * another (a sanitizer slows the purger down tenfold). */
#define IDLE_WAIT_MS 110

static long idle_wait_ms(void)
{
    const char *ms = getenv("WAIT_MS");
    return ms != NULL ? atol(ms) : IDLE_WAIT_MS;
}

static void report_idle(size_t start, size_t peak)
{
    struct strata_stats stats;
    strata_stats_get(&stats);
    printf("start=%zu peak=%zu after=%zu cached=%zu\n", start / 1024, peak / 1024, resident_bytes() / 1024,
           on_glibc() ? 0 : stats.cached / 1024);
}

/* A sleeping thread, for a program that has other threads. */
static pthread_mutex_t sleeper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sleeper_wake = PTHREAD_COND_INITIALIZER;
static int sleeper_stage;

static void *sleeper(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&sleeper_lock);
    while (sleeper_stage == 0)
        pthread_cond_wait(&sleeper_wake, &sleeper_lock);
    pthread_mutex_unlock(&sleeper_lock);
    return NULL;
}

static void sleeper_release(void)
{
    pthread_mutex_lock(&sleeper_lock);
    sleeper_stage = 1;
    pthread_cond_broadcast(&sleeper_wake);
    pthread_mutex_unlock(&sleeper_lock);
}

/* Four 10 MB blocks written and freed; then, with WAIT=quiet, no call at
 * all; with WAIT=busy, a small block allocated and freed every
 * millisecond; with WAIT=thread, no call while another thread sleeps. */
static int large_idle(void)
{
    const char *wait = getenv("WAIT");
    if (wait == NULL || (strcmp(wait, "quiet") != 0 && strcmp(wait, "busy") != 0 && strcmp(wait, "thread") != 0)) {
        printf("usage: WAIT=quiet|busy|thread\n");
        return 2;
    }
    chosen_free(chosen_malloc(1));
    pthread_t thread;
    if (strcmp(wait, "thread") == 0)
        pthread_create(&thread, NULL, sleeper, NULL);
    size_t start = resident_bytes();
    void *big[4];
    for (int i = 0; i < 4; i++) {
        big[i] = chosen_malloc(10 * MB);
        memset(big[i], 1, 10 * MB);
    }
    size_t peak = resident_bytes();
    for (int i = 0; i < 4; i++)
        chosen_free(big[i]);
    if (strcmp(wait, "busy") == 0) {
        for (long ms = 0; ms < idle_wait_ms(); ms++) {
            chosen_free(chosen_malloc(64));
            quiet(1);
        }
    } else {
        quiet(idle_wait_ms());
    }
    report_idle(start, peak);
    if (strcmp(wait, "thread") == 0) {
        sleeper_release();
        pthread_join(thread, NULL);
    }
    return 0;
}

/* A worker thread allocates BLOCKS blocks of SIZE bytes, writes them and
 * waits on a condition variable, as a server's I/O thread does; this thread
 * frees them all and reports while the worker still waits. */
static size_t worker_blocks, worker_size;
static void **worker_made;
static int worker_stage;
static pthread_mutex_t worker_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t worker_changed = PTHREAD_COND_INITIALIZER;

static void worker_set_stage(int stage)
{
    pthread_mutex_lock(&worker_lock);
    worker_stage = stage;
    pthread_cond_broadcast(&worker_changed);
    pthread_mutex_unlock(&worker_lock);
}

static void worker_wait_stage(int stage)
{
    pthread_mutex_lock(&worker_lock);
    while (worker_stage < stage)
        pthread_cond_wait(&worker_changed, &worker_lock);
    pthread_mutex_unlock(&worker_lock);
}

static void *worker(void *unused)
{
    (void)unused;
    for (size_t i = 0; i < worker_blocks; i++) {
        worker_made[i] = chosen_malloc(worker_size);
        memset(worker_made[i], 1, worker_size);
    }
    worker_set_stage(1);
    worker_wait_stage(2);
    return NULL;
}

static int worker_idle(void)
{
    const char *blocks = getenv("BLOCKS"), *size = getenv("SIZE");
    worker_blocks = blocks != NULL ? (size_t)atol(blocks) : 0;
    worker_size = size != NULL ? (size_t)atol(size) : 0;
    if (worker_blocks == 0 || worker_size == 0) {
        printf("usage: BLOCKS=n SIZE=bytes\n");
        return 2;
    }
    chosen_free(chosen_malloc(1));
    worker_made = mmap(NULL, worker_blocks * sizeof *worker_made, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    size_t start = resident_bytes();
    pthread_t thread;
    pthread_create(&thread, NULL, worker, NULL);
    worker_wait_stage(1);
    size_t peak = resident_bytes();
    for (size_t i = 0; i < worker_blocks; i++)
        chosen_free(worker_made[i]);
    /* What the program holds, before any thread has collected its frees. */
    struct strata_stats stats;
    strata_stats_get(&stats);
    printf("allocated=%zu\n", on_glibc() ? 0 : stats.allocated / 1024);
    quiet(idle_wait_ms());
    report_idle(start, peak);
    worker_set_stage(2);
    pthread_join(thread, NULL);
    return 0;
}

/* The purger thread's voluntary context switches (its wake-ups), found by
 * its name; -1 when it is not running. */
static long purger_wakeups(void)
{
    char path[320];
    return purger_task_status(path, sizeof path) ? status_field(path, "voluntary_ctxt_switches") : -1;
}

/* A freed burst goes back; then, with nothing left to give back, the
 * purger sleeps (its wake-ups over 500 ms of quiet); a second burst wakes
 * it, and goes back too. */
static int purger_sleeps(void)
{
    size_t start = started(), count;
    void **blocks = burst(20 * MB, &count);
    free_burst(blocks, count);
    quiet(200);
    size_t first_back = resident_bytes();
    long before = purger_wakeups();
    quiet(500);
    long asleep = purger_wakeups() - before;
    blocks = burst(20 * MB, &count);
    free_burst(blocks, count);
    quiet(IDLE_WAIT_MS);
    printf("start=%zu first=%zu wakeups=%ld running=%d after=%zu\n", start / 1024, first_back / 1024, asleep,
           before >= 0, resident_bytes() / 1024);
    return 0;
}

/* The purger thread's blocked signals (its status's SigBlk, a mask of
 * signal numbers less one), once it runs; -1 when it never does. */
static int purger_signals(void)
{
    started();
    char path[320];
    bool running = false;
    for (int i = 0; i < 500 && !(running = purger_task_status(path, sizeof path)); i++)
        quiet(2);
    unsigned long long blocked = 0;
    bool read = false;
    FILE *f = running ? fopen(path, "r") : NULL;
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "SigBlk: %llx", &blocked) == 1)
            read = true;
    if (f != NULL)
        fclose(f);
    printf("running=%d read=%d blocked=%llx\n", running, read, blocked);
    return 0;
}

/* The address space in use (VmSize, KiB) once strata is in place and,
 * with the purger asked for from the start, once its thread runs. */
static int purger_address_space(void)
{
    started();
    const char *mode = getenv("STRATA_BACKGROUND_PURGE");
    for (int i = 0; i < 500 && mode != NULL && strcmp(mode, "1") == 0 && purger_wakeups() < 0; i++)
        quiet(2);
    printf("vm=%ld running=%d\n", status_field("/proc/self/status", "VmSize"), purger_wakeups() >= 0);
    return 0;
}

/* A server's shape: main fills shared slots with blocks, then waits while
 * two workers replace them, freeing main's blocks among their own. Prints
 * what the heap keeps cached and what the program holds at the end. */
#define SHARED_SLOTS 20000
static _Atomic(void *) shared_slots[SHARED_SLOTS];

static void *replace_slots(void *seed)
{
    unsigned long long rng = (unsigned long long)(uintptr_t)seed;
    for (int step = 0; step < 400000; step++) {
        size_t size = 16 + (size_t)(check_random(&rng) % 1000);
        unsigned char *block = strata_malloc(size);
        block[0] = 1;
        strata_free(atomic_exchange(&shared_slots[check_random(&rng) % SHARED_SLOTS], block));
    }
    return NULL;
}

static int idle_owner(void)
{
    unsigned long long rng = 1;
    for (size_t i = 0; i < SHARED_SLOTS; i++)
        atomic_store(&shared_slots[i], strata_malloc(16 + (size_t)(check_random(&rng) % 1000)));
    pthread_t workers[2];
    for (uintptr_t t = 0; t < 2; t++)
        pthread_create(&workers[t], NULL, replace_slots, (void *)(t + 2));
    for (int t = 0; t < 2; t++)
        pthread_join(workers[t], NULL);
    struct strata_stats stats;
    strata_stats_get(&stats);
    printf("allocated=%zu cached=%zu\n", stats.allocated / 1024, stats.cached / 1024);
    return 0;
}

static const struct check_case cases[] = {
    {"idle-owner", idle_owner},
    {"states", states},
    {"closed", closed},
    {"huge", huge},
    {"dense-written", dense_written},
    {"dense-ends", dense_ends},
    {"quiet", quiet_after_burst},
    {"phases", phases},
    {"phases-big", phases_big},
    {"delay0", burst_freed},
    {"trim", trim},
    {"limit", limit},
    {"limit-small", limit_small},
    {"stats", stats},
    {"sample", sample},
    {"idle", idle},
    {"large-idle", large_idle},
    {"worker-idle", worker_idle},
    {"purger-sleeps", purger_sleeps},
    {"purger-address-space", purger_address_space},
    {"purger-signals", purger_signals},
};

static long field(const char *text, const char *key)
{
    const char *at = strstr(text, key);
    return at ? strtol(at + strlen(key), NULL, 10) : -1;
}

/* A burst freed, then no call at all: the purger thread returns it.
 * (Resident sizes are checked where they mean something, not under a
 * sanitizer; what strata keeps cached is checked everywhere.) */
static void test_purger_returns(void)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn("quiet", "STRATA_BACKGROUND_PURGE=2");
    long start = field(o.output, "start="), after = field(o.output, "after=");
    printf("quiet: %ld -> %ld KiB resident, %ld KiB cached\n", start, after, field(o.output, "cached="));
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "cached="), >=, 0);
    CHECK_CMP(field(o.output, "cached="), <, 4096);
    if (resident_ok) {
        CHECK_CMP(start, >, 0);
        CHECK_CMP(after, <, start + 5 * 1024);
    }
}

/* A program whose phases take back what the purge gave back a moment ago
 * stretches its heap's delay: the first phases' memory is purged, the last
 * phases' is kept for the next; once it stops, the memory still goes back. */
static void phases_stretch(const char *name, long phase_kib)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn(name, "STRATA_BACKGROUND_PURGE=2 STRATA_PURGE_DELAY_MS=10");
    long first = field(o.output, "first="), last = field(o.output, "last=");
    printf("%s: %ld KiB purged in the first 3, %ld KiB in the last 6; %ld KiB cached after\n", name,
           first, last, field(o.output, "cached="));
    CHECK(exited_cleanly(&o));
    CHECK_CMP(first, >=, phase_kib);
    /* Six phases against three: without the stretch the last would purge
     * twice the first (each phase all it built). Not half of the first:
     * the secure flavour's debug build, on a loaded machine, builds its
     * 48 MiB phases slowly enough that part of the stretched delay runs
     * out within them (7-123 MiB of the first's 227 MiB). */
    CHECK_CMP(last, <, first);
    CHECK_CMP(field(o.output, "cached="), >=, 0);
    CHECK_CMP(field(o.output, "cached="), <, 4096);
    if (resident_ok)
        CHECK_CMP(field(o.output, "after="), <, field(o.output, "start=") + 5 * 1024);
}

static void test_phases_stretch_delay(void)
{
    phases_stretch("phases", 8 * 1024);
}

static void test_phases_stretch_limit(void)
{
    phases_stretch("phases-big", 32 * 1024);
}

/* Without the purger, the heap keeps its recent free slices until a call. */
static void test_no_purger_keeps(void)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn("quiet", "STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "cached="), >, 5 * 1024);
    if (resident_ok)
        CHECK_CMP(field(o.output, "after="), >, field(o.output, "start=") + 5 * 1024);
}

/* Delay 0: gone as the frees happen. */
static void test_delay0(void)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn("delay0", "STRATA_PURGE_DELAY_MS=0 STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "cached="), <, 4096);
    if (resident_ok)
        CHECK_CMP(field(o.output, "after="), <, field(o.output, "start=") + 5 * 1024);
}

/* strata_trim: within a few MB of the start, now. */
static void test_trim(void)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn("trim", "STRATA_BACKGROUND_PURGE=0 STRATA_PURGE_DELAY_MS=100000");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "cached="), <, 1024);
    if (resident_ok)
        CHECK_CMP(field(o.output, "after="), <, field(o.output, "start=") + 3 * 1024);
}

/* The secure flavour's block states go back with their slices. */
static void test_states(void)
{
    if (!TEST_SECURE) {
        printf("block states are the secure flavour's\n");
        return;
    }
    if (!resident_is_meaningful())
        return;
    struct outcome o = check_spawn("states", "STRATA_BACKGROUND_PURGE=0");
    printf("states of 32-byte slots: %ld OS pages resident, %ld once all but one block is freed\n",
           field(o.output, "states_before="), field(o.output, "states_after="));
    CHECK(exited_cleanly(&o));
    /* The array's 64 OS pages cover the whole segment; its pages, 47 of
     * its 64 slices, have theirs resident. */
    CHECK_CMP(field(o.output, "states_before="), >=, 40);
    CHECK_CMP(field(o.output, "states_after="), <=, 2);
}

/* Whether this kernel closes a range by guard markers for a process that
 * asks (Linux 6.13) and overcommit is not strict: what os.c decides. */
static bool guard_markers_offered(void)
{
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = 0;
    if (f != NULL) {
        if (fscanf(f, "%d", &mode) != 1)
            mode = 0;
        fclose(f);
    }
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    void *probe = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (probe == MAP_FAILED)
        return false;
    bool offered = madvise(probe, page, 102 /* MADV_GUARD_INSTALL */) == 0;
    munmap(probe, page);
    return offered && mode != 2;
}

/* Free slices given back are inaccessible, and open again when used; where
 * the kernel has guard markers they close them, so closing splits no
 * mapping (a heap of many closed runs stays far from the kernel's limit
 * of mappings); mprotect closes them otherwise. */
static void test_closed_slices(void)
{
    struct outcome o = check_spawn("closed", "STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    CHECK(strstr(o.output, "before=rw") != NULL);
    CHECK(strstr(o.output, "after=--") != NULL);
    CHECK(strstr(o.output, "again=rw") != NULL);
    bool guards = guard_markers_offered();
    CHECK_CMP(field(o.output, "guards="), ==, guards ? 1 : 0);
    if (guards)
        CHECK_CMP(field(o.output, "mappings_after="), <=, field(o.output, "mappings_before="));
    else
        printf("note: no guard markers here (Linux before 6.13, or strict overcommit): closed by mprotect\n");
}

/* The limit refuses past 64 MB, and recovers once memory is freed. */
static void test_limit(void)
{
    struct outcome o = check_spawn("limit", "STRATA_LIMIT_MB=64");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "huge="), ==, 0);
    CHECK_CMP(field(o.output, "errno="), ==, 1);
    CHECK_CMP(field(o.output, "small_mb="), >=, 40);
    CHECK_CMP(field(o.output, "small_mb="), <=, 64);
    CHECK_CMP(field(o.output, "recovered="), ==, 1);

    o = check_spawn("limit-small", "STRATA_LIMIT_MB=8");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "small="), ==, 1);
    CHECK_CMP(field(o.output, "big="), ==, 0);
    CHECK_CMP(field(o.output, "errno="), ==, 1);
}

/* Statistics add up: allocated grows by the usable sizes, exactly. */
static void test_stats(void)
{
    struct outcome o = check_spawn("stats", "STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    /* (In the secure flavour a block's usable size is what was asked, and
     * statistics count its whole slot, with its canary.) */
    if (TEST_SECURE) {
        CHECK_CMP(field(o.output, "added="), >, field(o.output, "usable="));
        CHECK_CMP(field(o.output, "usable="), >, 0);
    } else {
        CHECK_CMP(field(o.output, "added="), ==, field(o.output, "usable="));
        CHECK_CMP(field(o.output, "added="), >, 0);
    }
    CHECK_CMP(field(o.output, "large="), ==, 20); /* 300 KB, 2 MB */
    CHECK_CMP(field(o.output, "heaps="), >=, 1);
    CHECK_CMP(field(o.output, "peak_ok="), ==, 1);
    CHECK_CMP(field(o.output, "eimval="), ==, 1);
    CHECK_CMP(field(o.output, "class1024="), ==, 10);
    CHECK_CMP(field(o.output, "back="), ==, 1);
    CHECK_CMP(field(o.output, "mapped="), ==, 1);
    CHECK(strstr(o.output, "strata " STRATA_VERSION TEST_FLAVOUR " statistics") != NULL && strstr(o.output, "allocated") != NULL);
    /* The JSON line parses. */
    const char *json = strstr(o.output, "{\"version\"");
    CHECK(json != NULL && strstr(json, "\"program\": \"test\", \"pid\": ") != NULL);
    int parses = 0;
    if (json != NULL) {
        FILE *p = popen("python3 -m json.tool > /dev/null", "w");
        if (p != NULL) {
            fwrite(json, 1, strcspn(json, "\n"), p);
            parses = pclose(p) == 0;
        }
    }
    CHECK(parses);
}

/* STRATA_SHOW_STATS prints the table at exit; it names the program and its
 * pid, in units that fit. */
static void test_show_stats(void)
{
    struct outcome o = check_spawn("idle", "STRATA_SHOW_STATS=1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata " STRATA_VERSION TEST_FLAVOUR " statistics") != NULL);
    CHECK(exited_cleanly(&o) && strstr(o.output, "strata " STRATA_VERSION TEST_FLAVOUR " statistics of test (pid ") != NULL &&
          strstr(o.output, " 0.0 MiB") == NULL && strstr(o.output, "given back") != NULL);
}

/* Every option's malformed or out-of-range value is reported by name, with
 * what is accepted and the default used. */
static void test_malformed_options(void)
{
    static const struct {
        const char *setting, *accepted;
    } bad[] = {
        {"STRATA_PURGE_DELAY_MS=soon", "(a whole number from 0 to 3600000); using the default, 10"},
        {"STRATA_BACKGROUND_PURGE=7", "(a whole number from 0 to 2); using the default, 2"},
        {"STRATA_LIMIT_MB=-5", "(a whole number from 0 to 1099511627776); using the default, 0"},
        {"STRATA_CHECK=maybe", "(a flag: 1/0, yes/no, on/off or true/false, in any case); using the default, 0"},
        {"STRATA_VERBOSE=2", "(a flag: 1/0, yes/no, on/off or true/false, in any case); using the default, 0"},
        {"STRATA_SHOW_STATS=x", "(a flag: 1/0, yes/no, on/off or true/false, in any case); using the default, 0"},
        {"STRATA_THP=huge", "(a whole number from 0 to 2); using the default, 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct outcome o = check_spawn("idle", bad[i].setting);
        char expected[256];
        snprintf(expected, sizeof expected, "strata: warning: %s is not valid %s\n", bad[i].setting, bad[i].accepted);
        CHECK(exited_cleanly(&o) && strstr(o.output, expected) != NULL);
    }
}

/* Flags take one syntax in any case. */
static void test_flags(void)
{
    static const char *const on[] = {"1", "yes", "on", "true", "TRUE", "Yes", "ON"};
    static const char *const off[] = {"0", "no", "off", "false", "FALSE", "No", "Off"};
    for (size_t i = 0; i < sizeof on / sizeof on[0]; i++) {
        char setting[64];
        snprintf(setting, sizeof setting, "STRATA_SHOW_STATS=%s", on[i]);
        struct outcome o = check_spawn("idle", setting);
        CHECK(exited_cleanly(&o) && strstr(o.output, " statistics of ") != NULL && strstr(o.output, "warning") == NULL);
        snprintf(setting, sizeof setting, "STRATA_SHOW_STATS=%s", off[i]);
        o = check_spawn("idle", setting);
        CHECK(exited_cleanly(&o) && o.output[0] == '\0');
    }
}

/* A STRATA_ name that is no option is said once, with the nearest. */
static void test_unknown_options(void)
{
    struct outcome o = check_spawn("idle", "STRATA_CHEKC=1");
    CHECK(exited_cleanly(&o) &&
          strcmp(o.output, "strata: warning: STRATA_CHEKC is not a strata option (did you mean STRATA_CHECK?); it is ignored\n") == 0);
    o = check_spawn("idle", "STRATA_PURGE_DELAY=5");
    CHECK(exited_cleanly(&o) && strstr(o.output, "STRATA_PURGE_DELAY is not a strata option (did you mean STRATA_PURGE_DELAY_MS?)") != NULL);
    o = check_spawn("idle", "STRATA_WHATEVER=1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "STRATA_WHATEVER is not a strata option; it is ignored (the options: "
                                                 "STRATA_PURGE_DELAY_MS STRATA_BACKGROUND_PURGE") != NULL);
}

/* STRATA_VERBOSE says at start (the children run as "test") that strata is
 * in force, and how. */
static void test_verbose(void)
{
    struct outcome o = check_spawn("idle", "STRATA_VERBOSE=1 STRATA_PURGE_DELAY_MS=25");
    char in_force[128];
    snprintf(in_force, sizeof in_force, "strata " STRATA_VERSION TEST_FLAVOUR " in force in test (pid ");
    CHECK(exited_cleanly(&o) && strncmp(o.output, in_force, strlen(in_force)) == 0 &&
          strstr(o.output, " STRATA_PURGE_DELAY_MS=25 ") != NULL && strstr(o.output, " STRATA_VERBOSE=1 ") != NULL);
}

/* STRATA_SAMPLE_MS: the purger thread appends the memory in use to the
 * statistics file, in time order, and the exit record comes last, though
 * the program wipes its environment strings (setproctitle); without a
 * file to write to, no sampling and no thread for it. */
static void test_sampling(void)
{
    char samples[] = "/tmp/strata-samples-XXXXXX";
    int samples_fd = mkstemp(samples);
    CHECK_CMP(samples_fd, >=, 0);
    close(samples_fd);
    char setting[256];
    snprintf(setting, sizeof setting, "STRATA_STATS_FILE=%s STRATA_SAMPLE_MS=5 STRATA_BACKGROUND_PURGE=0 STRATA_VERBOSE=1", samples);
    struct outcome o = check_spawn("sample", setting);
    CHECK(exited_cleanly(&o) && strstr(o.output, "purger thread started") != NULL);
    FILE *records = fopen(samples, "r");
    CHECK(records != NULL);
    int sampled = 0, in_order = 1, last_is_exit = 0;
    long most = 0, last_allocated = -1;
    double last_ms = 0;
    static char record[65536]; /* the exit record is one line of every size class */
    while (records != NULL && fgets(record, sizeof record, records) != NULL) {
        const char *at = strstr(record, "{\"sample_ms\": ");
        last_is_exit = strncmp(record, "{\"version\"", 10) == 0;
        if (at == NULL)
            continue;
        double ms = strtod(at + 14, NULL);
        in_order &= ms >= last_ms;
        last_ms = ms;
        last_allocated = field(record, "\"allocated\": ");
        most = last_allocated > most ? last_allocated : most;
        in_order &= strstr(record, "\"program\": \"test\", \"pid\": ") != NULL && field(record, "\"resident\": ") > 0;
        sampled++;
    }
    if (records != NULL)
        fclose(records);
    unlink(samples);
    CHECK_CMP(sampled, >=, 10);
    CHECK(in_order && last_is_exit);
    CHECK_CMP(most, >=, (long)(8 * MB));
    CHECK_CMP(last_allocated, >=, 0);
    CHECK_CMP(last_allocated, <, (long)MB);
    /* Without a file to write to, no sampling and no thread for it. */
    o = check_spawn("sample", "STRATA_SAMPLE_MS=5 STRATA_BACKGROUND_PURGE=0 STRATA_VERBOSE=1");
    CHECK(exited_cleanly(&o) && strstr(o.output, "purger thread started") == NULL);
}

/* Huge pages on request, and the default with everything on. */
/* Runs an idle case on glibc and on strata; checks that strata kept no
 * more than 2 MB of what it freed after the purge delay plus 100 ms (where
 * resident sizes mean something: else that it says it caches under 1 MB
 * after 1 s), and no more than glibc kept. Returns strata's run. */
static struct outcome check_idle(const char *name, const char *env, const char *what)
{
    int resident_ok = resident_is_meaningful();
    char strata_env[256], glibc_env[320];
    snprintf(strata_env, sizeof strata_env, "WAIT_MS=%d %s", resident_ok ? IDLE_WAIT_MS : 1000, env);
    snprintf(glibc_env, sizeof glibc_env, "ALLOCATOR=glibc %s", strata_env);
    struct outcome g = check_spawn(name, glibc_env), o = check_spawn(name, strata_env);
    long kept = field(o.output, "after=") - field(o.output, "start=");
    long glibc_kept = field(g.output, "after=") - field(g.output, "start=");
    printf("%s: peak %+ld KiB; %d ms after the free strata keeps %+ld KiB resident (glibc %+ld), caches %ld KiB\n",
           what, field(o.output, "peak=") - field(o.output, "start="), resident_ok ? IDLE_WAIT_MS : 1000, kept, glibc_kept,
           field(o.output, "cached="));
    CHECK(exited_cleanly(&o));
    CHECK(exited_cleanly(&g));
    CHECK_CMP(field(o.output, "cached="), >=, 0);
    CHECK_CMP(field(o.output, "cached="), <, 1024);
    if (resident_ok) {
        CHECK_CMP(field(o.output, "peak=") - field(o.output, "start="), >, 30 * 1024);
        CHECK_CMP(kept, <, 2 * 1024);
        CHECK_CMP(kept, <, (glibc_kept > 0 ? glibc_kept : 0) + 2 * 1024);
    }
    return o;
}

/* Freed large blocks go back within the purge delay, whether the program
 * then calls the allocator or not, and whether it has other threads. */
static void test_large_idle(void)
{
    check_idle("large-idle", "WAIT=quiet", "4 x 10 MB freed, no call after");
    check_idle("large-idle", "WAIT=busy", "4 x 10 MB freed, a small block a millisecond after");
    check_idle("large-idle", "WAIT=thread", "4 x 10 MB freed, another thread sleeping");
}

/* What a thread frees of a waiting worker's blocks goes back within the
 * purge delay while the worker still waits: medium blocks and small. The
 * statistics say at once that the program holds none of them. */
static void test_worker_idle(void)
{
    static const char *const runs[][2] = {
        {"BLOCKS=400 SIZE=300000", "a waiting worker's 400 blocks of 300 KB freed"},
        {"BLOCKS=40000 SIZE=4200", "a waiting worker's 40000 blocks of 4200 bytes freed"},
    };
    for (size_t i = 0; i < CHECK_COUNT(runs); i++) {
        struct outcome o = check_idle("worker-idle", runs[i][0], runs[i][1]);
        printf("  allocated as the frees end: %ld KiB\n", field(o.output, "allocated="));
        CHECK_CMP(field(o.output, "allocated="), >=, 0);
        CHECK_CMP(field(o.output, "allocated="), <, 1024);
    }
}

/* A thread that waits while others free its blocks and allocate their
 * own: the others hand its freed blocks out again from their caches, so
 * that its pages' free space is used, not stranded where only it, idle,
 * would allocate. What strata keeps cached stays well under what the
 * program holds (sending such blocks home instead kept 0.8-0.95 of it). */
static void test_idle_owner(void)
{
    struct outcome o = check_spawn("idle-owner", "");
    long allocated = field(o.output, "allocated="), cached = field(o.output, "cached=");
    printf("idle owner: the program holds %ld KiB, strata keeps %ld KiB cached\n", allocated, cached);
    CHECK(exited_cleanly(&o));
    CHECK_CMP(allocated, >, 5 * 1024);
    CHECK_CMP(cached, >=, 0);
    CHECK_CMP(cached, <, allocated * 3 / 4);
}

/* With nothing to give back, the purger thread sleeps rather than wake
 * every purge delay (50 times in 500 ms), and work wakes it. */
static void test_purger_sleeps(void)
{
    int resident_ok = resident_is_meaningful();
    struct outcome o = check_spawn("purger-sleeps", "STRATA_BACKGROUND_PURGE=1");
    printf("purger: %ld wake-ups in 500 ms with nothing to give back\n", field(o.output, "wakeups="));
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "running="), ==, 1);
    CHECK_CMP(field(o.output, "wakeups="), >=, 0);
    CHECK_CMP(field(o.output, "wakeups="), <=, 2);
    if (resident_ok) { /* what the thread's own bins keep aside, as in purger_returns */
        CHECK_CMP(field(o.output, "first="), <, field(o.output, "start=") + 5 * 1024);
        CHECK_CMP(field(o.output, "after="), <, field(o.output, "start=") + 5 * 1024);
    }
}

/* The purger thread blocks every signal a program may send the process
 * (kill(getpid(), ...), a terminal's, a timer's, a child's), so that each
 * goes to one of the program's own threads: at a signal to the process,
 * the kernel picks any thread that does not block it. */
static void test_purger_signals(void)
{
    struct outcome o = check_spawn("purger-signals", "STRATA_BACKGROUND_PURGE=1");
    CHECK(exited_cleanly(&o));
    CHECK_CMP(field(o.output, "running="), ==, 1);
    CHECK_CMP(field(o.output, "read="), ==, 1);
    const char *mask = strstr(o.output, "blocked=");
    unsigned long long blocked = mask != NULL ? strtoull(mask + strlen("blocked="), NULL, 16) : 0;
    static const int sent[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM, SIGTERM, SIGCHLD,
                               SIGWINCH, SIGIO, SIGPROF};
    for (size_t i = 0; i < sizeof sent / sizeof sent[0]; i++)
        CHECK((blocked >> (sent[i] - 1)) & 1);
}

/* The purger's thread costs little address space, which an address-space
 * limit counts: a small stack, not a default one of 8 MiB. (A sanitizer
 * maps megabytes of its own for each thread: not measured there.) */
static void test_purger_address_space(void)
{
    struct outcome with = check_spawn("purger-address-space", "STRATA_BACKGROUND_PURGE=1");
    struct outcome without = check_spawn("purger-address-space", "STRATA_BACKGROUND_PURGE=0");
    long cost = field(with.output, "vm=") - field(without.output, "vm=");
    printf("the purger's thread: %ld KiB of address space\n", cost);
    CHECK(exited_cleanly(&with));
    CHECK(exited_cleanly(&without));
    CHECK_CMP(field(with.output, "running="), ==, 1);
    CHECK_CMP(field(without.output, "running="), ==, 0);
    if (resident_is_meaningful()) {
        CHECK_CMP(cost, >, 0);
        CHECK_CMP(cost, <=, 1024);
    }
}

/* Whether the kernel gives transparent huge pages to a range that asks
 * (its setting "always" or "madvise", not "never"). */
static bool huge_pages_offered(void)
{
    char line[128] = "";
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (f != NULL) {
        if (fgets(line, sizeof line, f) == NULL)
            line[0] = '\0';
        fclose(f);
    }
    return strstr(line, "[always]") != NULL || strstr(line, "[madvise]") != NULL;
}

/* STRATA_THP=1 gives the default flavour's segments huge pages where the
 * kernel offers them, their free slices then left open (a huge page needs
 * a 2 MiB range of one protection); the secure flavour keeps its slices
 * closed. Without it, none. */
static void test_huge_pages(void)
{
    struct outcome o = check_spawn("trim", "STRATA_THP=1 STRATA_VERBOSE=1");
    CHECK(exited_cleanly(&o));

    struct outcome with = check_spawn("huge", "STRATA_THP=1 STRATA_BACKGROUND_PURGE=0");
    struct outcome without = check_spawn("huge", "STRATA_THP=0 STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&with));
    CHECK(exited_cleanly(&without));
    CHECK_CMP(field(without.output, "huge_kib="), <, 2048);
    if (TEST_SECURE)
        printf("note: the secure flavour keeps its free slices closed, so a first touch takes no huge page\n");
    else if (huge_pages_offered() && resident_is_meaningful())
        CHECK_CMP(field(with.output, "huge_kib="), >=, 4096);
    else
        printf("note: huge pages not offered here; STRATA_THP=1's huge pages not checked\n");

    o = check_spawn("closed", "STRATA_THP=1 STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    CHECK(strstr(o.output, TEST_SECURE ? "after=--" : "after=rw") != NULL);
}

/* STRATA_THP=2 gives huge pages to the segments of a heap that writes its
 * blocks whole, once it holds four (48 MB of 256-byte blocks: most of
 * them), and none to a heap whose blocks' middle pages are never written
 * (12 KiB blocks written at their ends), nor without the option. A heap
 * that is not dense keeps its free slices closed. The secure flavour
 * keeps them closed always: no huge pages. */
static void test_dense_huge_pages(void)
{
    struct outcome written = check_spawn("dense-written", "STRATA_THP=2 STRATA_BACKGROUND_PURGE=0");
    struct outcome ends = check_spawn("dense-ends", "STRATA_THP=2 STRATA_BACKGROUND_PURGE=0");
    struct outcome without = check_spawn("dense-written", "STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&written) && exited_cleanly(&ends) && exited_cleanly(&without));
    CHECK_CMP(field(without.output, "huge_kib="), <, 2048);
    CHECK_CMP(field(ends.output, "huge_kib="), <, 2048);
    if (TEST_SECURE)
        CHECK_CMP(field(written.output, "huge_kib="), <, 2048);
    else if (!huge_pages_offered() || !resident_is_meaningful())
        printf("note: huge pages not offered here; STRATA_THP=2's huge pages not checked\n");
    else if (field(written.output, "huge_kib=") < 16 * 1024 && field(written.output, "refused=") > 0)
        printf("note: the kernel had no huge page free (%ld refused); STRATA_THP=2's huge pages not checked\n",
               field(written.output, "refused="));
    else
        CHECK_CMP(field(written.output, "huge_kib="), >=, 16 * 1024);

    struct outcome o = check_spawn("closed", "STRATA_THP=2 STRATA_BACKGROUND_PURGE=0");
    CHECK(exited_cleanly(&o));
    CHECK(strstr(o.output, "after=--") != NULL);
}

static const struct check_test tests[] = {
    {"purger_returns", test_purger_returns},
    {"phases_stretch_delay", test_phases_stretch_delay},
    {"phases_stretch_limit", test_phases_stretch_limit},
    {"no_purger_keeps", test_no_purger_keeps},
    {"delay0", test_delay0},
    {"trim", test_trim},
    {"states", test_states},
    {"closed_slices", test_closed_slices},
    {"limit", test_limit},
    {"stats", test_stats},
    {"show_stats", test_show_stats},
    {"malformed_options", test_malformed_options},
    {"flags", test_flags},
    {"unknown_options", test_unknown_options},
    {"verbose", test_verbose},
    {"sampling", test_sampling},
    {"huge_pages", test_huge_pages},
    {"dense_huge_pages", test_dense_huge_pages},
    {"large_idle", test_large_idle},
    {"worker_idle", test_worker_idle},
    {"idle_owner", test_idle_owner},
    {"purger_sleeps", test_purger_sleeps},
    {"purger_address_space", test_purger_address_space},
    {"purger_signals", test_purger_signals},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_CASES(cases));
}
