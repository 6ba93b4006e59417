# array_test: build arrays by appending, then copy and slice them.
local n=${1:-60000} i
local -a a b
for (( i = 1; i <= n; i++ )); do a+=("element-$i"); done
b=("${a[@]}")
b=(${b[1,n/2]} ${a[n/2,-1]})
print ${#a} ${#b}
