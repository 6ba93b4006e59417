#!/bin/sh
# bench/deps.sh: installs the allocators strata is measured against, and the
# programs the benchmarks run, from Debian's packages (needs root).
set -e
if [ "$(id -u)" -ne 0 ]; then
    echo "make bench-deps installs Debian packages: run it as root" >&2
    exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y python3 libjemalloc2 libmimalloc2.0 libtcmalloc-minimal4
