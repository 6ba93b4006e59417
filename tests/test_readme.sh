#!/bin/sh
# tests/test_readme.sh: every C example in the docs (README.md, INSTALL.md,
# HACKING.md, docs/*.md, bench/README.md, tests/README.md) is a whole program
# that compiles as pasted (warnings as errors), links against strata and
# runs; its output is what the example's comments say. The options table is
# in docs/usage.md alone and is the library's; the manual page states the
# same options and defaults.
BUILD=${BUILD:-build}
CC=${CC:-cc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

# Each ```c block into example-N.c.
docs=$(ls README.md INSTALL.md HACKING.md docs/*.md bench/README.md tests/README.md 2> /dev/null)
awk -v dir="$out" '
    /^```c$/ { n++; file = dir "/example-" n ".c"; inside = 1; next }
    /^```/ { inside = 0; next }
    inside { print > file }
' $docs
count=$(ls "$out"/example-*.c 2> /dev/null | wc -l)
check '[ "$count" -ge 5 ]' "the docs have C examples ($count)"
readme_count=$(grep -c '^```c$' README.md)
check '[ "$readme_count" -eq 3 ]' "README.md has one C example per layer ($readme_count)"
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

# docs/usage.md's options table is the library's: every option the library
# says is in force (STRATA_VERBOSE=1, all defaults) has a row with its
# default, and the table has no row for an option the library lacks.
in_force=$(env -i STRATA_VERBOSE=1 LD_PRELOAD="$PWD/$BUILD/libstrata.so" /bin/true 2>&1 | sed -n 's/^strata [0-9.]* in force in [^:]*: //p')
check '[ -n "$in_force" ]' "the library prints the options in force"
for setting in $in_force; do
    name=${setting%%=*} value=${setting#*=}
    [ "$name" = STRATA_VERBOSE ] && value=0
    check 'grep -q "^| \`$name\` | \`$value\` | " docs/usage.md' "docs/usage.md's options table has $name with default $value"
done
profile_dir=$(mktemp -d)
check 'env -i STRATA_VERBOSE=1 STRATA_PROFILE="$profile_dir/p" LD_PRELOAD="$PWD/$BUILD/libstrata.so" /bin/true 2>&1 | grep -q " STRATA_PROFILE=$profile_dir/p "' \
    "the library knows STRATA_PROFILE, a path named in the line when set"
rm -rf "$profile_dir"
for name in $(sed -n 's/^| `\(STRATA_[A-Z_]*\)` | .*/\1/p' docs/usage.md); do
    case " $in_force " in
        *" $name="*) ;;
        *) case $name in
               STRATA_STATS_FILE | STRATA_PROFILE) ;; # paths: named in the line only when set
               *) check false "docs/usage.md's options table has $name, which the library does not know" ;;
           esac ;;
    esac
done
# The in-force line docs/usage.md shows names the library's options, in
# its order.
shown=$(sed -n 's/^strata [0-9.]* in force in [^:]*: //p' docs/usage.md | head -n 1)
check '[ "$(echo "$shown" | tr " " "\n" | sed "s/=.*//")" = "$(echo "$in_force" | tr " " "\n" | sed "s/=.*//")" ]' \
    "docs/usage.md's in-force line names the library's options in order ($shown)"
# The manual page, for the installed library, states the same options and,
# where it gives one, the same default.
for setting in $in_force; do
    name=${setting%%=*} value=${setting#*=}
    [ "$name" = STRATA_VERBOSE ] && value=0
    check 'grep -q "^\.BR\{0,1\} $name\( \|$\)" man/strata.3' "man/strata.3 has $name"
    stated=$(sed -n "s/^\.BR $name \" (\([^)]*\))\"$/\1/p" man/strata.3)
    check '[ -z "$stated" ] || [ "$stated" = "$value" ]' "man/strata.3 gives $name's default as $value ($stated)"
done
# Every link between the docs leads to a file that exists.
for doc in $docs; do
    for target in $(grep -o '](\([^)#]*\))' "$doc" | sed 's/^](\(.*\))$/\1/'); do
        case "$target" in *://*) continue ;; esac
        check '[ -e "$(dirname "$doc")/$target" ]' "$doc links to $target, which exists"
    done
done
# The options are tabled in one place: no other doc has a row of that table.
others=$(grep -l '^| `STRATA_[A-Z_]*` | ' $docs | grep -vx docs/usage.md)
check '[ -z "$others" ]' "the options table is in docs/usage.md alone (also in: $others)"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
