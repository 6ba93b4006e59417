/* test_exit.c: memory comes back when threads exit. A thread that frees
 * everything leaves nothing behind; a thread that exits holding blocks
 * leaves them to whoever frees them later, and the memory goes back once
 * they are; thread churn reuses heaps instead of leaking them. */
#include <pthread.h>

#include "check.h"
#include "checkers.h"
#include "core.h"
#include "strata.h"

#define BLOCKS 20000

static void *held[BLOCKS];

static void *allocate_and_keep(void *arg)
{
    for (size_t i = 0; i < BLOCKS; i++) {
        held[i] = strata_malloc(1000 + i % 64);
        memset(held[i], (int)i, 1000);
    }
    return arg;
}

static void *allocate_and_free(void *arg)
{
    void *local[256];
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 256; i++)
            local[i] = strata_malloc((size_t)(i * 97 % 20000) + 1);
        for (int i = 0; i < 256; i++)
            strata_free(local[i]);
    }
    return arg;
}

static size_t run_thread(void *(*fn)(void *))
{
    pthread_t t;
    pthread_create(&t, NULL, fn, NULL);
    pthread_join(t, NULL);
    return os_mapped_bytes();
}

int main(void)
{
    strata_free(strata_malloc(1)); /* the main heap exists from here */
    size_t base_mapped = os_mapped_bytes();
    size_t base_resident = resident_bytes();
    size_t slack = (SEGMENT_CACHE_MAX + 1) * SEGMENT_SIZE; /* the purged segment cache */

    /* A thread that frees what it allocated leaves no mapping behind. */
    CHECK(run_thread(allocate_and_free) <= base_mapped + slack);

    /* A thread exits holding 20 MB: the blocks stay valid after its exit. */
    size_t with_orphans = run_thread(allocate_and_keep);
    CHECK(with_orphans >= base_mapped + (size_t)BLOCKS * 1000);
    int intact = 1;
    for (size_t i = 0; i < BLOCKS; i++)
        intact &= ((unsigned char *)held[i])[999] == (unsigned char)i;
    CHECK(intact);
    /* The main thread frees them: the abandoned segments go back. */
    for (size_t i = 0; i < BLOCKS; i++)
        strata_free(held[i]);
    CHECK(os_mapped_bytes() <= base_mapped + slack);
    int resident_ok = resident_is_meaningful();
    if (resident_ok)
        CHECK(resident_bytes() <= base_resident + 2 * 1024 * 1024);
    printf("resident: %zu KiB at start, %zu KiB after the orphans were freed\n",
           base_resident / 1024, resident_bytes() / 1024);

    /* 300 threads come and go: heaps are reused, nothing accumulates. */
    for (int i = 0; i < 300; i++)
        run_thread(allocate_and_free);
    CHECK(os_mapped_bytes() <= base_mapped + slack + 64 * 1024);
    if (resident_ok)
        CHECK(resident_bytes() <= base_resident + 2 * 1024 * 1024);
    return check_finish();
}
