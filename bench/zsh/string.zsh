# string_test: grow a string by appends up to $1 bytes, $2 times.
local max=${1:-225000} s i
repeat ${2:-1}; do
    s=""
    while (( ${#s} < max )); do s+="abcdefghij"; done
done
print ${#s}
