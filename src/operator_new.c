/* operator_new.c: C++'s operator new and delete in every form (plain and
 * array; nothrow; aligned; sized), in the override, so that a C++ program
 * reaches strata's inline paths without going through libstdc++'s operator
 * new and malloc's PLT: a loop replacing small objects takes 0.85x the time
 * (docs/usage.md, "C++"). Written in C against the Itanium C++ ABI's names,
 * so the library needs no C++ runtime.
 *
 * What the standard asks, and how it is kept here:
 * - A program may replace the four basic forms (operator new and delete,
 *   plain and aligned). strata's are weak, so a replacement wins at link
 *   time too, and every other form then calls the program's, as the C++
 *   runtime's own do: a block never crosses from one allocator to the other.
 * - A failed allocation calls the new-handler until there is none, then
 *   throws std::bad_alloc; the nothrow forms return NULL instead. That is
 *   the C++ runtime's business: the failure goes to the runtime's own
 *   definition of the same form (found after strata's), which retries
 *   through strata's malloc. Where there is none (libstdc++ linked
 *   statically, so that strata's definitions are the only ones), strata runs
 *   the handler loop itself through std::get_new_handler and throws through
 *   std::__throw_bad_alloc; without those either, it reports and aborts, as
 *   an uncaught exception would.
 * - operator new[] is aligned for any object no larger than the request
 *   (16 bytes on x86-64): such requests are rounded to 16. */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "api.h"
#include "os.h"
#include "report.h"
#include "strata.h"

#define EXPORT STRATA_EXPORT
#define UNUSED __attribute__((unused))
/* A C++ definition under its mangled name (size_t is "m" on LP64 Linux). */
#define CXX(mangled) __asm__(mangled)

/* __STDCPP_DEFAULT_NEW_ALIGNMENT__ on x86-64 and AArch64. */
#define NEW_ALIGNMENT ((size_t)16)

/* ---- the C++ runtime, where it is linked ------------------------------- */
typedef void new_handler_fn(void);
extern new_handler_fn *cxx_get_new_handler(void) CXX("_ZSt15get_new_handlerv") __attribute__((weak));
extern _Noreturn void cxx_throw_bad_alloc(void) CXX("_ZSt17__throw_bad_allocv") __attribute__((weak));

/* ---- the four replaceable forms ---------------------------------------- */
static void *basic_new(size_t size);
static void basic_delete(void *ptr);
static void *basic_new_aligned(size_t size, size_t alignment);
static void basic_delete_aligned(void *ptr, size_t alignment);
/* Their exported names; through these, a program's replacement if it has one. */
EXPORT void *cxx_new(size_t size) CXX("_Znwm") __attribute__((weak, alias("basic_new")));
EXPORT void cxx_delete(void *ptr) CXX("_ZdlPv") __attribute__((weak, alias("basic_delete")));
EXPORT void *cxx_new_aligned(size_t size, size_t alignment) CXX("_ZnwmSt11align_val_t")
    __attribute__((weak, alias("basic_new_aligned")));
EXPORT void cxx_delete_aligned(void *ptr, size_t alignment) CXX("_ZdlPvSt11align_val_t")
    __attribute__((weak, alias("basic_delete_aligned")));

/* True when the program replaced a basic form: then the others go through
 * the replacements. The weak names' final bindings (made at link time for a
 * static program, at load time for a shared one) never change, so the
 * answer is worked out once. */
enum { BASICS_UNKNOWN, BASICS_OURS, BASICS_REPLACED };
static _Atomic unsigned char basics_state;

static STRATA_COLD bool basics_replaced_slow(void)
{
    bool replaced = (void *)cxx_new != (void *)basic_new || (void *)cxx_delete != (void *)basic_delete ||
                    (void *)cxx_new_aligned != (void *)basic_new_aligned ||
                    (void *)cxx_delete_aligned != (void *)basic_delete_aligned;
    atomic_store_explicit(&basics_state, replaced ? BASICS_REPLACED : BASICS_OURS, memory_order_relaxed);
    return replaced;
}

static inline bool basics_replaced(void)
{
    unsigned state = atomic_load_explicit(&basics_state, memory_order_relaxed);
    if (likely(state == BASICS_OURS))
        return false;
    return state == BASICS_REPLACED || basics_replaced_slow();
}

/* ---- failure ------------------------------------------------------------ */
/* The standard's loop, where no runtime definition can run it: the handler
 * may make room (and the allocation is retried), throw, or give up. */
static STRATA_COLD void *handler_loop(size_t size, size_t alignment, bool nothrow)
{
    for (;;) {
        new_handler_fn *handler = cxx_get_new_handler != NULL ? cxx_get_new_handler() : NULL;
        if (handler == NULL) {
            if (nothrow)
                return NULL;
            if (cxx_throw_bad_alloc != NULL)
                cxx_throw_bad_alloc();
            report_fatal("operator new: out of memory, and no C++ runtime to throw std::bad_alloc", NULL);
        }
        handler();
        void *p = alignment <= NEW_ALIGNMENT ? api_malloc(size) : api_aligned_alloc(alignment, size);
        if (p != NULL)
            return p;
    }
}

