#!/usr/bin/env bash
# Installs the Debian packages ccc builds with, if any are missing. As root it runs apt-get
# itself (update first); otherwise it prints the exact command and fails.
set -euo pipefail

packages=(cmake make g++ clang libfmt-dev libboost-graph-dev libboost-context-dev libgtest-dev libbenchmark-dev llvm-14-tools nlohmann-json3-dev
          python3-dev python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "install-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}"
  else
    echo "install-deps: missing packages; run as root:" >&2
    echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

nvcc_dir=/usr/local/cuda
if [[ ! -f $nvcc_dir/include/nvrtc.h ]]; then
  echo "install-deps: the CUDA Toolkit (NVRTC) is expected under $nvcc_dir (set CUDAToolkit_ROOT otherwise)" >&2
  exit 1
fi

# The Python package's build and test tools (python/requirements-dev.txt) come from PyPI into the
# project's own virtual environment .venv, never system-wide; pip runs again only when the
# requirements changed.
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$root/.venv
requirements=$root/python/requirements-dev.txt
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
if ! cmp -s "$requirements" "$venv/requirements-dev.txt"; then
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet -r "$requirements"
  cp "$requirements" "$venv/requirements-dev.txt"
fi
