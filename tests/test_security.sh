#!/bin/sh
# tests/test_security.sh: the misuse suite. Each kind of misuse of
# tests/programs/attacks.c (frees of what is not a live block, uses after
# free, writes outside a block, zero-size blocks, what freed and new blocks
# hold), at 8, 4096 and 262144 bytes where the kind takes a size, runs in a
# child on glibc, on strata (default), on strata in checked mode and on
# strata's secure flavour. docs/safety.md's misuse suite table says what
# each must do ("stops": an abort with a report, a fault, or the misuse
# neutralised; "passes": it went through) and this suite holds every strata
# column to it in both directions: a flavour that stops less than its row
# says fails, and one that stops more must have its row updated. glibc's
# column is checked where glibc is Debian 12's 2.36. Each run first warms
# the size's fast paths, as a program that has run a while has them.
# `sh tests/test_security.sh --table` prints the table the runs make.
BUILD=${BUILD:-build}
CC=${CC:-cc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }
ulimit -c 0

default_lib="$PWD/$BUILD/libstrata.so"
secure_lib="$PWD/$BUILD/libstrata-secure.so"
sizes="8 4096 262144"

"$CC" -std=gnu11 -Wall -Wextra -Werror -O1 -fno-builtin-malloc -fno-builtin-free tests/programs/attacks.c \
    -o "$out/attacks" -lpthread > "$out/cc.log" 2>&1
check '[ $? -eq 0 ]' "tests/programs/attacks.c compiles: $(head -c 300 "$out/cc.log")"
check '[ -r "$default_lib" ] && [ -r "$secure_lib" ]' "both flavours are built ($default_lib, $secure_lib)"

# How one run ended: "stops" (an abort, a fault, or neutralised) or
# "passes"; anything else ("exit N") is the program's own failure.
outcome() { # preload (or empty), check (0/1), kind, size
    if [ -n "$1" ]; then
        STRATA_CHECK=$2 LD_PRELOAD="$1" "$out/attacks" "$3" "$4" > "$out/run" 2>&1
    else
        "$out/attacks" "$3" "$4" > "$out/run" 2>&1
    fi
    status=$?
    if grep -q "^got through: " "$out/run"; then
        echo passes
    elif grep -q "^neutralised: " "$out/run" && [ "$status" -eq 0 ]; then
        echo stops
    elif [ "$status" -eq 134 ] || [ "$status" -eq 139 ] || [ "$status" -eq 135 ]; then
        echo stops
    else
        echo "exit $status"
    fi
}

# One cell of the table: the outcomes at each size, joined by " / ".
cell() { # preload, check, kind, sized
    if [ "$4" = sized ]; then
        cells=""
        for size in $sizes; do
            result=$(outcome "$1" "$2" "$3" "$size")
            if [ "$1" = "$secure_lib" ] && [ "$2" = 0 ] && grep -q "^strata: error: " "$out/run"; then
                grep -q "(address 0x[0-9a-f]*)" "$out/run" || echo "$3 $size" >> "$out/unaddressed"
            fi
            cells="${cells:+$cells / }$result"
        done
        echo "$cells"
    else
        outcome "$1" "$2" "$3" 64
    fi
}

table="$out/table.md"
{
    echo "| misuse | glibc | strata | strata, STRATA_CHECK=1 | strata secure flavour |"
    echo "| --- | --- | --- | --- | --- |"
} > "$table"
"$out/attacks" --list > "$out/kinds"
check '[ "$(wc -l < "$out/kinds")" -ge 30 ]' "attacks --list names the kinds: $(wc -l < "$out/kinds")"
while read -r kind sized; do
    glibc=$(cell "" 0 "$kind" "$sized")
    plain=$(cell "$default_lib" 0 "$kind" "$sized")
    checked=$(cell "$default_lib" 1 "$kind" "$sized")
    secure=$(cell "$secure_lib" 0 "$kind" "$sized")
    echo "| \`$kind\` | $glibc | $plain | $checked | $secure |" >> "$table"
done < "$out/kinds"

if [ "${1:-}" = --table ]; then
    cat "$table"
    exit 0
fi
cat "$table"

check '! grep -q "exit [0-9]" "$table"' "every run ended by a stop or a line of its own: $(grep "exit [0-9]" "$table" | head -3)"
check '[ ! -s "$out/unaddressed" ]' "the secure flavour's reports name the address: $(head -3 "$out/unaddressed" 2>/dev/null)"

# docs/safety.md's table is the expectation: each strata column as the
# runs went, glibc's too where glibc is 2.36. "varies" in a cell of the
# docs is an outcome the secure flavour's random layout decides (the
# neighbour a write before a block lands in), and matches either.
glibc_236=$(ldd --version 2>&1 | head -n 1 | grep -c ' 2\.36')
first_column=3
[ "$glibc_236" -eq 1 ] && first_column=2
matches() { # a row of the runs, the docs' row
    echo "$1|$2" | awk -F'|' -v first="$first_column" '{
        for (c = first; c <= 6; c++) {
            n = split($c, ran, " / "); m = split($(c + 7), said, " / ")
            if (n != m) exit 1
            for (i = 1; i <= n; i++) {
                gsub(/ /, "", ran[i]); gsub(/ /, "", said[i])
                if (ran[i] != said[i] && !(said[i] == "varies" && ran[i] ~ /^(stops|passes)$/)) exit 1
            }
        }
    }'
}
while IFS= read -r row; do
    case "$row" in "| misuse "* | "| --- "*) continue ;; esac
    name=$(echo "$row" | cut -d'|' -f2)
    expected=$(grep -F -- "|$name|" docs/safety.md | head -n 1)
    check 'matches "$row" "$expected"' "docs/safety.md's misuse suite row is what the runs did: $row (docs: $expected)"
done < "$table"

# Linked statically with libstrata-secure.a, a program is just as guarded.
"$CC" -std=gnu11 -O1 -fno-builtin-malloc -fno-builtin-free tests/programs/attacks.c "$BUILD/libstrata-secure.a" \
    -o "$out/attacks-static" -lpthread > "$out/cc.log" 2>&1
check '[ $? -eq 0 ]' "attacks.c links libstrata-secure.a: $(head -c 300 "$out/cc.log")"
"$out/attacks-static" overflow-1 64 > "$out/run" 2>&1
check '[ $? -eq 134 ] && grep -q "^strata: error: write past the end of a block" "$out/run"' "linked with libstrata-secure.a, an overflow by one byte is reported"

echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
