#!/bin/sh
# tests/test_programs.sh: real programs under LD_PRELOAD=libstrata.so, each
# compared with the same run without it; plus the override probe, preloaded
# and statically linked. Prints "checks: N passed, N failed".
BUILD=${BUILD:-build}
CC=${CC:-gcc}
case $CC in *clang*) CXX=${CXX:-clang++} ;; *) CXX=${CXX:-g++} ;; esac
LIB=$(cd "$BUILD" && pwd)/libstrata.so
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# same NAME CMD...: output and exit status with strata equal those without.
same() {
    name=$1; shift
    if ! command -v "$1" >/dev/null 2>&1; then
        bad "$name: $1 is not installed (apt-get install $name)"
        return
    fi
    "$@" > "$tmp/plain" 2>&1; plain_rc=$?
    LD_PRELOAD="$LIB" "$@" > "$tmp/strata" 2>&1; strata_rc=$?
    if [ "$plain_rc" -eq "$strata_rc" ] && cmp -s "$tmp/plain" "$tmp/strata" && [ -s "$tmp/plain" ]; then
        ok "$name under strata matches ($(head -c 60 "$tmp/plain" | tr '\n' ' '))"
    else
        bad "$name: exit $plain_rc vs $strata_rc"; diff "$tmp/plain" "$tmp/strata" | head -5
    fi
}

# The override reaches strata, preloaded and linked statically. The probe is
# built with -fno-builtin: clang otherwise assumes the malloc family never
# sets errno, and reads a stale one.
if $CC -std=gnu11 -O1 -fno-builtin -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude tests/programs/probe.c -o "$tmp/probe" -ldl \
    && LD_PRELOAD="$LIB" "$tmp/probe" libstrata.so > "$tmp/out" 2>&1 \
    && grep -q '^checks: [0-9]* passed, 0 failed' "$tmp/out"; then ok "probe under LD_PRELOAD"
else bad "probe under LD_PRELOAD"; cat "$tmp/out"; fi
if $CC -std=gnu11 -O1 -fno-builtin -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude tests/programs/probe.c "$BUILD/libstrata.a" -o "$tmp/probe_static" -ldl -lpthread \
    && "$tmp/probe_static" probe_static > "$tmp/out" 2>&1 \
    && grep -q '^checks: [0-9]* passed, 0 failed' "$tmp/out"; then ok "probe linked with libstrata.a"
else bad "probe linked with libstrata.a"; cat "$tmp/out"; fi

if $CC -std=gnu11 -O1 -fno-builtin -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude tests/programs/probe.c "$BUILD/libstrata.a" -static \
        -o "$tmp/probe_full_static" -ldl -lpthread 2> "$tmp/out" \
    && "$tmp/probe_full_static" static > "$tmp/out" 2>&1 \
    && grep -q '^checks: [0-9]* passed, 0 failed' "$tmp/out"; then ok "probe linked -static with libstrata.a"
else bad "probe linked -static with libstrata.a"; cat "$tmp/out"; fi

# glibc's malloc interface (malloc_trim, mallinfo2, malloc_info, ...) is
# strata's: linked with libstrata.so, and preloaded; purging put off.
glibc_api() { # how program [LD_PRELOAD value]
    if STRATA_PURGE_DELAY_MS=100000 STRATA_BACKGROUND_PURGE=0 LD_PRELOAD="$3" "$2" > "$tmp/out" 2> "$tmp/err" \
        && grep -q '^checks: [0-9]* passed, 0 failed' "$tmp/out" && grep -q '^strata [0-9.]* statistics' "$tmp/err"; then
        ok "glibc's malloc_trim, mallinfo2, mallinfo, malloc_info, malloc_stats, mallopt, free_sized answered by strata ($1)"
    else bad "glibc's malloc interface ($1)"; cat "$tmp/out" "$tmp/err"; fi
}
if $CC -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude tests/programs/glibc_api.c -L"$BUILD" \
        -Wl,-rpath,"$(cd "$BUILD" && pwd)" -lstrata -o "$tmp/glibc_api" > "$tmp/out" 2>&1; then
    glibc_api "linked with libstrata.so" "$tmp/glibc_api" ""
