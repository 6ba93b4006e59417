#!/bin/sh
# tests/test_strata_run.sh: strata-run on real programs (python3, zsh, a
# shell pipeline): one summary line per process, with the program's name and
# pid; the JSON file parses, one object per process; its options reach the
# program; the program's exit status comes back; misuse is refused.
BUILD=${BUILD:-build}
run="$BUILD/strata-run"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; sed 's/^/     | /' "$out/err" 2> /dev/null | tail -n 5; fi; }
line='^strata-run: [^ ]+ \(pid [0-9]+\): resident [0-9.]+ (B|KiB|MiB|GiB) at peak, [0-9.]+ (B|KiB|MiB|GiB) at exit; allocated [0-9.]+ (B|KiB|MiB|GiB) at peak, [0-9.]+ (B|KiB|MiB|GiB) at exit; given back [0-9.]+ (B|KiB|MiB|GiB); [0-9.]+ s$'

"$run" python3 -c 'x = [str(i) * 10 for i in range(200000)]; print(len(x))' > "$out/stdout" 2> "$out/err"
check '[ $? -eq 0 ] && [ "$(cat "$out/stdout")" = 200000 ]' "python3 runs under strata-run"
check 'grep -Eq "^strata-run: python3[.0-9]* \(pid [0-9]+\): resident [0-9.]+ MiB at peak" "$out/err"' "python3's summary line"
check '[ "$(grep -c "^strata-run: " "$out/err")" -eq "$(grep -Ec "$line" "$out/err")" ]' "every summary line has every figure"
# The figures are the process's: python3 allocated megabytes at its peak.
check 'grep -E "^strata-run: python3" "$out/err" | grep -Eq "allocated [0-9.]+ MiB at peak"' "python3's allocation peak in MiB"

if command -v zsh > /dev/null; then
    "$run" zsh -c 'a=(); for i in {1..20000}; do a+=("item $i"); done; print ${#a}' > "$out/stdout" 2> "$out/err"
    check '[ "$(cat "$out/stdout")" = 20000 ] && grep -Eq "^strata-run: zsh \(pid [0-9]+\)" "$out/err"' "zsh under strata-run"
else
    check false "zsh is not installed (apt-get install zsh)"
fi

# A pipeline of three processes: three lines, three JSON objects, pids all different.
"$run" --json "$out/stats.jsonl" sh -c 'seq 1 1000 | sort -n -r | head -n 1' > "$out/stdout" 2> "$out/err"
check '[ "$(cat "$out/stdout")" = 1000 ]' "a pipeline's output"
check 'grep -Eq "^strata-run: sort \(pid" "$out/err" && grep -Eq "^strata-run: seq \(pid" "$out/err"' "a line for each process of the pipeline"
check 'python3 -c "
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
assert len(rows) >= 3 and len({r[\"pid\"] for r in rows}) == len(rows)
assert all(isinstance(r[\"allocated_peak\"], int) and r[\"resident_peak\"] > 0 for r in rows)
assert {\"sort\", \"seq\"} <= {r[\"program\"] for r in rows}
" "$out/stats.jsonl"' "the JSON file: one object per process, exact bytes"

# Options reach the program.
"$run" --check --limit 64 --purge-delay 25 --json "$out/opts.jsonl" python3 -c 'pass' 2> "$out/err"
check 'grep -q "\"STRATA_CHECK\": 1, " "$out/opts.jsonl" && grep -q "\"STRATA_LIMIT_MB\": 64, " "$out/opts.jsonl" && grep -q "\"STRATA_PURGE_DELAY_MS\": 25, " "$out/opts.jsonl"' "--check, --limit and --purge-delay reach the program"
"$run" --verbose --quiet python3 -c 'pass' 2> "$out/err"
check 'grep -q "^strata [0-9.]* in force in python3" "$out/err" && ! grep -q "^strata-run: " "$out/err"' "--verbose says strata is in force; --quiet prints no summary"
"$run" --secure --verbose --json "$out/secure.jsonl" python3 -c 'pass' 2> "$out/err"
check 'grep -q "^strata [0-9.]* (secure flavour) in force in python3" "$out/err" && grep -q "\"flavour\": \"secure\"" "$out/secure.jsonl"' "--secure runs the program on the secure flavour"
"$run" --stats python3 -c 'pass' 2> "$out/err"
check 'grep -q "statistics of python3 (pid" "$out/err"' "--stats prints the table"

# --sample: each process's resident and allocated memory over time, as CSV
# and a plot; --compare: the same run on glibc beside strata's. Blocks of
# 2000 bytes come from malloc (python's own pools take the small ones).
"$run" --quiet --sample "$out/rss.csv" --json "$out/sampled.jsonl" --compare python3 -c 'import time
x = [bytes(2000) for i in range(20000)]
time.sleep(0.05)' 2> "$out/err"
check '[ $? -eq 0 ] && head -n 1 "$out/rss.csv" | grep -q "^ms,pid,program,resident_kib,allocated_kib$" && [ "$(grep -c ",python3[.0-9]*," "$out/rss.csv")" -ge 3 ]' "--sample writes python3's memory over time"
check 'awk -F, "NR > 1 && \$3 ~ /^python3/ && \$4 > 40000 && \$5 > 38000 { big = 1 } END { exit !big }" "$out/rss.csv"' "the samples see the program's 40 MB, resident and allocated"
check 'awk -F, "NR > 2 && \$1 < last && \$2 == pid { bad = 1 } { last = \$1; pid = \$2 } END { exit bad }" "$out/rss.csv"' "each process's samples in time order"
check '[ "$(wc -l < "$out/sampled.jsonl")" -ge 1 ] && ! grep -q sample_ms "$out/sampled.jsonl"' "the JSON file keeps one object per process, not the samples"
if command -v gnuplot > /dev/null; then
    check 'grep -q "<svg" "$out/rss.csv.svg"' "--sample plots the samples"
else
    check false "gnuplot is not installed (apt-get install gnuplot-nox): the plot is not checked"
fi
check 'grep -Eq "^strata-run:   time +[0-9.]+ s +[0-9.]+ s  \([0-9.]+x\)$" "$out/err" && grep -Eq "^strata-run:   peak resident, largest one +[0-9.]+ MiB +[0-9.]+ MiB  \([0-9.]+x\)$" "$out/err"' "--compare prints strata and glibc side by side"

# The exit status is the program's; misuse is refused.
"$run" python3 -c 'import sys; sys.exit(7)' 2> "$out/err"
check '[ $? -eq 7 ]' "the program's exit status"
"$run" 2> "$out/err"
check '[ $? -eq 2 ] && grep -q "^usage: strata-run" "$out/err"' "no program: usage, status 2"
"$run" --frobnicate true 2> "$out/err"
check '[ $? -eq 2 ] && grep -q "unknown option --frobnicate" "$out/err"' "an unknown option is refused"
"$run" --version > "$out/stdout"
check 'grep -q "^strata-run [0-9.]* (.*libstrata.so)$" "$out/stdout"' "--version names the library"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
