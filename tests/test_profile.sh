#!/bin/sh
# tests/test_profile.sh: the heap profiler (STRATA_PROFILE) on a program of
# known allocation sites (tests/programs/profile_sites.c), sampled with a
# fixed seed: google-pprof reads every file it writes and names the sites;
# each site's estimate lies within four standard deviations of the bytes
# it allocated, held at the peak and held at exit; a forked child writes
# its own profile; a path that cannot be written is reported and the
# program runs on. Prints "checks: N passed, N failed".
BUILD=${BUILD:-build}
CC=${CC:-gcc}
LIB=$(cd "$BUILD" && pwd)/libstrata.so
SECURE_LIB=$(cd "$BUILD" && pwd)/libstrata-secure.so
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { if eval "$1"; then ok "$2"; else bad "$2"; fi; }

finish() {
    echo "checks: $pass passed, $fail failed"
    exit 0
}

if ! command -v google-pprof >/dev/null 2>&1; then
    bad "google-pprof is not installed (apt-get install google-perftools, or make test-deps)"
    finish
fi
# -fno-builtin: a compiler may otherwise drop a malloc whose block is
# never read (the leak sites), as clang does.
if ! $CC -std=gnu11 -O1 -g -fno-builtin -Wall -Wextra -Werror tests/programs/profile_sites.c -o "$tmp/sites" -lpthread -ldl; then
    bad "tests/programs/profile_sites.c builds"
    finish
fi

SAMPLE=16384
STRATA_PROFILE="$tmp/p" STRATA_PROFILE_SAMPLE=$SAMPLE STRATA_PROFILE_SEED=12345 STRATA_PROFILE_SIGNAL=12 \
    LD_PRELOAD="$LIB" "$tmp/sites" "$tmp/now" "$tmp/p.dump1.peak.folded" > "$tmp/out" 2> "$tmp/err"
rc=$?
check '[ "$rc" -eq 0 ]' "the program runs profiled (exit $rc$(head -c 200 "$tmp/err"))"
child=$(sed -n 's/^child=//p' "$tmp/out")
for f in p p.peak p.folded p.peak.folded "p.$child"; do
    check '[ -s "$tmp/$f" ]' "the profile's file $f is written"
done

# site's bytes in a google-pprof report: pprof MODE FILE SITE
pprof_bytes() {
    google-pprof --text --show_bytes "$1" "$tmp/sites" "$2" 2>/dev/null |
        awk -v site="$3" '$6 == site { print $1; found = 1 } END { if (!found) print 0 }'
}
check 'google-pprof --text "$tmp/sites" "$tmp/p" > "$tmp/text" 2>&1 && grep -q " site_leak$" "$tmp/text"' \
    "google-pprof --text reads the profile and names its sites"

# within SITE ESTIMATE TRUE BLOCK COUNT: the estimate of COUNT blocks of
# BLOCK bytes (TRUE bytes in all) lies within 4 standard deviations. Each
# block is sampled with chance p = 1 - e^(-BLOCK/SAMPLE), independently
# (the gaps are geometric), and counts TRUE/COUNT/p bytes: the estimate's
# variance is COUNT (TRUE/COUNT)^2 (1 - p) / p.
within() {
    python3 - "$@" "$SAMPLE" <<'EOF'
import math, sys
site, estimate, true, block, count, sample = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
p = 1 - math.exp(-block / sample)
sigma = math.sqrt(count * (true / count) ** 2 * (1 - p) / p)
ok = abs(estimate - true) <= 4 * sigma + 1
print(f"{site}: {estimate:.0f} bytes estimated, {true:.0f} true, 4 sigma {4 * sigma:.0f}")
sys.exit(0 if ok else 1)
EOF
}

MIB=1048576
three_alloc=$(pprof_bytes --alloc_space "$tmp/p" site_three)
one_alloc=$(pprof_bytes --alloc_space "$tmp/p" site_one)
check 'within site_three "$three_alloc" $((48 * MIB)) 96 $((48 * MIB / 96))' \
    "allocated by site_three: 48 MiB in 96-byte blocks ($three_alloc)"
check 'within site_one "$one_alloc" $((16 * MIB)) 32 $((16 * MIB / 32))' \
    "allocated by site_one: 16 MiB in 32-byte blocks ($one_alloc)"
