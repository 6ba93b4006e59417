# strata: build, test, bench and install. `make help` lists the targets.
ifeq ($(origin CC),default)
CC := gcc
endif
VERSION := $(shell sed -n 's/^\#define STRATA_VERSION "\(.*\)"/\1/p' include/strata.h)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
# While the major version is 0 each minor version is its own ABI (the
# header's inline views may change layout): INSTALL.md, "Versions and ABI".
ABI_VERSION := $(VERSION_MAJOR).$(VERSION_MINOR)
SONAME := libstrata.so.$(ABI_VERSION)
REALNAME := libstrata.so.$(VERSION)
# The API-only library: strata_*, arenas and contexts, glibc's malloc untouched.
API_SONAME := libstrata-api.so.$(ABI_VERSION)
API_REALNAME := libstrata-api.so.$(VERSION)
# The secure flavour: the same API and override with every protection of
# docs/safety.md, "Secure flavour" (SECURE_SET: a subset, to measure one at a time).
SECURE_SONAME := libstrata-secure.so.$(ABI_VERSION)
SECURE_REALNAME := libstrata-secure.so.$(VERSION)
SECURE_SET ?= 127

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
CMAKEDIR ?= $(LIBDIR)/cmake/strata
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
# One build folder per compiler: `make CC=clang` builds in build-clang.
CC_NAME := $(notdir $(firstword $(CC)))
BUILD ?= $(if $(filter gcc cc,$(CC_NAME)),build,build-$(CC_NAME))
# Warnings are errors in the project's own builds and CI; `make install`
# (or WERROR=0) builds without -Werror, so a newer compiler's new warning
# never stops a user's install.
ifneq ($(filter install,$(MAKECMDGOALS)),)
WERROR ?= 0
endif
WERROR ?= 1
WARN := -Wall -Wextra $(if $(filter 1,$(WERROR)),-Werror)
# Debian 12's Valgrind cannot read clang's DWARF 5 (tests/test_valgrind.sh).
DEBUG_FORMAT := $(if $(findstring clang,$(CC)),-gdwarf-4)
CFLAGS ?= -O2 -g $(DEBUG_FORMAT)
# Functions start on a cache line: the entry points' speed then does not
# hang on where the linker happens to put them (the same instructions of a
# context's allocation ran 1.38x faster at one address than at another).
BASE_CFLAGS := -std=gnu11 $(WARN) -Iinclude -Isrc -fPIC -fvisibility=hidden -fno-semantic-interposition \
  -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
  -falign-functions=64 -D_GNU_SOURCE
LIBS := -lpthread

