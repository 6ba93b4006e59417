#!/bin/sh
# tests/test_bench.sh: every benchmark program's command line (-h, and a
# mistyped flag or value refused with the usage), then a smoke run of the
# whole benchmark suite (tiny sizes, one run) into a temporary folder;
# checks every table and file appears.
BUILD=${BUILD:-build}
# The allocators a user adds for make bench are not the suite's.
unset BENCH_ALLOCATORS
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

# Each benchmark program's command line (bench/common.h's parser): a
# program, one of its numeric flags, then every flag its usage must name.
# A mistyped flag or value is refused with the usage and exit status 2
# before anything is measured (timeout: a program that ran instead would
# measure at full size).
programs='threads -t -t -n -r -w
loops -t -t -n
crossthread -c -p -c -n
lifetimes -n -t -n -g
shortlived -n -s -c -n -m
medium -n -m -n
workloads -n -m -n
grow -m -m -s -r
cxx -n -c -n
memtime -w -w -m -q
redisflush -n -n -d -i -w -s
arena -w -k -n -m -w -r
context -t -k -t
peakrss
mallocfrom
attacks'
# run_program NAME ARGS...: its stdout, stderr and exit status into $out/run.*
run_program() {
    name=$1
    shift
    timeout 60 "$BUILD/bench/$name" "$@" < /dev/null > "$out/run.stdout" 2> "$out/run.stderr"
    echo $? > "$out/run.status"
}
status() { cat "$out/run.status"; }
for built in "$BUILD"/bench/*; do
    name=$(basename "$built")
    check 'echo "$programs" | grep -q "^$name\( \|$\)"' "bench/$name has a line in test_bench.sh's table of programs"
done
echo "$programs" > "$out/programs"
while read -r name numeric flags; do
    check '[ -x "$BUILD/bench/$name" ]' "$BUILD/bench/$name is built"
    [ -x "$BUILD/bench/$name" ] || continue
    run_program "$name" -h
    check '[ "$(status)" -eq 0 ] && head -n 1 "$out/run.stdout" | grep -q "^usage: $name " && [ ! -s "$out/run.stderr" ]' \
        "$name -h: the usage on stdout, exit 0"
    for flag in $flags; do
        check 'grep -Eq -- "^  $flag( |\$)" "$out/run.stdout"' "$name -h names $flag"
    done
    run_program "$name" -x
    check '[ "$(status)" -eq 2 ] && grep -q "^$name: unknown flag -x$" "$out/run.stderr" && grep -q "^usage: $name " "$out/run.stderr" && [ ! -s "$out/run.stdout" ]' \
        "$name -x: unknown flag, the usage on stderr, exit 2"
    [ -n "$numeric" ] || continue
    run_program "$name" "$numeric"
    check '[ "$(status)" -eq 2 ] && grep -q "^$name: $numeric needs a value" "$out/run.stderr" && grep -q "^usage: $name " "$out/run.stderr"' \
        "$name $numeric (no value): refused, exit 2"
    run_program "$name" "$numeric" abc
    check '[ "$(status)" -eq 2 ] && grep -q "^$name: $numeric abc: not a" "$out/run.stderr"' "$name $numeric abc: not a number, exit 2"
    run_program "$name" "$numeric" 5x
    check '[ "$(status)" -eq 2 ] && grep -q "^$name: $numeric 5x: not a" "$out/run.stderr"' "$name $numeric 5x: not a number, exit 2"
    run_program "$name" "$numeric" -1
    check '[ "$(status)" -eq 2 ] && grep -q "^$name: $numeric -1: less than" "$out/run.stderr"' "$name $numeric -1: below its least, exit 2"
done < "$out/programs"
# The words besides the flags are checked too.
run_program arena
check '[ "$(status)" -eq 2 ] && grep -q "^arena: no test named" "$out/run.stderr" && grep -q "^usage: arena " "$out/run.stderr"' \
    "arena without a test: usage, exit 2"
run_program arena sprint
check '[ "$(status)" -eq 2 ] && grep -q "^arena: test sprint: not one of command|spike|string|kinds" "$out/run.stderr"' \
    "arena sprint: unknown test, exit 2"
run_program arena spike -k strata,nokind
check '[ "$(status)" -eq 2 ] && grep -q "^arena: -k: unknown kind nokind" "$out/run.stderr"' "arena -k nokind: unknown kind, exit 2"
run_program arena kinds
check '[ "$(status)" -eq 0 ] && grep -q "^kind=strata$" "$out/run.stdout"' "arena kinds lists the kinds"
run_program context kind
check '[ "$(status)" -eq 2 ] && grep -q "^context: unexpected word kind$" "$out/run.stderr"' "context kind: unexpected word, exit 2"
run_program context -k strata-ctx,nokind
check '[ "$(status)" -eq 2 ] && grep -q "^context: -k: unknown kind nokind" "$out/run.stderr"' "context -k nokind: unknown kind, exit 2"
run_program shortlived -m elsewhere
check '[ "$(status)" -eq 2 ] && grep -q "^shortlived: -m elsewhere: not one of main|threaded|thread" "$out/run.stderr"' "shortlived -m elsewhere: refused, exit 2"
run_program threads -w middle
check '[ "$(status)" -eq 2 ] && grep -q "^threads: -w middle: not one of pages|ends" "$out/run.stderr"' "threads -w middle: refused, exit 2"
run_program peakrss
check '[ "$(status)" -eq 2 ] && grep -q "^peakrss: no command to run" "$out/run.stderr" && grep -q "^usage: peakrss " "$out/run.stderr"' \
    "peakrss without a command: usage, exit 2"
# The command's own flags are the command's: peakrss stops at its first word.
PEAKRSS_OUT="$out/peak" "$BUILD/bench/peakrss" sh -c 'echo ran "$0"' -x > "$out/run.stdout"
check '[ $? -eq 0 ] && [ "$(cat "$out/run.stdout")" = "ran -x" ] && [ "$(cat "$out/peak")" -gt 0 ]' \
    "peakrss passes the command its flags and writes the peak"

# make looks for APR and talloc at every run: a bench built before the
# library was installed (bench/deps.sh after make test), or after it was
# removed, is built again. Shown with the header looked for elsewhere,
# make -n printing what it would do and doing nothing.
make_dry_run() { env -u MAKEFLAGS -u MAKELEVEL make -n BUILD="$BUILD" ${CC:+CC="$CC"} "$@" 2>&1; }
for library in apr:arena:APR talloc:context:TALLOC; do
    kind=${library%%:*} program=${library#*:} program=${program%%:*} variable=${library##*:}
    if "$BUILD/bench/$program" kinds | grep -q "^kind=$kind$"; then
        header=/nonexistent/$kind.h flag="-DHAVE_$variable=0"
    else
        header=$PWD/bench/common.h flag="-DHAVE_$variable=1"
    fi
    check '! make_dry_run "$BUILD/bench/$program" | grep -q -- "-o $BUILD/bench/$program "' \
        "$program is up to date while $kind is where it was"
    check 'make_dry_run "${variable}_HEADER=$header" "$BUILD/bench/$program" | grep -q -- "$flag .*-o $BUILD/bench/$program "' \
        "$program is built again ($flag) once $kind is found otherwise"
done

# The runner sees each allocator serve a process before it measures: one
# whose library does not load or replaces no malloc is refused, never
# measured as glibc under its name. strata's API-only library loads and
# leaves glibc's malloc in place.
build_dir=$(cd "$BUILD" && pwd)
"$BUILD/bench/mallocfrom" > "$out/from.glibc"
LD_PRELOAD="$build_dir/libstrata.so" "$BUILD/bench/mallocfrom" > "$out/from.strata"
check 'grep -q "^malloc=.*/libc\.so" "$out/from.glibc" && [ "$(grep -c "=$build_dir/libstrata.so$" "$out/from.strata")" -eq 4 ]' \
    "mallocfrom names the library that serves malloc, free, calloc and realloc"
