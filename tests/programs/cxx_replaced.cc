// cxx_replaced.cc: a program that replaces the basic operator new and
// delete, as programs that count or tag their allocations do, run on
// strata. Its blocks carry a header strata knows nothing of, so every other
// form (array, sized, nothrow) must reach these replacements, as the C++
// runtime's own forms do, and never strata's free.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "../check.h"

// Only the unsized delete is replaced, as in programs written before C++14.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wsized-deallocation"
#endif

static long news, deletes;
static const uint64_t tag = 0x5eedf00dcafe1234u;

void *operator new(std::size_t size)
{
    uint64_t *block = static_cast<uint64_t *>(std::malloc(size + 16));
    if (block == nullptr)
        throw std::bad_alloc();
    block[0] = tag;
    news++;
    return block + 2;
}

void operator delete(void *ptr) noexcept
{
    if (ptr == nullptr)
        return;
    uint64_t *block = static_cast<uint64_t *>(ptr) - 2;
    if (block[0] != tag) {
        fprintf(stderr, "operator delete: %p is not this program's block\n", ptr);
        abort();
    }
    block[0] = 0;
    deletes++;
    std::free(block);
}

int main()
{
    long start_news = news, start_deletes = deletes;
    int *one = new int(1);
    delete one; // sized delete
    char *array = new char[100];
    delete[] array;
    int *quiet = new (std::nothrow) int(2);
    ::operator delete(quiet, std::nothrow);
    std::vector<std::string> strings;
    for (int i = 0; i < 1000; i++)
        strings.emplace_back(100, 'z');
    strings.clear();
    strings.shrink_to_fit();
    CHECK(news - start_news >= 1003);
    CHECK(news - start_news == deletes - start_deletes);
    return check_finish();
}
