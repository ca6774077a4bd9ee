# The two commands a fresh machine needs (see README.md):
#   make demo   - install deps, build, compile every shipped schedule, run them on the host backend
#   make test   - install deps, build with -Werror, run the whole test suite
#   make gpu-bundle - gpu-bundle/: the GPU check, built here for a machine that cannot build ccc
# CI (.ci/run) runs `make test`, then the sanitizer builds and a bounded fuzz run.

JOBS          ?= 2
BUILD         ?= build
CMAKE_FLAGS   ?=
FUZZ_SECONDS  ?= 60
DEMO_RANKS    ?= 8
DEMO_COUNT    ?= 1000003

CCC := $(BUILD)/cli/ccc

.PHONY: all deps build demo test test-asan test-tsan fuzz bench gpu-bundle clean
all: build

deps:
	@bash scripts/install-deps.sh

# The Python extension and its pytest suite build with the rest, against .venv (install-deps.sh).
PYTHON_FLAGS := -DCCC_PYTHON=ON -DPython_EXECUTABLE=$(CURDIR)/.venv/bin/python

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCCC_WERROR=ON $(PYTHON_FLAGS) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Only what the demo runs (the ccc command): the tests, the benchmarks and the Python module are
# for `make test`, and building them first kept a fresh machine's first look waiting minutes.
demo: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target ccc
	@bash scripts/demo.sh $(CCC) $(DEMO_RANKS) $(DEMO_COUNT)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j$(JOBS)

# Sanitizer builds: -O1 with line tables only, which builds much faster than -O2 -g and still
# gives symbolised reports with file:line.
SANITIZER_OPT := -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCCC_WERROR=ON -DCCC_BUILD_BENCH=OFF

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer. The host-emulation matrix runs
# on its smallest shapes, one of each sync pattern (ring1 and ring1ll, oneshot3ll, twoshot4,
# butterfly2, allpairs_slots3ll: one to four ranks, 1 to 1024 threads a block); the larger ones, ranks as threads
# spinning on two cores, add nothing for memory errors and cost minutes under ASan. Nor do the
# sweeps that only ask NVRTC and nvcc (neither instrumented) to compile (and nvdisasm to
# disassemble) every dtype, arch and traced kernel (the small Nvrtc tests still run ccc's side of
# the compile), or every shipped schedule (NvrtcSchedule.Compiles: under ctest, LeakSanitizer's
# tracer crashes at the exit of the tree case, 2026-12-07, not when the binary runs alone), nor
# ccc-bench's sweep of every type and op (a kernel compile each; the other BenchCli tests run its
# code). The epilogues run here on two shapes (HostRunResidual ring3 and oneshot3ll), the C API's
# tests and the lit test's RMSNorm runs; their sweep over every schedule (HostRunResidual's other
# shapes, CommunicatorEpilogue) adds minutes and no other code. Nor libccc-nccl's user program, an
# uninstrumented executable (as a user's is) that cannot load an instrumented libccc-nccl. `make
# test` runs them all.
ASAN_SKIP ?= HostRun.*/(ring[2358]|oneshot[39]|twoshot7|butterfly8|tree5|dbtree6|allpairs_slots5)( |$$)|HostRun.*/(ring5|oneshot9|twoshot[47]|butterfly8|tree5|dbtree6)ll|Nvcc\.CompilesTheGeneratedKernels|NvrtcSchedule\.Compiles|Nvrtc\.(Ll)?EveryDtypeForAmpereAndHopper|Nvrtc\.LlPerRankTablesSpillNothingInsideTheChunkLoop|Trace\.TracedKernelsCompileForAmpereAndHopper|Nvrtc\.RingAtTheMostRanksAGpuKernelHasCompiles|Nvrtc\.ResidualEpilogueKernelsCompileWithoutSpills|BenchCli\.EveryTypeAndEveryOp|HostRunResidual.*/(oneshot4|twoshot5|butterfly4|tree5|dbtree3|ring4ll|twoshot4ll)( |$$)|CommunicatorEpilogue\.|LibcccNccl\.
test-asan: deps
	cmake -S . -B build-asan $(SANITIZER_OPT) -DCCC_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS) --target ccc_tests ccc_gpu_tests ccc_cuda_call_path_tests ccc ccc_example_allreduce_host
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir build-asan --output-on-failure -E '$(ASAN_SKIP)' -j$(JOBS)

# Host emulation (generated kernels on threads) under ThreadSanitizer: the tests whose ranks run
# as threads (every sync pattern: ring, two-shot, butterfly, one-shot ll; a dead peer; the
# communicator; a blocked layout with staging; a rank's channels meeting before the RMSNorm).
TSAN_TESTS ?= CommunicatorEpilogue\.Channels|HostRun.*/(ring5|twoshot4|butterfly8|oneshot3ll)( |$$)|HostRunFailure|HostRunVirtualRanks|HostBlock|Communicator\.|CApi\.|HostBackend|CommunicatorCollective\.RankCounts.*/reduce_scatter
test-tsan: deps
	cmake -S . -B build-tsan $(SANITIZER_OPT) -DCCC_SANITIZE=thread $(CMAKE_FLAGS)
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

# Stripped Release binaries that need only glibc, the driver and NVRTC, the schedules and
# gpu-check.sh, at most 64 MiB (the script checks both): copy the folder to the GPU machine and
# run gpu-bundle/gpu-check.sh there (docs/runtime.md).
gpu-bundle: deps
	JOBS=$(JOBS) bash scripts/gpu-bundle.sh build-gpu-bundle gpu-bundle

clean:
	rm -rf build build-asan build-tsan build-fuzz build-gpu-bundle gpu-bundle
