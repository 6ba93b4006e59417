#!/bin/sh
# tests/test_install.sh: what a distribution and a user who builds against
# strata meet. make install into a staging root with its own directories;
# both shared libraries' SONAMEs and links; archives with no global name
# outside the API (and the malloc family, with the override); a program with
# clashing names, and one that only calls strdup, on strata; a user's program
# built from the staged prefix through pkg-config and through CMake's
# find_package, shared and static, with the override and API-only; make
# uninstall leaves no file behind. Prints "checks: N passed, N failed".
BUILD=${BUILD:-build}
CC=${CC:-gcc}
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

version=$(sed -n 's/^#define STRATA_VERSION "\(.*\)"/\1/p' include/strata.h)
abi=$(echo "$version" | cut -d. -f1-2)
prefix=/opt/strata-test
# A Debian multiarch LIBDIR: not the default, and where CMake looks.
multiarch=$(gcc -print-multiarch 2> /dev/null)
libdir=$prefix/lib/${multiarch:-x86_64-linux-gnu}
root="$tmp/root"
dirs="PREFIX=$prefix LIBDIR=$libdir INCLUDEDIR=$prefix/inc"
if make -s BUILD="$BUILD" CC="$CC" install DESTDIR="$root" $dirs > "$tmp/out" 2>&1; then
    ok "make install DESTDIR= PREFIX= LIBDIR= INCLUDEDIR="
else bad "make install"; cat "$tmp/out"; fi
lib="$root$libdir"
expected="bin/strata-run
inc/strata.h
lib/$multiarch/cmake/strata/strataConfig.cmake
lib/$multiarch/cmake/strata/strataConfigVersion.cmake
lib/$multiarch/libstrata-api.a
lib/$multiarch/libstrata-api.so
lib/$multiarch/libstrata-api.so.$abi
lib/$multiarch/libstrata-api.so.$version
lib/$multiarch/libstrata-override.a
lib/$multiarch/libstrata-secure-override.a
lib/$multiarch/libstrata-secure.a
lib/$multiarch/libstrata-secure.so
lib/$multiarch/libstrata-secure.so.$abi
lib/$multiarch/libstrata-secure.so.$version
lib/$multiarch/libstrata.a
lib/$multiarch/libstrata.so
lib/$multiarch/libstrata.so.$abi
lib/$multiarch/libstrata.so.$version
lib/$multiarch/pkgconfig/strata-api.pc
lib/$multiarch/pkgconfig/strata.pc
share/man/man1/strata-run.1
share/man/man3/strata.3"
found=$(cd "$root$prefix" 2> /dev/null && find . ! -type d | sed 's|^\./||' | LC_ALL=C sort)
[ "$found" = "$(echo "$expected" | LC_ALL=C sort)" ] && ok "header in INCLUDEDIR; libraries, pkg-config files and CMake package in LIBDIR" \
    || { bad "installed files"; echo "$found"; }
# The man pages render without a warning, from where they were installed.
if command -v man > /dev/null; then
    for page in man3/strata.3:STRATA_PURGE_DELAY_MS man1/strata-run.1:--purge-delay; do
        file="$root$prefix/share/man/${page%%:*}"
        warnings=$(man --warnings -l "$file" 2>&1 > /dev/null)
        [ -z "$warnings" ] && man -l "$file" 2> /dev/null | grep -q -- "${page#*:}" \
            && ok "$(basename "$file") renders without warnings" || { bad "$(basename "$file") warnings"; echo "$warnings"; }
    done
else
    bad "man is not installed (apt-get install man-db): the man pages are not checked"
fi
# The installed strata-run preloads the installed library.
grep -q "^LIBRARY='$libdir/libstrata.so'$" "$root$prefix/bin/strata-run" && [ -x "$root$prefix/bin/strata-run" ] \
    && ok "strata-run in BINDIR preloads $libdir/libstrata.so" || bad "installed strata-run"
grep -q "^SECURE_LIBRARY='$libdir/libstrata-secure.so'$" "$root$prefix/bin/strata-run" \
    && ok "strata-run --secure preloads $libdir/libstrata-secure.so" || bad "installed strata-run's secure flavour"

for pc in strata strata-api; do
    grep -q "^libdir=$libdir\$" "$lib/pkgconfig/$pc.pc" && grep -q "^Version: $version\$" "$lib/pkgconfig/$pc.pc" \
        && ok "$pc.pc names LIBDIR (not the staging root) and version $version" || { bad "$pc.pc"; cat "$lib/pkgconfig/$pc.pc"; }
done

