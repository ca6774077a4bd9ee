# The two commands a fresh machine needs (see README.md):
#   make demo   - install deps, build, compile every shipped schedule, run them on the host backend
#   make test   - install deps, build with -Werror, run the whole test suite
# CI (.ci/run) runs `make test`, then the sanitizer builds and a bounded fuzz run.

JOBS          ?= 2
BUILD         ?= build
CMAKE_FLAGS   ?=
FUZZ_SECONDS  ?= 60
DEMO_RANKS    ?= 8
DEMO_COUNT    ?= 1000003

CCC := $(BUILD)/cli/ccc

.PHONY: all deps build demo test test-asan test-tsan fuzz bench clean
all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCC_WERROR=ON $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@bash scripts/demo.sh $(CCC) $(DEMO_RANKS) $(DEMO_COUNT)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer. The host-emulation matrix at
# N >= 7 (ranks as threads, spinning on two cores) is left to `make test`: it adds nothing a
# smaller N does not check for memory errors, and costs minutes under ASan.
ASAN_SKIP ?= HostRun.*/(ring8|oneshot9|twoshot7|butterfly8)
test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCC_WERROR=ON -DCCC_BUILD_BENCH=OFF \
	  -DCCC_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS) --target ccc_tests ccc
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -E '$(ASAN_SKIP)' -j$(JOBS)

# Host emulation (generated kernels on threads) under ThreadSanitizer: the tests whose ranks run
# as threads (every sync pattern: ring, two-shot, butterfly; a dead peer; the communicator;
# a blocked layout with staging).
TSAN_TESTS ?= HostRun.*/(ring5|twoshot4|butterfly8)|HostRunFailure|HostRunVirtualRanks|Communicator\.|HostBackend|CommunicatorCollective\.RankCounts.*/reduce_scatter
test-tsan: deps
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCC_WERROR=ON -DCCC_BUILD_BENCH=OFF \
	  -DCCC_SANITIZE=thread $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS) --target ccc_tests
	TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure --no-tests=error -R '$(TSAN_TESTS)' -j$(JOBS)

# libFuzzer on the parser for a bounded time.
fuzz: deps
	cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCCC_BUILD_FUZZ=ON -DCCC_BUILD_TESTS=OFF -DCCC_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j$(JOBS) --target fuzz_parser
	bash scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

bench: build
	$(BUILD)/bench/ccc_bench_compiler

clean:
	rm -rf build build-asan build-tsan build-fuzz