else bad "glibc_api.c does not build"; cat "$tmp/out"; fi
if $CC -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude tests/programs/glibc_api.c -o "$tmp/glibc_api_plain" \
        > "$tmp/out" 2>&1; then
    glibc_api "under LD_PRELOAD" "$tmp/glibc_api_plain" "$LIB"
else bad "glibc_api.c does not build"; cat "$tmp/out"; fi

# C++'s operator new and delete, every form, reach strata, preloaded and
# linked with libstrata.a (with libstdc++ shared, and linked in statically);
# a failed one throws std::bad_alloc. A program's own replacement of the
# basic forms is used by all the others.
cxxflags="-std=c++17 -fsized-deallocation -O1 -Wall -Wextra -Werror -D_GNU_SOURCE -Iinclude"
cxx_run() { # what program argument [LD_PRELOAD value]
    if "$2" "$3" > "$tmp/out" 2>&1 && grep -q '^checks: [0-9]* passed, 0 failed' "$tmp/out"; then ok "$1"
    else bad "$1"; cat "$tmp/out"; fi
}
if ! command -v "$CXX" > /dev/null 2>&1; then
    bad "$CXX is not installed (apt-get install g++): C++'s operator new not checked"
else
    if $CXX $cxxflags tests/programs/cxx_new.cc -o "$tmp/cxx_new" -ldl > "$tmp/out" 2>&1; then
        LD_PRELOAD="$LIB" cxx_run "C++ operator new and delete under LD_PRELOAD" "$tmp/cxx_new" libstrata
    else bad "cxx_new.cc does not build"; cat "$tmp/out"; fi
    if $CXX $cxxflags tests/programs/cxx_new.cc "$BUILD/libstrata.a" -o "$tmp/cxx_new_linked" -ldl -lpthread -rdynamic \
            > "$tmp/out" 2>&1; then
        cxx_run "C++ operator new and delete linked with libstrata.a" "$tmp/cxx_new_linked" cxx_new_linked
    else bad "cxx_new.cc with libstrata.a does not build"; cat "$tmp/out"; fi
    if $CXX $cxxflags -static-libstdc++ tests/programs/cxx_new.cc "$BUILD/libstrata.a" -o "$tmp/cxx_new_own" -ldl \
            -lpthread -rdynamic > "$tmp/out" 2>&1; then
        cxx_run "C++ operator new and delete linked with libstrata.a and a static libstdc++ (strata throws std::bad_alloc itself)" \
            "$tmp/cxx_new_own" cxx_new_own
    else bad "cxx_new.cc with libstrata.a and -static-libstdc++ does not build"; cat "$tmp/out"; fi
    if $CXX $cxxflags tests/programs/cxx_replaced.cc -o "$tmp/cxx_replaced" > "$tmp/out" 2>&1; then
        LD_PRELOAD="$LIB" cxx_run "a program's own operator new and delete serve every form, under LD_PRELOAD" "$tmp/cxx_replaced" ""
    else bad "cxx_replaced.cc does not build"; cat "$tmp/out"; fi
    if $CXX $cxxflags tests/programs/cxx_replaced.cc "$BUILD/libstrata.a" -o "$tmp/cxx_replaced_linked" -lpthread \
            > "$tmp/out" 2>&1; then
        cxx_run "a program's own operator new and delete serve every form, linked with libstrata.a" "$tmp/cxx_replaced_linked" ""
    else bad "cxx_replaced.cc with libstrata.a does not build"; cat "$tmp/out"; fi
fi

# A program that sets its title (setproctitle) wipes the environment
# strings strata read its options from: redis-server under strata still
# samples its memory into STRATA_STATS_FILE and writes the exit record
# there. A path longer than strata keeps is refused aloud.
if ! command -v redis-server > /dev/null 2>&1 || ! command -v redis-cli > /dev/null 2>&1; then
    bad "redis-server is not installed (apt-get install redis-server redis-tools)"
