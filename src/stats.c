/* stats.c: statistics, the top of the general allocator's reporting. A
 * snapshot walks every live heap (under its lock), the abandoned segments and
 * the large-block registry; the peak comes from the counters (counters.c)
 * the slow paths keep of bytes handed out. Printing goes through stdio,
 * never from inside the allocator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bins.h"
#include "core.h"
#include "strata.h"

_Static_assert(STRATA_STATS_CLASSES >= CLASS_COUNT, "a stats row per size class (`classes` says how many)");

static void count_segment(const struct segment *s, void *arg)
{
    struct strata_stats *stats = arg;
    for (unsigned i = 1; i < SLICES_PER_SEGMENT; i++) {
        const struct page *page = &s->pages[i];
        if (!page->in_use)
            continue;
        if (page->class_index == CLASS_MEDIUM) { /* counted with the large blocks */
            size_t used = __atomic_load_n(&page->used, __ATOMIC_RELAXED);
            stats->large_blocks += used;
            stats->large_bytes += used * page->block_size;
            continue;
        }
        uint32_t used = __atomic_load_n(&page->used, __ATOMIC_RELAXED);
        uint32_t capacity = __atomic_load_n(&page->capacity, __ATOMIC_RELAXED);
        stats->size_class[page->class_index].blocks_in_use += used;
        stats->size_class[page->class_index].pages++;
        stats->cached += (size_t)(capacity - used) * page->block_size;
    }
}

/* The remote lists of the pages on a heap's stack hold blocks the program
 * has freed, which their owner (or the purger, for an idle one) has not
 * taken yet: not in use, but kept (heap lock held). */
static void count_remote(const struct page *page, void *arg)
{
    struct strata_stats *stats = arg;
    if (page->class_index == CLASS_MEDIUM) {
        stats->large_blocks--;
        stats->large_bytes -= page->block_size;
    } else {
        stats->size_class[page->class_index].blocks_in_use--;
        stats->cached += page->block_size;
    }
}

/* The secure flavour's quarantines: freed blocks held back from reuse,
 * counted in no figure of struct strata_stats but blocks_in_use (the
 * table and the JSON give them). */
struct quarantined {
    size_t blocks, bytes;
};

struct counting {
    struct strata_stats *stats;
    struct quarantined *quarantined;
};

static void count_heap(struct heap *heap, void *arg)
{
    struct counting *counting = arg;
    struct strata_stats *stats = counting->stats;
    if (heap->parked_at == 0) /* a parked heap's memory counts, the heap not */
        stats->live_heaps++;
    for (const struct segment *s = heap->segments; s != NULL; s = s->next)
        count_segment(s, stats);
    stats->cached += heap->dirty_slices * SLICE_SIZE;
    /* Bins change on the owner's inline paths, outside the lock: an owner
     * that runs makes these figures approximate, as documented. */
    for (unsigned c = 0; c < CLASS_COUNT; c++) {
        size_t n = bin_cached_blocks(heap, c);
        stats->size_class[c].blocks_in_use -= n;
        stats->cached += n * class_size[c];
    }
    heap_remote_for_each(heap, count_remote, stats);
    counting->quarantined->blocks += __atomic_load_n(&heap->quarantine.count, __ATOMIC_RELAXED);
    counting->quarantined->bytes += __atomic_load_n(&heap->quarantine.bytes, __ATOMIC_RELAXED);
}

static void count_abandoned(const struct segment *s, void *arg)
{
    struct strata_stats *stats = arg;
    stats->abandoned_segments++;
    count_segment(s, stats);
}

static void collect(struct strata_stats *stats, struct quarantined *quarantined)
{
    config_init();
    memset(stats, 0, sizeof *stats);
    *quarantined = (struct quarantined){0, 0};
    struct counting counting = {stats, quarantined};
    stats->classes = CLASS_COUNT;
    for (unsigned c = 0; c < CLASS_COUNT; c++)
        stats->size_class[c].block_size = class_size[c];
    heap_for_each_live(count_heap, &counting, false);
    abandoned_for_each(count_abandoned, stats);
    large_stats(&stats->large_blocks, &stats->large_bytes, &stats->cached);
    for (unsigned c = 0; c < CLASS_COUNT; c++)
        stats->allocated += stats->size_class[c].blocks_in_use * class_usable(c);
    stats->allocated += stats->large_bytes;
    stats->allocated -= quarantined->bytes < stats->allocated ? quarantined->bytes : stats->allocated;
    long peak = counters_peak();
    stats->allocated_peak = peak > 0 && (size_t)peak > stats->allocated ? (size_t)peak : stats->allocated;
    stats->resident = os_resident_bytes();
    stats->mapped = os_mapped_bytes();
    stats->purged = os_purged_bytes();
}

