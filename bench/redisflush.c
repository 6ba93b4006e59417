/* bench/redisflush.c: a real server's memory after it frees what it held.
 * Starts redis-server (Debian's redis-server) on a free loopback port,
 * its malloc chosen with -s (the library is preloaded into the server
 * alone, never into this program or redis-benchmark), fills it with
 * redis-benchmark's SETs over loopback, sends FLUSHALL, and reads the
 * server's resident memory (VmRSS) 1 s, 5 s and -w seconds after its reply
 * (FLUSHALL's own time, flush_s, is the server freeing the 2 GB: seconds
 * where the allocator gives memory back as it frees).
 * With -i, the server's I/O threads read and parse requests too
 * (--io-threads N --io-threads-do-reads yes): the blocks they allocate
 * are freed by the main thread, while they sleep. Prints one line of
 * key=value figures; exits 3, saying why, when redis is not installed or
 * the server does not start. */
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

/* A loopback port no one listens on now (the kernel's choice). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&address, sizeof address) == 0 &&
        getsockname(fd, (struct sockaddr *)&address, &length) == 0)
        port = ntohs(address.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* Runs argv (stdout to `out` when it is not NULL, else to /dev/null;
 * stderr to /dev/null) with `preload` as LD_PRELOAD (NULL: none) and
 * returns its pid; -1 when it cannot be started. */
static pid_t start(char *const argv[], const char *preload, const char *out)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    int null = open("/dev/null", O_RDWR);
    int to = out != NULL ? open(out, O_WRONLY | O_CREAT | O_TRUNC, 0600) : null;
    dup2(null, 0);
    dup2(to, 1);
    dup2(null, 2);
    if (preload != NULL)
        setenv("LD_PRELOAD", preload, 1);
    else
        unsetenv("LD_PRELOAD");
    execvp(argv[0], argv);
    _exit(127);
}

/* Runs argv to its end; its exit status, -1 when it did not exit. */
static int run(char *const argv[], const char *out)
{
    pid_t pid = start(argv, NULL, out);
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
        return -1;
    return WEXITSTATUS(status);
}

/* `redis-cli -p PORT words...`, its reply into `out` (NULL: dropped). */
static int cli(const char *port, const char *word1, const char *word2, const char *out)
{
    char *argv[] = {"redis-cli", "-p", (char *)port, (char *)word1, (char *)word2, NULL};
    return run(argv, out);
}

/* A "Name: N kB" field of /proc/PID/status, in MB; -1 if unreadable. */
static double status_mb(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    double mb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        double kb;
        if (strncmp(line, field, strlen(field)) == 0 && sscanf(line + strlen(field), " %lf", &kb) == 1)
            mb = kb / 1024.0;
    }
    if (f != NULL)
        fclose(f);
    return mb;
}

/* Whether the server's mappings include `library` (its preload took). */
static int maps_hold(pid_t pid, const char *library)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof line, f) != NULL)
        found = strstr(line, library) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* used_memory of INFO memory, in MB; -1 if not found. */
static double used_mb(const char *port, const char *scratch)
{
    if (cli(port, "info", "memory", scratch) != 0)
        return -1;
    FILE *f = fopen(scratch, "r");
    char line[256];
    double bytes = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (sscanf(line, "used_memory:%lf", &bytes) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return bytes < 0 ? -1 : bytes / 1048576.0;
}

static void sleep_until(double deadline)
{
    for (double left; (left = deadline - bench_now()) > 0;) {
        struct timespec pause = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&pause, NULL);
    }
}

static int unavailable(const char *why)
{
    fprintf(stderr, "redisflush: %s\n", why);
    return 3;
}

