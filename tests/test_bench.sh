#!/bin/sh
# tests/test_bench.sh: a smoke run of the whole benchmark suite (tiny sizes,
# one run) into a temporary folder; checks every table and file appears.
BUILD=${BUILD:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

status_before=$(git status --porcelain 2> /dev/null)
python3 bench/run.py --build "$BUILD" --mode smoke --repeats 1 --out "$out" > "$out/stdout" 2> "$out/progress"
check '[ $? -eq 0 ]' "bench/run.py exits 0"
status_after=$(git status --porcelain 2> /dev/null)
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
    check '[ "$status_before" = "$status_after" ]' "a run changes no file git tracks or sees"
    # Where make bench writes by default, and what make clean removes, git ignores.
    check '[ "$(git check-ignore bench/results/tables.md bench/results/threads.svg bench/results/threads.dat bench/__pycache__/harness.pyc | wc -l)" -eq 4 ]' "bench/results and caches ignored"
else
    echo "not a git checkout: the ignore rules are not checked (not counted)"
fi
check 'make -n clean | grep -q "bench/results"' "make clean removes bench/results"
# An unknown table is refused with the list of the known ones; --help lists them.
python3 bench/run.py --build "$BUILD" --only thread > "$out/unknown" 2>&1
check '[ $? -eq 2 ] && grep -q "unknown table thread; the tables are threads, threads_ends" "$out/unknown"' "unknown table refused with the list"
check 'python3 bench/run.py --help | grep -q "^tables: threads, threads_ends, loops"' "--help lists the tables"
# CSVs: allocator, case and run first; integers without a fraction.
check 'head -n 1 "$out/threads.csv" | grep -q "^allocator,case,run,threads,ops_per_sec,"' "CSV columns in a stable order"
check '! grep -Eq "[0-9]\.0(,|$)" "$out/threads.csv" && ! grep -Eq "\.[0-9]{7,}" "$out/grow.csv"' "CSV numbers without noise digits"
for heading in "### threads (" "### threads, partly written" "### per-thread loops" "### cross-thread" "### medium and big blocks" "### workloads" "### grow" "### C++: operator new and delete" "### zsh" "### memory over time" "### arena" "### context"; do
    check 'grep -q "^$heading" "$out/tables.md"' "table $heading"
done
for csv in threads threads_ends loops crossthread medium workloads grow cxx zsh memtime arena context; do
    check '[ -s "$out/$csv.csv" ] && grep -q strata "$out/$csv.csv"' "$csv.csv with strata rows"
done
check '[ "$(grep -c "^| strata |" "$out/tables.md")" -ge 13 ]' "strata has a row in every table"
check 'grep -q "^| strata contexts |" "$out/tables.md" && grep -q "^| strata pool |" "$out/tables.md"' "context table rows"
check 'grep -q "run 1/1" "$out/progress"' "progress lines"
check 'grep -q "^Machine: .*, 20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]\. .*the median of the ratios within each run" "$out/tables.md"' "the run's machine and date, and what a ratio is"
if command -v strace > /dev/null; then
    # strata's medium row: ops/s, faults/op, then the system calls per operation, counted.
    check 'grep "^| strata |" "$out/tables.md" | grep -Eq "^\| strata \| [0-9.]+ [kMG]? ?\| [0-9.]+ \| [0-9.]+ \|"' "system calls counted in the medium table"
else
    echo "strace is not installed (apt-get install strace): system calls not checked"
    fail=$((fail + 1))
fi
if command -v gnuplot > /dev/null; then
    for svg in threads memtime; do
        check 'grep -q "<svg" "$out/$svg.svg"' "$svg.svg plotted"
    done
    # The threads plot shows the runs' range (low and high columns).
    check 'grep -Eq "^[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$" "$out/threads.dat"' "threads plot data with each run's range"
else
    echo "gnuplot is not installed (apt-get install gnuplot-nox): plots not checked"
    fail=$((fail + 1))
fi
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
