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
