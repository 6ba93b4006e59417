#!/bin/sh
# tests/deps.sh: installs the Debian packages make test needs, only those
# missing: as root, or through sudo. The README's second command; `make
# test-deps` and CI. CPython's regression tests come in a package named
# after Debian's python3 version, asked once python3 is there.
dir=$(dirname "$0")/..
sh "$dir/packages.sh" "" \
    gcc g++ clang make cmake pkg-config python3 zsh tcl8.6 tcl-thread gnuplot-nox valgrind strace man-db \
    redis-server redis-tools google-perftools || exit 1
version=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') || exit 1
exec sh "$dir/packages.sh" "" "libpython$version-testsuite"
