# zsh growing strings and arrays, and searching them (zsh's perf-test in small).
s=""
for i in {1..20000}; do s+="$i,"; done
a=()
for i in {1..20000}; do a+=("item$i"); done
n=0
for i in {1..2000}; do [[ ${a[(i)item$((i*7))]} -le ${#a} ]] && ((n++)); done
typeset -A h
for i in {1..10000}; do h[k$i]=$((i*i)); done
print ${#s} ${#a} $n ${#h} ${h[k77]} ${s[1,30]}