else
    # A socket of its own, no TCP port: nothing else can hold it.
    mkdir "$tmp/redis"
    socket="$tmp/redis/redis.sock"
    STRATA_STATS_FILE="$tmp/redis.json" STRATA_SAMPLE_MS=20 LD_PRELOAD="$LIB" redis-server --port 0 \
        --unixsocket "$socket" --save "" --appendonly no --dir "$tmp/redis" > "$tmp/redis.log" 2>&1 &
    redis_pid=$!
    tries=0
    until redis-cli -s "$socket" ping > /dev/null 2>&1 || [ $tries -ge 200 ]; do sleep 0.05; tries=$((tries + 1)); done
    redis-cli -s "$socket" set key value > /dev/null 2>&1
    sleep 0.3
    redis-cli -s "$socket" shutdown nosave > /dev/null 2>&1
    wait $redis_pid
    samples=$(grep -c '"sample_ms": .*"program": "redis-server"' "$tmp/redis.json" 2>/dev/null)
    if [ "${samples:-0}" -ge 3 ] && tail -n 1 "$tmp/redis.json" | grep -q '^{"version": .*"program": "redis-server"'; then
        ok "redis-server, which wipes its environment for its title, samples into STRATA_STATS_FILE ($samples samples, the exit record last)"
    else bad "redis-server's STRATA_STATS_FILE: ${samples:-0} samples"; tail -n 3 "$tmp/redis.json" "$tmp/redis.log"; fi
fi
long=$(head -c 4100 /dev/zero | tr '\0' x)
if STRATA_STATS_FILE="$tmp/$long" LD_PRELOAD="$LIB" /bin/echo > /dev/null 2> "$tmp/err" \
    && grep -q "^strata: warning: STRATA_STATS_FILE is longer than 4095 bytes; it is ignored" "$tmp/err"; then
    ok "a STRATA_STATS_FILE longer than 4095 bytes is refused with a warning"
else bad "a STRATA_STATS_FILE longer than 4095 bytes"; cat "$tmp/err"; fi

same python3 python3 tests/programs/alloc_heavy.py
same zsh zsh -f tests/programs/grow.zsh
same tclsh tclsh tests/programs/threads.tcl
same gcc gcc -O2 -S -o - bench/threads.c
# The same programs on the secure flavour: no false alarm, the same output.
secure_lib=$(cd "$BUILD" && pwd)/libstrata-secure.so
default_lib=$LIB
LIB=$secure_lib
same "python3 (secure flavour)" python3 tests/programs/alloc_heavy.py
same "zsh (secure flavour)" zsh -f tests/programs/grow.zsh
same "tclsh (secure flavour)" tclsh tests/programs/threads.tcl
same "gcc (secure flavour)" gcc -O2 -S -o - bench/threads.c
if $CXX $cxxflags tests/programs/cxx_new.cc -o "$tmp/cxx_new_secure" -ldl > "$tmp/out" 2>&1; then
    LD_PRELOAD="$LIB" cxx_run "C++ operator new and delete on the secure flavour" "$tmp/cxx_new_secure" libstrata-secure
else bad "cxx_new.cc does not build"; cat "$tmp/out"; fi
LIB=$default_lib

# CPython's own regression tests, a selection that works the allocator
# hard (the garbage collector, containers, strings, pickling, weak
# references, threads, ctypes, tracemalloc), on the default flavour, in
# checked mode and on the secure flavour: every test of it that passes
# without strata passes with it (one failing here without strata too is
# left out, and named). Debian packages them for its python3
# (libpython3.X-testsuite).
python_tests="test_gc test_dict test_list test_set test_bytes test_unicode test_re test_json test_pickle test_array
test_mmap test_weakref test_collections test_struct test_ctypes test_tracemalloc test_memoryview test_threading
test_decimal test_itertools"
regrtest_python=
for py in /usr/bin/python3 python3; do
    if command -v "$py" > /dev/null 2>&1 && "$py" -c 'import test.libregrtest, test.test_dict' > /dev/null 2>&1; then
        regrtest_python=$py
        break
    fi
