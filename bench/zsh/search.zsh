# search_test: pattern searches through a large array (as in zsh's perf-test).
local n=${1:-100000} i hits=0
local -a a
for (( i = 1; i <= n; i++ )); do a+=("line $i of text $(( i % 97 ))"); done
for i in {1..20}; do
    local -a found; found=(${(M)a:#*of text $i}); hits=$(( hits + ${#found} ))
done
print $hits
