#!/bin/sh
# tests/test_strata_run.sh: strata-run on real programs (python3, zsh, a
# shell pipeline): one summary line per process, with the program's name and
# pid; the JSON file parses, one object per process; its options reach the
# program; --profile tables the stacks holding memory and --flame draws them;
# the program's exit status comes back; misuse is refused.
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

# --profile: the program's heap profiled, the stacks that held the most at
# the peak and at exit named and tabled; --flame draws the peak. The sites
# of tests/programs/profile_sites.c: site_three and site_one hold 48 and
# 16 MiB at the peak; site_leak holds 26 MB at exit; the forked child
# starts with its parent's figures and holds site_child's blocks at exit.
# A fixed seed: the same samples each run.
if ${CC:-gcc} -std=gnu11 -O1 -g -fno-builtin -Wall -Wextra -Werror tests/programs/profile_sites.c -o "$out/sites" -lpthread -ldl 2> "$out/err"; then
    STRATA_PROFILE_SEED=12345 "$run" --profile --profile-sample 16384 --profile-dir "$out/kept" --flame "$out/f.svg" \
        "$out/sites" > "$out/stdout" 2> "$out/err"
    check '[ $? -eq 0 ]' "--profile runs the program"
    child=$(sed -n 's/^child=//p' "$out/stdout")
    # The rows under a table's header: rows PID peak|exit
    rows() { awk -v head="^strata-run: profile of [^ ]+ \\\\(pid $1\\\\): top stacks at $2 " '
        $0 ~ head { inside = 1; next } /^strata-run: [^ ]/ { inside = 0 } inside' "$out/err"; }
    parent=$(sed -n 's/^strata-run: profile of sites (pid \([0-9]*\)): top stacks at peak (estimated [0-9.]* MiB held)$/\1/p' "$out/err" | head -n 1)
    check '[ -n "$parent" ] && [ "$parent" != "$child" ]' "a table of the program's stacks at the peak, with the estimate held"
    check 'rows "$parent" peak | head -n 1 | grep -Eq "^strata-run: +[0-9.]+ MiB +[0-9.]+%  site_three < main( < |$)"' \
        "site_three held the most at the peak"
    check 'rows "$parent" peak | grep -q "  site_one < main"' "site_one is among the stacks at the peak"
    three=$(rows "$parent" peak | sed -n "s/^strata-run: *[0-9.]* MiB *\([0-9.]*\)%  site_three .*/\1/p")
    one=$(rows "$parent" peak | sed -n "s/^strata-run: *[0-9.]* MiB *\([0-9.]*\)%  site_one .*/\1/p")
    check 'awk -v a="$three" -v b="$one" "BEGIN { exit !(b > 0 && a / b > 2.5 && a / b < 3.5) }"' \
        "site_three's share at the peak is three times site_one's ($three% and $one%)"
    check 'rows "$parent" exit | head -n 1 | grep -q "%  site_leak < main"' "site_leak holds the most at exit"
    check 'grep -q "^strata-run: profile of sites (pid $child): at peak as pid $parent " "$out/err" &&
        rows "$child" exit | grep -q "%  site_child < main"' "the forked child: its parent's peak, its own leak"
    check '! grep "^strata-run: .*%  " "$out/err" | grep -q ".\{101\}"' "the rows fit in 100 columns"
    check '[ -s "$out/kept/profile.$parent" ] && [ -s "$out/kept/profile.$child.peak.folded" ]' "--profile-dir keeps the profiles"
    # The flame graph: well-formed SVG, a frame for each site held at the
    # peak, its title giving the bytes and the share.
    check 'grep -q "^strata-run: flame graph of sites (pid $parent), memory held at the peak: $out/f.svg$" "$out/err"' \
        "--flame says which process it drew"
    python3 - "$out/f.svg" > "$out/flame" 2>&1 <<'PY'
import re, sys
import xml.etree.ElementTree as tree
svg = "{http://www.w3.org/2000/svg}"
root = tree.parse(sys.argv[1]).getroot()
assert root.tag == svg + "svg", root.tag
shares = {}
for frame in root.iter(svg + "g"):
    assert frame.find(svg + "rect") is not None, "a frame without its rectangle"
    title = re.fullmatch(r"(.+) \u2014 [0-9.]+ (B|KiB|MiB|GiB) \(([0-9.]+)%\)", frame.find(svg + "title").text)
    assert title, frame.find(svg + "title").text
    shares[title.group(1)] = float(title.group(3))
for site in ("site_three", "site_one", "main"):
    assert site in shares, "no frame for %s: %s" % (site, sorted(shares))
assert 2.5 < shares["site_three"] / shares["site_one"] < 3.5, shares
assert "site_leak" not in shares, "site_leak held nothing at the peak"
print("frames:", len(shares))
PY
    check '[ $? -eq 0 ]' "the flame graph is well-formed SVG with site_three, site_one and main, 3 to 1 ($(tail -n 1 "$out/flame"))"
    # The secure flavour samples too.
    STRATA_PROFILE_SEED=12345 "$run" --secure --profile --profile-sample 16384 "$out/sites" > /dev/null 2> "$out/err"
    check 'grep -A 1 "top stacks at peak" "$out/err" | grep -q " site_three < main"' \
        "--secure --profile: site_three tops the peak ($(grep -A 1 "top stacks at peak" "$out/err" | head -n 2 | tr '\n' ' '))"
else
    check false "tests/programs/profile_sites.c builds ($(head -c 300 "$out/err"))"
fi
# A program that allocates little, one that does not run on strata: said.
# (Sampled one byte in 2^30, true's few KiB are never sampled: at the
# default interval its stdio buffer was, in about one run in a hundred.)
rm -f "$out/none.svg"
"$run" --profile-sample 1073741824 --flame "$out/none.svg" /bin/true 2> "$out/err"
check '[ $? -eq 0 ] && grep -q "^strata-run: no allocation of true was sampled" "$out/err" && grep -q "not written" "$out/err" && [ ! -e "$out/none.svg" ]' \
    "--flame on a program that allocates little says nothing was sampled"
rm -f "$out/none.svg"
"$run" --flame "$out/none.svg" env -u LD_PRELOAD /bin/true 2> "$out/err"
check '[ $? -eq 0 ] && grep -q "^strata-run: no process wrote a heap profile: env did not run on strata" "$out/err" && [ ! -e "$out/none.svg" ]' \
    "--flame on a program that is not on strata says so"
# A real program: python3's frames named from its symbols or libpython's.
"$run" --profile --profile-sample 65536 python3 -c 'x = [bytes(2000) for i in range(20000)]' 2> "$out/err"
check '[ $? -eq 0 ] && grep -Eq "^strata-run: profile of python3[.0-9]* \(pid [0-9]+\): top stacks at peak" "$out/err"' \
    "--profile tables python3's stacks"
# A row's frames, one a line, less those shown by address (0x..., file+0x...).
named=$(grep -E "^strata-run: +[0-9.]+ (B|KiB|MiB|GiB) +[0-9.]+%  " "$out/err" | sed 's/^strata-run: *[0-9.]* [KMGi]*B *[0-9.]*%  //' |
    awk -F ' < ' '{ for (i = 1; i <= NF; i++) print $i }' | sed 's/ (+[0-9]* more)$//' |
    grep -Ev '^(0x[0-9a-f]+|.*\+0x[0-9a-f]+|\.\.\.)$' | head -n 3 | tr '\n' ' ')
check '[ -n "$named" ]' "python3's frames have names, not only addresses ($named)"
"$run" --profile-sample 12k true 2> "$out/err"
check '[ $? -eq 2 ] && grep -q "^strata-run: --profile-sample takes a number of bytes" "$out/err"' "--profile-sample takes bytes"

# --compare with a program that prints: its output is its own, the
# figures still come (they once went to the same pipe as the program's).
"$run" --quiet --compare sh -c 'echo printed' > "$out/stdout" 2> "$out/err"
check '[ "$(cat "$out/stdout")" = "$(printf "printed\nprinted")" ] && grep -Eq "^strata-run:   time +[0-9.]+ s +[0-9.]+ s  \([0-9.]+x\)$" "$out/err"' "--compare keeps a printing program's output and its figures"

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