CORE := os report options instrument sizeclass counters stack_walk profile purge segment large sampled_blocks zero_size heap purge_policy pages bins heap_check lifecycle free stats init alloc secure api arena context
CORE_OBJ := $(CORE:%=$(BUILD)/obj/%.o)
ALL_OBJ := $(CORE_OBJ) $(BUILD)/obj/override.o $(BUILD)/obj/operator_new.o
SECURE_CORE_OBJ := $(CORE:%=$(BUILD)/obj-secure/%.o)
SECURE_OBJ := $(SECURE_CORE_OBJ) $(BUILD)/obj-secure/override.o $(BUILD)/obj-secure/operator_new.o
HEADERS := include/strata.h $(wildcard src/*.h)

TEST_C := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
BENCH_C := $(wildcard bench/*.c)
# The C++ table's program, built where there is a C++ compiler (bench/run.py
# says so where there is none); tests/test_programs.sh uses it too.
ifeq ($(origin CXX),default)
CXX := $(if $(findstring clang,$(CC)),clang++,g++)
endif
CXX_FOUND := $(shell command -v $(firstword $(CXX)) 2> /dev/null)
BENCH_BIN := $(BENCH_C:bench/%.c=$(BUILD)/bench/%) $(if $(CXX_FOUND),$(BUILD)/bench/cxx) $(BUILD)/bench/attacks

.PHONY: all help test test-deps test-debug fuzz test-asan test-tsan bench bench-full bench-deps \
  install uninstall clean
LIBRARIES := $(BUILD)/libstrata.so $(BUILD)/libstrata.a $(BUILD)/libstrata-api.so $(BUILD)/libstrata-api.a \
  $(BUILD)/libstrata-secure.so $(BUILD)/libstrata-secure.a
all: $(LIBRARIES) $(BUILD)/strata-run

# strata-run for this build tree, preloading the library built here (the
# installed one preloads the installed library).
# $(call make_strata_run,folder): the script, preloading the libraries there.
make_strata_run = sed -e 's|@LIBRARY@|$(1)/libstrata.so|' -e 's|@SECURE_LIBRARY@|$(1)/libstrata-secure.so|' \
  -e 's|@VERSION@|$(VERSION)|' $< > $@
$(BUILD)/strata-run: tools/strata-run.in $(BUILD)/libstrata.so
	$(call make_strata_run,$(abspath $(BUILD)))
	chmod 755 $@

help:
	@echo 'strata $(VERSION): make [target] [VARIABLE=value ...]'
	@echo ''
	@echo 'Targets:'
	@echo '  all (default)  build the libraries in $(BUILD): libstrata.so ($(REALNAME), SONAME $(SONAME))'
	@echo '                 and libstrata.a replace malloc; libstrata-api.so and libstrata-api.a are'
	@echo '                 the strata_*, arena and context API alone, leaving glibc'"'"'s malloc in place;'
	@echo '                 libstrata-secure.so and libstrata-secure.a are the secure flavour'
	@echo '  test           build and run the test suite; ends with "N passed, N failed"'
	@echo '                 (ONLY=pattern: only the test programs and scripts whose name contains it)'
	@echo '  test-deps      install the Debian packages the tests need (with sudo when not root)'
	@echo '  test-debug     the test suite on the debug build (invariants asserted), in build-debug'
	@echo '  test-asan      the tests under AddressSanitizer and UBSan, in build-asan'
	@echo '  test-tsan      the threaded tests under ThreadSanitizer, in build-tsan'
	@echo '  fuzz           the differential fuzzer at length (FUZZ_STEPS, FUZZ_SEEDS)'
	@echo '  bench          strata beside every allocator installed and those of BENCH_ALLOCATORS'
	@echo '                 (20 to 25 minutes on 2 cores; about 45 with the six peers of bench/README.md)'
	@echo '  bench-full     the same with more sizes and runs, redis on every allocator (about 1 h 45 min;'
	@echo '                 2 h 30 min with the peers)'
	@echo '  bench-deps     install the Debian packages the benchmarks compare against'
	@echo '  install        install the libraries, header, pkg-config files and CMake package (without -Werror)'
	@echo '  uninstall      remove what install put there'
	@echo '  clean          remove every build folder'
	@echo ''
	@echo 'Variables: CC ($(CC)), CXX ($(CXX), for the C++ benchmark and test), CFLAGS, CPPFLAGS, LDFLAGS,'
	@echo '  WERROR (1: warnings are errors),'
	@echo '  BUILD ($(BUILD)), PREFIX ($(PREFIX)), LIBDIR ($(LIBDIR)), INCLUDEDIR ($(INCLUDEDIR)),'
	@echo '  PKGCONFIGDIR ($(PKGCONFIGDIR)), CMAKEDIR ($(CMAKEDIR)), BINDIR ($(BINDIR)),'
	@echo '  MANDIR ($(MANDIR)), DESTDIR (staging root for install and uninstall),'
	@echo '  BENCH_ALLOCATORS (make bench: more allocators, "NAME-VERSION=/path/lib.so ...")'

$(BUILD)/obj/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/obj-secure/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) -DSTRATA_SECURE=$(SECURE_SET) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

# $(call link_shared,soname): the shared library of the prerequisites; then
# $(call link_names,realname,soname): its SONAME and plain .so links.
link_shared = $(CC) -shared -Wl,-soname,$(1) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)
link_names = ln -sf $(1) $(BUILD)/$(2) && ln -sf $(1) $@

$(BUILD)/$(REALNAME): $(ALL_OBJ)
	$(call link_shared,$(SONAME))
$(BUILD)/libstrata.so: $(BUILD)/$(REALNAME)
	$(call link_names,$(REALNAME),$(SONAME))

$(BUILD)/$(API_REALNAME): $(CORE_OBJ)
	$(call link_shared,$(API_SONAME))
$(BUILD)/libstrata-api.so: $(BUILD)/$(API_REALNAME)
	$(call link_names,$(API_REALNAME),$(API_SONAME))

$(BUILD)/$(SECURE_REALNAME): $(SECURE_OBJ)
	$(call link_shared,$(SECURE_SONAME))
$(BUILD)/libstrata-secure.so: $(BUILD)/$(SECURE_REALNAME)
	$(call link_names,$(SECURE_REALNAME),$(SECURE_SONAME))

# Each archive holds one object, linked from all of strata's: every internal
# name is made local, so it defines nothing outside the strata_* API (and,
# with the override, the malloc family), and any one of those pulls in all
# of it. Its code goes into a section of its own, strata_text, whose bounds
# the linker names (__start_strata_text, __stop_strata_text): the heap
# profiler leaves strata's own frames out of a program's stacks by them.
define one_object_archive
	$(LD) -r -o $(@:.a=.o) $^
	objcopy --localize-hidden $(foreach s,.text .text.unlikely .text.hot .text.startup .text.exit,--rename-section $(s)=strata_text) $(@:.a=.o)
	rm -f $@ && ar rcs $@ $(@:.a=.o)
endef
$(BUILD)/libstrata-override.a: $(ALL_OBJ)
	$(one_object_archive)
$(BUILD)/libstrata-api.a: $(CORE_OBJ)
	$(one_object_archive)
$(BUILD)/libstrata-secure-override.a: $(SECURE_OBJ)
	$(one_object_archive)

# libstrata.a is a GNU ld script, as glibc's libm.a is: it names malloc as
# undefined, so the override is linked in even when the program itself calls
# no malloc function (only strdup, say), and then reads the real archive from
# its own folder.
# $(call override_script,what): the script for the override archive named
# by the prerequisite.
override_script = printf '/* GNU ld script: %s with its malloc override, linked in even when\n   the program names no malloc function itself. */\nEXTERN(malloc)\nINPUT(%s)\n' \
  '$(1)' '$(notdir $<)' > $@
$(BUILD)/libstrata.a: $(BUILD)/libstrata-override.a
	$(call override_script,strata)
$(BUILD)/libstrata-secure.a: $(BUILD)/libstrata-secure-override.a
	$(call override_script,strata'"'"'s secure flavour)

# Test programs link the core objects directly (white-box access to internals);
# the override is exercised through libstrata.so/.a by tests/run.sh.
TEST_CFLAGS := -std=gnu11 $(WARN) -Iinclude -Isrc -D_GNU_SOURCE $(CPPFLAGS) $(CFLAGS)
$(BUILD)/tests/%: tests/%.c tests/check.h bench/common.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LIBS) -ldl

# The same tests on the secure flavour's objects: its paths under the
# API, stress, fuzzing, contexts, thread exit, fault injection and fork.
SECURE_TESTS := test_api test_misuse test_stress test_fuzz test_context test_exit test_purge test_limit test_arena test_faults test_fork test_last_thread
SECURE_TEST_BIN := $(SECURE_TESTS:%=$(BUILD)/tests-secure/%)
# Under the sanitizers, the secure flavour's tests whose paths differ from
# the default's (memory errors under ASan; the quarantine and the threads
# under TSan), to keep the suite's time in bounds.
SECURE_ASAN_TESTS := test_api test_misuse test_stress test_fuzz test_context
SECURE_TSAN_TESTS := test_stress test_context test_faults test_fork
$(BUILD)/tests-secure/%: tests/%.c tests/check.h bench/common.h $(SECURE_CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -DSTRATA_SECURE=$(SECURE_SET) $< $(SECURE_CORE_OBJ) -o $@ $(LDFLAGS) $(LIBS) -ldl

$(BUILD)/bench/%: bench/%.c bench/common.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $(CPPFLAGS) $< -o $@ $(LDFLAGS) $(LIBS) -lm

# The misuse suite's program, for the secure table (tests/test_security.sh
# builds its own): misuse the compiler must not see through.
$(BUILD)/bench/attacks: tests/programs/attacks.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O1 -fno-builtin-malloc -fno-builtin-free $(CPPFLAGS) $< -o $@ $(LDFLAGS) -lpthread

# dlsym and dladdr: in the C library itself only since glibc 2.34.
$(BUILD)/bench/mallocfrom: LIBS += -ldl

$(BUILD)/bench/cxx: bench/cxx.cc bench/common.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(WARN) -O2 -D_GNU_SOURCE $(CPPFLAGS) $< -o $@ $(LDFLAGS)

# Whether a library the arena and context benches can compare against is
# installed is found at each make; the answer is a file of its own,
# $(BUILD)/bench-found/NAME-yes or NAME-no, that the bench depends on, so
# that installing the library after a build (bench/deps.sh after make
# test) or removing it rebuilds the bench on the next make.
# $(call found_stamp,name,found): the file that stands for the answer.
found_stamp = $(BUILD)/bench-found/$(1)-$(if $(2),yes,no)
$(BUILD)/bench-found/%:
	@mkdir -p $(dir $@)
	@rm -f $(BUILD)/bench-found/$(firstword $(subst -, ,$*))-*
	@touch $@

# The arena bench links strata's core (no malloc override) and, where
# libapr1-dev is installed, APR pools.
APR_HEADER ?= /usr/include/apr-1.0/apr_pools.h
APR_FOUND := $(shell test -f $(APR_HEADER) && echo 1)
APR_FLAGS := $(if $(APR_FOUND),-DHAVE_APR=1 -I$(dir $(APR_HEADER)),-DHAVE_APR=0)
APR_LIBS := $(if $(APR_FOUND),-lapr-1)
$(BUILD)/bench/arena: bench/arena.c bench/common.h $(CORE_OBJ) $(call found_stamp,apr,$(APR_FOUND))
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $(CPPFLAGS) $(APR_FLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LIBS) $(APR_LIBS) -lm

# The context bench likewise, with libtalloc where libtalloc-dev is installed.
TALLOC_HEADER ?= /usr/include/talloc.h
TALLOC_FOUND := $(shell test -f $(TALLOC_HEADER) && echo 1)
TALLOC_FLAGS := $(if $(TALLOC_FOUND),-DHAVE_TALLOC=1,-DHAVE_TALLOC=0)
TALLOC_LIBS := $(if $(TALLOC_FOUND),-ltalloc)
$(BUILD)/bench/context: bench/context.c bench/common.h $(CORE_OBJ) $(call found_stamp,talloc,$(TALLOC_FOUND))
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $(CPPFLAGS) $(TALLOC_FLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LIBS) $(TALLOC_LIBS) -lm

test: all $(TEST_BIN) $(SECURE_TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) CC=$(CC) CXX=$(CXX) ONLY="$(ONLY)" sh tests/run.sh

# The debug build: strata_assert guards the invariants and the checkers run
# at their checkpoints (page refill and release, thread exit, segment
# release, the end of a context free, arena release); the whole suite runs
# on it, the override included.
test-debug:
	$(MAKE) BUILD=build-debug CFLAGS="-O1 -g $(DEBUG_FORMAT) -DSTRATA_DEBUG" test

# The differential fuzzer at length: make test runs it briefly.
FUZZ_STEPS ?= 200000
FUZZ_SEEDS ?= 1 2 3 4
fuzz: $(BUILD)/tests/test_fuzz
	@for seed in $(FUZZ_SEEDS); do FUZZ_STEPS=$(FUZZ_STEPS) FUZZ_SEED=$$seed $(BUILD)/tests/test_fuzz || exit 1; done

# Sanitizer runs test the strata_* API directly: the sanitizers bring their
# own malloc, which the override would fight.
test-asan:
	$(MAKE) BUILD=build-asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" \
	  LIBS="-lpthread -fsanitize=address,undefined" build-asan/libstrata.a $(TEST_C:tests/%.c=build-asan/tests/%) \
	  $(SECURE_ASAN_TESTS:%=build-asan/tests-secure/%)
	BUILD=build-asan SANITIZER=asan ONLY="$(ONLY)" sh tests/run.sh

test-tsan:
	$(MAKE) BUILD=build-tsan CFLAGS="-O1 -g -fsanitize=thread" LIBS="-lpthread -fsanitize=thread" \
	  build-tsan/libstrata.a $(TEST_C:tests/%.c=build-tsan/tests/%) $(SECURE_TSAN_TESTS:%=build-tsan/tests-secure/%)
	BUILD=build-tsan SANITIZER=tsan ONLY="$(ONLY)" sh tests/run.sh

bench: all $(BENCH_BIN)
	BUILD=$(BUILD) python3 bench/run.py

bench-full: all $(BENCH_BIN)
	BUILD=$(BUILD) python3 bench/run.py --mode full

bench-deps:
	sh bench/deps.sh

test-deps:
	sh tests/deps.sh

# Substitutes the install paths into the pkg-config and CMake files. The
# CMake package names its folders relative to itself, so a staged or moved
# tree still finds them.
define configure_file
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|g' \
	  -e 's|@VERSION_MAJOR@|$(VERSION_MAJOR)|g' -e 's|@VERSION_MINOR@|$(VERSION_MINOR)|g' \
	  -e 's|@ABI_VERSION@|$(ABI_VERSION)|g' \
	  -e "s|@CMAKE_TO_LIBDIR@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(LIBDIR))|" \
	  -e "s|@CMAKE_TO_INCLUDEDIR@|$$(realpath -m -s --relative-to=$(CMAKEDIR) $(INCLUDEDIR))|" $< > $@
endef
PACKAGING := $(BUILD)/packaging/strata.pc $(BUILD)/packaging/strata-api.pc \
  $(BUILD)/packaging/strataConfig.cmake $(BUILD)/packaging/strataConfigVersion.cmake \
  $(BUILD)/packaging/strata-run
# Remade at every install: the paths may differ from the last one's.
$(filter-out %/strata-run,$(PACKAGING)): $(BUILD)/packaging/%: packaging/%.in FORCE
	@mkdir -p $(dir $@)
	$(configure_file)
$(BUILD)/packaging/strata-run: tools/strata-run.in FORCE
	@mkdir -p $(dir $@)
	$(call make_strata_run,$(LIBDIR))
FORCE:

INSTALLED := $(INCLUDEDIR)/strata.h $(LIBDIR)/$(REALNAME) $(LIBDIR)/$(SONAME) $(LIBDIR)/libstrata.so \
  $(LIBDIR)/$(API_REALNAME) $(LIBDIR)/$(API_SONAME) $(LIBDIR)/libstrata-api.so \
  $(LIBDIR)/libstrata.a $(LIBDIR)/libstrata-override.a $(LIBDIR)/libstrata-api.a \
  $(LIBDIR)/$(SECURE_REALNAME) $(LIBDIR)/$(SECURE_SONAME) $(LIBDIR)/libstrata-secure.so \
  $(LIBDIR)/libstrata-secure.a $(LIBDIR)/libstrata-secure-override.a \
  $(PKGCONFIGDIR)/strata.pc $(PKGCONFIGDIR)/strata-api.pc \
  $(CMAKEDIR)/strataConfig.cmake $(CMAKEDIR)/strataConfigVersion.cmake $(MANDIR)/man3/strata.3 \
  $(BINDIR)/strata-run $(MANDIR)/man1/strata-run.1
install: all $(PACKAGING)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(CMAKEDIR) \
	  $(DESTDIR)$(MANDIR)/man3 $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(BINDIR)
	install -m 644 man/strata.3 $(DESTDIR)$(MANDIR)/man3/
	install -m 644 man/strata-run.1 $(DESTDIR)$(MANDIR)/man1/
	install -m 755 $(BUILD)/packaging/strata-run $(DESTDIR)$(BINDIR)/
	install -m 644 include/strata.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(BUILD)/$(REALNAME) $(BUILD)/$(API_REALNAME) $(BUILD)/$(SECURE_REALNAME) $(DESTDIR)$(LIBDIR)/
	ln -sf $(SECURE_REALNAME) $(DESTDIR)$(LIBDIR)/$(SECURE_SONAME)
	ln -sf $(SECURE_REALNAME) $(DESTDIR)$(LIBDIR)/libstrata-secure.so
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/libstrata.so
	ln -sf $(API_REALNAME) $(DESTDIR)$(LIBDIR)/$(API_SONAME)
	ln -sf $(API_REALNAME) $(DESTDIR)$(LIBDIR)/libstrata-api.so
	install -m 644 $(BUILD)/libstrata.a $(BUILD)/libstrata-override.a $(BUILD)/libstrata-api.a \
	  $(BUILD)/libstrata-secure.a $(BUILD)/libstrata-secure-override.a $(DESTDIR)$(LIBDIR)/
	install -m 644 $(BUILD)/packaging/strata.pc $(BUILD)/packaging/strata-api.pc $(DESTDIR)$(PKGCONFIGDIR)/
	install -m 644 $(BUILD)/packaging/strataConfig.cmake $(BUILD)/packaging/strataConfigVersion.cmake \
	  $(DESTDIR)$(CMAKEDIR)/

uninstall:
	rm -f $(INSTALLED:%=$(DESTDIR)%)
	-rmdir $(DESTDIR)$(CMAKEDIR) 2>/dev/null

clean:
	rm -rf build build-* bench/results bench/__pycache__ tests/__pycache__