STRATA_EXPORT int strata_stats_get(struct strata_stats *stats)
{
    if (stats == NULL)
        return EINVAL;
    struct quarantined quarantined;
    collect(stats, &quarantined);
    return 0;
}

/* A size in the unit that fits it: bytes, KiB, MiB or GiB. */
struct human {
    char text[24];
};

static struct human human(size_t bytes)
{
    struct human h;
    if (bytes < 1024)
        snprintf(h.text, sizeof h.text, "%zu B", bytes);
    else if (bytes < ((size_t)1 << 20))
        snprintf(h.text, sizeof h.text, "%.1f KiB", (double)bytes / 1024.0);
    else if (bytes < ((size_t)1 << 30))
        snprintf(h.text, sizeof h.text, "%.1f MiB", (double)bytes / 1048576.0);
    else
        snprintf(h.text, sizeof h.text, "%.2f GiB", (double)bytes / 1073741824.0);
    return h;
}

STRATA_EXPORT void strata_stats_print(FILE *out)
{
    struct strata_stats s;
    struct quarantined q;
    collect(&s, &q);
    fprintf(out,
            "strata %s%s statistics of %s (pid %ld)\n"
            "  allocated      %12s (peak %s)\n"
            "  resident       %12s (the whole process)\n"
            "  mapped         %12s\n"
            "  cached         %12s (thread caches, free pages, cached mappings)\n"
            "  given back     %12s (free memory returned to the OS with madvise, so far)\n"
            "  large blocks   %12zu (%s)\n"
            "  live heaps     %12zu\n"
            "  abandoned segs %12zu\n",
            STRATA_VERSION, STRATA_FLAVOUR, os_program_name(), os_pid(), human(s.allocated).text, human(s.allocated_peak).text,
            human(s.resident).text, human(s.mapped).text, human(s.cached).text, human(s.purged).text,
            s.large_blocks, human(s.large_bytes).text, s.live_heaps, s.abandoned_segments);
    if (STRATA_SECURE_BUILD)
        fprintf(out, "  quarantine     %12s in %zu blocks (at most %ld blocks, %ld KiB a thread)\n",
                human(q.bytes).text, q.blocks, strata_options.quarantine_blocks,
                strata_options.quarantine_kb);
    fprintf(out, "  %10s %14s %8s\n", "class", "blocks in use", "pages");
    for (size_t c = 0; c < s.classes; c++)
        if (s.size_class[c].pages != 0)
            fprintf(out, "  %10zu %14zu %8zu\n", s.size_class[c].block_size,
                    s.size_class[c].blocks_in_use, s.size_class[c].pages);
    char options[OPTIONS_TEXT_MAX];
    options_format(options, sizeof options);
    fprintf(out, "  options:%s\n", options);
}

/* Text as a JSON string's contents: quotes, backslashes and controls left
 * out (names and paths, never user data). */
struct json_text {
    char text[256];
};

static struct json_text json_safe(const char *from)
{
    struct json_text j;
    size_t n = 0;
    for (const char *c = from; *c != '\0' && n + 1 < sizeof j.text; c++)
        if (*c != '"' && *c != '\\' && (unsigned char)*c >= 0x20)
            j.text[n++] = *c;
    j.text[n] = '\0';
    return j;
}

static uint64_t started_ns;

