#!/bin/sh
# tests/test_bench.sh: a smoke run of the whole benchmark suite (tiny sizes,
# one run) into a temporary folder; checks every table and file appears.
BUILD=${BUILD:-build}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

python3 bench/run.py --build "$BUILD" --mode smoke --repeats 1 --out "$out" > "$out/stdout" 2> "$out/progress"
check '[ $? -eq 0 ]' "bench/run.py exits 0"
for heading in "### threads (" "### threads, partly written" "### per-thread loops" "### cross-thread" "### medium and big blocks" "### workloads" "### grow" "### C++: operator new and delete" "### zsh" "### memory over time" "### arena" "### context"; do
    check 'grep -q "^$heading" "$out/tables.md"' "table $heading"
done
for csv in threads threads_ends loops crossthread medium workloads grow cxx zsh memtime arena context; do
    check '[ -s "$out/$csv.csv" ] && grep -q strata "$out/$csv.csv"' "$csv.csv with strata rows"
done
check '[ "$(grep -c "^| strata |" "$out/tables.md")" -ge 13 ]' "strata has a row in every table"
check 'grep -q "^| strata contexts |" "$out/tables.md" && grep -q "^| strata pool |" "$out/tables.md"' "context table rows"
check 'grep -q "run 1/1" "$out/progress"' "progress lines"
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
else
    echo "gnuplot is not installed (apt-get install gnuplot-nox): plots not checked"
    fail=$((fail + 1))
fi
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
