// cxx_new.cc: C++'s operator new and delete, every form, on strata: run
// under LD_PRELOAD=libstrata.so or linked with libstrata.a (argument: where
// the operators must be defined, "libstrata" or the program's own name).
// Every form must resolve to strata's definition (libstdc++'s would reach
// strata's malloc too, so the statistics alone cannot tell); each block must
// keep its alignment and contents; a failed allocation must behave as the
// standard says: the new-handler is called, the throwing forms throw
// std::bad_alloc, the nothrow forms return nullptr.
#include <dlfcn.h>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "../check.h"
#include "strata.h"

// Weak: from the preloaded library, or from libstrata.a.
extern "C" size_t strata_usable_size(const void *ptr) __attribute__((weak));
extern "C" int strata_stats_get(struct strata_stats *stats) __attribute__((weak));

static size_t allocated()
{
    struct strata_stats stats;
    return strata_stats_get != nullptr && strata_stats_get(&stats) == 0 ? stats.allocated : 0;
}

struct alignas(256) Wide {
    unsigned char bytes[300];
};

static int handler_calls;
static void give_up()
{
    handler_calls++;
    std::set_new_handler(nullptr); // the next attempt throws
}

// An allocation no allocator can satisfy (and no compiler folds away).
static volatile size_t impossible = (size_t)1 << 62;

static bool throws(void *(*attempt)())
{
    try {
        (void)attempt();
    } catch (const std::bad_alloc &) {
        return true;
    }
    return false;
}

static const char *const forms[] = {
    "_Znwm", "_Znam", "_ZnwmRKSt9nothrow_t", "_ZnamRKSt9nothrow_t", "_ZnwmSt11align_val_t",
    "_ZnamSt11align_val_t", "_ZnwmSt11align_val_tRKSt9nothrow_t", "_ZnamSt11align_val_tRKSt9nothrow_t",
    "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
    "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t", "_ZdaPvmSt11align_val_t",
    "_ZdlPvSt11align_val_tRKSt9nothrow_t", "_ZdaPvSt11align_val_tRKSt9nothrow_t",
};

int main(int argc, char **argv)
{
    CHECK(strata_usable_size != nullptr && strata_stats_get != nullptr);
    if (strata_usable_size == nullptr || strata_stats_get == nullptr)
        return check_finish(); // not on strata at all

    // Every form is strata's, in the library or in this program.
    const char *where = argc > 1 ? argv[1] : "libstrata";
    for (const char *form : forms) {
        Dl_info info;
        void *symbol = dlsym(RTLD_DEFAULT, form);
        bool strata = symbol != nullptr && dladdr(symbol, &info) != 0 && info.dli_fname != nullptr &&
                      strstr(info.dli_fname, where) != nullptr;
        if (!strata)
            fprintf(stderr, "%s is defined in %s\n", form,
                    symbol != nullptr && dladdr(symbol, &info) ? info.dli_fname : "nothing");
        CHECK(strata);
    }

    // Plain new, counted by strata; sized delete.
    size_t before = allocated();
    std::vector<int> *v = new std::vector<int>(1000, 7);
    CHECK(strata_usable_size(v) >= sizeof *v && allocated() >= before + 4000);
    CHECK((*v)[999] == 7);
    delete v;
    CHECK(allocated() <= before + 64);

    // Array new and delete; an array is aligned for any object that fits.
    char *small = new char[24];
    CHECK(((uintptr_t)small & 15) == 0);
    delete[] small;
    char *text = new char[5000];
    CHECK(strata_usable_size(text) >= 5000);
    memset(text, 'x', 5000);
    CHECK(text[4999] == 'x');
    delete[] text;

    // Aligned new, single and array, and their deletes.
    Wide *w = new Wide;
    CHECK(((uintptr_t)w & 255) == 0 && strata_usable_size(w) >= sizeof(Wide));
    delete w;
    Wide *ws = new Wide[3];
    CHECK(((uintptr_t)ws & 255) == 0 && strata_usable_size(ws) >= 3 * sizeof(Wide));
    delete[] ws;
    void *raw = ::operator new(100, std::align_val_t(4096));
    CHECK(((uintptr_t)raw & 4095) == 0 && strata_usable_size(raw) >= 100);
    ::operator delete(raw, 100, std::align_val_t(4096));
    raw = ::operator new[](3000, std::align_val_t(64));
    CHECK(((uintptr_t)raw & 63) == 0 && strata_usable_size(raw) >= 3000);
    ::operator delete[](raw, std::align_val_t(64));
    raw = ::operator new(40);
    CHECK(strata_usable_size(raw) >= 40);
    ::operator delete(raw, 40);

    // Nothrow forms.
    int *n = new (std::nothrow) int(5);
    CHECK(n != nullptr && *n == 5 && strata_usable_size(n) >= sizeof(int));
    ::operator delete(n, std::nothrow);
    CHECK(::operator new(impossible, std::nothrow) == nullptr);
    CHECK(::operator new[](impossible, std::nothrow) == nullptr);
    CHECK(::operator new(impossible, std::align_val_t(64), std::nothrow) == nullptr);

    CHECK(::operator new[](impossible, std::align_val_t(64), std::nothrow) == nullptr);

    // Throwing forms: std::bad_alloc, after the new-handler had its turn.
    CHECK(throws([]() { return ::operator new(impossible); }));
    CHECK(throws([]() { return ::operator new[](impossible); }));
    CHECK(throws([]() { return ::operator new(impossible, std::align_val_t(128)); }));
    CHECK(throws([]() { return ::operator new[](impossible, std::align_val_t(128)); }));
    std::set_new_handler(give_up);
    CHECK(throws([]() { return ::operator new(impossible); }) && handler_calls == 1);
    std::set_new_handler(give_up);
    CHECK(::operator new(impossible, std::nothrow) == nullptr && handler_calls == 2);

    // Many blocks through the standard library, contents checked.
    std::vector<std::string *> strings;
    for (int i = 0; i < 20000; i++)
        strings.push_back(new std::string((size_t)(i % 300), (char)('a' + i % 26)));
    bool intact = true;
    for (int i = 0; i < 20000; i++) {
        intact &= strings[i]->size() == (size_t)(i % 300) &&
                  (strings[i]->empty() || (*strings[i])[0] == (char)('a' + i % 26));
        delete strings[i];
    }
    CHECK(intact);
    return check_finish();
}