typedef void *new_fn(size_t size);
typedef void *new_nothrow_fn(size_t size, const void *tag);
typedef void *new_aligned_fn(size_t size, size_t alignment);
typedef void *new_aligned_nothrow_fn(size_t size, size_t alignment, const void *tag);

static STRATA_COLD void *failed(const char *mangled, size_t size)
{
    new_fn *next = (new_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size) : handler_loop(size, 0, false);
}

static STRATA_COLD void *failed_nothrow(const char *mangled, size_t size, const void *tag)
{
    new_nothrow_fn *next = (new_nothrow_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size, tag) : handler_loop(size, 0, true);
}

static STRATA_COLD void *failed_aligned(const char *mangled, size_t size, size_t alignment)
{
    new_aligned_fn *next = (new_aligned_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size, alignment) : handler_loop(size, alignment, false);
}

static STRATA_COLD void *failed_aligned_nothrow(const char *mangled, size_t size, size_t alignment,
                                                const void *tag)
{
    new_aligned_nothrow_fn *next = (new_aligned_nothrow_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size, alignment, tag) : handler_loop(size, alignment, true);
}

/* With a replaced basic form, a nothrow form is the runtime's (which calls
 * the replacement and catches what it throws); with no runtime definition,
 * the replacement is called directly. */
static STRATA_COLD void *replaced_nothrow(const char *mangled, size_t size, const void *tag)
{
    new_nothrow_fn *next = (new_nothrow_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size, tag) : cxx_new(size);
}

static STRATA_COLD void *replaced_aligned_nothrow(const char *mangled, size_t size, size_t alignment,
                                                  const void *tag)
{
    new_aligned_nothrow_fn *next = (new_aligned_nothrow_fn *)os_next_symbol(mangled);
    return next != NULL ? next(size, alignment, tag) : cxx_new_aligned(size, alignment);
}

static inline size_t array_size(size_t size)
{
    return size > NEW_ALIGNMENT && size <= SIZE_MAX - (NEW_ALIGNMENT - 1)
               ? (size + NEW_ALIGNMENT - 1) & ~(NEW_ALIGNMENT - 1)
               : size;
}

/* An allocation past the thread's bin (its class's bin empty, a size above
 * SMALL_MAX, or the secure flavour's), then the failure path: out of line,
 * so that the forms below pop their bin inline and tail-call it, with no
 * stack frame of their own. `request` is the program's size, `size` the
 * one allocated (an array's, rounded up). */
static STRATA_NOINLINE void *new_past_bin(size_t size, const char *mangled, size_t request)
{
    void *p = STRATA_SECURE_BUILD ? secure_malloc(size) : alloc_slow(size);
    return likely(p != NULL) ? p : failed(mangled, request);
}

/* ---- the definitions ---------------------------------------------------- */
static void *basic_new(size_t size)
{
    void *p = alloc_pop(size);
    return likely(p != NULL) ? p : new_past_bin(size, "_Znwm", size);
}

static void basic_delete(void *ptr) { free_inline(ptr); }

static void *basic_new_aligned(size_t size, size_t alignment)
{
    void *p = api_aligned_alloc(alignment, size);
    return likely(p != NULL) ? p : failed_aligned("_ZnwmSt11align_val_t", size, alignment);
}

static void basic_delete_aligned(void *ptr, size_t alignment UNUSED) { free_inline(ptr); }

#define WEAK_EXPORT EXPORT __attribute__((weak))

WEAK_EXPORT void *cxx_new_array(size_t size) CXX("_Znam");
void *cxx_new_array(size_t size)
{
    if (unlikely(basics_replaced()))
        return cxx_new(size);
    void *p = alloc_pop(array_size(size));
    return likely(p != NULL) ? p : new_past_bin(array_size(size), "_Znam", size);
}

WEAK_EXPORT void *cxx_new_nothrow(size_t size, const void *tag) CXX("_ZnwmRKSt9nothrow_t");
void *cxx_new_nothrow(size_t size, const void *tag)
{
    if (unlikely(basics_replaced()))
        return replaced_nothrow("_ZnwmRKSt9nothrow_t", size, tag);
    void *p = alloc_inline(size);
    return likely(p != NULL) ? p : failed_nothrow("_ZnwmRKSt9nothrow_t", size, tag);
}

