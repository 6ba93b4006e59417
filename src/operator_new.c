/* operator_new.c: C++'s operator new and delete in every form (plain and
 * array; nothrow; aligned; sized), in the override, so that a C++ program
 * reaches strata's inline paths without going through libstdc++'s operator
 * new and malloc's PLT. Measured on a new/delete loop of small objects it is
 * about a fifth faster (README, "C++").
 *
 * Written in C against the Itanium C++ ABI's names, so the library needs no
 * C++ runtime. Only the failure path needs one: the standard's new-handler
 * loop and std::bad_alloc belong to the C++ runtime, so a failed allocation
 * is handed to the definition the dynamic linker finds after strata's
 * (libstdc++'s), which calls the handler, retries through strata's malloc and
 * throws. Where there is none (a fully static program), the throwing forms
 * report the failure and abort, as an uncaught std::bad_alloc would; the
 * nothrow forms return NULL. */
#include <stddef.h>

#include "alloc.h"
#include "os.h"
#include "report.h"
#include "strata.h"

#define EXPORT STRATA_EXPORT
/* A C++ definition under its mangled name (size_t is "m" on LP64 Linux). */
#define CXX(mangled) __asm__(mangled)
#define UNUSED __attribute__((unused))

typedef void *new_fn(size_t size);
typedef void *new_nothrow_fn(size_t size, const void *nothrow);
typedef void *new_aligned_fn(size_t size, size_t alignment);
typedef void *new_aligned_nothrow_fn(size_t size, size_t alignment, const void *nothrow);

static STRATA_COLD _Noreturn void no_cxx_runtime(void)
{
    report_fatal("operator new: out of memory, and no C++ runtime to throw std::bad_alloc", NULL);
}

static STRATA_COLD void *failed(const char *mangled, size_t size)
{
    new_fn *next = (new_fn *)os_next_symbol(mangled);
    if (next == NULL)
        no_cxx_runtime();
    return next(size);
}

static STRATA_COLD void *failed_nothrow(const char *mangled, size_t size, const void *nothrow)
{
    new_nothrow_fn *next = (new_nothrow_fn *)os_next_symbol(mangled);
    return next == NULL ? NULL : next(size, nothrow);
}

static STRATA_COLD void *failed_aligned(const char *mangled, size_t size, size_t alignment)
{
    new_aligned_fn *next = (new_aligned_fn *)os_next_symbol(mangled);
    if (next == NULL)
        no_cxx_runtime();
    return next(size, alignment);
}

static STRATA_COLD void *failed_aligned_nothrow(const char *mangled, size_t size, size_t alignment,
                                                const void *nothrow)
{
    new_aligned_nothrow_fn *next = (new_aligned_nothrow_fn *)os_next_symbol(mangled);
    return next == NULL ? NULL : next(size, alignment, nothrow);
}

/* Each definition names itself, so that its failure reaches the same form. */
#define DEFINE_NEW(name, mangled)                                                               \
    EXPORT void *name(size_t size) CXX(mangled);                                                \
    EXPORT void *name(size_t size)                                                              \
    {                                                                                           \
        void *p = alloc_inline(size);                                                           \
        return likely(p != NULL) ? p : failed(mangled, size);                                   \
    }
#define DEFINE_NEW_NOTHROW(name, mangled)                                                       \
    EXPORT void *name(size_t size, const void *nothrow) CXX(mangled);                          \
    EXPORT void *name(size_t size, const void *nothrow)                                        \
    {                                                                                           \
        void *p = alloc_inline(size);                                                           \
        return likely(p != NULL) ? p : failed_nothrow(mangled, size, nothrow);                  \
    }
#define DEFINE_NEW_ALIGNED(name, mangled)                                                       \
    EXPORT void *name(size_t size, size_t alignment) CXX(mangled);                             \
    EXPORT void *name(size_t size, size_t alignment)                                           \
    {                                                                                           \
        void *p = strata_aligned_alloc(alignment, size);                                        \
        return likely(p != NULL) ? p : failed_aligned(mangled, size, alignment);                \
    }
#define DEFINE_NEW_ALIGNED_NOTHROW(name, mangled)                                               \
    EXPORT void *name(size_t size, size_t alignment, const void *nothrow) CXX(mangled);        \
    EXPORT void *name(size_t size, size_t alignment, const void *nothrow)                      \
    {                                                                                           \
        void *p = strata_aligned_alloc(alignment, size);                                        \
        return likely(p != NULL) ? p : failed_aligned_nothrow(mangled, size, alignment, nothrow); \
    }

DEFINE_NEW(cxx_new, "_Znwm")
DEFINE_NEW(cxx_new_array, "_Znam")
DEFINE_NEW_NOTHROW(cxx_new_nothrow, "_ZnwmRKSt9nothrow_t")
DEFINE_NEW_NOTHROW(cxx_new_array_nothrow, "_ZnamRKSt9nothrow_t")
DEFINE_NEW_ALIGNED(cxx_new_aligned, "_ZnwmSt11align_val_t")
DEFINE_NEW_ALIGNED(cxx_new_array_aligned, "_ZnamSt11align_val_t")
DEFINE_NEW_ALIGNED_NOTHROW(cxx_new_aligned_nothrow, "_ZnwmSt11align_val_tRKSt9nothrow_t")
DEFINE_NEW_ALIGNED_NOTHROW(cxx_new_array_aligned_nothrow, "_ZnamSt11align_val_tRKSt9nothrow_t")

/* Every delete is free: strata finds the block's size and alignment from
 * the pointer, so the sized and aligned forms' extra arguments are unused. */
#define DEFINE_DELETE(name, mangled, ...)                                                       \
    EXPORT void name(void *ptr, ##__VA_ARGS__) CXX(mangled);                                   \
    EXPORT void name(void *ptr, ##__VA_ARGS__) { free_inline(ptr); }

DEFINE_DELETE(cxx_delete, "_ZdlPv")
DEFINE_DELETE(cxx_delete_array, "_ZdaPv")
DEFINE_DELETE(cxx_delete_sized, "_ZdlPvm", size_t size UNUSED)
DEFINE_DELETE(cxx_delete_array_sized, "_ZdaPvm", size_t size UNUSED)
DEFINE_DELETE(cxx_delete_nothrow, "_ZdlPvRKSt9nothrow_t", const void *nothrow UNUSED)
DEFINE_DELETE(cxx_delete_array_nothrow, "_ZdaPvRKSt9nothrow_t", const void *nothrow UNUSED)
DEFINE_DELETE(cxx_delete_aligned, "_ZdlPvSt11align_val_t", size_t alignment UNUSED)
DEFINE_DELETE(cxx_delete_array_aligned, "_ZdaPvSt11align_val_t", size_t alignment UNUSED)
DEFINE_DELETE(cxx_delete_sized_aligned, "_ZdlPvmSt11align_val_t", size_t size UNUSED, size_t alignment UNUSED)
DEFINE_DELETE(cxx_delete_array_sized_aligned, "_ZdaPvmSt11align_val_t", size_t size UNUSED, size_t alignment UNUSED)
DEFINE_DELETE(cxx_delete_aligned_nothrow, "_ZdlPvSt11align_val_tRKSt9nothrow_t", size_t alignment UNUSED,
              const void *nothrow UNUSED)
DEFINE_DELETE(cxx_delete_array_aligned_nothrow, "_ZdaPvSt11align_val_tRKSt9nothrow_t", size_t alignment UNUSED,
              const void *nothrow UNUSED)
