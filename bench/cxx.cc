// cxx.cc: C++ allocation through operator new and delete, as C++ programs
// allocate: objects of one small type replaced at random ("objects"), a
// std::map of std::string built and torn down ("map"), and vectors of
// heap-allocated strings of mixed lengths ("strings"). Every allocator is
// reached through operator new: its own, if it exports one, or libstdc++'s,
// which calls malloc. Prints one line of fields for the run.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

extern "C" {
#include "common.h"
}

struct Node {
    long key, a, b;
    Node *next;
};

static unsigned long objects(long rounds)
{
    std::vector<Node *> live(256, nullptr);
    unsigned long long state = 12345, sum = 0;
    for (long i = 0; i < rounds; i++) {
        unsigned k = (unsigned)(bench_random(&state) & 255);
        if (live[k] != nullptr)
            sum += (unsigned long)live[k]->key;
        delete live[k];
        live[k] = new Node{i, 0, 0, nullptr};
    }
    for (Node *node : live)
        delete node;
    return sum;
}

static unsigned long map(long rounds)
{
    unsigned long sum = 0;
    for (long r = 0; r < rounds / 20000; r++) {
        std::map<long, std::string> m;
        for (long i = 0; i < 20000; i++)
            m.emplace(i * 7919 % 20011, std::string((size_t)(24 + i % 40), 'x'));
        sum += m.size() + m.begin()->second.size();
    }
    return sum;
}

static unsigned long strings(long rounds)
{
    unsigned long sum = 0;
    for (long r = 0; r < rounds / 1000; r++) {
        std::vector<std::unique_ptr<std::string>> v;
        for (int i = 0; i < 1000; i++)
            v.emplace_back(new std::string((size_t)(i % 200), 'y'));
        sum += v.size() + v.back()->size();
    }
    return sum;
}

int main(int argc, char **argv)
{
    const char *what = "objects";
    long rounds = 16000000;
    const struct bench_flag flags[] = {
        BENCH_STRING_FLAG("-c", "objects|map|strings", &what, "the case to run (default objects)"),
        BENCH_LONG_FLAG("-n", "rounds", &rounds, 1,
                        "objects replaced, map entries or strings made, all told (default 16000000)"),
    };
    const struct bench_command_line command_line = {"cxx", nullptr, 0, nullptr, flags, BENCH_FLAG_COUNT(flags)};
    bench_parse_command_line(&command_line, argc, argv);
    unsigned long (*const cases[])(long) = {objects, map, strings};
    unsigned long (*run)(long) = cases[bench_choice(&command_line, "-c", what, "objects|map|strings")];
    double start = bench_now();
    unsigned long checksum = run(rounds);
    double ms = (bench_now() - start) * 1000.0;
    struct bench_memory peak = bench_peak_memory();
    printf("case=%s rounds=%ld ms=%.3f top_rss_mb=%.1f checksum=%lu\n", what, rounds, ms, peak.resident_mb, checksum);
    return 0;
}
