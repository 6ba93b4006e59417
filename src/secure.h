/* secure.h: the secure flavour's allocation calls (secure.c), which api.h's
 * inline paths send every allocation and free to in that flavour: each
 * block checked when handed out and given a canary, each free validated
 * and checked, then held in the thread's quarantine; sizes are what was
 * asked. What the flavour writes in and around blocks is block_guards.h's. */
#ifndef STRATA_SECURE_H
#define STRATA_SECURE_H

#include <stdbool.h>
#include <stddef.h>

#include "platform.h"

STRATA_NOINLINE void *secure_malloc(size_t size);
STRATA_NOINLINE void secure_free(void *p);
void *secure_calloc(size_t total);
void *secure_realloc(void *p, size_t size);
void *secure_aligned_alloc(size_t alignment, size_t size);
size_t secure_usable_size(const void *p);
/* Whether p is the start of a small block, or a block of size 0, that is
 * free now: what a freed block's zeros no longer say (for the contexts'
 * reports). Never a report itself. */
bool secure_block_is_free(const void *p);

#endif /* STRATA_SECURE_H */
