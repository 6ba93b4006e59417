"""tests/test_harness.py: the parts of the benchmark harness that compute
figures: medians, ratios, field parsing, /proc status reading, allocator
discovery, tables, and a real peak-resident measurement. Prints the
"checks: N passed, N failed" line that tests/run.sh adds up."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "bench"))
import harness  # noqa: E402

passed = failed = 0


def check(condition, what):
    global passed, failed
    if condition:
        passed += 1
    else:
        failed += 1
        print("CHECK failed: %s" % what)


def raises(fn, exception):
    try:
        fn()
    except exception:
        return True
    return False


# median and ratio
check(harness.median([3, 1, 2]) == 2, "median of odd count")
check(harness.median([4, 1, 3, 2]) == 2.5, "median of even count")
check(harness.median([5, None, 1, 3]) == 3, "median skips missing values")
check(raises(lambda: harness.median([]), ValueError), "median of nothing is an error")
check(harness.ratio(10.0, 4.0) == 2.5, "ratio")
check(harness.ratio(1.0, 0.0) is None, "ratio to zero is undefined")
# a slow spell on two of strata's three runs (the zsh table of one make bench)
spell = [dict(allocator=a, run=n + 1, case="string", ms=v)
         for a, vs in (("strata", (529, 311, 553)), ("glibc", (323, 321, 563))) for n, v in enumerate(vs)]
check(abs(harness.paired_ratio(spell, "glibc", "strata", "string", "ms") - 563 / 553) < 1e-9,
      "paired ratio: the median of the run-by-run ratios")
check([round(r, 2) for r in harness.paired_ratios(spell, "glibc", "strata", "string", "ms")] == [0.61, 1.02, 1.03],
      "paired ratios, sorted")
check(raises(lambda: harness.paired_ratio(spell, "glibc", "strata", "search", "ms"), ValueError),
      "paired ratio of a case with no runs is an error")

# fields printed by the benchmark programs
fields = harness.parse_fields("threads=2 ops_per_sec=1.5e6 name=strata junk")
check(fields == {"threads": 2.0, "ops_per_sec": 1500000.0, "name": "strata"}, "parse_fields")

# resident memory from /proc/PID/status text
status = "Name:\tx\nVmHWM:\t   20480 kB\nVmRSS:\t    1536 kB\n"
check(harness.read_status_field(status, "VmRSS") == 1.5, "VmRSS in MB")
check(harness.read_status_field(status, "VmHWM") == 20.0, "VmHWM in MB")
check(raises(lambda: harness.read_status_field(status, "VmSwap"), KeyError), "missing field")
with open("/proc/self/status") as f:
    check(harness.read_status_field(f.read(), "VmRSS") > 1.0, "this process's resident size")

# allocator discovery: strata and glibc always, the others where found
with tempfile.TemporaryDirectory() as d:
    open(os.path.join(d, "libjemalloc.so.2"), "w").close()
    found, missing = harness.find_allocators("build/libstrata.so", [d], scudo_glob=os.path.join(d, "none-*.so"))
    names = [n for n, _ in found]
    check(names == ["strata", "glibc", "jemalloc"], "allocators found: %s" % names)
    check(dict(found)["glibc"] is None, "glibc needs no preload")
    check(sorted(p for _, p in missing) == ["libclang-rt-dev", "libmimalloc2.0", "libtcmalloc-minimal4"],
          "missing allocators name their packages: %s" % missing)
    # Scudo, the newest LLVM's, named by it
    for version in ("14", "16"):
        os.makedirs(os.path.join(d, "llvm-%s" % version, "lib"))
        open(os.path.join(d, "llvm-%s" % version, "lib", "libclang_rt.scudo_standalone-x.so"), "w").close()
    found, missing = harness.find_allocators("build/libstrata.so", [d],
                                             scudo_glob=os.path.join(d, "llvm-*", "lib", "libclang_rt.scudo_standalone-x.so"))
    check(found[-1][0] == "scudo-16" and "/llvm-16/" in found[-1][1], "Scudo found, the newest: %s" % found[-1:])

# tables and rates
table = harness.markdown_table(["a", "b"], [[1, 2], [3, 4]])
check(table.splitlines() == ["| a | b |", "| --- | --- |", "| 1 | 2 |", "| 3 | 4 |"], "markdown table")
check(harness.human(18800000) == "18.8 M" and harness.human(950000) == "950 k", "human rates")

# a real peak-resident measurement through the peakrss helper
build = os.environ.get("BUILD", "build")
peakrss = os.path.join(build, "bench", "peakrss")
if os.path.exists(peakrss):
    ms, peak, out = harness.run_timed(
        [sys.executable, "-c", "b = bytearray(64 << 20); b[::4096] = b'x' * len(b[::4096]); print('ok')"],
        None, peakrss)
    check(out.strip() == "ok" and ms > 0, "run_timed runs the program")
    check(64 <= peak < 200, "peak resident of a 64 MB program: %.1f MB" % peak)
else:
    check(False, "%s is not built" % peakrss)

print("checks: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
