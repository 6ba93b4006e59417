#!/bin/sh
# tests/test_valgrind.sh: arenas and contexts under Valgrind's memcheck. The
# inline fast paths step aside, so correct use reports no error, and a use
# of released memory (arena release, pool chunk free) is reported. A
# program on the preloaded override, told to memcheck as the documented
# --soname-synonyms idiom says, has its write after free, leak and invalid
# free reported; named wrongly, strata warns that memcheck sees nothing.
BUILD=${BUILD:-build}
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }
if ! command -v valgrind > /dev/null; then
    echo "valgrind is not installed (apt-get install valgrind)"
    echo "checks: 0 passed, 1 failed"
    exit 1
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in test_arena test_context; do
    TEST_UNDER_VALGRIND=1 valgrind -q --error-exitcode=99 "$BUILD/tests/$t" > "$out" 2>&1
    check '[ $? -eq 0 ]' "$t runs clean under valgrind"
    check 'grep -Eq "^checks: [1-9][0-9]* passed, 0 failed$" "$out"' "$t passes under valgrind"
    check '! grep -q "==[0-9]*==" "$out"' "$t: no valgrind report"
done
valgrind --error-exitcode=99 "$BUILD/tests/test_arena" --case use-after-release > "$out" 2>&1
check '[ $? -eq 99 ] && grep -q "Invalid write" "$out"' "arena: write after release reported"
valgrind --error-exitcode=99 "$BUILD/tests/test_context" --case use-after-free-in-pool > "$out" 2>&1
check '[ $? -eq 99 ] && grep -q "Invalid write" "$out"' "pool: write after free reported"

# A program on the preloaded override: memcheck sees its blocks when told
# that the library is the malloc (the SONAME carries the version, so the
# name is given with a wildcard or in full), and finds each error.
prog=$(mktemp)
lib="$(pwd)/$BUILD/libstrata.so"
soname=$(objdump -p "$lib" | sed -n 's/^ *SONAME *//p')
if ${CC:-cc} -std=gnu11 -O0 -g -Wall -Wextra -Werror tests/programs/memcheck_errors.c -o "$prog" 2> "$out"; then
    for synonym in 'libstrata.so*' "$soname"; do
        LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc="$synonym" --error-exitcode=99 "$prog" use-after-free > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "Invalid write of size 1" "$out" && grep -q "inside a block of size 64 free" "$out"' "somalloc=$synonym: write after free reported"
        LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc="$synonym" --leak-check=full --error-exitcode=99 "$prog" leak > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "64 bytes in 1 blocks are definitely lost" "$out"' "somalloc=$synonym: leak reported"
        LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc="$synonym" --error-exitcode=99 "$prog" invalid-free > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "Invalid free()" "$out"' "somalloc=$synonym: invalid free reported"
        LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc="$synonym" --error-exitcode=99 "$prog" > "$out" 2>&1
        check '[ $? -eq 0 ] && grep -q "total heap usage: [1-9]" "$out" && ! grep -q "strata: warning" "$out"' "somalloc=$synonym: a correct run is clean and counted"
    done
    # Named without its version, the library is not found, memcheck sees no
    # block at all, and strata says so.
    LD_PRELOAD="$lib" valgrind --soname-synonyms=somalloc=libstrata.so "$prog" > "$out" 2>&1
    check 'grep -q "total heap usage: 0 allocs" "$out" && grep -q "strata: warning: running under Valgrind, which does not see the blocks strata hands out: run it with --soname-synonyms=somalloc=libstrata.so\*" "$out"' "somalloc=libstrata.so: strata warns that memcheck sees nothing"
else
    check false "memcheck_errors.c compiles: $(cat "$out")"
fi
# The strata_* calls: memcheck sees their blocks too, linked with the API
# library (beside glibc's malloc) and linked with the override, preloaded.
for variant in api override; do
    if [ $variant = api ]; then libs="-L$BUILD -lstrata-api"; preload=""; synonym=""
    else libs="-L$BUILD -lstrata"; preload="$lib"; synonym="--soname-synonyms=somalloc=libstrata.so*"; fi
    if ${CC:-cc} -std=gnu11 -O0 -g -Wall -Wextra -Werror -DUSE_STRATA_API -Iinclude tests/programs/memcheck_errors.c -o "$prog" $libs -Wl,-rpath,"$(pwd)/$BUILD" 2> "$out"; then
        LD_PRELOAD="$preload" valgrind $synonym --error-exitcode=99 "$prog" use-after-free > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "inside a block of size 64 free" "$out"' "strata_* ($variant): write after free reported"
        LD_PRELOAD="$preload" valgrind $synonym --leak-check=full --error-exitcode=99 "$prog" leak > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "64 bytes in 1 blocks are definitely lost" "$out"' "strata_* ($variant): leak reported"
        LD_PRELOAD="$preload" valgrind $synonym --error-exitcode=99 "$prog" invalid-free > "$out" 2>&1
        check '[ $? -eq 99 ] && grep -q "Invalid free()" "$out"' "strata_* ($variant): invalid free reported"
        LD_PRELOAD="$preload" valgrind $synonym --error-exitcode=99 "$prog" > "$out" 2>&1
        check '[ $? -eq 0 ] && grep -q "^a block$" "$out"' "strata_* ($variant): a correct run is clean"
    else
        check false "memcheck_errors.c with the strata_* calls compiles: $(cat "$out")"
    fi
done
rm -f "$prog"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