STRATA_EXPORT void strata_stats_json(FILE *out)
{
    struct strata_stats s;
    struct quarantined q;
    collect(&s, &q);
    fprintf(out,
            "{\"version\": \"%s\", \"flavour\": \"%s\", \"program\": \"%s\", \"pid\": %ld, \"seconds\": %.3f, "
            "\"resident_peak\": %zu, \"allocated\": %zu, \"allocated_peak\": %zu, \"resident\": %zu, \"mapped\": %zu, "
            "\"cached\": %zu, \"purged\": %zu, \"large_blocks\": %zu, \"large_bytes\": %zu, "
            "\"live_heaps\": %zu, \"abandoned_segments\": %zu, \"quarantine_blocks\": %zu, \"quarantine_bytes\": %zu, "
            "\"options\": {",
            STRATA_VERSION, STRATA_SECURE_BUILD ? "secure" : "default", json_safe(os_program_name()).text, os_pid(),
            (double)(os_now_ns() - started_ns) / 1e9, os_resident_peak_bytes(), s.allocated, s.allocated_peak, s.resident, s.mapped, s.cached, s.purged,
            s.large_blocks, s.large_bytes, s.live_heaps, s.abandoned_segments, q.blocks, q.bytes);
    for (size_t i = 0; i < options_count(); i++) {
        long value;
        const char *text, *doc;
        const char *name = options_describe(i, &value, &text, &doc);
        if (text == NULL)
            fprintf(out, "%s\"%s\": %ld", i ? ", " : "", name, value);
        else
            fprintf(out, "%s\"%s\": \"%s\"", i ? ", " : "", name, json_safe(text).text);
    }
    fprintf(out, "}, \"size_classes\": [");
    for (size_t c = 0; c < s.classes; c++)
        fprintf(out, "%s{\"block_size\": %zu, \"blocks_in_use\": %zu, \"pages\": %zu}", c ? ", " : "",
                s.size_class[c].block_size, s.size_class[c].blocks_in_use, s.size_class[c].pages);
    fprintf(out, "]}\n");
}

STRATA_EXPORT const char *strata_version(void)
{
    return STRATA_VERSION;
}

static void print_at_exit(void)
{
    strata_stats_print(stderr);
}

/* One JSON line appended with one write, so that the processes of a tree
 * writing to the same file never interleave. Formatted into a buffer of
 * its own (room for every size class), never into allocated memory. */
/* Once the exit record is being written no sample follows it: a sample
 * counts itself in flight, and the exit waits for it (a while at most: a
 * fork may have left a count behind in a child). */
static _Atomic bool exit_recorded;
static _Atomic int samples_in_flight;
#define EXIT_WAIT_ROUNDS 1000

static void append_at_exit(void)
{
    atomic_store(&exit_recorded, true);
    for (int round = 0; round < EXIT_WAIT_ROUNDS && atomic_load(&samples_in_flight) != 0; round++)
        os_sleep_ns(100000);
    static char line[32768];
    FILE *memory = fmemopen(line, sizeof line, "w");
    if (memory == NULL)
        return;
    strata_stats_json(memory);
    long length = ftell(memory);
    fclose(memory);
    if (length <= 0 || (size_t)length >= sizeof line || !os_append(strata_options.stats_file, line, (size_t)length))
        report_warning("cannot append the statistics to STRATA_STATS_FILE", NULL);
}

/* A short line, told from the exit record by its "sample_ms" key; the
 * time is the system's monotonic clock, so that strata-run lines up the
 * samples of every process of a tree. */
void stats_sample(void)
{
    if (atomic_load(&exit_recorded))
        return;
    struct strata_stats s;
    strata_stats_get(&s);
    char line[512];
    int length = snprintf(line, sizeof line,
                          "{\"sample_ms\": %.1f, \"program\": \"%s\", \"pid\": %ld, \"resident\": %zu, \"allocated\": %zu}\n",
                          (double)os_now_ns() / 1e6, json_safe(os_program_name()).text, os_pid(), s.resident, s.allocated);
    atomic_fetch_add(&samples_in_flight, 1);
    if (!atomic_load(&exit_recorded) && length > 0 && (size_t)length < sizeof line)
        (void)os_append(strata_options.stats_file, line, (size_t)length);
    atomic_fetch_sub(&samples_in_flight, 1);
}

void stats_init(void)
{
    started_ns = os_now_ns();
    if (strata_options.show_stats)
        atexit(print_at_exit);
    if (strata_options.stats_file != NULL)
        atexit(append_at_exit);
}
