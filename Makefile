# strata: build, test, bench and install. `make CC=clang` builds with clang.
ifeq ($(origin CC),default)
CC := gcc
endif
PREFIX ?= /usr/local
BUILD ?= build
WARN := -Wall -Wextra -Werror
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

.PHONY: all test test-deps test-debug fuzz test-asan test-tsan bench bench-full bench-deps install clean
all: $(BUILD)/libstrata.so $(BUILD)/libstrata.a

$(BUILD)/obj/%.o: src/%.c $(HEADERS)
	@mkdir -p $(dir $@)
	$(CC) $(BASE_CFLAGS) $(CFLAGS) -c $< -o $@

$(BUILD)/libstrata.so: $(ALL_OBJ)
	$(CC) -shared -o $@ $^ $(LIBS)

$(BUILD)/libstrata.a: $(ALL_OBJ)
	rm -f $@ && ar rcs $@ $^

# Test programs link the core objects directly (white-box access to internals);
# the override is exercised through libstrata.so/.a by tests/run.sh.
TEST_CFLAGS := -std=gnu11 $(WARN) -Iinclude -Isrc -D_GNU_SOURCE $(CFLAGS)
$(BUILD)/tests/%: tests/%.c tests/check.h bench/common.h $(CORE_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) $< $(CORE_OBJ) -o $@ $(LIBS) -ldl

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
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig
	install -m 644 include/strata.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/libstrata.so $(DESTDIR)$(PREFIX)/lib/
	install -m 644 $(BUILD)/libstrata.a $(DESTDIR)$(PREFIX)/lib/
	sed 's|@PREFIX@|$(PREFIX)|' strata.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/strata.pc

clean:
	rm -rf build build-asan build-tsan build-clang build-debug
