#!/bin/sh
# packages.sh: installs the Debian packages named after the first argument
# that are missing: with apt-get as root (a fresh Debian machine has no
# sudo), through sudo as a user; without either, names them and fails. The
# first argument is said when nothing is missing (may be empty). Used by
# bench/deps.sh and tests/deps.sh.
installed_message=$1
shift
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -z "$missing" ]; then
    [ -n "$installed_message" ] && echo "$installed_message"
    exit 0
fi
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
