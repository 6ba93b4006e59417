#!/usr/bin/env python3
"""bench/run.py: make bench. Runs each table's benchmark for strata and
every other allocator on the machine, side by side in one run, and prints the
tables with each allocator's figure as a ratio to strata's. Raw runs go to
OUT/<table>.csv, the tables to OUT/tables.md, plots to OUT/*.svg."""
import argparse
import glob
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))

# Sizes per mode: smoke (the test suite's quick run), default, full.
SIZES = {
    "smoke": dict(replacements=20000, threads=[1, 2], pairs=[1], consumers=3, cross_blocks=20480,
                  grow=[22500, 135000], grow_repeats=3,
                  zsh=dict(string=[5000, 1], array=[3000], function=[2000], search=[2000]),
                  working_mb=16,
                  arena=dict(rounds=2000, spike_mb=16, strings=[22500], string_repeats=3),
                  context_seconds=0.05, cxx=dict(objects=100000, map=40000, strings=10000),
                  loop_threads=[1, 2], loop_steps=100000, medium_steps=dict(medium=500, big=20),
                  workloads=dict(server=1, churn=5, leak=100000),
                  lifetimes=dict(threads=[2], steps=6400, started=4), shortlived_rounds=2000,
                  real=dict(redis_requests=300, sqlite_rows=2000, python=[1, 2000], gcc_functions=2),
                  redis=dict(requests=20000, last_wait=0.5, io_threads=[0, 2],
                             allocators=["strata", "glibc", "jemalloc"], repeats=1),
                  profiler=dict(threads=[1, 2], replacements=20000, loop_threads=[1], loop_steps=100000,
                                zsh="array", python=[1, 2000], rates=[65536, 524288, 4194304], seeds=1)),
    "default": dict(replacements=2000000, threads=[1, 2, 4, 8, 16], pairs=[1, 2, 4], consumers=3,
                    cross_blocks=2000000, grow=[225000, 1350000], grow_repeats=21,
                    zsh=dict(string=[60000, 1], array=[60000], function=[40000], search=[20000]),
                    working_mb=500,
                    arena=dict(rounds=50000, spike_mb=256, strings=[225000, 1350000], string_repeats=11),
                    context_seconds=0.5, cxx=dict(objects=16000000, map=1000000, strings=2000000),
                    loop_threads=[1, 2, 4], loop_steps=20000000, medium_steps=dict(medium=20000, big=2000),
                    workloads=dict(server=20, churn=200, leak=4000000),
                    lifetimes=dict(threads=[2, 4], steps=200000, started=20), shortlived_rounds=200000,
                    real=dict(redis_requests=15000, sqlite_rows=80000, python=[2, 30000], gcc_functions=60),
                    redis=dict(requests=3200000, last_wait=30, io_threads=[0, 2],
                               allocators=["strata", "glibc", "jemalloc"], repeats=1),
                    profiler=dict(threads=[1, 2], replacements=2000000, loop_threads=[1, 2], loop_steps=20000000,
                                  zsh="array", python=[2, 30000], rates=[65536, 524288, 4194304], seeds=5)),
    "full": dict(replacements=8000000, threads=[1, 2, 4, 8, 16], pairs=[1, 2, 4, 8], consumers=3,
                 cross_blocks=8000000, grow=[225000, 1350000], grow_repeats=51,
                 zsh=dict(string=[225000, 1], array=[200000], function=[100000], search=[100000]),
                 working_mb=500,
                 arena=dict(rounds=200000, spike_mb=256, strings=[225000, 1350000], string_repeats=31),
                 context_seconds=2.0, cxx=dict(objects=64000000, map=4000000, strings=8000000),
                 loop_threads=[1, 2, 4, 8], loop_steps=40000000, medium_steps=dict(medium=80000, big=4000),
                 workloads=dict(server=80, churn=800, leak=16000000),
                 lifetimes=dict(threads=[2, 4, 8], steps=200000, started=80), shortlived_rounds=800000,
                 real=dict(redis_requests=60000, sqlite_rows=320000, python=[8, 30000], gcc_functions=200),
                 redis=dict(requests=3200000, last_wait=30, io_threads=[0, 4], allocators="all", repeats=None),
                 profiler=dict(threads=[1, 2, 4], replacements=4000000, loop_threads=[1, 2, 4], loop_steps=10000000,
                               zsh="array", python=[4, 30000], rates=[65536, 524288, 4194304], seeds=11)),
}


# One colour an allocator in the plots: gnuplot's own cycle has eight, and a
# run with the peers draws more lines than that.
PLOT_COLOURS = ["#9400d3", "#009e73", "#56b4e9", "#e69f00", "#d4c200", "#0072b2", "#e51e10", "#000000",
                "#a0522d", "#ff69b4", "#808080", "#2e8b57"]

# How many times a run of another allocator than strata's is made when
# each is killed by a signal.
CRASH_TRIES = 3


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal %d" % number


