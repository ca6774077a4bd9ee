"""The environment that puts libccc-nccl behind a program's NCCL (docs/nccl.md).

``python -m ccc.nccl_env`` prints shell lines to ``eval`` (or paste) before starting a program
that calls NCCL (PyTorch with ``backend="nccl"``, vLLM, nccl-tests, ...)::

    eval "$(python -m ccc.nccl_env)"            # LD_PRELOAD: programs that link libnccl.so.2
    eval "$(python -m ccc.nccl_env --soname-dir ~/.cache/ccc/nccl)"   # libnccl.so.2 first on the path

It finds libccc-nccl.so.2 (``$CCC_NCCL_SHIM``, this package's ``lib/``, a build tree's
``nccl/``, an install prefix's ``lib/``, the interpreter's prefix, ``/usr/local/lib``) and the real NCCL it forwards
to (``$CCC_NCCL_LIB``, then the nvidia-nccl wheel in this interpreter's site-packages), and says
where it looked when it finds neither. ``--check`` loads libccc-nccl here and asks it for
NCCL's version, which opens the real NCCL: the whole chain a program will use.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import site
import sys
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

SHIM = "libccc-nccl.so.2"
ROUTES = ("auto", "ccc", "nccl")


def _package_dir() -> Path:
    return Path(__file__).resolve().parent


def shim_candidates() -> List[Path]:
    """Where libccc-nccl.so.2 is looked for, in order."""
    places = []
    if os.environ.get("CCC_NCCL_SHIM"):
        places.append(Path(os.environ["CCC_NCCL_SHIM"]))
    package = _package_dir()
    places.append(package / "lib" / SHIM)  # a wheel (pip install .)
    places.append(package.parent.parent / "nccl" / SHIM)  # a build tree: build/python/ccc
    # cmake --install: <prefix>/lib/pythonX.Y/site-packages/ccc, the library in <prefix>/lib
    places.append(package.parent.parent.parent / SHIM)
    places.append(Path(sys.prefix) / "lib" / SHIM)
    places.append(Path("/usr/local/lib") / SHIM)
    return places


def find_shim() -> Tuple[Optional[Path], List[str]]:
    """libccc-nccl.so.2, or None and why each place was passed over."""
    tried = []
    for path in shim_candidates():
        if path.is_file():
            return path.resolve(), tried
        tried.append(f"{path}: no such file")
    return None, tried


def find_real_nccl() -> Tuple[Optional[Path], List[str]]:
    """The real libnccl.so.2 to forward to: $CCC_NCCL_LIB, else the nvidia-nccl wheel."""
    tried = []
    if os.environ.get("CCC_NCCL_LIB"):
        path = Path(os.environ["CCC_NCCL_LIB"])
        if path.is_file():
            return path.resolve(), tried
        tried.append(f"$CCC_NCCL_LIB={path}: no such file")
    folders = list(sys.path)
    try:
        folders += site.getsitepackages() + [site.getusersitepackages()]
    except AttributeError:  # some virtualenvs' site module lacks them
        pass
    seen = set()
    for folder in folders:
        if not folder or folder in seen:
            continue
        seen.add(folder)
        path = Path(folder) / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
        if path.is_file():
            return path.resolve(), tried
    tried.append("nvidia/nccl/lib/libnccl.so.2 under this interpreter's sys.path and site-packages: none")
    return None, tried


def shell_lines(shim: Path, real: Optional[Path], route: str, soname_dir: Optional[Path]) -> List[str]:
    """The lines to evaluate (POSIX shell)."""
    lines = ["# libccc-nccl: ccc behind NCCL's API (docs/nccl.md); eval these lines, or paste them"]
    if soname_dir is None:
        lines.append(f"export LD_PRELOAD={shlex.quote(str(shim))}${{LD_PRELOAD:+:$LD_PRELOAD}}")
    else:
        lines.append(f"export LD_LIBRARY_PATH={shlex.quote(str(soname_dir))}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    if real is not None:
        lines.append(f"export CCC_NCCL_LIB={shlex.quote(str(real))}")
    elif soname_dir is not None:
        lines.append("# no real NCCL found here: set CCC_NCCL_LIB to its libnccl.so.2, or it fails every call")
    else:
        lines.append("# the real NCCL: the program's own libnccl.so.2 (LD_PRELOAD puts libccc-nccl before it)")
    lines.append(f"export CCC_NCCL_ROUTE={shlex.quote(route)}")
    return lines


def make_soname_dir(folder: Path, shim: Path) -> None:
    """folder/libnccl.so.2 -> shim, replacing an older link there (never a file of its own)."""
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "libnccl.so.2"
    if link.is_symlink():
        link.unlink()
    elif link.exists():
        raise FileExistsError(f"{link} exists and is not a link; choose another --soname-dir")
    link.symlink_to(shim)


def check(shim: Path) -> str:
    """Loads libccc-nccl in this process and asks it for NCCL's version (which opens the real
    NCCL); the version as NCCL prints it, e.g. 2.28.9. Raises OSError when the chain breaks."""
    library = ctypes.CDLL(str(shim))
    version = ctypes.c_int(0)
    status = library.ncclGetVersion(ctypes.byref(version))
    if status != 0:
        library.ncclGetLastError.restype = ctypes.c_char_p
        reason = library.ncclGetLastError(None) or b""
        raise OSError(f"{shim}: ncclGetVersion failed ({status}): {reason.decode(errors='replace')}")
    code = version.value
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ccc.nccl_env",
        description="Print the environment that puts libccc-nccl behind a program's NCCL (docs/nccl.md).")
    parser.add_argument("--route", default=os.environ.get("CCC_NCCL_ROUTE", "auto"),
                        help="CCC_NCCL_ROUTE: auto (default), ccc, nccl, or per collective, e.g. auto,allgather=nccl")
    parser.add_argument("--soname-dir", type=Path, metavar="DIR",
                        help="make DIR/libnccl.so.2 a link to libccc-nccl and put DIR first on LD_LIBRARY_PATH "
                             "instead of LD_PRELOAD (for programs that open NCCL by its soname)")
    parser.add_argument("--check", action="store_true",
                        help="also load libccc-nccl here and ask it for NCCL's version (opens the real NCCL)")
    args = parser.parse_args(argv)
    if args.route.split(",")[0] not in ROUTES:
        parser.error(f"--route starts with auto, ccc or nccl, not {args.route!r}")

    shim, tried = find_shim()
    if shim is None:
        print("ccc.nccl_env: error: libccc-nccl.so.2 not found; looked at:", file=sys.stderr)
        for reason in tried:
            print(f"  {reason}", file=sys.stderr)
        print("  (build it: cmake --build build --target ccc_nccl; or set CCC_NCCL_SHIM)", file=sys.stderr)
        return 1
    real, real_tried = find_real_nccl()
    if args.check:
        if real is not None:
            os.environ["CCC_NCCL_LIB"] = str(real)
        try:
            print(f"# checked: libccc-nccl loads and forwards to NCCL {check(shim)}", file=sys.stderr)
        except OSError as e:
            print(f"ccc.nccl_env: error: {e}", file=sys.stderr)
            for reason in real_tried:
                print(f"  {reason}", file=sys.stderr)
            return 1
    soname_dir = None
    if args.soname_dir is not None:
        soname_dir = args.soname_dir.expanduser().resolve()
        try:
            make_soname_dir(soname_dir, shim)
        except OSError as e:
            print(f"ccc.nccl_env: error: {e}", file=sys.stderr)
            return 1
    print("\n".join(shell_lines(shim, real, args.route, soname_dir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