# The share: three times within the two estimates' combined bound.
check 'python3 -c "
import math, sys
p3, p1 = 1 - math.exp(-96 / $SAMPLE), 1 - math.exp(-32 / $SAMPLE)
n = 48 * 2 ** 20 / 96
rel = math.sqrt((1 - p3) / (n * p3) + (1 - p1) / (n * p1))
sys.exit(0 if abs($three_alloc / $one_alloc / 3 - 1) <= 4 * rel else 1)"' \
    "site_three allocated three times site_one's bytes ($three_alloc / $one_alloc)"
three_peak=$(pprof_bytes --inuse_space "$tmp/p.peak" site_three)
one_peak=$(pprof_bytes --inuse_space "$tmp/p.peak" site_one)
check 'within site_three "$three_peak" $((48 * MIB)) 96 $((48 * MIB / 96))' \
    "held at the peak by site_three: 48 MiB ($three_peak; the peak is caught within a 64th)"
check 'within site_one "$one_peak" $((16 * MIB)) 32 $((16 * MIB / 32))' \
    "held at the peak by site_one: 16 MiB ($one_peak)"

# strata_profile_dump while both are held: their blocks, held now.
check 'grep -q "^dump=0$" "$tmp/out" && [ -s "$tmp/now" ] && [ -s "$tmp/now.folded" ]' \
    "strata_profile_dump writes the profile on request ($(grep dump= "$tmp/out"))"
three_now=$(pprof_bytes --inuse_space "$tmp/now" site_three)
check 'within site_three "$three_now" $((48 * MIB)) 96 $((48 * MIB / 96))' \
    "held by site_three when strata_profile_dump wrote: 48 MiB ($three_now)"

# STRATA_PROFILE_SIGNAL=12: SIGUSR2, raised while both are held, has the
# purger write the profile to path.dump1.
check 'grep -q "^signal=written$" "$tmp/out" && [ -s "$tmp/p.dump1" ] && [ -s "$tmp/p.dump1.folded" ]' \
    "STRATA_PROFILE_SIGNAL's signal writes the profile to path.dump1 ($(grep signal= "$tmp/out"))"
three_signal=$(pprof_bytes --inuse_space "$tmp/p.dump1" site_three)
check 'within site_three "$three_signal" $((48 * MIB)) 96 $((48 * MIB / 96))' \
    "held by site_three when the signal came: 48 MiB ($three_signal)"

# At exit: the leak, 4000 blocks of 4000 bytes and 10 of 1 MiB (always
# sampled: its chance is 1 - e^-64), and nothing of the sites that freed.
leak=$(pprof_bytes --inuse_space "$tmp/p" site_leak)
check 'within site_leak "$((leak - 10 * MIB))" 16000000 4000 4000' \
    "held at exit by site_leak: 16 MB + 10 MiB ($leak)"
for site in site_three site_one site_handed site_grown; do
    held=$(pprof_bytes --inuse_space "$tmp/p" $site)
    check '[ "$held" -eq 0 ]' "nothing held at exit by $site, which freed its blocks ($held)"
done
handed=$(pprof_bytes --alloc_space "$tmp/p" site_handed)
check 'within site_handed "$handed" $((64 * MIB)) $MIB 64' \
    "allocated by site_handed in threads that exited, freed by another: 64 MiB ($handed)"
grown=$(pprof_bytes --alloc_space "$tmp/p" site_grown)
check 'within site_grown "$grown" $((200 * 200 * 1024)) $((200 * 1024)) 200' \
    "allocated by site_grown before its reallocs: 200 blocks of 200 KiB ($grown)"
child_held=$(pprof_bytes --inuse_space "$tmp/p.$child" site_child)
check 'within site_child "$child_held" $((200 * 65536)) 65536 200' \
    "the forked child's own profile holds its leak: 200 blocks of 64 KiB ($child_held)"

# The folded stacks: frames by address, outermost first, and the bytes held,
# which add up to the profile's total.
check 'awk "!/^0x[0-9a-f]+(;0x[0-9a-f]+)* [0-9]+\$/ { bad = 1 } END { exit bad }" "$tmp/p.folded"' \
    "the folded stacks are lines of addresses and bytes"
total=$(sed -n 's/^heap profile: *[0-9]*: *\([0-9]*\) .*/\1/p' "$tmp/p")
folded=$(awk '{ s += $NF } END { print s + 0 }' "$tmp/p.folded")
check '[ "$folded" -le "$total" ] && [ "$folded" -ge $((total - 100)) ]' \
    "the folded stacks' bytes add up to the profile's ($folded of $total)"

