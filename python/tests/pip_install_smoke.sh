#!/usr/bin/env bash
# `pip install .` of the repository into TARGET, then `import ccc` from there runs a check and
# a host all-reduce. Usage: pip_install_smoke.sh PYTHON SOURCE_DIR TARGET [PIP_OPTION...]
set -euo pipefail
python=$1 source_dir=$2 target=$3
shift 3
rm -rf "$target"
marker=$(mktemp)
trap 'rm -f "$marker"' EXIT
# No build isolation: the venv already has scikit-build-core and nanobind (and CI may be offline).
"$python" -m pip install --quiet --no-build-isolation --no-deps --target "$target" "$@" "$source_dir"
# The install writes nothing into the source tree (a read-only checkout installs): no file but
# in the build folders, the tools' own (.venv, .git, .cache) and the suite's __pycache__ is newer
# than the install's start.
written=$(cd "$source_dir" && find . \( -path './build*' -o -path ./.venv -o -path ./.git -o -path ./.cache \
  -o -path ./gpu-bundle -o -name __pycache__ \) -prune -o -type f -newer "$marker" -print)
if [ -n "$written" ]; then
  echo "pip install wrote into the source tree:" >&2
  echo "$written" >&2
  exit 1
fi
cd "$target"  # not the source tree: the import must find the installed package
PYTHONPATH="$target" "$python" - "$source_dir" "$target" <<'PY'
import os
import sys
import numpy as np
import ccc
assert os.path.realpath(ccc.__file__).startswith(os.path.realpath(sys.argv[2])), ccc.__file__
assert ccc.check(f"{sys.argv[1]}/schedules/ring.sched", ranks=4).schedule == "ring"
from importlib import metadata
assert any(r.split(";")[0].strip() == "numpy" for r in metadata.requires("ccc") or []), "pip install . must bring NumPy"
xs = [np.full(10, r, dtype=np.float32) for r in range(2)]
ccc.Communicator(2).all_reduce(xs)
assert (xs[0] == 1).all() and (xs[1] == 1).all()
# The wheel carries libccc-nccl, and nccl_env finds it there (docs/nccl.md).
from ccc import nccl_env
shim, _ = nccl_env.find_shim()
assert shim is not None and str(shim).startswith(os.path.realpath(sys.argv[2])), shim
print("installed ccc works:", ccc.__file__)
PY
