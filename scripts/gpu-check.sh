#!/usr/bin/env bash
# The GPU check, for a machine with one H200 (sm_90); finishes well inside 8 minutes.
#   1. build (Release), and compile the generated ring/twoshot/oneshot kernels at N = 8 with nvcc
#      for sm_90 (NVRTC is what the runtime uses; nvcc must accept the same text);
#   2. the CUDA-backend tests: N virtual ranks on the one device, one grid whose blocks pick rank
#      and channel, so every rank is co-resident;
#   3. ccc-bench for ring, twoshot and oneshot at N = 8, a checked pass on small sizes, then
#      bandwidth with a device-to-device copy timed in the same run;
#   4. a short table last: per schedule, the largest size's busbw, the copy's bandwidth, the ratio.
# usage: scripts/gpu-check.sh [BUILD_DIR]     (default build-gpu; logs in BUILD_DIR/gpu-check/)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
logs=$build/gpu-check
ranks=8
algos=(ring twoshot oneshot)
mkdir -p "$logs"
export CCC_CACHE_DIR=$PWD/$build/jit-cache

step() { printf '\n== %s (%ds)\n' "$*" "$SECONDS"; }

step "device"
nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader || echo "nvidia-smi not found"

step "build"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCC_BUILD_BENCH=OFF >"$logs/cmake.log"
cmake --build "$build" -j"$(nproc)" --target ccc ccc_tests ccc-bench >"$logs/build.log"
ccc=$build/cli/ccc
bench=$build/tools/ccc-bench

step "nvcc sm_90 on the generated kernels"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
compile_help=$("$ccc" compile --help)
if ! grep -q -- '--emit.*\bcu\b' <<<"$compile_help"; then
  echo "skipped: this ccc has no '--emit cu' target yet"
elif [ ! -x "$nvcc" ]; then
  echo "skipped: nvcc not found"
else
  for algo in "${algos[@]}"; do
    "$ccc" compile "schedules/$algo.sched" --ranks "$ranks" --emit cu -o "$logs/$algo.cu"
    "$nvcc" -arch=sm_90 -cubin -I runtime/device -o "$logs/$algo.cubin" "$logs/$algo.cu"
    echo "$algo: ok ($(stat -c %s "$logs/$algo.cubin") byte cubin)"
  done
fi

step "CUDA-backend tests (virtual ranks)"
timeout 240 "$build/tests/ccc_tests" --gtest_filter='Cuda*' --gtest_brief=1 | tee "$logs/tests.txt"

step "ccc-bench, checked, N = $ranks"
for algo in "${algos[@]}"; do
  timeout 60 "$bench" --backend cuda --ranks "$ranks" --algo "$algo" -b 8 -e 4M -f 16 -n 2 -w 1 -c 1 \
    | tee "$logs/check-$algo.txt"
done

step "ccc-bench, bandwidth against cuMemcpyDtoD, N = $ranks"
for algo in "${algos[@]}"; do
  timeout 90 "$bench" --backend cuda --ranks "$ranks" --algo "$algo" -b 64K -e 256M -f 16 -n 20 -w 5 -c 0 \
    --baseline | tee "$logs/bench-$algo.txt"
done

step "summary"
# ccc-bench data rows: size count type redop root | time algbw busbw #wrong (out of place) |
# time algbw busbw #wrong (in place) | algo | copy ratio
{
  printf '%-9s %12s %12s %12s %12s %8s %s\n' schedule size_B time_us busbw_GB/s copy_GB/s ratio checked
  for algo in "${algos[@]}"; do
    checked=$(grep -q 'Out of bounds values : 0 OK' "$logs/check-$algo.txt" && echo ok || echo FAILED)
    awk -v algo="$algo" -v checked="$checked" '!/^#/ && NF >= 16 { last = $0 } END {
      split(last, f, " "); printf "%-9s %12s %12s %12s %12s %8s %s\n", algo, f[1], f[6], f[8], f[15], f[16], checked }' \
      "$logs/bench-$algo.txt"
  done
} | tee "$logs/summary.txt"
echo "total ${SECONDS}s"
