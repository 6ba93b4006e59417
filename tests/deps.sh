#!/bin/sh
# tests/deps.sh: installs the Debian packages make test needs, only those
# missing: as root, or through sudo. The README's second command; `make
# test-deps` and CI.
exec sh "$(dirname "$0")/../packages.sh" "" \
    gcc g++ clang make cmake pkg-config python3 zsh tcl8.6 tcl-thread gnuplot-nox valgrind strace man-db \
    redis-server redis-tools google-perftools
