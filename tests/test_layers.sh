#!/bin/sh
# tests/test_layers.sh: the library's layering, measured from its object files
# ($BUILD/obj/*.o, then the secure flavour's in $BUILD/obj-secure): calls go
# down only, no call cycles, allowed includes only. One line of totals.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
pass=0
fail=0
for objects in obj obj-secure; do
    LAYERS_OBJ=$objects python3 tests/test_layers.py "$@" > "$out" 2>&1
    status=$?
    sed -e '/^checks: /d' -e "s|^|$objects: |" "$out"
    line=$(grep -E '^checks: [0-9]+ passed, [0-9]+ failed$' "$out")
    p=$(echo "$line" | sed -E 's/checks: ([0-9]+) passed.*/\1/')
    f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed/\1/')
    [ -n "$p" ] || { p=0; f=1; }
    [ "$status" -ne 0 ] && [ "$f" -eq 0 ] && f=1
    pass=$((pass + p))
    fail=$((fail + f))
done
echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
