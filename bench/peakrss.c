/* bench/peakrss.c: runs a command and writes its peak resident memory (kB,
 * from wait4) to the file named by PEAKRSS_OUT. The harness cannot measure
 * this itself: Linux folds the parent's own peak into a child at exec, so
 * the command must be started from a process as small as this one. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

int main(int argc, char **argv)
{
    /* No flags of its own: everything from the command on is the
     * command's, and -h or a mistyped flag before it is caught. */
    const struct bench_command_line command_line = {
        "peakrss", "command [args...]", 1,
        "runs the command; writes its peak resident kB to the file named by PEAKRSS_OUT", NULL, 0};
    if (bench_parse_command_line(&command_line, argc, argv) == 0)
        bench_usage_error(&command_line, "no command to run");
    const char *out = getenv("PEAKRSS_OUT");
    if (out == NULL)
        bench_usage_error(&command_line, "PEAKRSS_OUT names no file");
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[1], argv + 1);
        perror(argv[1]);
        _exit(127);
    }
    int status = 0;
    struct rusage usage;
    if (pid < 0 || wait4(pid, &status, 0, &usage) != pid)
        return 126;
    FILE *f = fopen(out, "w");
    if (f != NULL) {
        fprintf(f, "%ld\n", usage.ru_maxrss);
        fclose(f);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
