#!/bin/sh
# tests/test_valgrind.sh: arenas and contexts under Valgrind's memcheck. The
# inline fast paths step aside, so correct use reports no error, and a use
# of released memory (arena release, pool chunk free) is reported.
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
valgrind --error-exitcode=99 "$BUILD/tests/test_arena" use-after-release > "$out" 2>&1
check '[ $? -eq 99 ] && grep -q "Invalid write" "$out"' "arena: write after release reported"
valgrind --error-exitcode=99 "$BUILD/tests/test_context" use-after-free-in-pool > "$out" 2>&1
check '[ $? -eq 99 ] && grep -q "Invalid write" "$out"' "pool: write after free reported"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