api_only="$out/api-only-build"
mkdir "$api_only"
ln -s "$build_dir/libstrata-api.so" "$api_only/libstrata.so"
ln -s "$build_dir/bench" "$api_only/bench"
python3 bench/run.py --build "$api_only" --mode smoke --repeats 1 --only loops --out "$out/refused" > /dev/null 2> "$out/refused.err"
check '[ $? -eq 2 ] && grep -q "^run.py: strata refused, nothing measured: malloc comes from .*libc\.so.*, not $api_only/libstrata.so" "$out/refused.err" && [ ! -e "$out/refused/tables.md" ]' \
    "a library that serves no malloc is refused: $(head -c 300 "$out/refused.err")"
python3 bench/run.py --build "$out/no-build" --mode smoke --repeats 1 --only loops --out "$out/refused" > /dev/null 2> "$out/refused.err"
check '[ $? -eq 2 ] && grep -q "^run.py: strata refused, nothing measured: $out/no-build/libstrata.so does not exist" "$out/refused.err"' \
    "a missing library is refused: $(head -c 300 "$out/refused.err")"
# BENCH_ALLOCATORS adds allocators by name and library, measured under
# the name as given (here strata's library again); a missing file, a
# name given twice and a library that serves no malloc are refused.
BENCH_ALLOCATORS="strata-again=$build_dir/libstrata.so" python3 bench/run.py --build "$BUILD" --mode smoke \
    --repeats 1 --only loops --out "$out/asked" > /dev/null 2> "$out/asked.err"
