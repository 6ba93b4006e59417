#!/bin/sh
# bench/deps.sh: installs (as root) the allocators strata is measured
# against and what the harness needs, from Debian's packages; otherwise
# names them. Used by `make bench-deps`.
packages="gcc make python3 zsh gnuplot-nox libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4 libapr1-dev libtalloc-dev"
missing=""
for p in $packages; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && { echo "bench dependencies are installed"; exit 0; }
if [ "$(id -u)" -ne 0 ]; then
    echo "missing packages:$missing (run: sudo make bench-deps)" >&2
    exit 1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
