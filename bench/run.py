#!/usr/bin/env python3
"""bench/run.py: make bench. Runs each seed table's benchmark for strata and
every other allocator on the machine, side by side, and prints the tables
with each allocator's figure as a ratio to strata's. Raw runs go to
bench/results/*.csv, the tables to bench/results/*.md."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def threads_table(build, allocators, thread_counts, repeats, replacements):
    program = os.path.join(build, "bench", "threads")
    raw = []
    for rep in range(repeats):
        for threads in thread_counts:
            for name, preload in allocators:
                harness.progress("threads: run %d/%d, %2d threads, %s" % (rep + 1, repeats, threads, name))
                for fields in harness.run_program([program, "-t", str(threads), "-r", str(replacements)], preload):
                    fields.update(allocator=name, run=rep + 1)
                    raw.append(fields)
    harness.write_csv("bench/results/threads.csv", raw)

    def med(name, threads, key):
        return harness.median([r[key] for r in raw if r["allocator"] == name and r["threads"] == threads])

    names = [name for name, _ in allocators]
    header = ["allocator"] + ["%d thread%s" % (t, "" if t == 1 else "s") for t in thread_counts]
    rows = []
    for name in names:
        row = [name]
        for t in thread_counts:
            value = med(name, t, "ops_per_sec")
            r = harness.ratio(value, med("strata", t, "ops_per_sec"))
            row.append(harness.human(value) if name == "strata" else "%s (%.2fx)" % (harness.human(value), r))
        rows.append(row)
    speed = harness.markdown_table(header, rows)

    first, last = thread_counts[0], thread_counts[-1]
    header = ["allocator", "Top resident", "Top virtual", "Low resident", "Low virtual"]
    rows = []
    for name in names:
        row = [name]
        for key in ("top_rss_mb", "top_vm_mb", "low_rss_mb", "low_vm_mb"):
            row.append("%.0f / %.0f" % (med(name, first, key), med(name, last, key)))
        rows.append(row)
    memory = harness.markdown_table(header, rows)
    return ("### threads (seed 002): alloc/free operations per second, median of %d runs\n"
            "16000 blocks of 16..16384 bytes split over the threads; ratio = allocator / strata.\n\n%s\n\n"
            "### threads: memory in MB, %d thread / %d threads (Top: peak; Low: all freed, threads exited)\n\n%s\n"
            % (repeats, speed, first, last, memory))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--build", default=os.environ.get("BUILD", "build"))
    parser.add_argument("--full", action="store_true", help="longer runs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", default="1,2,4,8,16")
    args = parser.parse_args()

    allocators, missing = harness.find_allocators(os.path.join(args.build, "libstrata.so"))
    for name, package in missing:
        print("note: %s not installed; measuring the rest (apt-get install %s, or make bench-deps)"
              % (name, package))
    counts = [int(t) for t in args.threads.split(",")]
    replacements = 8000000 if args.full else 2000000
    report = "## strata benchmarks\nMachine: %s\n\n" % harness.machine_line()
    report += threads_table(args.build, allocators, counts, args.repeats, replacements)
    os.makedirs("bench/results", exist_ok=True)
    with open("bench/results/tables.md", "w") as f:
        f.write(report)
    print(report)


if __name__ == "__main__":
    main()
