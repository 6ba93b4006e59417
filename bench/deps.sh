#!/bin/sh
# bench/deps.sh: installs the allocators strata is measured against and
# what the harness needs, from Debian's packages, only those missing: as
# root, or through sudo. The README's first command; `make bench-deps`.
packages="gcc make python3 zsh gnuplot-nox libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 libapr1-dev libtalloc-dev"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && { echo "bench dependencies are installed"; exit 0; }
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
