#!/bin/sh
# tests/test_security.sh: the security suite. Each attack of
# tests/programs/attacks.c (use after free, read and write, small and large;
# overflow by 1 and by 8 bytes, small and large; free-list forgery; double,
# invalid and interior free; a freed block reused while a stale pointer
# writes to it) runs in a child on glibc, on strata (default), on strata in
# checked mode and on strata's secure flavour. The secure flavour must stop
# (abort with a report, or fault) or neutralise every one; the default
# flavour keeps what it stops; docs/safety.md's table is this run's.
# `sh tests/test_security.sh --table` prints the table alone.
BUILD=${BUILD:-build}
CC=${CC:-cc}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0
fail=0
check() { if eval "$1"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL $2"; fi; }

attacks="uaf-read-small uaf-read-large uaf-write-small uaf-write-large overflow-1-small overflow-8-small
overflow-1-large overflow-8-large free-list-forgery double-free invalid-free interior-free stale-write-after-reuse"
default_lib="$PWD/$BUILD/libstrata.so"
secure_lib="$PWD/$BUILD/libstrata-secure.so"

"$CC" -std=gnu11 -Wall -Wextra -Werror -O1 -fno-builtin-malloc -fno-builtin-free tests/programs/attacks.c \
    -o "$out/attacks" > "$out/cc.log" 2>&1
check '[ $? -eq 0 ]' "tests/programs/attacks.c compiles: $(head -c 300 "$out/cc.log")"
check '[ -r "$default_lib" ] && [ -r "$secure_lib" ]' "both flavours are built ($default_lib, $secure_lib)"

# How one run ended, in a word or two.
outcome() { # preload (or empty), check (0/1), attack
    if [ -n "$1" ]; then
        STRATA_CHECK=$2 LD_PRELOAD="$1" "$out/attacks" "$3" > "$out/run" 2>&1
    else
        "$out/attacks" "$3" > "$out/run" 2>&1
    fi
    status=$?
    if grep -q "^got through: " "$out/run"; then
        echo "got through"
    elif grep -q "^neutralised: " "$out/run" && [ "$status" -eq 0 ]; then
        echo "neutralised"
    elif [ "$status" -eq 134 ]; then
        echo "stopped (abort)"
    elif [ "$status" -eq 139 ] || [ "$status" -eq 135 ]; then
        echo "stopped (fault)"
    else
        echo "exit $status"
    fi
}

table="$out/table.md"
{
    echo "| attack | glibc | strata | strata, STRATA_CHECK=1 | strata secure flavour |"
    echo "| --- | --- | --- | --- | --- |"
} > "$table"
for attack in $attacks; do
    # glibc stops a forged link by an abort or a fault, as the address
    # layout falls: its column says "stopped" for either.
    glibc=$(outcome "" 0 "$attack" | sed 's/^stopped (.*)$/stopped/')
    plain=$(outcome "$default_lib" 0 "$attack")
    checked=$(outcome "$default_lib" 1 "$attack")
    secure=$(outcome "$secure_lib" 0 "$attack")
    secure_says=$(grep -m 1 "^strata: error: " "$out/run" | sed 's/ (address 0x[0-9a-f]*)$//')
    echo "| $attack | $glibc | $plain | $checked | $secure |" >> "$table"
    case "$secure" in
        "stopped (abort)") check '[ -n "$secure_says" ]' "secure flavour: $attack is reported with what happened" ;;
        "stopped (fault)" | neutralised) check true "secure flavour: $attack" ;;
        *) check false "secure flavour: $attack $secure" ;;
    esac
    # What the default flavour stops, it keeps stopping; where glibc
    # stops an attack by a free's checks, so does strata.
    case "$attack" in
        double-free | invalid-free | interior-free | free-list-forgery)
            check '[ "$plain" = "stopped (abort)" ] && [ "$checked" = "stopped (abort)" ]' "default flavour stops $attack ($plain, checked: $checked)" ;;
    esac
done

# Linked statically with libstrata-secure.a, a program is just as guarded.
"$CC" -std=gnu11 -O1 -fno-builtin-malloc -fno-builtin-free tests/programs/attacks.c "$BUILD/libstrata-secure.a" \
    -o "$out/attacks-static" -lpthread > "$out/cc.log" 2>&1
check '[ $? -eq 0 ]' "attacks.c links libstrata-secure.a: $(head -c 300 "$out/cc.log")"
"$out/attacks-static" overflow-1-small > "$out/run" 2>&1
check '[ $? -eq 134 ] && grep -q "^strata: error: write past the end of a block" "$out/run"' "linked with libstrata-secure.a, an overflow by one byte is reported"

if [ "${1:-}" = --table ]; then
    cat "$table"
    exit 0
fi
cat "$table"
# docs/safety.md shows this table; glibc's column is Debian 12's glibc 2.36.
glibc_236=$(ldd --version 2>&1 | head -n 1 | grep -c ' 2\.36')
while IFS= read -r row; do
    case "$row" in "| attack "* | "| --- "*) continue ;; esac
    if [ "$glibc_236" -eq 1 ]; then
        check 'grep -Fqx -- "$row" docs/safety.md' "docs/safety.md's security table has the row: $row"
    else
        strata_part=$(echo "$row" | cut -d'|' -f4-)
        name=$(echo "$row" | cut -d'|' -f2)
        check 'grep -F -- "|$name|" docs/safety.md | grep -Fq -- "$strata_part"' "docs/safety.md's security table has strata's part of: $row"
    fi
done < "$table"
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
