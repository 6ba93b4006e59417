# function_test: many calls of small functions with local variables.
local n=${1:-40000} i total=0
f() { local x=$1 y; y=$(( x * 2 )); REPLY="v$y" }
for (( i = 1; i <= n; i++ )); do f $i; total=$(( total + ${#REPLY} )); done
print $total
