# strata: build, test, bench and install. `make help` lists the targets.
ifeq ($(origin CC),default)
CC := gcc
endif
VERSION := $(shell sed -n 's/^\#define STRATA_VERSION "\(.*\)"/\1/p' include/strata.h)
VERSION_MAJOR := $(word 1,$(subst ., ,$(VERSION)))
VERSION_MINOR := $(word 2,$(subst ., ,$(VERSION)))
# While the major version is 0 each minor version is its own ABI (the
# header's inline views may change layout): README, "Versions and ABI".
SONAME := libstrata.so.$(VERSION_MAJOR).$(VERSION_MINOR)
REALNAME := libstrata.so.$(VERSION)

PREFIX ?= /usr/local
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
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
BASE_CFLAGS := -std=gnu11 $(WARN) -Iinclude -Isrc -fPIC -fvisibility=hidden -fno-semantic-interposition \
  -fno-builtin-malloc -fno-builtin-free -fno-builtin-calloc -fno-builtin-realloc \
  -D_GNU_SOURCE
LIBS := -lpthread

CORE := os report options instrument sizeclass counters purge segment large heap free stats init alloc api arena context
CORE_OBJ := $(CORE:%=$(BUILD)/obj/%.o)
ALL_OBJ := $(CORE_OBJ) $(BUILD)/obj/override.o
HEADERS := include/strata.h $(wildcard src/*.h)

TEST_C := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_C:tests/%.c=$(BUILD)/tests/%)
BENCH_C := $(wildcard bench/*.c)
BENCH_BIN := $(BENCH_C:bench/%.c=$(BUILD)/bench/%)

.PHONY: all help test test-deps test-debug fuzz test-asan test-tsan bench bench-full bench-deps \
  install uninstall clean
all: $(BUILD)/libstrata.so $(BUILD)/libstrata.a

help:
	@echo 'strata $(VERSION): make [target] [VARIABLE=value ...]'
	@echo ''
	@echo 'Targets:'
	@echo '  all (default)  build $(BUILD)/libstrata.so ($(REALNAME), SONAME $(SONAME)) and $(BUILD)/libstrata.a'
	@echo '  test           build and run the test suite; ends with "N passed, N failed"'
	@echo '  test-deps      install the Debian packages the tests need (with sudo when not root)'
	@echo '  test-debug     the test suite on the debug build (invariants asserted), in build-debug'
	@echo '  test-asan      the tests under AddressSanitizer and UBSan, in build-asan'
	@echo '  test-tsan      the threaded tests under ThreadSanitizer, in build-tsan'
	@echo '  fuzz           the differential fuzzer at length (FUZZ_STEPS, FUZZ_SEEDS)'
	@echo '  bench          strata beside every allocator installed (about 3 minutes on 2 cores)'
	@echo '  bench-full     the same with more sizes and runs (about 20 minutes)'
	@echo '  bench-deps     install the Debian packages the benchmarks compare against'
	@echo '  install        install the libraries, header and pkg-config file (without -Werror)'
	@echo '  uninstall      remove what install put there'
	@echo '  clean          remove every build folder'
	@echo ''
	@echo 'Variables: CC ($(CC)), CFLAGS, CPPFLAGS, LDFLAGS, WERROR (1: warnings are errors),'
	@echo '  BUILD ($(BUILD)), PREFIX ($(PREFIX)), LIBDIR ($(LIBDIR)), INCLUDEDIR ($(INCLUDEDIR)),'
	@echo '  PKGCONFIGDIR ($(PKGCONFIGDIR)), DESTDIR (staging root for install and uninstall)'

$(BUILD)/obj/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CPPFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/$(REALNAME): $(ALL_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) $(CFLAGS) $(LDFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/libstrata.so: $(BUILD)/$(REALNAME)
	ln -sf $(REALNAME) $(BUILD)/$(SONAME)
	ln -sf $(REALNAME) $@

# The archive holds one object, linked from all of strata's: every internal
# name is made local, so the archive defines nothing outside the strata_*
# API and the malloc family, and any one of those pulls in all of it.
$(BUILD)/libstrata.a: $(ALL_OBJ)
	$(LD) -r -o $(BUILD)/strata.o $^
	objcopy --localize-hidden $(BUILD)/strata.o
	rm -f $@ && ar rcs $@ $(BUILD)/strata.o

# Test programs link the core objects directly (white-box access to internals);
# the override is exercised through libstrata.so/.a by tests/run.sh.
TEST_CFLAGS := -std=gnu11 $(WARN) -Iinclude -Isrc -D_GNU_SOURCE $(CPPFLAGS) $(CFLAGS)
$(BUILD)/tests/%: tests/%.c tests/check.h bench/common.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $< $(CORE_OBJ) -o $@ $(LDFLAGS) $(LIBS) -ldl

$(BUILD)/bench/%: bench/%.c bench/common.h
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $< -o $@ $(LIBS) -lm

# The arena bench links strata's core (no malloc override) and, where
# libapr1-dev is installed, APR pools.
APR_FOUND := $(shell test -f /usr/include/apr-1.0/apr_pools.h && echo 1)
APR_FLAGS := $(if $(APR_FOUND),-DHAVE_APR=1 -I/usr/include/apr-1.0,-DHAVE_APR=0)
APR_LIBS := $(if $(APR_FOUND),-lapr-1)
$(BUILD)/bench/arena: bench/arena.c bench/common.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $(APR_FLAGS) $< $(CORE_OBJ) -o $@ $(LIBS) $(APR_LIBS) -lm

# The context bench likewise, with libtalloc where libtalloc-dev is installed.
TALLOC_FOUND := $(shell test -f /usr/include/talloc.h && echo 1)
TALLOC_FLAGS := $(if $(TALLOC_FOUND),-DHAVE_TALLOC=1,-DHAVE_TALLOC=0)
TALLOC_LIBS := $(if $(TALLOC_FOUND),-ltalloc)
$(BUILD)/bench/context: bench/context.c bench/common.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 $(WARN) -O2 -Iinclude -D_GNU_SOURCE $(TALLOC_FLAGS) $< $(CORE_OBJ) -o $@ $(LIBS) $(TALLOC_LIBS) -lm

test: all $(TEST_BIN) $(BENCH_BIN)
	BUILD=$(BUILD) CC=$(CC) sh tests/run.sh

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
	  LIBS="-lpthread -fsanitize=address,undefined" build-asan/libstrata.a $(TEST_C:tests/%.c=build-asan/tests/%)
	BUILD=build-asan SANITIZER=asan sh tests/run.sh

test-tsan:
	$(MAKE) BUILD=build-tsan CFLAGS="-O1 -g -fsanitize=thread" LIBS="-lpthread -fsanitize=thread" \
	  build-tsan/libstrata.a $(TEST_C:tests/%.c=build-tsan/tests/%)
	BUILD=build-tsan SANITIZER=tsan sh tests/run.sh

bench: all $(BENCH_BIN)
	BUILD=$(BUILD) python3 bench/run.py

bench-full: all $(BENCH_BIN)
	BUILD=$(BUILD) python3 bench/run.py --mode full

bench-deps:
	sh bench/deps.sh

test-deps:
	sh tests/deps.sh

install: all
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR)
	install -m 644 include/strata.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(BUILD)/$(REALNAME) $(DESTDIR)$(LIBDIR)/
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(REALNAME) $(DESTDIR)$(LIBDIR)/libstrata.so
	install -m 644 $(BUILD)/libstrata.a $(DESTDIR)$(LIBDIR)/
	sed -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	  strata.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/strata.pc

uninstall:
	rm -f $(DESTDIR)$(INCLUDEDIR)/strata.h $(DESTDIR)$(LIBDIR)/$(REALNAME) \
	  $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libstrata.so $(DESTDIR)$(LIBDIR)/libstrata.a \
	  $(DESTDIR)$(PKGCONFIGDIR)/strata.pc

clean:
	rm -rf build build-*