check '[ $? -eq 0 ] && grep -q "^| strata-again | [0-9.]* [kMG]* (" "$out/asked/tables.md" && grep -q "^strata-again,1,1," "$out/asked/loops.csv"' \
    "BENCH_ALLOCATORS: an allocator measured under its name: $(tail -c 300 "$out/asked.err")"
for wrong in "gone-1.0=$out/gone.so:gone-1.0: $out/gone.so does not exist" \
    "twice=$build_dir/libstrata.so twice=$build_dir/libstrata.so:twice is named twice" \
    "glibc=$build_dir/libstrata.so:glibc: the name is taken" "nameonly:'nameonly' is not NAME=PATH" \
    "api-only=$build_dir/libstrata-api.so:api-only refused, nothing measured: malloc comes from"; do
    BENCH_ALLOCATORS=${wrong%%:*} python3 bench/run.py --build "$BUILD" --mode smoke --repeats 1 --only loops \
        --out "$out/refused" > /dev/null 2> "$out/refused.err"
    check '[ $? -eq 2 ] && grep -qF -- "${wrong#*:}" "$out/refused.err" && [ ! -e "$out/refused/tables.md" ]' \
        "BENCH_ALLOCATORS=${wrong%%:*} refused: $(head -c 300 "$out/refused.err")"
done
check 'python3 bench/run.py --help | grep -q "^BENCH_ALLOCATORS=\"NAME=PATH ...\""' "--help says what BENCH_ALLOCATORS is"
# A run of another allocator that is killed by a signal is made again and
# listed under the tables: here a malloc that is glibc's, in a library
# that crashes the first shortlived process it is loaded into.
cat > "$out/flaky.c" << 'EOF_FLAKY'
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern void *__libc_malloc(size_t size);
extern void __libc_free(void *block);
extern void *__libc_calloc(size_t count, size_t size);
extern void *__libc_realloc(void *block, size_t size);
void *malloc(size_t size) { return __libc_malloc(size); }
void free(void *block) { __libc_free(block); }
void *calloc(size_t count, size_t size) { return __libc_calloc(count, size); }
void *realloc(void *block, size_t size) { return __libc_realloc(block, size); }
__attribute__((constructor)) static void crash_once(void)
{
    const char *mark = getenv("FLAKY_MARK");
    if (mark != NULL && strcmp(program_invocation_short_name, "shortlived") == 0 &&
        (strcmp(mark, "always") == 0 || open(mark, O_CREAT | O_EXCL | O_WRONLY, 0600) >= 0))
        raise(SIGSEGV);
}
EOF_FLAKY
${CC:-cc} -D_GNU_SOURCE -shared -fPIC -o "$out/flaky.so" "$out/flaky.c"
FLAKY_MARK="$out/flaky.mark" BENCH_ALLOCATORS="flaky=$out/flaky.so" python3 bench/run.py --build "$BUILD" --mode smoke \
    --repeats 1 --only shortlived --out "$out/flaky" > /dev/null 2> "$out/flaky.err"
