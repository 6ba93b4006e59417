#!/bin/sh
# tests/deps.sh: installs the Debian packages make test needs, only those
# missing: as root, or through sudo. The README's second command; `make
# test-deps` and CI.
packages="gcc clang make pkg-config python3 zsh tcl8.6 tcl-thread gnuplot-nox valgrind"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
# As root, apt-get directly (a fresh Debian machine has no sudo); as a
# user, through sudo; without either, say what to install.
if [ "$(id -u)" -eq 0 ]; then
    as_root=""
elif command -v sudo >/dev/null 2>&1; then
    as_root="sudo"
else
    echo "missing packages:$missing; as root, run: apt-get install$missing" >&2
    exit 1
fi
echo "installing:$missing"
$as_root apt-get update -qq && $as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
