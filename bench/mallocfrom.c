/* bench/mallocfrom.c: names the shared object whose malloc, free, calloc
 * and realloc this process calls, as the dynamic loader bound them
 * (LD_PRELOAD's libraries first). bench/run.py runs it under each
 * allocator before measuring: the loader only warns and goes on with the C
 * library's malloc when a preloaded library is missing or cannot load, and
 * a library may load without replacing malloc at all, so without this the
 * run would measure glibc under another allocator's name. Prints one
 * NAME=FILE line a function (the file may hold blanks: read whole lines). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

static const char *defining_file(const char *symbol)
{
    void *address = dlsym(RTLD_DEFAULT, symbol);
    Dl_info info;
    if (address == NULL || dladdr(address, &info) == 0 || info.dli_fname == NULL || info.dli_fname[0] == '\0')
        return "unknown";
    return info.dli_fname;
}

int main(int argc, char **argv)
{
    const struct bench_command_line command_line = {
        "mallocfrom", NULL, 0,
        "prints the file of the shared object that defines each of malloc, free, calloc and realloc here", NULL,
        0};
    bench_parse_command_line(&command_line, argc, argv);
    /* A library that breaks at its first calls breaks here, not in a table. */
    char *block = malloc(100);
    char *zeroed = calloc(10, 10);
    block = realloc(block, 5000);
    if (block == NULL || zeroed == NULL || zeroed[99] != 0)
        return 1;
    memset(block, 1, 5000);
    free(block);
    free(zeroed);
    static const char *const functions[] = {"malloc", "free", "calloc", "realloc"};
    for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++)
        printf("%s=%s\n", functions[i], defining_file(functions[i]));
    return 0;
}
