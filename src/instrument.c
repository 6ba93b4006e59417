/* instrument.c: the out-of-line half of instrument.h. Valgrind's client
 * requests cost a stack frame and a stall each, so they live here and are
 * made only when start-up found the program running under Valgrind. */
#include "instrument.h"

_Bool instrument_valgrind;

void instrument_valgrind_mark(void *p, size_t n, _Bool usable)
{
#ifdef STRATA_VALGRIND
    if (usable)
        VALGRIND_MAKE_MEM_UNDEFINED(p, n);
    else
        VALGRIND_MAKE_MEM_NOACCESS(p, n);
#else
    (void)p, (void)n, (void)usable;
#endif
}

void instrument_detect(void)
{
#ifdef STRATA_VALGRIND
    instrument_valgrind = RUNNING_ON_VALGRIND != 0;
#endif
}