WEAK_EXPORT void *cxx_new_array_nothrow(size_t size, const void *tag) CXX("_ZnamRKSt9nothrow_t");
void *cxx_new_array_nothrow(size_t size, const void *tag)
{
    if (unlikely(basics_replaced()))
        return replaced_nothrow("_ZnamRKSt9nothrow_t", size, tag);
    void *p = alloc_inline(array_size(size));
    return likely(p != NULL) ? p : failed_nothrow("_ZnamRKSt9nothrow_t", size, tag);
}

WEAK_EXPORT void *cxx_new_array_aligned(size_t size, size_t alignment) CXX("_ZnamSt11align_val_t");
void *cxx_new_array_aligned(size_t size, size_t alignment)
{
    if (unlikely(basics_replaced()))
        return cxx_new_aligned(size, alignment);
    void *p = api_aligned_alloc(alignment, size);
    return likely(p != NULL) ? p : failed_aligned("_ZnamSt11align_val_t", size, alignment);
}

WEAK_EXPORT void *cxx_new_aligned_nothrow(size_t size, size_t alignment, const void *tag)
    CXX("_ZnwmSt11align_val_tRKSt9nothrow_t");
void *cxx_new_aligned_nothrow(size_t size, size_t alignment, const void *tag)
{
    if (unlikely(basics_replaced()))
        return replaced_aligned_nothrow("_ZnwmSt11align_val_tRKSt9nothrow_t", size, alignment, tag);
    void *p = api_aligned_alloc(alignment, size);
    return likely(p != NULL) ? p : failed_aligned_nothrow("_ZnwmSt11align_val_tRKSt9nothrow_t", size, alignment, tag);
}

WEAK_EXPORT void *cxx_new_array_aligned_nothrow(size_t size, size_t alignment, const void *tag)
    CXX("_ZnamSt11align_val_tRKSt9nothrow_t");
void *cxx_new_array_aligned_nothrow(size_t size, size_t alignment, const void *tag)
{
    if (unlikely(basics_replaced()))
        return replaced_aligned_nothrow("_ZnamSt11align_val_tRKSt9nothrow_t", size, alignment, tag);
    void *p = api_aligned_alloc(alignment, size);
    return likely(p != NULL) ? p : failed_aligned_nothrow("_ZnamSt11align_val_tRKSt9nothrow_t", size, alignment, tag);
}

/* A delete while the basic forms' binding is not yet settled, or after the
 * program replaced one: the basic form it stands for (the replacement), or
 * strata's free. Out of line, so that the forms below test one byte and
 * free inline with no stack frame of their own. `alignment` 0: a form
 * without one. */
static STRATA_NOINLINE void delete_unsettled(void *ptr, size_t alignment)
{
    if (!basics_replaced())
        free_inline(ptr);
    else if (alignment == 0)
        cxx_delete(ptr);
    else
        cxx_delete_aligned(ptr, alignment);
}

/* Every other delete is free, or the program's replacement: strata finds
 * the block's size and alignment from the pointer, so the sized and aligned
 * forms' extra arguments are unused. */
#define DEFINE_DELETE(name, mangled, alignment_or_0, ...)                       \
    WEAK_EXPORT void name(void *ptr, ##__VA_ARGS__) CXX(mangled);               \
    void name(void *ptr, ##__VA_ARGS__)                                         \
    {                                                                           \
        if (unlikely(atomic_load_explicit(&basics_state, memory_order_relaxed) != BASICS_OURS)) \
            delete_unsettled(ptr, alignment_or_0);                              \
        else                                                                    \
            free_inline(ptr);                                                   \
    }

DEFINE_DELETE(cxx_delete_array, "_ZdaPv", 0)
DEFINE_DELETE(cxx_delete_sized, "_ZdlPvm", 0, size_t size UNUSED)
DEFINE_DELETE(cxx_delete_array_sized, "_ZdaPvm", 0, size_t size UNUSED)
DEFINE_DELETE(cxx_delete_nothrow, "_ZdlPvRKSt9nothrow_t", 0, const void *tag UNUSED)
DEFINE_DELETE(cxx_delete_array_nothrow, "_ZdaPvRKSt9nothrow_t", 0, const void *tag UNUSED)
DEFINE_DELETE(cxx_delete_array_aligned, "_ZdaPvSt11align_val_t", alignment, size_t alignment)
DEFINE_DELETE(cxx_delete_sized_aligned, "_ZdlPvmSt11align_val_t", alignment, size_t size UNUSED, size_t alignment)
DEFINE_DELETE(cxx_delete_array_sized_aligned, "_ZdaPvmSt11align_val_t", alignment, size_t size UNUSED,
              size_t alignment)
DEFINE_DELETE(cxx_delete_aligned_nothrow, "_ZdlPvSt11align_val_tRKSt9nothrow_t", alignment, size_t alignment,
              const void *tag UNUSED)
DEFINE_DELETE(cxx_delete_array_aligned_nothrow, "_ZdaPvSt11align_val_tRKSt9nothrow_t", alignment, size_t alignment,
              const void *tag UNUSED)