class Suite:
    def __init__(self, build, out, allocators, repeats, sizes):
        self.build, self.out, self.allocators = build, out, allocators
        self.repeats, self.sizes = repeats, sizes
        self.names = [name for name, _ in allocators]
        self.own_libraries = {preload for name, preload in allocators if name in harness.OWN_NAMES and preload}
        self.crashes = []
        # The speed tables the secure table compares the secure flavours on:
        # (table, rows, cases, key, whether more is faster).
        self.speed_tables = []

    def measured(self, preload, name, what, measure, may_leave_out=False):
        """measure()'s result. A run of another allocator than strata's that
        is killed by a signal is made again, up to CRASH_TRIES times, and the
        crash is listed under the tables: one crash of a peer should neither
        end an hour's measurement nor go unsaid. A run that crashes every
        time is left out (None) where the caller allows it, and said so;
        strata's own crash ends the run."""
        for attempt in range(1, CRASH_TRIES + 1):
            try:
                return measure()
            except harness.ProgramFailed as e:
                if e.returncode >= 0 or preload in self.own_libraries:
                    raise
                if attempt == CRASH_TRIES:
                    if not may_leave_out:
                        raise
                    self.crashes.append("%s, %s: killed by %s %d times; left out" % (
                        name, what, signal_name(-e.returncode), CRASH_TRIES))
                    harness.progress("%s crashed %d times; left out" % (name, CRASH_TRIES))
                    return None
                self.crashes.append("%s, %s: %s killed by %s; measured again" % (
                    name, what, os.path.basename(str(e).split(" ", 1)[0]), signal_name(-e.returncode)))
                harness.progress("%s crashed (%s); measuring it again" % (name, signal_name(-e.returncode)))

    def program(self, name):
        return os.path.join(self.build, "bench", name)

    def runs(self, table, label_of, command_of, cases, variants=()):
        """Runs command_of(case) for every case, allocator (and extra variant:
        name, preload, environment) and repeat (repeats outermost, so drift
        spreads evenly); returns the parsed rows."""
        rows = []
        runners = [(name, preload, None) for name, preload in self.allocators] + list(variants)
        for rep in range(self.repeats):
            for case in cases:
                for name, preload, env in runners:
                    harness.progress("%s: run %d/%d, %s, %s" % (table, rep + 1, self.repeats,
                                                                label_of(case), name))
                    what = "%s %s, run %d" % (table, label_of(case), rep + 1)
                    for fields in self.measured(preload, name, what,
                                                lambda: harness.run_program(command_of(case), preload, env),
                                                may_leave_out=True) or []:
                        if "t_ms" in fields:
                            continue
                        fields.update(allocator=name, run=rep + 1, case=label_of(case))
                        rows.append(fields)
        harness.write_csv(os.path.join(self.out, table + ".csv"), rows)
        return rows

    def med(self, rows, name, case, key):
        """The median of the allocator's runs of the case; NaN where every
        run was left out (crashed)."""
        values = [r[key] for r in rows if r["allocator"] == name and r["case"] == case]
        return harness.median(values) if any(v is not None for v in values) else float("nan")

    def ratio_table(self, rows, cases, key, fmt, names=None):
        """One row per allocator, one column per case: the median, and for the
        others their ratio to strata's."""
        table = []
        for name in names or self.names:
            row = [name]
            for case in cases:
                value = self.med(rows, name, case, key)
                text = fmt(value)
                ratios = harness.paired_ratios(rows, name, "strata", case, key) if name != "strata" else []
                if ratios:
                    text += " (%.2fx)" % harness.median(ratios)
                row.append(text)
            table.append(row)
        return table

    def with_peak(self, rows, cases, table, key):
        """Adds a column of the cases' median peaks to each allocator's row."""
        return [row + [" / ".join("%.1f" % self.med(rows, row[0], c, key) for c in cases)] for row in table]

    def memory_table(self, rows, cases, keys):
        header = ["allocator"] + [k[1] for k in keys]
        table = []
        for name in self.names:
            table.append([name] + [" / ".join("%.0f" % self.med(rows, name, c, k[0]) for c in cases)
                                   for k in keys])
        return header, table

    # ---- the tables ------------------------------------------------------
    def threads(self):
        return self.vt("threads", "pages", "one byte a page of each block written")

    def threads_ends(self):
        return self.vt("threads_ends", "ends", "only each block's two ends written, as buffers partly used are")

    def vt(self, table, write, how):
        counts = self.sizes["threads"]
        strata = dict(self.allocators)["strata"]
        no_purge = ("strata, purge off", strata,
                    {"STRATA_PURGE_DELAY_MS": "3600000", "STRATA_BACKGROUND_PURGE": "0"})
        rows = self.runs(table, lambda t: "%d" % t,
                         lambda t: [self.program("threads"), "-t", str(t), "-r",
                                    str(self.sizes["replacements"]), "-w", write], counts, [no_purge])
        cases = ["%d" % t for t in counts]
        self.speed_tables.append((table, rows, cases, "ops_per_sec", True))
        speed = harness.markdown_table(["allocator"] + ["%s thr" % c for c in cases],
                                       self.ratio_table(rows, cases, "ops_per_sec", harness.human,
                                                        self.names + [no_purge[0]]))
        ends = [cases[0], cases[-1]]
        header, memory = self.memory_table(rows, ends, [("top_rss_mb", "Top resident"),
                                                        ("top_vm_mb", "Top virtual"),
                                                        ("low_rss_mb", "Low resident"),
                                                        ("low_vm_mb", "Low virtual")])
        if table == "threads":
            self.plot_threads(rows, counts)
        return ("### %s (the VT-malloc thread benchmark): alloc/free operations per second\n"
                "16000 blocks of 16..16384 bytes split over the threads, random blocks replaced; %s.\n\n%s\n\n"
                "Memory in MB, %s / %s threads (Top: peak; Low: all freed, threads exited):\n\n%s\n"
                % ("threads" if write == "pages" else "threads, partly written", how, speed,
                   ends[0], ends[1], harness.markdown_table(header, memory)))

    def loops(self):
        counts = self.sizes["loop_threads"]
        rows = self.runs("loops", lambda t: "%d" % t,
                         lambda t: [self.program("loops"), "-t", str(t), "-n", str(self.sizes["loop_steps"])],
                         counts)
        cases = ["%d" % t for t in counts]
        self.speed_tables.append(("loops", rows, cases, "ops_per_sec", True))
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ops_per_sec", harness.human),
                               "top_rss_mb")
        header = ["allocator"] + ["%s thr" % c for c in cases] + ["peak resident MB (%s thr)" % "/".join(cases)]
        return ("### per-thread loops: every thread its own malloc/free loop of random small sizes\n"
                "8..512 bytes, a ring of 16 live blocks a thread; alloc/free operations per second.\n\n%s\n"
                % harness.markdown_table(header, table))

    def shortlived(self):
        blocks = 100
        # (size, where the loop runs): three sizes in a process of one
        # thread, then one beside a second thread, where glibc leaves its
        # single-thread fast path.
        cases = [(16, "main"), (128, "main"), (1024, "main"), (128, "threaded")]

        def label(case):
            size, where = case
            return "%d B" % size + ("" if where == "main" else ", " + where)
        rows = self.runs("shortlived", label,
                         lambda c: [self.program("shortlived"), "-s", str(c[0]), "-m", c[1], "-c", str(blocks),
                                    "-n", str(self.sizes["shortlived_rounds"])], cases)
        labels = [label(c) for c in cases]
        table = self.ratio_table(rows, labels, "ops_per_sec", harness.human)
        return ("### short-lived small blocks in one thread (glibc's bench-malloc-simple): alloc/free operations per second\n"
                "A round allocates %d blocks of one size, writes a byte of each and frees them all in the order\n"
                "allocated; in a process of one thread, and (threaded) beside a second thread that waits.\n\n%s\n"
                % (blocks, harness.markdown_table(["allocator"] + labels, table)))

    def medium(self):
        modes = ["medium", "big"]
        rows = self.runs("medium", lambda m: m,
                         lambda m: [self.program("medium"), "-m", m, "-n", str(self.sizes["medium_steps"][m])],
                         modes)
        calls = {}
        for name, preload in self.allocators:
            for m in modes:
                harness.progress("medium: system calls, %s, %s" % (m, name))
                command = [self.program("medium"), "-m", m, "-n", str(self.sizes["medium_steps"][m])]
                n = self.measured(preload, name, "medium %s, system calls" % m,
                                  lambda: harness.count_memory_calls(command, preload))
                calls[(name, m)] = None if n is None else n / float(self.sizes["medium_steps"][m])
        table = []
        for row in self.ratio_table(rows, modes, "ops_per_sec", harness.human):
            name = row[0]
            cells = [row[0]]
            for i, m in enumerate(modes):
                per_op = calls[(name, m)]
                cells += [row[1 + i], "%.2f" % self.med(rows, name, m, "faults_per_op"),
                          "-" if per_op is None else "%.3f" % per_op]
            cells.append(" / ".join("%.0f" % self.med(rows, name, m, "top_rss_mb") for m in modes))
            table.append(cells)
        header = ["allocator", "medium: ops/s", "faults/op", "calls/op", "big: ops/s", "faults/op",
                  "calls/op", "peak resident MB (medium/big)"]
        note = "" if shutil.which("strace") else "\nstrace is not installed (apt-get install strace): system calls not counted.\n"
        return ("### medium and big blocks: buffers replaced one at a time\n"
                "medium: 4 live blocks of 128 KiB..4 MiB, one replaced a step, three pages of each written;\n"
                "big: 20 live blocks of 5..25 MiB replaced at random, each zeroed by the program. Operations\n"
                "(a free and an allocation) per second; page faults per operation in the loop; memory system\n"
                "calls (%s) per operation over the whole run, start-up included.\n\n%s\n%s"
                % (harness.MEMORY_CALLS.replace(",", ", "), harness.markdown_table(header, table), note))

    def workloads(self):
        rounds = self.sizes["workloads"]
        cases = list(rounds)
        rows = self.runs("workloads", lambda c: c,
                         lambda c: [self.program("workloads"), "-m", c, "-n", str(rounds[c])], cases)
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ops_per_sec", harness.human),
                               "top_rss_mb")
        header = ["allocator"] + cases + ["peak resident MB (%s)" % "/".join(cases)]
        return ("### workloads: a server, thread churn, a small leak\n"
                "server: 2 threads replace blocks of 8..1000 bytes in 40000 shared slots (freeing other\n"
                "threads' blocks) and are replaced every 200000 steps, the newcomers inheriting the blocks;\n"
                "churn: generations of 2 threads allocate 20000 blocks of 16..2000 bytes each, free four in\n"
                "five soon after and hand the rest to the next generation; leak: one thread's short-lived\n"
                "blocks of 16..512 bytes, one in a thousand never freed. Alloc/free operations per second.\n\n%s\n"
                % harness.markdown_table(header, table))

    def crossthread(self):
        fanout = self.sizes["consumers"]
        # (producers, consumers a producer): the pairs, then one producer
        # whose blocks several consumers free, whichever takes them.
        groups = [(p, 1) for p in self.sizes["pairs"]] + [(1, fanout)]

        def label(group):
            producers, consumers = group
            return "%d" % (2 * producers) if consumers == 1 else "1:%d" % consumers
        rows = self.runs("crossthread", label,
                         lambda g: [self.program("crossthread"), "-p", str(g[0]), "-c", str(g[1]), "-n",
                                    str(self.sizes["cross_blocks"])], groups)
        cases = [label(g) for g in groups]
        self.speed_tables.append(("crossthread", rows, cases, "ops_per_sec", True))
        header = ["allocator"] + ["%s thr" % c for c in cases[:-1]] + ["1 producer, %d consumers" % fanout]
        speed = harness.markdown_table(header, self.ratio_table(rows, cases, "ops_per_sec", harness.human))
        header, memory = self.memory_table(rows, [cases[0]], [("top_rss_mb", "Top resident"),
                                                               ("low_rss_mb", "Low resident")])
        return ("### cross-thread: producers and consumers, every block freed by another thread\n"
                "Blocks of 16..4096 bytes passed in batches of 256: producer/consumer pairs, and one producer\n"
                "feeding %d consumers, each taking whichever batch is next; operations per second.\n\n%s\n\n"
                "Memory in MB at %s threads (one pair):\n\n%s\n"
                % (fanout, speed, cases[0], harness.markdown_table(header, memory)))

    def lifetimes(self):
        sz = self.sizes["lifetimes"]
        rows = self.runs("lifetimes", lambda t: "%d" % t,
                         lambda t: [self.program("lifetimes"), "-t", str(t), "-n", str(sz["steps"]),
                                    "-g", str(sz["started"])], sz["threads"])
        cases = ["%d" % t for t in sz["threads"]]
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ops_per_sec", harness.human),
                               "top_rss_mb")
        header = ["allocator"] + ["%s thr" % c for c in cases] + ["peak resident MB (%s thr)" % "/".join(cases)]
        live = harness.median([r["live_blocks"] for r in rows])
        return ("### random lifetimes: blocks freed by whichever thread reaches their time, threads replaced\n"
                "At each tick of a shared clock, one block of 24..4096 bytes due 1..65535 ticks later (both spread\n"
                "over their logarithm; %.0f blocks live on average), and the blocks due then freed, whoever made\n"
                "them; a thread exits after %d ticks and a new one takes its place (%d threads over the run).\n"
                "Alloc/free operations per second.\n\n%s\n"
                % (live, sz["steps"], sz["started"], harness.markdown_table(header, table)))

    def grow(self):
        sizes = self.sizes["grow"]
        rows = self.runs("grow", lambda m: "%d" % m,
                         lambda m: [self.program("grow"), "-m", str(m), "-r",
                                    str(self.sizes["grow_repeats"])], sizes)
        cases = ["%d" % m for m in sizes]
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ms_per_string",
                                                             lambda v: "%.2f ms" % v), "top_rss_mb")
        header = ["allocator"] + ["%.0f KB: time" % (int(c) / 1000) for c in cases] + ["peak resident MB"]
        return ("### grow (zsh's mmap string test): a string grown by realloc in 10-byte steps\n"
                "Median milliseconds per string (lower is better; ratio = allocator / strata).\n\n%s\n"
                % harness.markdown_table(header, table))

    def cxx(self):
        if not os.path.exists(self.program("cxx")):
            return ("### C++: operator new and delete\nNo C++ compiler was found to build bench/cxx.cc "
                    "(apt-get install g++): table skipped.\n")
        rounds = self.sizes["cxx"]
        cases = list(rounds)
        rows = self.runs("cxx", lambda c: c, lambda c: [self.program("cxx"), "-c", c, "-n", str(rounds[c])], cases)
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ms", lambda v: "%.0f ms" % v),
                               "top_rss_mb")
        header = ["allocator"] + ["%s (%s)" % (c, harness.human(rounds[c])) for c in cases] + \
                 ["peak resident MB (%s)" % "/".join(cases)]
        return ("### C++: operator new and delete\n"
                "Small objects replaced at random; a std::map of std::string built and freed; vectors of\n"
                "heap-allocated strings. Median milliseconds (lower is better; ratio = allocator / strata).\n\n%s\n"
                % harness.markdown_table(header, table))

    def zsh(self):
        zsh = shutil.which("zsh")
        if zsh is None:
            return "### zsh\nzsh is not installed (apt-get install zsh): table skipped.\n"
        peakrss = self.program("peakrss")
        tests = self.sizes["zsh"]
        rows = []
        for rep in range(self.repeats):
            for test, args in tests.items():
                for name, preload in self.allocators:
                    harness.progress("zsh: run %d/%d, %s_test, %s" % (rep + 1, self.repeats, test, name))
                    script = os.path.join(HERE, "zsh", test + ".zsh")
                    command = [zsh, "-f", script] + [str(a) for a in args]
                    ms, peak, _ = self.measured(preload, name, "zsh %s_test, run %d" % (test, rep + 1),
                                                lambda: harness.run_timed(command, preload, peakrss))
                    rows.append(dict(allocator=name, run=rep + 1, case=test, ms=ms, peak_rss_mb=peak))
        harness.write_csv(os.path.join(self.out, "zsh.csv"), rows)
        cases = list(tests)
        self.speed_tables.append(("zsh", rows, cases, "ms", False))
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ms", lambda v: "%.0f ms" % v),
                               "peak_rss_mb")
        header = ["allocator"] + ["%s_test" % c for c in cases] + ["peak resident MB (%s)" % "/".join(cases)]
        return ("### zsh (zsh's perf-test): the real zsh running perf-test style scripts\n"
                "Median wall milliseconds (lower is better) and peak resident memory.\n\n%s\n"
                % harness.markdown_table(header, table))

    # The redis-benchmark tests of the real programs table, each with the
    # same number of requests.
    REDIS_TESTS = "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,mset"

    def real(self):
        """redis-server driven by redis-benchmark, sqlite3, python3 and gcc:
        wall time and peak resident memory of each, the allocator
        preloaded (into redis-server alone, not the benchmark driving it)."""
        sz = self.sizes["real"]
        peakrss = self.program("peakrss")
        work = tempfile.mkdtemp(prefix="strata-bench-real.")
        try:
            programs, skipped = self.real_programs(sz, work, peakrss)
            rows = []
            for rep in range(self.repeats):
                for case, _, measure in programs:
                    for name, preload in self.allocators:
                        harness.progress("real programs: run %d/%d, %s, %s" % (rep + 1, self.repeats, case, name))
                        ms, peak = self.measured(preload, name, "real programs %s, run %d" % (case, rep + 1),
                                                 lambda: measure(preload))
                        rows.append(dict(allocator=name, run=rep + 1, case=case, ms=ms, peak_rss_mb=peak))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        title = "### real programs: redis-server, sqlite3, python3 and gcc\n"
        notes = "".join("%s\n" % line for line in skipped)
        if not programs:
            return title + notes
        harness.write_csv(os.path.join(self.out, "real.csv"), rows)
        cases = [case for case, _, _ in programs]
        self.speed_tables.append(("real", rows, cases, "ms", False))
        table = self.with_peak(rows, cases, self.ratio_table(rows, cases, "ms", lambda v: "%.0f ms" % v),
                               "peak_rss_mb")
        header = ["allocator"] + cases + ["peak resident MB (%s)" % "/".join(cases)]
        return (title + "Median wall milliseconds (lower is better; ratio = allocator / strata) and peak resident memory.\n\n"
                + "".join(textwrap.fill("- %s: %s" % (case, what), 100, subsequent_indent="  ") + "\n"
                          for case, what, _ in programs)
                + "\n" + notes + ("\n" if notes else "") + harness.markdown_table(header, table) + "\n")

    def real_programs(self, sz, work, peakrss):
        """[(case, what it runs, measure(preload) -> (ms, peak MB))] for the
        programs installed here, and a line for each that is not."""
        programs, skipped = [], []

        def missing(program, package):
            skipped.append("%s is not installed (apt-get install %s): not measured." % (program, package))

        def version(command, pattern):
            out = subprocess.run(command, capture_output=True, text=True)
            found = re.search(pattern, out.stdout + out.stderr)
            return found.group(1) if found else "?"

        if all(shutil.which(p) for p in ("redis-server", "redis-benchmark", "redis-cli")):
            args = ["-q", "-n", str(sz["redis_requests"]), "-r", "100000", "-d", "200", "-P", "16", "-c", "20",
                    "-t", self.REDIS_TESTS]
            programs.append(("redis", "redis-server %s driven by redis-benchmark over loopback: %d requests of each of "
                             "%s (20 clients, 16 requests pipelined, 200-byte values on 100000 random keys); the "
                             "allocator preloaded into the server alone, seen in its mappings, redis's own jemalloc "
                             "seen to serve next to nothing (glibc: the C library preloaded, as Debian's redis links "
                             "jemalloc); the server's peak"
                             % (version(["redis-server", "--version"], r"v=(\S+)"), sz["redis_requests"],
                                self.REDIS_TESTS.replace(",", ", ")),
                             lambda preload, args=args: harness.run_redis(preload, args)))
        else:
            missing("redis-server or redis-benchmark", "redis-server redis-tools")
        sqlite3 = shutil.which("sqlite3")
        if sqlite3:
            command = [sqlite3, ":memory:", ".parameter set @rows %d" % sz["sqlite_rows"],
                       ".read \"%s\"" % os.path.join(HERE, "real", "sqlite3.sql")]
            programs.append(("sqlite3", "sqlite3 %s running bench/real/sqlite3.sql on an in-memory database: %d rows "
                             "inserted, two indexes, queries, updates, deletes, VACUUM"
                             % (version([sqlite3, "--version"], r"^(\S+)"), sz["sqlite_rows"]),
                             lambda preload, command=command: harness.run_timed(command, preload, peakrss)[:2]))
        else:
            missing("sqlite3", "sqlite3")
        # Debian's python3, not whichever runs this script (a virtual
        # environment's, or one built by hand).
        python3 = "/usr/bin/python3"
        if os.path.exists(python3):
            rounds, records = sz["python"]
            command = [python3, os.path.join(HERE, "real", "python3.py"), str(rounds), str(records)]
            programs.append(("python3", "Python %s running bench/real/python3.py: %d rounds of %d records as dicts, "
                             "indexed, through JSON and back, strings, lists and bytes (objects of up to 512 bytes "
                             "are Python's own allocator's)"
                             % (version([python3, "--version"], r"Python (\S+)"), rounds, records),
                             lambda preload, command=command: harness.run_timed(command, preload, peakrss)[:2]))
        else:
            missing(python3, "python3")
        gcc = shutil.which("gcc")
        if gcc:
            sys.path.insert(0, os.path.join(HERE, "real"))
            import gcc_source
            source = os.path.join(work, "big.c")
            with open(source, "w") as f:
                f.write(gcc_source.source(sz["gcc_functions"]))
            command = [gcc, "-O2", "-c", source, "-o", os.path.join(work, "big.o")]
            programs.append(("gcc", "gcc %s -O2 -c of a C file of %d functions (%d KB) written by "
                             "bench/real/gcc_source.py; the driver, cc1 and as all preloaded; the peak is the "
                             "largest of theirs (cc1's)"
                             % (version([gcc, "-dumpfullversion"], r"^(\S+)"), sz["gcc_functions"],
                                os.path.getsize(source) // 1024),
                             lambda preload, command=command: harness.run_timed(command, preload, peakrss)[:2]))
        else:
            missing("gcc", "gcc")
        return programs, skipped

    def memtime(self):
        return "\n".join([self.memtime_burst("small", "burst"), self.memtime_burst("large", "big blocks"),
                          self.memtime_redis()])

    def memtime_burst(self, mode, case):
        """memtime's burst of small blocks (with light work after it), or of
        10 MB blocks (with no call after it)."""
        mb = self.sizes["working_mb"]
        rows = []
        curves = {}
        for rep in range(self.repeats):
            for name, preload in self.allocators:
                harness.progress("memory over time: run %d/%d, %d MB of %s, %s" % (rep + 1, self.repeats, mb, case, name))
                command = [self.program("memtime"), "-w", str(mb), "-m", mode]
                fields = self.measured(preload, name, "memory over time, %s, run %d" % (case, rep + 1),
                                       lambda: harness.run_program(command, preload))
                summary = [f for f in fields if "summary" in f][0]
                summary.update(allocator=name, run=rep + 1, case=case)
                rows.append(summary)
                if rep == 0:
                    curves[name] = [(f["t_ms"], f["rss_mb"]) for f in fields if "t_ms" in f]
        plot = "memtime" if mode == "small" else "memtime_large"
        harness.write_csv(os.path.join(self.out, plot + ".csv"), rows)
        self.plot_memtime(plot, case, curves, rows)
        after = "end (300 ms of light work)" if mode == "small" else "end (300 ms without a call)"
        header = ["allocator", "start", "peak", "100 ms after the free began", after,
                  "free loop ms", "back within 5 MB, ms after the last free"]
        table = []
        for name in self.names:
            settle = harness.median([r["settle_ms"] if r["settle_ms"] >= 0 else float("inf")
                                     for r in rows if r["allocator"] == name])
            table.append([name] + ["%.0f" % self.med(rows, name, case, k) for k in
                                   ("start_rss_mb", "peak_rss_mb", "after_100ms_rss_mb", "end_rss_mb",
                                    "free_loop_ms")] +
                         ["never" if settle == float("inf") else "%.0f" % settle])
        if mode == "small":
            return ("### memory over time (zsh's mem-test): resident MB around a %d MB burst\n"
                    "Small blocks (16..1024 bytes) allocated, held 50 ms, freed; light work goes on.\n\n%s\n"
                    % (mb, harness.markdown_table(header, table)))
        return ("### memory over time, big blocks: resident MB around %d MB of 10 MB blocks\n"
                "Each block written whole, all held 50 ms, freed; then the program makes no call at all,\n"
                "as one that freed its big buffers and waits for input.\n\n%s\n"
                % (mb, harness.markdown_table(header, table)))

    def memtime_redis(self):
        """redis-server filled over loopback, then FLUSHALL: its resident
        memory after 1 s, 5 s and 30 s, without and with I/O threads."""
        sz = self.sizes["redis"]
        wanted = sz["allocators"]
        allocators = [(n, p) for n, p in self.allocators if wanted == "all" or n in wanted]
        repeats = sz["repeats"] or self.repeats
        rows, skipped = [], None
        for rep in range(repeats):
            for io in sz["io_threads"]:
                case = "io%d" % io
                for name, preload in allocators:
                    harness.progress("memory over time: redis, run %d/%d, %s, %s"
                                     % (rep + 1, repeats, "%d I/O threads" % io if io else "no I/O threads", name))
                    command = [self.program("redisflush"), "-n", str(sz["requests"]), "-w", str(sz["last_wait"]),
                               "-i", str(io), "-s", "glibc" if preload is None else preload]
                    try:
                        fields = harness.run_program(command, None)
                    except RuntimeError as e:
                        if "redisflush failed (3)" not in str(e):
                            raise
                        skipped = str(e).split("redisflush: ")[-1].strip()
                        break
                    for f in fields:
                        f.update(allocator=name, run=rep + 1, case=case)
                        rows.append(f)
                if skipped:
                    break
            if skipped:
                break
        title = ("### memory over time, a real server: redis-server's resident MB after FLUSHALL\n")
        if skipped:
            return title + "Not measured: %s.\n" % skipped
        harness.write_csv(os.path.join(self.out, "memtime_redis.csv"), rows)
        cases = ["io%d" % io for io in sz["io_threads"]]
        names = [n for n, _ in allocators]
        header = ["allocator"]
        waits = [min(1, sz["last_wait"]), min(5, sz["last_wait"]), sz["last_wait"]]
        for io in sz["io_threads"]:
            label = "%d I/O threads" % io if io else "no I/O threads"
            header += ["%s: full" % label, "FLUSHALL s"] + ["%g s after" % w for w in waits]
        table = []
        for name in names:
            row = [name]
            for case in cases:
                row.append("%.0f" % self.med(rows, name, case, "full_rss_mb"))
                text = "%.1f" % self.med(rows, name, case, "flush_s")
                if name != "strata":
                    text += " (%.2fx)" % harness.paired_ratio(rows, name, "strata", case, "flush_s")
                row.append(text)
                for key in ("after_1s_rss_mb", "after_5s_rss_mb", "after_last_rss_mb"):
                    text = "%.0f" % self.med(rows, name, case, key)
                    if name != "strata":
                        text += " (%.2fx)" % harness.paired_ratio(rows, name, "strata", case, key)
                    row.append(text)
            table.append(row)
        used = harness.median([r["full_used_mb"] for r in rows])
        return (title + "Filled by redis-benchmark over loopback (%d SETs of %d-byte values on random keys: %.0f MB that\n"
                "redis counts as used), then FLUSHALL, timed (the server freeing it all), and the resident MB\n"
                "1, 5 and %g s after its reply; the server's malloc preloaded into it alone (glibc: the C\n"
                "library preloaded, since Debian's redis links jemalloc; jemalloc is redis's own choice). With I/O\n"
                "threads they read and parse requests, so the main thread frees what they allocated.\n\n%s\n"
                % (sz["requests"], 1000, used, sz["last_wait"], harness.markdown_table(header, table)))

    def arena(self):
        """Arenas beside GNU obstack, APR pools and malloc/free (glibc's: the
        program links strata's core without the override)."""
        program = self.program("arena")
        kinds = [f["kind"] for f in harness.run_program([program, "kinds"], None)]
        notes = "" if "apr" in kinds else "APR pools not measured: libapr1-dev was not installed at build time.\n\n"
        sz = self.sizes["arena"]
        rows = []
        for rep in range(self.repeats):
            # The command test runs every kind in one process, in turns.
            harness.progress("arena: run %d/%d, command, %s" % (rep + 1, self.repeats, " vs ".join(kinds)))
            for fields in harness.run_program([program, "command", "-n", str(sz["rounds"]), "-k", ",".join(kinds)],
                                              None):
                fields.update(allocator=fields["kind"], run=rep + 1, case="command")
                rows.append(fields)
            for kind in kinds:
                harness.progress("arena: run %d/%d, %s" % (rep + 1, self.repeats, kind))
                runs = [("spike", ["spike", "-w", str(sz["spike_mb"])])]
                runs += [("string%d" % m, ["string", "-m", str(m), "-r", str(sz["string_repeats"])])
                         for m in sz["strings"]]
                for case, args in runs:
                    for fields in harness.run_program([program] + args + ["-k", kind], None):
                        fields.update(allocator=kind, run=rep + 1, case=case)
                        rows.append(fields)
        harness.write_csv(os.path.join(self.out, "arena.csv"), rows)
        names = ["strata"] + [k for k in kinds if k != "strata"]
        command = self.ratio_table(rows, ["command"], "allocs_per_sec", harness.human, names)
        strings = self.ratio_table(rows, ["string%d" % m for m in sz["strings"]], "ms_per_string",
                                   lambda v: "%.2f ms" % v, names)
        spike = [" / ".join("%.0f" % self.med(rows, name, "spike", k)
                            for k in ("start_rss_mb", "peak_rss_mb", "after_rss_mb")) for name in names]
        table = [c + [s] + t[1:] for c, s, t in zip(command, spike, strings)]
        header = (["arena", "command: allocs/s", "spike %d MB: resident start / peak / after release" % sz["spike_mb"]]
                  + ["string %.0f KB" % (m / 1000) for m in sz["strings"]])
        return ("### arena (zsh's perf-test and mmap string test): strata arenas beside obstack, APR pools, malloc/free\n"
                "command: mark, 200 allocations of 8..200 bytes written, release (all kinds in one\n"
                "process, taking turns); spike: 100-byte pieces, released; string: the newest block grown\n"
                "10 bytes at a time (obstack's growing object, APR doubling by hand, realloc). Ratios are\n"
                "the allocator's over strata's.\n\n%s%s\n"
                % (notes, harness.markdown_table(header, table)))

    def context(self):
        """talloc's pool speed test: strata contexts and pools beside
        libtalloc and malloc/free (glibc's, as the program links strata's
        core without the override, and strata_malloc's)."""
        program = self.program("context")
        kinds = [f["kind"] for f in harness.run_program([program, "kinds"], None)]
        notes = ("" if "talloc" in kinds else
                 "talloc not measured: libtalloc-dev was not installed at build time.\n\n")
        # Each pair runs in one process, taking turns in short slices, so
        # that the machine's changes of speed fall on both alike.
        groups = [[k for k in g if k in kinds] for g in
                  (["strata-ctx", "talloc"], ["strata-pool", "talloc-pool"], ["malloc", "strata-malloc"])]
        rows = []
        for rep in range(self.repeats):
            for group in groups:
                if not group:
                    continue
                harness.progress("context: run %d/%d, %s" % (rep + 1, self.repeats, " vs ".join(group)))
                for fields in harness.run_program([program, "-k", ",".join(group), "-t",
                                                   str(self.sizes["context_seconds"])], None):
                    fields.update(allocator=fields["kind"], run=rep + 1, case="speed")
                    rows.append(fields)
        harness.write_csv(os.path.join(self.out, "context.csv"), rows)

        def paired(a, b):
            """Median and range of a's ops/s over b's, run by run."""
            ratios = harness.paired_ratios(rows, a, b, "speed", "ops_per_sec")
            return harness.median(ratios), ratios[0], ratios[-1]
        labels = {"strata-ctx": "strata contexts", "strata-pool": "strata pool", "talloc": "talloc",
                  "talloc-pool": "talloc_pool", "malloc": "malloc/free (glibc)",
                  "strata-malloc": "malloc/free (strata)"}
        speed = {k: self.med(rows, k, "speed", "ops_per_sec") for k in kinds}
        reclaim = {k: self.med(rows, k, "speed", "reclaim_per_sec") for k in kinds}
        table = []
        for kind in kinds:
            row = [labels.get(kind, kind), harness.human(speed[kind]),
                   "%.2fx" % harness.paired_ratio(rows, kind, "strata-ctx", "speed", "ops_per_sec"),
                   harness.human(reclaim[kind])]
            table.append(row)
        header = ["context (talloc's pool speed test)", "speed: ops/s", "ratio to strata contexts",
                  "reclaim: alloc 2048 + free, per s"]
        summary = ""
        if "talloc" in kinds:
            summary = ("strata contexts / talloc: %.2fx (runs %.2fx-%.2fx).\n"
                       "strata pool / talloc_pool: %.2fx (runs %.2fx-%.2fx).\n"
                       "(Medians over the runs of the ratio within each run, where the two took turns in one process.)\n\n"
                       % (paired("strata-ctx", "talloc") + paired("strata-pool", "talloc-pool")))
        return ("### context: talloc's pool speed test\n"
                "A round: p1 = 100 bytes under the context (or pool), p2 = strdup(p1, \"foo bar\"),\n"
                "p3 = 300 bytes under p1, free p1; 3 ops a round (malloc rows: three mallocs, three frees).\n"
                "reclaim: talloc's pool reclaim loop, 2048 bytes allocated and freed in a 4096-byte pool (contexts:\n"
                "under a plain context; malloc rows: malloc/free).\n\n%s%s%s\n"
                % (notes, summary, harness.markdown_table(header, table)))

    # ---- the heap profiler ------------------------------------------------
    # tests/programs/profile_sites.c's sites, what each allocated or held at
    # exit, exactly: (site, pprof's mode, bytes).
    PROFILE_SITES = [("site_three", "--alloc_space", 48 << 20), ("site_one", "--alloc_space", 16 << 20),
                     ("site_grown", "--alloc_space", 200 * 200 * 1024),
                     ("site_leak", "--inuse_space", 16000000 + (10 << 20))]

    def profiler(self):
        """The heap profiler's cost: each program's wall time profiled over
        the same allocator's unprofiled, paired run by run (strata and its
        secure flavour with STRATA_PROFILE, jemalloc with prof:true at its
        own 512 KiB default, heaptrack over glibc); then its accuracy on
        tests/programs/profile_sites.c at three sampling rates."""
        sz = self.sizes["profiler"]
        peakrss = self.program("peakrss")
        work = tempfile.mkdtemp(prefix="strata-bench-profiler.")
        try:
            tools, notes = self.profiler_tools(work)
            cases = self.profiler_cases(sz)
            rows = []
            for rep in range(self.repeats):
                for label, command in cases:
                    for tool, off, on in tools:
                        for name, (preload, env, prefix) in ((tool, off), (tool + ", profiled", on)):
                            harness.progress("profiler: run %d/%d, %s, %s" % (rep + 1, self.repeats, label, name))
                            ms, peak, _ = self.measured(preload, tool, "profiler %s, run %d" % (label, rep + 1),
                                                        lambda: harness.run_timed(prefix + command, preload,
                                                                                  peakrss, env))
                            rows.append(dict(allocator=name, run=rep + 1, case=label, ms=ms, peak_rss_mb=peak))
                        if tool == "jemalloc" and not glob.glob(os.path.join(work, "jeprof*")):
                            notes.append("jemalloc wrote no profile: its library was built without "
                                         "profiling, so its row measures nothing.")
                        for leftover in glob.glob(os.path.join(work, "*")):
                            os.remove(leftover)
            harness.write_csv(os.path.join(self.out, "profiler.csv"), rows)
            labels = [label for label, _ in cases]
            table = []
            for tool, _, _ in tools:
                cells, peaks = [], []
                for label in labels:
                    ratios = harness.paired_ratios(rows, tool + ", profiled", tool, label, "ms")
                    cells.append("%.2fx" % harness.median(ratios) if ratios else "-")
                    peak_ratios = harness.paired_ratios(rows, tool + ", profiled", tool, label, "peak_rss_mb")
                    if peak_ratios:
                        peaks.append(harness.median(peak_ratios))
                geomean = math.exp(sum(math.log(p) for p in peaks) / len(peaks)) if peaks else float("nan")
                table.append([tool] + cells + ["%.2fx" % geomean])
            header = ["profiler (over its allocator unprofiled)"] + labels + ["peak resident (geomean)"]
            accuracy = self.profiler_accuracy(sz, work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return ("### the heap profiler: what profiling costs, and how close its figures are\n"
                "Wall time profiled over the same allocator's unprofiled, the median of the ratios within each run\n"
                "(the two run one after the other): strata and strata secure with STRATA_PROFILE at the default\n"
                "512 KiB, jemalloc with MALLOC_CONF=prof:true (its default rate, 512 KiB, and a profile at\n"
                "exit), heaptrack (every call traced) over glibc. threads: the threads table's program (%d\n"
                "replacements); loops: the per-thread loops' (%d steps); zsh: bench/zsh/%s.zsh; python3:\n"
                "bench/real/python3.py. The last column: peak resident profiled over unprofiled.\n\n%s%s\n\n%s"
                % (sz["replacements"], sz["loop_steps"], sz["zsh"], "".join("%s\n\n" % n for n in dict.fromkeys(notes)),
                   harness.markdown_table(header, table), accuracy))

    def profiler_tools(self, work):
        """[(name, (preload, env, prefix) unprofiled, the same profiled)]
        for the profilers found here, and notes on those that are not."""
        allocators = dict(self.allocators)
        tools, notes = [], []
        for name in ("strata", "strata secure"):
            if name in allocators:
                tools.append((name, (allocators[name], {}, []),
                              (allocators[name], {"STRATA_PROFILE": os.path.join(work, "strata.%p")}, [])))
        jemalloc = [preload for name, preload in self.allocators if name.startswith("jemalloc")]
        if jemalloc:
            tools.append(("jemalloc", (jemalloc[0], {}, []),
                          (jemalloc[0], {"MALLOC_CONF": "prof:true,prof_final:true,prof_prefix:%s"
                                         % os.path.join(work, "jeprof")}, [])))
        else:
            notes.append("jemalloc is not installed (apt-get install libjemalloc2): not measured.")
        heaptrack = shutil.which("heaptrack")
        if heaptrack:
            tools.append(("heaptrack", (None, {}, []), (None, {}, [heaptrack, "-o", os.path.join(work, "heaptrack")])))
        else:
            notes.append("heaptrack is not installed (apt-get install heaptrack): not measured.")
        return tools, notes

    def profiler_cases(self, sz):
        """[(label, command)]: the programs each profiler is measured on."""
        cases = [("threads %d thr" % t, [self.program("threads"), "-t", str(t), "-r", str(sz["replacements"])])
                 for t in sz["threads"]]
        cases += [("loops %d thr" % t, [self.program("loops"), "-t", str(t), "-n", str(sz["loop_steps"])])
                  for t in sz["loop_threads"]]
        zsh = shutil.which("zsh")
        if zsh:
            args = self.sizes["zsh"][sz["zsh"]]
            cases.append(("zsh %s" % sz["zsh"], [zsh, "-f", os.path.join(HERE, "zsh", sz["zsh"] + ".zsh")]
                          + [str(a) for a in args]))
        if os.path.exists("/usr/bin/python3"):
            rounds, records = sz["python"]
            cases.append(("python3", ["/usr/bin/python3", os.path.join(HERE, "real", "python3.py"), str(rounds),
                                      str(records)]))
        return cases

    def profiler_accuracy(self, sz, work):
        """Each known site's estimate against its exact bytes, at three
        rates, over several seeds: the median and the largest error."""
        pprof = shutil.which("google-pprof")
        title = "Accuracy: tests/programs/profile_sites.c under strata, each site's estimate against its exact bytes.\n\n"
        if pprof is None:
            return title + "google-pprof is not installed (apt-get install google-perftools): not measured.\n"
        source = os.path.join(os.path.dirname(HERE), "tests", "programs", "profile_sites.c")
        sites = os.path.join(work, "sites")
        cc = os.environ.get("CC", "cc")
        built = subprocess.run([cc, "-std=gnu11", "-O1", "-g", "-fno-builtin", source, "-o", sites, "-lpthread",
                                "-ldl"], capture_output=True, text=True)
        if built.returncode != 0:
            return title + "tests/programs/profile_sites.c did not build: %s\n" % built.stderr[-300:]
        strata = dict(self.allocators)["strata"]
        errors = {}
        for rate in sz["rates"]:
            for seed in range(1, sz["seeds"] + 1):
                harness.progress("profiler: accuracy at %d bytes, seed %d" % (rate, seed))
                profile = os.path.join(work, "accuracy")
                harness.run_program([sites], strata, {"STRATA_PROFILE": profile, "STRATA_PROFILE_SAMPLE": str(rate),
                                                      "STRATA_PROFILE_SEED": str(seed)})
                for site, mode, exact in self.PROFILE_SITES:
                    out = subprocess.run([pprof, "--text", "--show_bytes", mode, sites, profile], capture_output=True,
                                         text=True).stdout
                    estimate = 0
                    for line in out.splitlines():
                        fields = line.split()
                        if len(fields) >= 6 and fields[5] == site:
                            estimate = float(fields[0])
                    errors.setdefault((site, rate), []).append(abs(estimate - exact) / exact * 100)
        header = ["site (exact bytes)"] + ["%d KiB a sample" % (rate // 1024) for rate in sz["rates"]]
        table = []
        for site, mode, exact in self.PROFILE_SITES:
            what = "allocated" if mode == "--alloc_space" else "held at exit"
            row = ["%s (%s %.1f MB)" % (site, what, exact / 1e6)]
            for rate in sz["rates"]:
                e = sorted(errors[(site, rate)])
                row.append("%.1f%% (worst %.1f%%)" % (harness.median(e), e[-1]))
            table.append(row)
        return (title + "The median error over %d seeds (and the worst); one sample in about every N bytes: the\n"
                "error of a site of n blocks of s bytes is about 1/sqrt(n p), p = 1 - e^(-s/N).\n\n%s\n"
                % (sz["seeds"], harness.markdown_table(header, table)))

    # ---- plots -----------------------------------------------------------
    # The misuse suite's sizes (tests/test_security.sh's).
    MISUSE_SIZES = ["8", "4096", "262144"]

    def secure(self):
        """The misuse suite (tests/programs/attacks.c) on every allocator, and
        the secure flavour's speed against each on the speed tables measured
        before it in this run (threads, partly written, per-thread loops,
        cross-thread, zsh, real programs)."""
        program = self.program("attacks")
        if not os.path.exists(program):
            return "### the secure flavours\n%s is not built (make bench builds it): table skipped.\n" % program
        kinds = [line.split() for line in subprocess.run([program, "--list"], capture_output=True, text=True,
                                                         check=True).stdout.splitlines()]
        cells = [(k[0], size) for k in kinds for size in (self.MISUSE_SIZES if len(k) > 1 else ["64"])]
        outcome = {}
        for name, preload in self.allocators:
            harness.progress("secure: the misuse suite, %s" % name)
            for kind, size in cells:
                outcome[(name, kind, size)] = harness.misuse_outcome(program, kind, size, preload)
        rows = [dict(allocator=name, kind=kind, size=size, outcome=outcome[(name, kind, size)])
                for name in self.names for kind, size in cells]
        harness.write_csv(os.path.join(self.out, "secure.csv"), rows)
        secure = "strata secure"
        stopped = {name: sum(outcome[(name, kind, size)] == "stops" for kind, size in cells) for name in self.names}
        summary = []
        for name in self.names:
            line = [name, "%d" % stopped[name]]
            if secure in self.names and name != secure:
                missed = sum(outcome[(name, kind, size)] == "stops" and outcome[(secure, kind, size)] != "stops"
                             for kind, size in cells)
                line.append("%d" % missed)
                line.append(self.secure_speed_against(name))
            else:
                line += ["", ""]
            summary.append(line)
        header = ["allocator", "misuse cells stopped (of %d)" % len(cells),
                  "of those, strata secure lets through", "strata secure's speed against it"]
        # The kinds where strata secure and the allocators that stop more
        # than glibc differ.
        stronger = [n for n in self.names if n not in harness.OWN_NAMES and stopped[n] > stopped.get("glibc", 0)]
        columns = ([secure] if secure in self.names else []) + stronger
        differing = []
        for kind, size in cells:
            said = [outcome[(n, kind, size)] for n in columns]
            if len(set(said)) > 1:
                differing.append(["%s%s" % (kind, "" if size == "64" else " %s" % size)] + said)
        detail = (harness.markdown_table(["misuse (size)"] + columns, differing) if differing and len(columns) > 1
                  else "(no secure allocator beside strata's stops more than glibc here)")
        return ("### the secure flavours: the misuse suite, and strata secure's speed against each\n"
                "Each kind of misuse of tests/programs/attacks.c (docs/safety.md, \"The misuse suite\") at 8,\n"
                "4096 and 262144 bytes where it takes a size, in a child: \"stops\" is an abort, a fault or the\n"
                "misuse neutralised. Speed: strata secure's figure over the allocator's, paired run by run, the\n"
                "geomean (and range) of the cells of the threads, partly written, per-thread loops, cross-thread,\n"
                "zsh and real programs tables (above 1.00x: strata secure faster).\n\n%s\n\n"
                "Where strata secure and the allocators that stop more than glibc differ:\n\n%s\n"
                % (harness.markdown_table(header, summary), detail))

    def secure_speed_against(self, name):
        """strata secure's speed over `name`'s on the speed tables measured:
        "geomean (min-max) over N cells", or a dash."""
        ratios = []
        for _, rows, cases, key, more_is_faster in self.speed_tables:
            for case in cases:
                if more_is_faster:
                    r = harness.paired_ratios(rows, "strata secure", name, case, key)
                else:
                    r = harness.paired_ratios(rows, name, "strata secure", case, key)
                if r:
                    ratios.append(harness.median(r))
        if not ratios:
            return "-"
        geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        return "%.2fx (%.2fx-%.2fx) over %d cells" % (geomean, min(ratios), max(ratios), len(ratios))

    def gnuplot(self, script, name):
        if shutil.which("gnuplot") is None:
            harness.progress("gnuplot not installed (apt-get install gnuplot-nox): %s not drawn" % name)
            return
        subprocess.run(["gnuplot"], input=script, text=True, check=True)

    def plot(self, name, series, using, style, labels, extra=""):
        """Writes each allocator's points (x, y[, low, high]) as a gnuplot data
        block and draws them into OUT/name.svg, from 0 up, each allocator's
        line thinner than the one before (so that no line hides one it lies
        on), from 5 down to 1 whatever their number, each of its own colour,
        and the legend outside the plot; labels: title, x label, y label."""
        data = os.path.join(self.out, name + ".dat")
        with open(data, "w") as f:
            for label in self.names:
                f.write("# %s\n" % label)
                for point in series.get(label, []):
                    f.write(" ".join("%.3f" % v for v in point) + "\n")
                f.write("\n\n")
        steps = max(len(self.names) - 1, 1)
        plots = ", ".join("'%s' index %d using %s with %s lw %.1f lc rgb '%s' title '%s'"
                          % (data, i, using, style, 1 + 4.0 * (steps - i) / steps, PLOT_COLOURS[i % len(PLOT_COLOURS)], n)
                          for i, n in enumerate(self.names))
        self.gnuplot("set terminal svg size 820,420 font 'sans,12'\nset output '%s'\n"
                     "set title '%s'\nset xlabel '%s'\nset ylabel '%s'\nset grid\nset yrange [0:*]\n"
                     "set key outside right top\n%splot %s\n"
                     % ((os.path.join(self.out, name + ".svg"),) + labels + (extra, plots)), name + ".svg")

    def plot_threads(self, rows, counts):
        """The median of the runs, with a bar from the slowest to the fastest."""
        series = {}
        for n in self.names:
            series[n] = []
            for t in counts:
                runs = [r["ops_per_sec"] for r in rows if r["allocator"] == n and r["case"] == "%d" % t]
                if runs:
                    series[n].append((t, harness.median(runs), min(runs), max(runs)))
        self.plot("threads", series, "1:($2/1e6):($3/1e6):($4/1e6)", "yerrorlines",
                  ("threads (the VT-malloc thread benchmark): alloc/free operations per second, median and range of the runs",
                   "threads", "million ops/s"),
                  "set logscale x 2\n")

    def plot_memtime(self, plot, case, curves, rows):
        """Each allocator's first run, shifted so that its free starts at 0."""
        series = {}
        for n in self.names:
            free_ms = [r["free_ms"] for r in rows if r["run"] == 1 and r["allocator"] == n][0]
            series[n] = [(t - free_ms, mb) for t, mb in curves.get(n, [])]
        self.plot(plot, series, "1:2", "lines",
                  ("memory over time: resident MB around the free of a %s (first run)"
                   % ("burst" if case == "burst" else "burst of big blocks"),
                   "milliseconds since the free began", "resident MB"),
                  "set arrow from 0, graph 0 to 0, graph 1 nohead dt 2\n")


TABLES = ["threads", "threads_ends", "loops", "shortlived", "crossthread", "lifetimes", "medium", "workloads",
          "grow", "cxx", "zsh", "real", "profiler", "secure", "memtime", "arena", "context"]


EPILOG = """tables: %s

BENCH_ALLOCATORS="NAME=PATH ..." measures more allocators beside strata, its
secure flavour, glibc and those of Debian's found here (jemalloc, mimalloc,
tcmalloc): each blank-separated NAME=PATH preloads the library PATH under
NAME, which the tables show as given. Name it with its version, NAME-VERSION,
as Debian's mimalloc is named with its package's (mimalloc-2.0.9), so that
two versions of one allocator are told apart; for example, with the peers
built by ../shared/peers/build.sh ../peers:
  BENCH_ALLOCATORS="mimalloc-3.4.3=../peers/lib/mimalloc3.so
    snmalloc-0.7.5=../peers/lib/snmalloc.so rpmalloc-2.0.1=../peers/lib/rpmalloc.so" make bench
A name given twice or taken, or a file that does not exist, is refused; so
is any allocator whose library does not serve the process's malloc (checked
before anything is measured)."""


def main():
    parser = argparse.ArgumentParser(description=__doc__, epilog=EPILOG % ", ".join(TABLES),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.environ.get("BUILD", "build"))
    parser.add_argument("--out", default=os.path.join(HERE, "results"),
                        help="folder for tables.md, the CSVs and plots (default: bench/results, which git ignores)")
    parser.add_argument("--mode", choices=sorted(SIZES), default="default")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default=",".join(TABLES),
                        help="comma-separated tables, of those listed below (default: all)")
    parser.add_argument("--publish", action="store_true",
                        help="measure nothing: make the run in --out the published one (its files into "
                             "--published, its tables into --readme)")
    parser.add_argument("--check-published", action="store_true",
                        help="measure nothing: exit 1 unless --readme shows --published's tables.md")
    parser.add_argument("--published", default=os.path.join(HERE, "published"), help=argparse.SUPPRESS)
    parser.add_argument("--readme", default=os.path.join(HERE, "README.md"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.publish:
        try:
            harness.publish(args.out, args.published, args.readme)
        except (OSError, ValueError) as e:
            print("run.py --publish: %s" % e, file=sys.stderr)
            return 2
        print("published %s: %s and the tables of %s" % (args.out, args.published, args.readme))
        return 0
    if args.check_published:
        differences = harness.published_differences(args.published, args.readme)
        for line in differences:
            print(line)
        return 1 if differences else 0
    wanted = [t for t in args.only.split(",") if t]
    unknown = [t for t in wanted if t not in TABLES]
    if unknown or not wanted:
        parser.error("unknown table %s; the tables are %s" % (", ".join(unknown) or "(none given)", ", ".join(TABLES)))

    try:
        asked = harness.parse_allocator_list(os.environ.get("BENCH_ALLOCATORS", ""))
        allocators, missing = harness.find_allocators(os.path.join(args.build, "libstrata.so"),
                                                      secure_lib=os.path.join(args.build, "libstrata-secure.so"),
                                                      extra=asked)
    except ValueError as e:
        print("run.py: BENCH_ALLOCATORS: %s" % e, file=sys.stderr)
        return 2
    notes = ["note: %s is not installed; measured the rest (apt-get install %s, or sudo make bench-deps)"
             % (name, package) for name, package in missing]
    # Every allocator is seen serving a process before any is measured:
    # the ones found on the machine are left out when they do not, the
    # ones the run was asked for stop it.
    probe = os.path.join(args.build, "bench", "mallocfrom")
    required = list(harness.OWN_NAMES) + [name for name, _ in asked]
    served = []
    for name, preload in allocators:
        why = harness.malloc_refusal(probe, preload)
        if why is None:
            served.append((name, preload))
        elif name not in required:
            notes.append("note: %s is left out, its library does not serve malloc: %s" % (name, why))
        else:
            print("run.py: %s refused, nothing measured: %s" % (name, why), file=sys.stderr)
            return 2
    allocators = served
    os.makedirs(args.out, exist_ok=True)
    for note in notes:
        print(note)
    suite = Suite(args.build, args.out, allocators, args.repeats, SIZES[args.mode])
    report = ["## strata benchmarks",
              "Machine: %s, %s. Mode: %s, median of %d runs. A ratio in brackets is the allocator's figure over "
              "strata's: the median of the ratios within each run (the two measured one after the other), so it "
              "can differ from the ratio of the two medians shown." % (harness.machine_line(), time.strftime("%Y-%m-%d"),
                                                                      args.mode, args.repeats)] + notes
    for table in wanted:
        report.append(getattr(suite, table)())
    if suite.crashes:
        report.append("### runs that crashed\nKilled by a signal and measured again, or left out after %d crashes "
                      "(the figures above are of the runs that ended; nan where none did):\n\n" % CRASH_TRIES + "".join("- %s\n" % crash for crash in suite.crashes))
    text = "\n\n".join(report) + "\n"
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
