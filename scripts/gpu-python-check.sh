#!/usr/bin/env bash
# The GPU check's Python parts (gpu-bundle/python/check.sh; gpu-check.sh runs it twice): the
# tests of python/tests/test_torch.py against the bundle's ccc package, with the machine's torch.
#   check.sh host   ccc.torch on CPU tensors (the host backend across processes); the 4-rank case
#                   is left out to stay within the check's time (it differs from the 2-rank one
#                   only in N);
#   check.sh cuda   two rank processes on the one GPU: ccc.Communicator(backend="cuda") and
#                   ccc.torch on CUDA tensors, with a CUDA graph capture (the tests named *cuda*).
# When they cannot run there it prints "[  SKIPPED ] why" (gpu-check.sh's SKIP) and exits 0:
# the extension is built for one CPython version (its file name says which), and the tests need
# torch with torch.distributed, pytest, and (host) a C++ compiler for the host backend's kernels.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
case ${1:-} in
  host) tests="not cuda and (not every_collective or 2)" ;;
  cuda) tests="cuda" ;;
  *) echo "usage: $0 host|cuda" >&2; exit 2 ;;
esac
skip() {
  echo "[  SKIPPED ] $*"
  exit 0
}
command -v python3 >/dev/null || skip "no python3"
export PYTHONPATH=$here${PYTHONPATH:+:$PYTHONPATH}
extension=$(basename "$(ls "$here"/ccc/_ccc*.so)")
if ! why=$(python3 -c 'import ccc' 2>&1); then
  skip "the bundle's $extension does not load in $(python3 -V 2>&1): ${why##*$'\n'}"
fi
python3 -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null || skip "no torch with torch.distributed"
python3 -c 'import pytest' 2>/dev/null || skip "no pytest"
if [ "$1" = host ]; then
  command -v "${CCC_HOST_CXX:-g++}" >/dev/null || skip "no ${CCC_HOST_CXX:-g++} for the host backend's kernels"
fi
exec python3 -m pytest -q -p no:cacheprovider -rs "$here/tests/test_torch.py" -k "$tests"
