#!/bin/sh
# tests/deps.sh: installs (as root) the Debian packages make test needs,
# only those missing; otherwise names them. Used by `make test-deps` and CI.
packages="gcc clang make pkg-config python3 zsh tcl8.6 tcl-thread gnuplot-nox valgrind"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages:$missing (run: sudo apt-get install$missing)" >&2
    exit 1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