# The shared libraries: the real file carries the full version, the SONAME
# the ABI's, and the two links point at the real file.
for name in libstrata libstrata-api libstrata-secure; do
    real=$name.so.$version
    [ -f "$lib/$real" ] && [ "$(readlink "$lib/$name.so.$abi")" = "$real" ] && [ "$(readlink "$lib/$name.so")" = "$real" ] \
        && ok "$real, with $name.so.$abi and $name.so linked to it" || bad "library files: $(ls -l "$lib")"
    readelf -d "$lib/$real" | grep -q "Library soname: \[$name.so.$abi\]" \
        && ok "$real has SONAME $name.so.$abi" || { bad "$real SONAME"; readelf -d "$lib/$real" | grep SONAME; }
done
# The API-only library leaves malloc to the C library: it defines none of it.
malloc_names='malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|malloc_usable_size|free_sized|free_aligned_sized|malloc_trim|mallinfo2?|malloc_stats|malloc_info|mallopt|__libc_(malloc|free|calloc|realloc|memalign|valloc|pvalloc)'
defined() { nm "$@" --defined-only 2> /dev/null | awk 'NF == 3 && $2 ~ /^[TDBRVW]$/ { print $3 }'; }
in_api=$(defined -D "$lib/libstrata-api.so.$version" | grep -Ec "^($malloc_names)\$")
in_full=$(defined -D "$lib/libstrata.so.$version" | grep -Ec "^($malloc_names)\$")
in_secure=$(defined -D "$lib/libstrata-secure.so.$version" | grep -Ec "^($malloc_names)\$")
[ "$in_api" -eq 0 ] && [ "$in_full" -ge 20 ] && [ "$in_secure" -eq "$in_full" ] \
    && ok "libstrata.so and libstrata-secure.so export the malloc family ($in_full names), libstrata-api.so none of it" \
    || bad "malloc names exported: libstrata.so $in_full, libstrata-secure.so $in_secure, libstrata-api.so $in_api"

# The archives define only strata_* (and, with the override, the malloc
# family); libstrata.a is the linker script that pulls the override in.
for archive in libstrata-override libstrata-secure-override libstrata-api; do
    allowed="strata_.*"
    [ $archive != libstrata-api ] && allowed="strata_.*|$malloc_names|_Z(nw|na|dl|da).*"
    stray=$(defined -g "$lib/$archive.a" | grep -Ev "^($allowed)\$")
    count=$(defined -g "$lib/$archive.a" | wc -l)
    [ -z "$stray" ] && [ "$count" -gt 20 ] && ok "$archive.a defines $count global names, none outside $allowed" \
        || bad "$archive.a defines stray names: $(echo $stray)"
done
# C++'s operator new and delete: exactly the forms libstdc++ defines.
libstdcxx=$(g++ -print-file-name=libstdc++.so.6 2> /dev/null)
cxx_forms() { grep -E '^_Z(nw|na|dl|da)' | sed 's/@.*//' | LC_ALL=C sort -u; }
expected_forms=$(defined -D "$libstdcxx" | cxx_forms)
archive_forms=$(defined -g "$lib/libstrata-override.a" | cxx_forms)
[ -n "$expected_forms" ] && [ "$archive_forms" = "$expected_forms" ] \
    && ok "libstrata-override.a defines the $(echo "$expected_forms" | wc -l) forms of operator new and delete libstdc++ defines" \
    || { bad "operator new and delete forms"; echo "libstdc++: $expected_forms"; echo "strata: $archive_forms"; }
grep -q '^EXTERN(malloc)$' "$lib/libstrata.a" && grep -q '^INPUT(libstrata-override.a)$' "$lib/libstrata.a" \
    && ok "libstrata.a is a linker script naming malloc and the override archive" || { bad "libstrata.a"; cat "$lib/libstrata.a"; }
grep -q '^EXTERN(malloc)$' "$lib/libstrata-secure.a" && grep -q '^INPUT(libstrata-secure-override.a)$' "$lib/libstrata-secure.a" \
    && ok "libstrata-secure.a is a linker script naming malloc and the secure override archive" \
    || { bad "libstrata-secure.a"; cat "$lib/libstrata-secure.a"; }

cflags="-std=gnu11 -Wall -Wextra -Werror -I$root$prefix/inc"
for archive in libstrata libstrata-secure libstrata-api; do
    if $CC $cflags tests/programs/clashing.c "$lib/$archive.a" -o "$tmp/clashing" -lpthread > "$tmp/out" 2>&1 \
        && "$tmp/clashing" > "$tmp/out" 2>&1; then ok "a program defining os_map, page_new, heap_check, thread_heap links $archive.a and runs"
    else bad "clashing names with $archive.a"; cat "$tmp/out"; fi
done

