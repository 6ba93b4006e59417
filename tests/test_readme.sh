#!/bin/sh
# tests/test_readme.sh: every C example in README.md is a whole program that
# compiles as pasted (warnings as errors), links against strata and runs; its
# output is what the example's comments say.
BUILD=${BUILD:-build}
CC=${CC:-cc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

# Each ```c block into example-N.c.
awk -v dir="$out" '
    /^```c$/ { n++; file = dir "/example-" n ".c"; inside = 1; next }
    /^```/ { inside = 0; next }
    inside { print > file }
' README.md
count=$(ls "$out"/example-*.c 2> /dev/null | wc -l)
check '[ "$count" -ge 2 ]' "README has C examples ($count)"
for src in "$out"/example-*.c; do
    name=$(basename "$src" .c)
    first=$(grep -m 1 -E "strata_[a-z]+" -o "$src")
    "$CC" -std=c11 -Wall -Wextra -Werror -Iinclude "$src" -o "$out/$name" "$BUILD/libstrata-api.a" -lpthread > "$out/$name.log" 2>&1
    check '[ $? -eq 0 ]' "$name ($first...) compiles as pasted: $(head -c 300 "$out/$name.log")"
    "$out/$name" > "$out/$name.out" 2>&1
    check '[ $? -eq 0 ]' "$name runs"
    # A comment after puts(...) gives the line it prints.
    expected=$(sed -n 's|.*puts(.*/\* \(.*\) \*/$|\1|p' "$src")
    check '[ -n "$expected" ] && [ "$(cat "$out/$name.out")" = "$expected" ]' "$name prints \"$expected\""
done

# The README's options table is the library's: every option the library
# says is in force (STRATA_VERBOSE=1, all defaults) has a row with its
# default, and the table has no row for an option the library lacks.
in_force=$(env -i STRATA_VERBOSE=1 LD_PRELOAD="$PWD/$BUILD/libstrata.so" /bin/true 2>&1 | sed -n 's/^strata [0-9.]* in force in [^:]*: //p')
check '[ -n "$in_force" ]' "the library prints the options in force"
for setting in $in_force; do
    name=${setting%%=*} value=${setting#*=}
    [ "$name" = STRATA_VERBOSE ] && value=0
    check 'grep -q "^| \`$name\` | \`$value\` | " README.md' "README's options table has $name with default $value"
done
for name in $(sed -n 's/^| `\(STRATA_[A-Z_]*\)` | .*/\1/p' README.md); do
    case " $in_force " in
        *" $name="*) ;;
        *) [ "$name" = STRATA_STATS_FILE ] || check false "README's options table has $name, which the library does not know" ;;
    esac
done
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
