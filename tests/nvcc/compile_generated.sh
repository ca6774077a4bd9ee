#!/usr/bin/env bash
# nvcc must accept the text ccc generates, as NVRTC does (the runtime's path): someone may build a
# generated kernel into their own CUDA program. Compiles (host and device, sm_90) every kernel in
# generated/ against the device prelude.
# usage: compile_generated.sh NVCC PRELUDE_DIR OUT_DIR FILE.cu...
set -euo pipefail
nvcc=$1 prelude=$2 out=$3
shift 3
mkdir -p "$out"
for cu in "$@"; do
  "$nvcc" -std=c++17 -arch=sm_90 -Werror all-warnings -c -I "$prelude" -o "$out/$(basename "$cu" .cu).o" "$cu"
  echo "ok: $(basename "$cu")"
done
