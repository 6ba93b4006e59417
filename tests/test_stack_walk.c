/* tests/test_stack_walk.c: the heap profiler's stack walk (src/stack_walk.c)
 * against libgcc's unwinder, which follows the same tables: from frames
 * with and without a frame pointer, of every depth, with alloca, through
 * the C library's qsort calling back, on threads and in a signal handler,
 * the walk gives the same return addresses or gives up (-1, where the
 * profiler then asks libgcc), and a second walk through the rules it
 * cached gives the same again. A walk from a start taken in an outer
 * function (the profiler takes it in its slow path) gives the full
 * walk's frames from that function's return address on. */
#include <alloca.h>
#include <pthread.h>
#include <signal.h>
#include <unwind.h>

#include "check.h"
#include "stack_walk.h"

#define DEPTH 64

struct trace {
    uintptr_t frames[DEPTH];
    int depth;
};

static _Unwind_Reason_Code trace_step(struct _Unwind_Context *context, void *arg)
{
    struct trace *t = arg;
    uintptr_t ip = (uintptr_t)_Unwind_GetIP(context);
    if (ip == 0)
        return _URC_END_OF_STACK;
    t->frames[t->depth++] = ip;
    return t->depth == DEPTH ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* Counted by every walk, on any thread or in a signal handler, and
 * checked by the tests on the main thread (check.h's counts are its own):
 * walks compared, walks the stack walk gave up, walks that differed. */
static _Atomic int walks_compared, walks_given_up, walks_differed;

/* Walks here both ways and compares: both start inside compare_here (each
 * at its own call), and from the next frame on they must agree, as must a
 * second walk through the rules cached. */
static __attribute__((noinline)) void compare_here(void)
{
    struct trace walked, unwound = {{0}, 0};
    walked.depth = stack_walk(walked.frames, DEPTH, 0, 0);
    _Unwind_Backtrace(trace_step, &unwound);
    struct trace again;
    again.depth = stack_walk(again.frames, DEPTH, 0, 0);
    if (walked.depth < 0) {
        walks_given_up++;
        if (again.depth >= 0)
            walks_differed++;
        return;
    }
    walks_compared++;
    bool same = walked.depth == unwound.depth && again.depth == walked.depth;
    for (int i = 1; same && i < walked.depth; i++)
        same = walked.frames[i] == unwound.frames[i] && again.frames[i] == walked.frames[i];
    if (!same && walks_differed++ == 0) {
        fprintf(stderr, "the walk (%d frames) and libgcc's (%d) differ:\n", walked.depth, unwound.depth);
        for (int i = 0; i < walked.depth || i < unwound.depth; i++)
            fprintf(stderr, "  %#lx %#lx\n", i < walked.depth ? (unsigned long)walked.frames[i] : 0ul,
                    i < unwound.depth ? (unsigned long)unwound.frames[i] : 0ul);
    }
}

static _Thread_local volatile int sink; /* each thread's: the frames' work, kept */

static __attribute__((noinline)) void without_frame_pointer(int n);

/* alloca makes the frame rbp-based (its size is known at run time only);
 * without_frame_pointer's is rsp-based, as -O2 leaves fixed frames. */
static __attribute__((noinline)) void with_frame_pointer(int n)
{
    char *room = alloca(16 + (size_t)(n % 5) * 512);
    room[0] = (char)n;
    sink += room[0];
    if (n > 0)
        without_frame_pointer(n - 1);
    else
        compare_here();
    sink++;
}

static __attribute__((noinline)) void without_frame_pointer(int n)
{
    volatile char room[700];
    room[n % 700] = (char)n;
    if (n > 0)
        with_frame_pointer(n - 1);
    else
        compare_here();
    sink += room[n % 700];
}

static void test_depths(void)
{
    for (int n = 0; n < 40; n++) {
        with_frame_pointer(n);
        without_frame_pointer(n);
    }
    CHECK_CMP(walks_compared, >=, 80);
    CHECK_CMP(walks_differed, ==, 0);
}

static int compare_called(const void *a, const void *b)
{
    static int once;
    if (!once++)
        compare_here(); /* inside the C library's qsort */
    return *(const int *)a - *(const int *)b;
}

static void test_through_libc(void)
{
    int before = walks_compared + walks_given_up;
    int numbers[64];
    for (int i = 0; i < 64; i++)
        numbers[i] = (i * 37) % 64;
    qsort(numbers, 64, sizeof numbers[0], compare_called);
    CHECK_CMP(walks_compared + walks_given_up, ==, before + 1);
    CHECK_CMP(walks_given_up, ==, 0);
    CHECK_CMP(walks_differed, ==, 0);
}

static void *thread_walks(void *arg)
{
    (void)arg;
    for (int n = 0; n < 10; n++)
        without_frame_pointer(n);
    return NULL;
}

static void test_threads(void)
{
    pthread_t threads[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&threads[i], NULL, thread_walks, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(threads[i], NULL);
    CHECK_CMP(walks_compared, >=, 80 + 40);
    CHECK_CMP(walks_given_up, ==, 0);
    CHECK_CMP(walks_differed, ==, 0);
}

static void on_signal(int signal)
{
    (void)signal;
    with_frame_pointer(3);
}

/* A signal frame's rule is one the walk does not follow: it gives up
 * (the profiler asks libgcc) or, where the handler's stack ends at the
 * kernel's trampoline without a table, agrees with libgcc. */
static void test_signal_handler(void)
{
    int compared = walks_compared, given_up = walks_given_up;
    signal(SIGUSR1, on_signal);
    raise(SIGUSR1);
    signal(SIGUSR1, SIG_DFL);
    CHECK_CMP(walks_compared + walks_given_up, ==, compared + given_up + 1);
    CHECK_CMP(walks_differed, ==, 0);
}

/* The walk from a start taken in the outer function, made two calls
 * deeper, against the full walk made there: the full one's first two
 * frames are the returns into walk_from_start and into the outer one. */
static int from_compared, from_differed;

static __attribute__((noinline)) void walk_from_start(const struct stack_start *start)
{
    struct trace from, full;
    from.depth = stack_walk_from(start, from.frames, DEPTH, 0, 0, NULL);
    full.depth = stack_walk(full.frames, DEPTH, 0, 0);
    if (from.depth < 0 || full.depth < 0)
        return;
    from_compared++;
    bool same = from.depth == full.depth - 2 && from.depth > 0;
    for (int i = 0; same && i < from.depth; i++)
        same = from.frames[i] == full.frames[i + 2];
    from_differed += !same;
    sink++;
}

static __attribute__((noinline)) void start_with_frame_pointer(int n)
{
    char *room = alloca(16 + (size_t)n * 64);
    room[0] = (char)n;
    struct stack_start start;
    stack_start_here(&start);
    walk_from_start(&start);
    sink += room[0];
}

static __attribute__((noinline)) void start_without_frame_pointer(int n)
{
    volatile char room[300];
    room[n % 300] = (char)n;
    struct stack_start start;
    stack_start_here(&start);
    walk_from_start(&start);
    sink += room[n % 300];
}

static void test_from_start(void)
{
    for (int n = 0; n < 8; n++) {
        start_with_frame_pointer(n);
        start_without_frame_pointer(n);
    }
    CHECK_CMP(from_compared, ==, 16);
    CHECK_CMP(from_differed, ==, 0);
    struct stack_start nowhere = {0, 0, 0};
    uintptr_t frames[4];
    CHECK_CMP(stack_walk_from(&nowhere, frames, 4, 0, 0, NULL), ==, -1);
}

/* The words a walk read tell a later walk from the same start whether it
 * would find the same frames: the same call path again, yes; another path
 * to the same start (the same code at the same stack depth), no. */
static struct stack_start start_before;
static struct stack_reads reads_before;
static struct trace trace_before;
static int reads_held, reads_changed, starts_matched;

static __attribute__((noinline)) void walk_remembering(bool first)
{
    struct stack_start start;
    stack_start_here(&start);
    if (first) {
        start_before = start;
        trace_before.depth = stack_walk_from(&start, trace_before.frames, DEPTH, 0, 0, &reads_before);
        sink++;
        return;
    }
    if (start.pc != start_before.pc || start.sp != start_before.sp)
        return;
    starts_matched++;
    struct trace now;
    now.depth = stack_walk_from(&start, now.frames, DEPTH, 0, 0, NULL);
    bool same = now.depth == trace_before.depth;
    for (int i = 0; same && i < now.depth; i++)
        same = now.frames[i] == trace_before.frames[i];
    if (stack_reads_unchanged(&reads_before)) {
        reads_held++;
        CHECK(same); /* unchanged words must mean the same frames */
    } else {
        reads_changed++;
    }
    sink++;
}

static __attribute__((noinline)) void path_one(bool first)
{
    walk_remembering(first);
    sink++;
}

static __attribute__((noinline)) void path_two(bool first)
{
    walk_remembering(first);
    sink += 2;
}

static void test_reads(void)
{
    /* The same call site twice (the second time the words still hold),
     * then another caller at the same depth, whose return address into
     * walk_remembering differs. */
    static volatile int rounds = 2; /* not unrolled: one call site */
    for (int i = 0; i < rounds; i++)
        path_one(i == 0);
    path_two(false);
    CHECK(trace_before.depth > 0);
    CHECK(reads_before.complete);
    CHECK_CMP(reads_before.count, >=, 1);
    CHECK_CMP(reads_before.count, <=, STACK_READS_MAX);
    CHECK_CMP(starts_matched, >=, 1);
    CHECK_CMP(reads_held, >=, 1);
    if (starts_matched == 2)
        CHECK_CMP(reads_changed, ==, 1);
    /* A word that changed is found. */
    struct stack_reads altered = reads_before;
    altered.value[altered.count - 1] ^= 1;
    CHECK(!stack_reads_unchanged(&altered));
    /* A walk from a frame-pointer frame uses the start's rbp. */
    struct stack_start start;
    stack_start_here(&start);
    uintptr_t frames[DEPTH];
    struct stack_reads reads;
    CHECK_CMP(stack_walk_from(&start, frames, DEPTH, 0, 0, &reads), >, 0);
    CHECK(stack_reads_unchanged(&reads));
}

static char *volatile room_escaped; /* keeps the alloca, and so rbp as the frame's base */

static __attribute__((noinline)) void walk_from_frame_pointer_frame(int n)
{
    char *room = alloca(16 + (size_t)n * 64);
    room[0] = (char)n;
    room_escaped = room;
    struct stack_start start;
    stack_start_here(&start);
    uintptr_t frames[DEPTH];
    struct stack_reads reads;
    CHECK_CMP(stack_walk_from(&start, frames, DEPTH, 0, 0, &reads), >, 0);
    CHECK(reads.start_bp_used);
    sink += room[0];
}

static void test_reads_frame_pointer(void)
{
    static volatile int room_size = 3; /* a size the compiler cannot know: a real alloca */
    walk_from_frame_pointer_frame(room_size);
}

static const struct check_test tests[] = {
    {"from_start", test_from_start},
    {"reads", test_reads},
    {"reads_frame_pointer", test_reads_frame_pointer},
    {"depths", test_depths},
    {"through_libc", test_through_libc},
    {"threads", test_threads},
    {"signal_handler", test_signal_handler},
};

int main(int argc, char **argv)
{
    return check_main(argc, argv, CHECK_TESTS(tests), CHECK_NO_CASES);
}