check '[ $? -eq 0 ] && grep -q "^| flaky | " "$out/flaky/tables.md" && grep -q "^### runs that crashed" "$out/flaky/tables.md" &&
       grep -q "^- flaky, shortlived 16 B, run 1: shortlived killed by SIGSEGV; measured again$" "$out/flaky/tables.md"' \
    "a peer's crashed run is made again and listed: $(tail -c 300 "$out/flaky.err")"
# One that crashes every time is left out, and the run goes on.
FLAKY_MARK=always BENCH_ALLOCATORS="flaky=$out/flaky.so" python3 bench/run.py --build "$BUILD" --mode smoke \
    --repeats 1 --only shortlived --out "$out/crashing" > /dev/null 2> "$out/crashing.err"
check '[ $? -eq 0 ] && grep -q "^| flaky | nan " "$out/crashing/tables.md" && grep -q "^| strata | [0-9]" "$out/crashing/tables.md" &&
       grep -q "^- flaky, shortlived 16 B, run 1: killed by SIGSEGV 3 times; left out$" "$out/crashing/tables.md"' \
    "a peer whose run crashes every time is left out, the run going on: $(tail -c 300 "$out/crashing.err")"

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
for heading in "### threads (" "### threads, partly written" "### per-thread loops" "### short-lived small blocks" "### cross-thread" "### random lifetimes" "### medium and big blocks" "### workloads" "### grow" "### C++: operator new and delete" "### zsh" "### real programs" "### the heap profiler" "### the secure flavours" "### memory over time (" "### memory over time, big blocks" "### memory over time, a real server" "### arena" "### context"; do
    check 'grep -q "^$heading" "$out/tables.md"' "table $heading"
done
for csv in threads threads_ends loops shortlived crossthread lifetimes medium workloads grow cxx zsh real profiler secure memtime memtime_large memtime_redis arena context; do
    check '[ -s "$out/$csv.csv" ] && grep -q strata "$out/$csv.csv"' "$csv.csv with strata rows"
done
check '[ "$(grep -c "^| strata |" "$out/tables.md")" -ge 18 ]' "strata has a row in every table"
# The secure table: the misuse suite's count for each allocator, and the
# secure flavour's speed against each from the speed tables of the run.
sed -n "/^### the secure flavours/,/^### /p" "$out/tables.md" > "$out/secure.md"
check 'grep -Eq "^\| strata secure \| [0-9]+ \|" "$out/secure.md" && grep -Eq "^\| strata \| [0-9]+ \| [0-9]+ \|" "$out/secure.md"' \
    "the secure table counts the misuse cells each allocator stops"
check 'grep -Eq "^\| glibc \| [0-9]+ \| [0-9]+ \| [0-9.]+x \([0-9.]+x-[0-9.]+x\) over [0-9]+ cells \|" "$out/secure.md"' \
    "the secure table gives strata secure's speed against glibc: $(grep "^| glibc" "$out/secure.md")"