int main(int argc, char **argv)
{
    long requests = 3200000, value_bytes = 1000;
    int io_threads = 0;
    double last_wait = 30;
    const char *preload = "";
    const struct bench_flag flags[] = {
        BENCH_LONG_FLAG("-n", "requests", &requests, 1,
                        "SETs, over as many random keys, of which about 63% are distinct (default 3200000: about 2 GB)"),
        BENCH_LONG_FLAG("-d", "bytes", &value_bytes, 1, "bytes a value (default 1000)"),
        BENCH_INT_FLAG("-i", "threads", &io_threads, 0,
                       "the server's I/O threads, reading requests too; 0: none (default 0)"),
        BENCH_DOUBLE_FLAG("-w", "seconds", &last_wait, 0,
                          "the last reading, seconds after FLUSHALL; the others at 1 and 5 (default 30)"),
        BENCH_STRING_FLAG("-s", "library", &preload,
                          "preloaded into the server: a path, glibc (the C library's malloc), or empty for "
                          "redis's own jemalloc (default empty)"),
    };
    const struct bench_command_line command_line = {"redisflush", NULL, 0, NULL, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    /* Debian's redis-server links jemalloc: glibc's malloc comes first in
     * the server's lookups only when the C library itself is preloaded. */
    const char *library = strcmp(preload, "glibc") == 0 ? "libc.so.6" : preload;
    char *probe[] = {"redis-server", "--version", NULL};
    if (run(probe, NULL) != 0)
        return unavailable("redis-server is not installed (apt-get install redis-server redis-tools)");
    char *bench_probe[] = {"redis-benchmark", "--version", NULL};
    if (run(bench_probe, NULL) != 0)
        return unavailable("redis-benchmark is not installed (apt-get install redis-tools)");

    char folder[] = "/tmp/redisflush.XXXXXX";
    if (mkdtemp(folder) == NULL)
        return unavailable("no temporary folder");
    char scratch[64], port[16], threads[16];
    snprintf(scratch, sizeof scratch, "%s/reply", folder);
    snprintf(port, sizeof port, "%d", free_port());
    snprintf(threads, sizeof threads, "%d", io_threads);
    char *server_argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                           "--dir", folder, "--io-threads", threads, "--io-threads-do-reads", "yes", NULL};
    if (io_threads == 0)
        server_argv[11] = NULL; /* no --io-threads */
    pid_t server = start(server_argv, *library != '\0' ? library : NULL, NULL);
    double deadline = bench_now() + 10;
    while (server > 0 && cli(port, "ping", NULL, NULL) != 0 && bench_now() < deadline)
        sleep_until(bench_now() + 0.05);
    int code = 0;
    if (server <= 0 || cli(port, "ping", NULL, NULL) != 0) {
        code = unavailable("redis-server did not answer within 10 s");
    } else if (*library != '\0' && !maps_hold(server, library)) {
        code = unavailable("the server's malloc is not the preloaded one: its mappings do not hold it");
    } else {
        double start_mb = status_mb(server, "VmRSS:");
        char n[32], r[32], d[32];
        snprintf(n, sizeof n, "%ld", requests);
        snprintf(r, sizeof r, "%ld", requests);
        snprintf(d, sizeof d, "%ld", value_bytes);
        char *fill[] = {"redis-benchmark", "-p", port, "-t", "set", "-n", n, "-r", r, "-d", d, "-P", "16",
                        "-c", "20", "-q", NULL};
        double fill_start = bench_now();
        int filled = run(fill, NULL);
        double fill_s = bench_now() - fill_start;
        double full_mb = status_mb(server, "VmRSS:"), full_used_mb = used_mb(port, scratch);
        double flush_start = bench_now();
        if (filled != 0 || cli(port, "flushall", NULL, NULL) != 0) {
            code = unavailable("the fill or the FLUSHALL failed");
        } else {
            double flushed_at = bench_now();
            double waits[3] = {last_wait < 1 ? last_wait : 1, last_wait < 5 ? last_wait : 5, last_wait}, after_mb[3];
            for (int i = 0; i < 3; i++) {
                sleep_until(flushed_at + waits[i]);
                after_mb[i] = status_mb(server, "VmRSS:");
            }
            printf("io_threads=%d start_rss_mb=%.1f fill_s=%.1f full_rss_mb=%.1f full_used_mb=%.1f flush_s=%.2f "
                   "after_1s_rss_mb=%.1f after_5s_rss_mb=%.1f after_last_rss_mb=%.1f last_s=%.1f used_after_mb=%.1f "
                   "preloaded=%d\n",
                   io_threads, start_mb, fill_s, full_mb, full_used_mb, flushed_at - flush_start, after_mb[0],
                   after_mb[1], after_mb[2], last_wait, used_mb(port, scratch), *library != '\0');
        }
    }
    if (server > 0) {
        cli(port, "shutdown", "nosave", NULL);
        kill(server, SIGTERM);
        waitpid(server, NULL, 0);
    }
    unlink(scratch);
    rmdir(folder);
    return code;
}
