#!/bin/sh
# tests/run.sh: runs every test program and script, prints one line per test
# and, last, the totals as "N passed, N failed" (checks of all programs).
# ONLY=pattern (make test ONLY=...) runs only those whose name, as the
# lines print it, contains the pattern.
BUILD=${BUILD:-build}
ONLY=${ONLY:-}
SANITIZER=${SANITIZER:-}
export SANITIZER
# Threads in a forked child are what test_fork checks; TSan must let them be.
export TSAN_OPTIONS="${TSAN_OPTIONS:-} die_after_fork=0"
total_pass=0
total_fail=0
failed_tests=""
ran=0

selected() { # name as printed
    case "$1" in *"$ONLY"*) return 0 ;; esac
    return 1
}

# Each line gives the seconds since the previous one ended, so a run's
# output shows where its time goes.
last_end=$(date +%s)
record() { # name, output file, exit status
    now=$(date +%s)
    took=$((now - last_end))
    last_end=$now
    line=$(grep -E '^checks: [0-9]+ passed, [0-9]+ failed$' "$2" | tail -n 1)
    p=$(echo "$line" | sed -E 's/checks: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed/\1/')
    ran=$((ran + 1))
    [ -n "$p" ] || { p=0; f=1; }
    if [ "$3" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    total_pass=$((total_pass + p))
    total_fail=$((total_fail + f))
    if [ "$f" -eq 0 ]; then
        echo "ok   $1 ($p checks, ${took} s)"
    else
        echo "FAIL $1 ($p passed, $f failed, exit $3, ${took} s)"
        sed 's/^/     | /' "$2" | tail -n 30
        failed_tests="$failed_tests $1"
    fi
}

# ThreadSanitizer finds a race in the interleavings of a short run as well
# as a long one, at ten times the cost an operation: the stress test runs
# a third of its work under it (two thirds of TSan's time in CI went to it).
stress_scale=1
[ "$SANITIZER" = tsan ] && stress_scale=0.33
out=$(mktemp)
# The test programs, then those built again on the secure flavour's objects.
for t in "$BUILD"/tests/test_* "$BUILD"/tests-secure/test_*; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    case "$t" in */tests-secure/*) flavour=" (secure flavour)" ;; *) flavour="" ;; esac
    selected "$name$flavour" || continue
    case "$SANITIZER:$name$flavour" in
        tsan:test_api*|tsan:test_sizeclass*|tsan:test_pages*|tsan:test_misuse*) continue ;;
        "tsan:test_exit (secure flavour)"|"tsan:test_purge (secure flavour)")
            # They time memory going back within purge delays, which the
            # secure flavour's frees, slowed further by TSan, overrun; the
            # other builds run them, and TSan runs the threaded ones above.
            # (make test-tsan does not build them; an older build may have.)
            echo "not run under tsan: $name$flavour (times memory going back)"
            continue ;;
        tsan:test_last_thread*)
            # ThreadSanitizer keeps a thread of its own running, so a
            # process whose main thread ends with pthread_exit never ends
            # under it, with strata or without; the other builds run it.
            echo "not run under tsan: $name$flavour (its runtime's own thread keeps such a process alive)"
            continue ;;
        ?*:test_benchmem) # it checks real resident sizes, which shadow memory swamps
            echo "not run under $SANITIZER: $name (measures the process's resident size)"
            continue ;;
    esac
    STRESS_SCALE=${STRESS_SCALE:-$stress_scale} timeout 600 "$t" > "$out" 2>&1
    record "$name$flavour" "$out" $?
done
# The stress test once more in checked mode: every free validated, no false
# alarm, and (under TSan) no race in the checks themselves.
if [ -x "$BUILD/tests/test_stress" ] && selected "test_stress (STRATA_CHECK=1)"; then
    STRATA_CHECK=1 STRESS_SCALE=$(awk "BEGIN { print $stress_scale / 2 }") \
        timeout 600 "$BUILD/tests/test_stress" > "$out" 2>&1
    record "test_stress (STRATA_CHECK=1)" "$out" $?
fi
# Contexts in checked mode: every block they return to the general allocator
# is validated there (no double or foreign free hidden behind a context).
if [ -x "$BUILD/tests/test_context" ] && selected "test_context (STRATA_CHECK=1)"; then
    STRATA_CHECK=1 timeout 600 "$BUILD/tests/test_context" > "$out" 2>&1
    record "test_context (STRATA_CHECK=1)" "$out" $?
fi
# The heap profiler sampling one allocation in every 4 KiB or so, in both
# flavours: sampled blocks (slots of their own region) across threads
# with every block checked, and a profile written at exit. (test_api
# asserts where blocks land, which a sample changes.)
for stress in "$BUILD/tests/test_stress" "$BUILD/tests-secure/test_stress"; do
    name="test_stress (STRATA_PROFILE)"
    [ "$stress" = "$BUILD/tests-secure/test_stress" ] && name="test_stress (secure flavour, STRATA_PROFILE)"
    if [ -x "$stress" ] && selected "$name"; then
        profile_dir=$(mktemp -d)
        STRATA_PROFILE="$profile_dir/profile" STRATA_PROFILE_SAMPLE=4096 STRESS_SCALE=$(awk "BEGIN { print $stress_scale / 2 }") \
            timeout 600 "$stress" > "$out" 2>&1
        status=$?
        [ -s "$profile_dir/profile" ] || { echo "no profile written at exit" >> "$out"; status=1; }
        record "$name" "$out" $status
        rm -rf "$profile_dir"
    fi
done
# Thread exit without a purger thread: heaps are given up at once.
if [ -x "$BUILD/tests/test_exit" ] && selected "test_exit (STRATA_BACKGROUND_PURGE=0)"; then
    STRATA_BACKGROUND_PURGE=0 timeout 600 "$BUILD/tests/test_exit" > "$out" 2>&1
    record "test_exit (STRATA_BACKGROUND_PURGE=0)" "$out" $?
fi
if [ -z "$SANITIZER" ]; then
    for s in tests/test_*.sh; do
        selected "$(basename "$s")" || continue
        BUILD="$BUILD" timeout 900 sh "$s" > "$out" 2>&1
        record "$(basename "$s")" "$out" $?
    done
fi
rm -f "$out"
if [ -n "$ONLY" ] && [ "$ran" -eq 0 ]; then # a misspelt pattern is no green run
    echo "FAIL nothing ran: no test run here has a name containing '$ONLY'"
    total_fail=$((total_fail + 1))
    failed_tests="$failed_tests ONLY=$ONLY"
fi
[ -n "$failed_tests" ] && echo "failed:$failed_tests"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
