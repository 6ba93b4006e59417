#!/bin/sh
# tests/test_install.sh: what a distribution and a user who builds against
# strata meet. make install into a staging root with its own directories;
# the shared library's SONAME and links; an archive with no global name
# outside the API and the malloc family; a program with clashing names, and
# one that only calls strdup, on strata both ways; make uninstall leaves no
# file behind. Prints "checks: N passed, N failed".
BUILD=${BUILD:-build}
CC=${CC:-gcc}
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

version=$(sed -n 's/^#define STRATA_VERSION "\(.*\)"/\1/p' include/strata.h)
soname=libstrata.so.$(echo "$version" | cut -d. -f1-2)
prefix=/opt/strata-test
root="$tmp/root"
if make -s BUILD="$BUILD" CC="$CC" install DESTDIR="$root" PREFIX="$prefix" LIBDIR="$prefix/lib64" \
        INCLUDEDIR="$prefix/inc" > "$tmp/out" 2>&1; then ok "make install DESTDIR= PREFIX= LIBDIR= INCLUDEDIR="
else bad "make install"; cat "$tmp/out"; fi
lib="$root$prefix/lib64"
[ -f "$root$prefix/inc/strata.h" ] && [ -f "$lib/libstrata.a" ] && [ -f "$lib/pkgconfig/strata.pc" ] \
    && ok "header in INCLUDEDIR, libraries and strata.pc in LIBDIR" || bad "installed files: $(find "$root" -type f)"
grep -q "^libdir=$prefix/lib64\$" "$lib/pkgconfig/strata.pc" && grep -q "^Version: $version\$" "$lib/pkgconfig/strata.pc" \
    && ok "strata.pc names LIBDIR (not the staging root) and version $version" || { bad "strata.pc"; cat "$lib/pkgconfig/strata.pc"; }

# The shared library: the real file carries the full version, the SONAME
# the ABI's, and the two links point at the real file.
[ -f "$lib/libstrata.so.$version" ] && [ "$(readlink "$lib/$soname")" = "libstrata.so.$version" ] \
    && [ "$(readlink "$lib/libstrata.so")" = "libstrata.so.$version" ] \
    && ok "libstrata.so.$version, with $soname and libstrata.so linked to it" || bad "library files: $(ls -l "$lib")"
readelf -d "$lib/libstrata.so.$version" | grep -q "Library soname: \[$soname\]" \
    && ok "SONAME $soname" || { bad "SONAME"; readelf -d "$lib/libstrata.so.$version" | grep SONAME; }

# The archive defines only strata_* and the malloc family.
stray=$(nm -g --defined-only "$lib/libstrata.a" | awk 'NF == 3 { print $3 }' \
    | grep -Ev '^(strata_.*|malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized|malloc_trim|mallinfo2?|malloc_stats|malloc_info|mallopt|__libc_(malloc|free|calloc|realloc|memalign|valloc|pvalloc))$')
count=$(nm -g --defined-only "$lib/libstrata.a" | awk 'NF == 3' | wc -l)
[ -z "$stray" ] && [ "$count" -gt 20 ] && ok "libstrata.a defines $count global names, none outside the API and the malloc family" \
    || bad "libstrata.a defines stray names: $(echo $stray)"

cflags="-std=gnu11 -Wall -Wextra -Werror -I$root$prefix/inc"
if $CC $cflags tests/programs/clashing.c "$lib/libstrata.a" -o "$tmp/clashing" -lpthread > "$tmp/out" 2>&1 \
    && "$tmp/clashing" > "$tmp/out" 2>&1; then ok "a program defining os_map, page_new, heap_check, thread_heap links libstrata.a and runs on strata"
else bad "clashing names with libstrata.a"; cat "$tmp/out"; fi

# A program that names no malloc function: through pkg-config's flags it is
# on strata, linked to the shared library or to the archive.
pcflags=$(PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" pkg-config --libs strata)
static_flags=$(echo "$pcflags" | sed 's/-lstrata/-l:libstrata.a/')
for how in shared static; do
    if [ $how = shared ]; then flags=$pcflags; else flags="$static_flags -lpthread"; fi
    if $CC $cflags tests/programs/strdup_only.c $flags -o "$tmp/strdup_$how" > "$tmp/out" 2>&1 \
        && STRATA_SHOW_STATS=1 LD_LIBRARY_PATH="$lib" "$tmp/strdup_$how" > "$tmp/out" 2>&1 \
        && grep -q "^strdup: ok" "$tmp/out" && grep -q "^strata $version statistics" "$tmp/out"; then
        ok "a program that only calls strdup runs on strata ($how, pkg-config --libs strata)"
    else bad "strdup only, $how: $flags"; cat "$tmp/out"; fi
done

if make -s BUILD="$BUILD" CC="$CC" uninstall DESTDIR="$root" PREFIX="$prefix" LIBDIR="$prefix/lib64" \
        INCLUDEDIR="$prefix/inc" > "$tmp/out" 2>&1 && [ -z "$(find "$root" ! -type d)" ]; then
    ok "make uninstall leaves no file"
else bad "make uninstall left: $(find "$root" ! -type d)"; cat "$tmp/out"; fi

echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
