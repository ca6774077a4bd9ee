#!/usr/bin/env bash
# Builds gpu-bundle/: what the GPU check needs on a machine that cannot build ccc (no fmt, Boost,
# GoogleTest; only glibc, libstdc++, the CUDA driver and NVRTC). `make gpu-bundle` runs it.
#   gpu-bundle/bin/ccc-bench, bin/ccc_gpu_tests  stripped Release binaries (fmt compiled in;
#                                                 libstdc++ and NVRTC are the machine's own,
#                                                 NVRTC opened with dlopen)
#   gpu-bundle/schedules/                         the shipped schedules (compiled in as well)
#   gpu-bundle/python/                            the ccc package (extension stripped, for this
#                                                 build's CPython), ccc.torch's tests, check.sh
#   gpu-bundle/gpu-check.sh                       the one command to run there
# It fails if a binary needs any other shared library, or if the folder exceeds 64 MiB.
# usage: scripts/gpu-bundle.sh [BUILD_DIR] [BUNDLE_DIR]   (defaults build-gpu-bundle, gpu-bundle)
# The extension is built with $PYTHON (default .venv/bin/python, which has nanobind).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu-bundle}
bundle=${2:-gpu-bundle}
jobs=${JOBS:-2}
limit_bytes=$((64 << 20))
binaries=(tools/ccc-bench tests/ccc_gpu_tests)
python=${PYTHON:-$PWD/.venv/bin/python}

# No RUNPATH: this machine's toolkit path means nothing there; ccc finds NVRTC itself.
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCCC_PORTABLE=ON -DCCC_BUILD_BENCH=OFF -DCMAKE_SKIP_RPATH=ON \
  -DCCC_PYTHON=ON -DPython_EXECUTABLE="$python" >/dev/null
cmake --build "$build" -j"$jobs" --target ccc-bench ccc_gpu_tests _ccc

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/schedules" "$bundle/python/ccc" "$bundle/python/tests"
for b in "${binaries[@]}"; do strip -o "$bundle/bin/$(basename "$b")" "$build/$b"; done
cp schedules/*.sched "$bundle/schedules/"
cp scripts/gpu-check.sh "$bundle/gpu-check.sh"
for f in "$build"/python/ccc/_ccc*.so; do strip -o "$bundle/python/ccc/$(basename "$f")" "$f"; done
cp python/ccc/*.py python/ccc/py.typed "$bundle/python/ccc/"
cp python/tests/test_torch.py "$bundle/python/tests/"
cp scripts/gpu-python-check.sh "$bundle/python/check.sh"

# The only shared libraries a bundled binary may need: glibc's, libstdc++ and libgcc. libcuda
# and NVRTC are opened with dlopen, so never listed.
allowed='^(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libstdc\+\+|libgcc_s)\.so'
status=0
for f in "$bundle"/bin/* "$bundle"/python/ccc/*.so; do
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  extra=$(grep -Ev "$allowed" <<<"$needed" || true)
  if [ -n "$extra" ]; then
    echo "gpu-bundle: $f needs libraries the GPU machine lacks: $(echo $extra)" >&2
    status=1
  fi
  # The newest glibc and libstdc++ symbol versions it needs: the GPU machine's must be at least
  # these (Ubuntu 22.04 has GLIBC_2.35 and GLIBCXX_3.4.30).
  versions=$(for lib in GLIBC GLIBCXX; do objdump -T "$f" | grep -o "${lib}_[0-9.]*[0-9]" | sort -Vu | tail -1; done)
  echo "gpu-bundle: $(basename "$f"): needs $(echo $needed); $(echo $versions) or newer"
done
size=$(du -sb "$bundle" | cut -f1)
if [ "$size" -gt "$limit_bytes" ]; then
  echo "gpu-bundle: $bundle is $size bytes, over the 64 MiB that can be copied to the GPU machine" >&2
  status=1
fi
echo "gpu-bundle: $bundle/ is $((size >> 10)) KiB; copy it over and run: $bundle/gpu-check.sh"
exit $status
