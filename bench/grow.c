/* bench/grow.c: zsh's mmap string test. A string is grown by realloc in
 * small steps (appending 10 bytes at a time, as a shell's `s+=...` does) up
 * to a maximum size, then freed; a short-lived temporary is allocated at
 * every step, as an interpreter does between appends. Reports the median
 * milliseconds per grown string (the first, cold one included in the runs)
 * and peak resident memory. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

int main(int argc, char **argv)
{
    size_t max = 225000, step = 10;
    int repeats = 20;
    const struct bench_flag flags[] = {
        BENCH_SIZE_FLAG("-m", "max_bytes", &max, 1, "the string's final length (default 225000)"),
        BENCH_SIZE_FLAG("-s", "step", &step, 1, "bytes appended at a time (default 10)"),
        BENCH_INT_FLAG("-r", "repeats", &repeats, 1, "strings grown; the median time is printed (default 20)"),
    };
    const struct bench_command_line command_line = {"grow", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    if (max < step)
        bench_usage_error(&command_line, "-m %zu: shorter than one step (-s %zu)", max, step);
    unsigned long checksum = 0;
    double *times = malloc((size_t)repeats * sizeof *times);
    for (int r = 0; r < repeats; r++) {
        double start = bench_now();
        char *s = NULL, *temporary = NULL;
        for (size_t n = step; n <= max; n += step) {
            char *grown = realloc(s, n + 1);
            if (grown == NULL) {
                fprintf(stderr, "realloc failed at %zu bytes\n", n);
                return 1;
            }
            s = grown;
            memset(s + n - step, 'a' + (int)(n % 26), step);
            s[n] = '\0';
            free(temporary);
            temporary = malloc(16 + n % 48);
            temporary[0] = s[n - 1];
        }
        checksum += (unsigned long)s[max / 2] + (unsigned long)temporary[0];
        free(temporary);
        free(s);
        times[r] = (bench_now() - start) * 1000.0;
    }
    struct bench_memory top = bench_peak_memory();
    printf("max_bytes=%zu ms_per_string=%.3f top_rss_mb=%.1f checksum=%lu\n", max,
           bench_median(times, (size_t)repeats), top.resident_mb, checksum);
    free(times);
    return 0;
}