# The real programs table measures each program installed, and names the
# package of each that is not.
sed -n "/^### real programs/,/^### /p" "$out/tables.md" > "$out/real.md"
for program in redis-server:redis sqlite3:sqlite3 /usr/bin/python3:python3 gcc:gcc; do
    if command -v "${program%%:*}" > /dev/null; then
        check 'grep -q "^| allocator |.* ${program#*:} |" "$out/real.md" && grep -q "^- ${program#*:}: " "$out/real.md"' \
            "the real programs table measures ${program#*:}"
    else
        check 'grep -q "^.*${program#*:}.* is not installed (apt-get install " "$out/real.md"' \
            "the real programs table names the package of ${program#*:}"
    fi
done
# The heap profiler's table: strata's cost on each program, and, where
# google-pprof reads the profiles, each known site's error at three rates.
sed -n "/^### the heap profiler/,/^### /p" "$out/tables.md" > "$out/profiler.md"
check 'grep -Eq "^\| strata \|( [0-9.]+x \|)+$" "$out/profiler.md" && grep -Eq "^\| strata secure \|( [0-9.]+x \|)+$" "$out/profiler.md"' \
    "the profiler table gives strata's cost on every program: $(grep "^| strata |" "$out/profiler.md")"
if command -v google-pprof > /dev/null; then
    check 'grep -Eq "^\| site_three \(allocated 50\.3 MB\)( \| [0-9.]+% \(worst [0-9.]+%\)){3} \|$" "$out/profiler.md"' \
        "the profiler table gives site_three's error at three rates"
else
    check 'grep -q "google-pprof is not installed (apt-get install google-perftools)" "$out/profiler.md"' \
        "the profiler table names google-perftools where it is missing"
fi
# Debian's mimalloc, where installed, carries its version, apart from a
# mimalloc built by hand.
check '! grep -q "^| mimalloc |" "$out/tables.md" && { ! dpkg-query -W libmimalloc2.0 > /dev/null 2>&1 || grep -q "^| mimalloc-2\.[0-9.]* |" "$out/tables.md"; }' \
    "Debian's mimalloc named with its version"
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
# The published run: bench/README.md shows bench/published/tables.md as it
# is; --publish makes a run the published one (here into copies).
python3 bench/run.py --check-published > "$out/published.diff"
check '[ $? -eq 0 ]' "bench/README.md shows bench/published/tables.md: $(head -c 600 "$out/published.diff")"
mkdir "$out/pub"
cp bench/README.md "$out/README.md"
python3 bench/run.py --publish --out "$out" --published "$out/pub" --readme "$out/README.md" > /dev/null
check '[ $? -eq 0 ] && [ -s "$out/pub/tables.md" ] && [ -s "$out/pub/threads.csv" ]' "--publish copies the run's files"
check 'grep -q "^Machine: .* Mode: smoke, median of 1 runs" "$out/README.md" && ! grep -q "Mode: default" "$out/README.md"' \
    "--publish puts the run's tables in the README"
check '[ "$(sed "/^<!-- The tables of/q" "$out/README.md")" = "$(sed "/^<!-- The tables of/q" bench/README.md)" ] &&
       [ "$(sed -n "/^<!-- End of the published tables/,\$p" "$out/README.md")" = "$(sed -n "/^<!-- End of the published tables/,\$p" bench/README.md)" ]' \
    "--publish changes nothing of the README outside the tables"
python3 bench/run.py --check-published --published "$out/pub" --readme "$out/README.md" > /dev/null
check '[ $? -eq 0 ]' "--check-published passes after --publish"
sed -i "s/^| strata | /| strata | 1 /" "$out/README.md"
python3 bench/run.py --check-published --published "$out/pub" --readme "$out/README.md" > "$out/published.diff"
check '[ $? -eq 1 ] && grep -q "^+| strata | 1 " "$out/published.diff"' "--check-published shows a table edited by hand"
grep -v "^<!-- End of the published tables" bench/README.md > "$out/README.md"
python3 bench/run.py --publish --out "$out" --published "$out/pub" --readme "$out/README.md" 2> "$out/published.err"
check '[ $? -eq 2 ] && grep -q "has no" "$out/published.err"' "--publish refuses a README without the markers"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