done
# regrtest OUTPUT TESTS [VAR=VALUE...]: runs the tests (two at a time);
# its status is regrtest's.
regrtest() {
    output=$1; tests=$2; shift 2
    # shellcheck disable=SC2086 # the tests are words
    (cd "$tmp" && env "$@" timeout 600 "$regrtest_python" -m test -j2 --timeout 300 $tests) > "$output" 2>&1
}
# The tests an output names as failed (the indented lines after "N tests
# failed:").
failed_tests() {
    awk '/^[0-9]+ tests? failed:$/ { on = 1; next } on && /^ / { print; next } { on = 0 }' "$1" | tr -s ' \n' ' '
}
if [ -z "$regrtest_python" ]; then
    version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    bad "CPython's regression tests are not installed (apt-get install libpython${version:-3.X}-testsuite)"
else
    regrtest "$tmp/regr_plain" "$python_tests"
    left_out=$(failed_tests "$tmp/regr_plain" | sed "s/ *$//")
    passing=""
    for t in $python_tests; do
        case " $left_out " in *" $t "*) ;; *) passing="$passing $t" ;; esac
    done
    count=$(echo $passing | wc -w)
    note=""
    [ -n "$left_out" ] && note="; left out, failing without strata here:$left_out"
    if [ "$count" -lt 15 ] || ! grep -q "Tests result: \|^Result: " "$tmp/regr_plain"; then
        bad "CPython's regression tests: $count of $(echo $python_tests | wc -w) pass without strata here, too few to compare"; tail -8 "$tmp/regr_plain"
    else
        for run in "default flavour|LD_PRELOAD=$LIB" "checked mode|LD_PRELOAD=$LIB|STRATA_CHECK=1" \
                   "secure flavour|LD_PRELOAD=$secure_lib"; do
            label=${run%%|*}
            settings=$(echo "${run#*|}" | tr '|' ' ')
            # shellcheck disable=SC2086 # the settings are words
            if regrtest "$tmp/regr" "$passing" $settings; then
                ok "CPython's regression tests under strata, $label: $count tests pass, as without it$note"
            else bad "CPython's regression tests under strata, $label"; tail -15 "$tmp/regr"; fi
        done
    fi
fi

# Address space: strata reserves little at start (the segment map's root
# and the first segment, not a map of the whole address space), and under
# an address-space limit that glibc's malloc fills with 10 MB blocks a
# program on strata has as many, and then a small block.
if $CC -std=gnu11 -O1 -Wall -Wextra -Werror tests/programs/address_space.c -o "$tmp/address_space" > "$tmp/out" 2>&1; then
    plain_kib=$("$tmp/address_space" start)
    strata_kib=$(LD_PRELOAD="$LIB" "$tmp/address_space" start)
    # one 4 MiB segment, the library and the map's root
    if [ -n "$plain_kib" ] && [ -n "$strata_kib" ] && [ $((strata_kib - plain_kib)) -le 6144 ]; then
        ok "address space at start: $strata_kib KiB with strata, $plain_kib without"
    else bad "address space at start: $strata_kib KiB with strata, $plain_kib without (at most 6144 more)"; fi
    # room for 7 blocks on glibc, with 6 MB to spare
    limit=$((plain_kib + 7 * 10244 + 6 * 1024))
    plain=$(ulimit -v "$limit" && "$tmp/address_space" fill)
    with_strata=$(ulimit -v "$limit" && LD_PRELOAD="$LIB" "$tmp/address_space" fill)
    if [ "$plain" = "7 enomem small" ] && [ "$with_strata" = "$plain" ]; then
        ok "under ulimit -v $limit: $with_strata with strata, $plain without"
    else bad "under ulimit -v $limit: '$with_strata' with strata, '$plain' without (7 enomem small)"; fi
else bad "address_space.c does not build"; cat "$tmp/out"; fi
# A threaded program forking under the override (the fork test, preloaded).
if [ -x "$BUILD/tests/test_fork" ] && LD_PRELOAD="$LIB" "$BUILD/tests/test_fork" > "$tmp/out" 2>&1; then
    ok "fork test under LD_PRELOAD"
else bad "fork test under LD_PRELOAD"; cat "$tmp/out"; fi

echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