# pkg-config, shared and static, with the override and API-only; the
# staging root stands in for the real one.
pc() { PKG_CONFIG_PATH="$lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" pkg-config "$@"; }
run_linked() { # how program mode flags...
    how=$1 program=$2 mode=$3
    shift 3
    $CC $cflags "tests/programs/$program.c" "$@" -o "$tmp/$program" > "$tmp/out" 2>&1 \
        && STRATA_SHOW_STATS=1 LD_LIBRARY_PATH="$lib" "$tmp/$program" $mode > "$tmp/out" 2>&1 \
        && grep -q "^strata $version statistics" "$tmp/out" \
        && if [ "$program" = linked ]; then grep -q "^strata $version ($mode): works" "$tmp/out"; else grep -q "^strdup: ok" "$tmp/out"; fi \
        && ok "$how" || { bad "$how: $*"; cat "$tmp/out"; }
}
for package in strata strata-api; do
    mode=override malloc="strata's"
    [ $package = strata-api ] && mode=api malloc="glibc's"
    shared=$(pc --cflags --libs $package)
    static=$(pc --cflags --libs --static $package | sed "s/-l$package\\b/-l:lib$package.a/")
    run_linked "a program built with pkg-config $package, shared: strata_* work, malloc is $malloc" linked $mode $shared
    run_linked "a program built with pkg-config $package, static: strata_* work, malloc is $malloc" linked $mode $static
done
run_linked "a program that only calls strdup runs on strata (pkg-config strata, shared)" strdup_only "" $(pc --libs strata)
run_linked "a program that only calls strdup runs on strata (pkg-config strata, static)" strdup_only "" \
    $(pc --libs --static strata | sed 's/-lstrata\b/-l:libstrata.a/')
run_linked "a program that only calls strdup runs on strata (plain -l:libstrata.a)" strdup_only "" -L"$lib" -l:libstrata.a -lpthread

# CMake: find_package(strata CONFIG) from the staged prefix, one program per
# imported target; --as-needed as some distributions' toolchains link.
if ! command -v cmake > /dev/null 2>&1; then
    bad "cmake is not installed (apt-get install cmake): the CMake package is not checked"
else
    cmake_configure() { # build-folder cmake-arguments...
        folder=$1
        shift
        CC="$CC" cmake -S tests/cmake -B "$tmp/$folder" -DCMAKE_PREFIX_PATH="$root$prefix" \
            -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" -DCMAKE_EXE_LINKER_FLAGS=-Wl,--as-needed "$@" > "$tmp/cmake.out" 2>&1
    }
    if cmake_configure cmake && cmake --build "$tmp/cmake" > "$tmp/out" 2>&1; then
        ok "a CMake project finds strata $version with find_package(strata $abi CONFIG) and builds"
        for target in strata strata_static api api_static; do
            mode=override malloc="strata's"
            case $target in api*) mode=api malloc="glibc's" ;; esac
            LD_LIBRARY_PATH="$lib" "$tmp/cmake/linked_$target" $mode > "$tmp/out" 2>&1 \
                && grep -q "^strata $version ($mode): works" "$tmp/out" \
                && ok "CMake target strata::$target: strata_* work, malloc is $malloc" || { bad "strata::$target"; cat "$tmp/out"; }
        done
        for target in strata strata_static; do
            STRATA_SHOW_STATS=1 LD_LIBRARY_PATH="$lib" "$tmp/cmake/strdup_$target" > "$tmp/out" 2>&1 \
                && grep -q "^strata $version statistics" "$tmp/out" \
                && ok "CMake target strata::$target: a program that only calls strdup runs on strata, linked --as-needed" \
                || { bad "strdup only, strata::$target"; cat "$tmp/out"; }
        done
    else bad "CMake project"; cat "$tmp/cmake.out" "$tmp/out"; fi
    major=$(echo "$version" | cut -d. -f1)
    minor=$(echo "$version" | cut -d. -f2)
    newer=$major.$((minor + 1))
    older=$major.$((minor - 1))
    [ "$minor" -eq 0 ] && older=$((major - 1)).9
    for want in "$newer" "$older" "$major"; do
        if cmake_configure "cmake-$want" -DSTRATA_WANT="$want"; then bad "find_package(strata $want) accepted $version"
        elif grep -q "strataConfig.cmake, version: $version" "$tmp/cmake.out"; then
            ok "find_package(strata $want) turns down $version (another ABI), naming it"
        else bad "find_package(strata $want)"; cat "$tmp/cmake.out"; fi
    done
    if cmake_configure cmake-range -DSTRATA_WANT="$older...$newer"; then ok "find_package(strata $older...$newer) accepts $version"
    else bad "find_package(strata $older...$newer)"; cat "$tmp/cmake.out"; fi
fi

if make -s BUILD="$BUILD" CC="$CC" uninstall DESTDIR="$root" $dirs > "$tmp/out" 2>&1 && [ -z "$(find "$root" ! -type d)" ]; then
    ok "make uninstall leaves no file"
else bad "make uninstall left: $(find "$root" ! -type d)"; cat "$tmp/out"; fi

echo "checks: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