# "%p" in the path: every process writes its own, named by its pid (a
# shell that execs the program, and the program's forked child).
STRATA_PROFILE="$tmp/q.%p" STRATA_PROFILE_SAMPLE=$SAMPLE LD_PRELOAD="$LIB" \
    sh -c 'echo $$ > "$1"; exec "$2"' sh "$tmp/shell_pid" "$tmp/sites" > "$tmp/out_q" 2> "$tmp/err"
shell_pid=$(cat "$tmp/shell_pid")
child_q=$(sed -n 's/^child=//p' "$tmp/out_q")
check '[ -s "$tmp/q.$shell_pid" ] && [ -s "$tmp/q.$shell_pid.peak.folded" ] && [ -s "$tmp/q.$child_q" ] && [ ! -e "$tmp/q.%p" ]' \
    "%p in STRATA_PROFILE names each process's profile by its pid ($(ls "$tmp" | grep "^q\." | head -n 3 | tr '\n' ' '))"
q_leak=$(pprof_bytes --inuse_space "$tmp/q.$shell_pid" site_leak)
check '[ "$q_leak" -gt $((10 * MIB)) ]' "the exec'd program's own profile holds its leak ($q_leak)"

# Sampled blocks used as any block is (tests/programs/profile_blocks.c),
# every allocation sampled, in both flavours: contents, calloc,
# alignments, realloc across the bins' sizes, frees in other threads,
# slots reused (the secure flavour's samples are large blocks).
if $CC -std=gnu11 -O1 -g -fno-builtin -Wall -Wextra -Werror -Iinclude tests/programs/profile_blocks.c -o "$tmp/blocks" -lpthread -ldl; then
    for flavour in "default:$LIB" "secure:$SECURE_LIB"; do
        name=${flavour%%:*}
        lib=${flavour#*:}
        STRATA_PROFILE="$tmp/b" STRATA_PROFILE_SAMPLE=1 LD_PRELOAD="$lib" "$tmp/blocks" > "$tmp/out_b" 2>&1
        rc=$?
        check '[ "$rc" -eq 0 ] && grep -q "^ok$" "$tmp/out_b"' \
            "$name flavour: sampled blocks behave as blocks (exit $rc: $(head -c 300 "$tmp/out_b"))"
        # Each thread keeps its free records (and freed slots): the profile
        # still holds every live sampled block once.
        STRATA_PROFILE="$tmp/b" STRATA_PROFILE_SAMPLE=1 LD_PRELOAD="$lib" "$tmp/blocks" thread-caches > "$tmp/out_b" 2>&1
        rc=$?
        check '[ "$rc" -eq 0 ] && grep -q "^ok$" "$tmp/out_b"' \
            "$name flavour: sampled blocks of threads with caches counted once each (exit $rc: $(head -c 300 "$tmp/out_b"))"
        # A program that frees everything leaves nothing in the profile at
        # exit: not the purger thread's TLS vector either, which the C
        # library allocates when strata starts it (STRATA_PROFILE_SIGNAL
        # starts it at once).
        STRATA_PROFILE="$tmp/freed" STRATA_PROFILE_SAMPLE=1 STRATA_PROFILE_SIGNAL=12 LD_PRELOAD="$lib" \
            "$tmp/blocks" all-freed > "$tmp/out_b" 2>&1
        rc=$?
        check '[ "$rc" -eq 0 ] && head -1 "$tmp/freed" | grep -q "^heap profile: 0: 0 "' \
            "$name flavour: a program that freed everything leaves an empty profile (exit $rc: $(head -1 "$tmp/freed" 2>&1))"
        # The default flavour keeps a sampled block in its page: a realloc
        # keeps it in place (the secure flavour moves every sampled block).
        if [ "$name" = default ]; then
            STRATA_PROFILE="$tmp/b" STRATA_PROFILE_SAMPLE=1 LD_PRELOAD="$lib" "$tmp/blocks" realloc-in-place > "$tmp/out_b" 2>&1
            rc=$?
            check '[ "$rc" -eq 0 ] && grep -q "^ok$" "$tmp/out_b"' \
                "$name flavour: a sampled block reallocated in place is held no more (exit $rc: $(head -c 300 "$tmp/out_b"))"
        fi
        # Misuse of a sampled block is stopped, with its address. No purger
        # thread: its start allocates, and could take the slot freed first.
        for misuse in "double-free:double free" "interior-free:not a block's start|not the start of a block|did not allocate" \
            "header-write:write before the start of a block" "interior-realloc:not a block's start|not allocated|did not allocate"; do
            kind=${misuse%%:*}
            said=${misuse#*:}
            STRATA_BACKGROUND_PURGE=0 STRATA_PROFILE="$tmp/b" STRATA_PROFILE_SAMPLE=1 LD_PRELOAD="$lib" \
                "$tmp/blocks" "$kind" > "$tmp/out_b" 2>&1
            rc=$?
            check '[ "$rc" -gt 128 ] && grep -Eq "strata: error: .*($said).* \(address 0x[0-9a-f]*\)" "$tmp/out_b" && ! grep -q "went through" "$tmp/out_b"' \
                "$name flavour: a sampled block's $kind is stopped (exit $rc: $(head -c 200 "$tmp/out_b"))"
        done
    done
    STRATA_BACKGROUND_PURGE=0 STRATA_PROFILE="$tmp/b" STRATA_PROFILE_SAMPLE=1 LD_PRELOAD="$SECURE_LIB" \
        "$tmp/blocks" write-after-free > "$tmp/out_b" 2>&1
    rc=$?
    check '[ "$rc" -gt 128 ] && grep -q "strata: error: write after free.* (address 0x[0-9a-f]*)" "$tmp/out_b"' \
        "secure flavour: a write after a sampled block's free is stopped at its reuse (exit $rc: $(head -c 200 "$tmp/out_b"))"
else
    bad "tests/programs/profile_blocks.c builds"
fi

# The secure flavour samples too: the sites' shares at the peak.
STRATA_PROFILE="$tmp/s" STRATA_PROFILE_SAMPLE=$SAMPLE STRATA_PROFILE_SEED=12345 LD_PRELOAD="$SECURE_LIB" \
    "$tmp/sites" > "$tmp/out_s" 2>&1
rc=$?
three_secure=$(pprof_bytes --inuse_space "$tmp/s.peak" site_three)
one_secure=$(pprof_bytes --inuse_space "$tmp/s.peak" site_one)
check '[ "$rc" -eq 0 ] && within site_three "$three_secure" $((48 * MIB)) 96 $((48 * MIB / 96)) && within site_one "$one_secure" $((16 * MIB)) 32 $((16 * MIB / 32))' \
    "secure flavour: held at the peak by site_three and site_one: 48 and 16 MiB ($three_secure, $one_secure; exit $rc)"

# A program linked with libstrata.a: strata's code lies in a section of
# its own, and its frames are left out of the stacks as the library's are.
if $CC -std=gnu11 -O1 -g -fno-builtin -Wall -Wextra -Werror tests/programs/profile_sites.c -o "$tmp/sites_static" \
    "$BUILD/libstrata.a" -lpthread -ldl; then
    STRATA_PROFILE="$tmp/st" STRATA_PROFILE_SAMPLE=$SAMPLE STRATA_PROFILE_SEED=12345 "$tmp/sites_static" > /dev/null 2>&1
    google-pprof --text "$tmp/sites_static" "$tmp/st.peak" > "$tmp/static_text" 2>/dev/null
    check 'awk "NR == 2 { exit \$6 != \"site_three\" }" "$tmp/static_text" && ! grep -Eq "alloc_|profile_|stack_walk|bin_" "$tmp/static_text"' \
        "linked with libstrata.a: site_three first, no frame of strata's ($(head -n 3 "$tmp/static_text" | tr '\n' ' '))"
else
    bad "tests/programs/profile_sites.c links with $BUILD/libstrata.a"
fi

# A path that cannot be written: said, and the program's exit is its own.
STRATA_PROFILE="$tmp/missing/p" STRATA_PROFILE_SAMPLE=$SAMPLE LD_PRELOAD="$LIB" "$tmp/sites" > /dev/null 2> "$tmp/err"
rc=$?
check '[ "$rc" -eq 0 ] && grep -q "STRATA_PROFILE: the profile could not be written to $tmp/missing/p" "$tmp/err"' \
    "an unwritable STRATA_PROFILE path is reported, the program runs on (exit $rc: $(head -c 200 "$tmp/err"))"
finish
