#!/bin/sh
# bench/deps.sh: installs the allocators strata is measured against (Scudo
# from LLVM's compiler-rt, libclang-rt-dev) and what the harness needs,
# from Debian's packages, only those missing: as root, or through sudo. The README's first command; `make bench-deps`.
exec sh "$(dirname "$0")/../packages.sh" "bench dependencies are installed" \
    gcc g++ make python3 zsh gnuplot-nox strace libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 libapr1-dev libtalloc-dev \
    redis-server redis-tools sqlite3 libclang-rt-dev heaptrack google-perftools
