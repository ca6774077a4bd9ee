"""python -m ccc.nccl_env: the environment that puts libccc-nccl behind a program's NCCL."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import ccc.nccl_env as nccl_env


def run(*args, env=None):
    merged = dict(os.environ)
    merged.pop("CCC_NCCL_LIB", None)
    merged.update(env or {})
    return subprocess.run([sys.executable, "-m", "ccc.nccl_env", *args], capture_output=True, text=True, env=merged)


def exports(text):
    """The variables the printed lines export, as a shell would see them (with nothing set before)."""
    out = subprocess.run(["sh", "-c", text + '\nenv -0'], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"]}, check=True).stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def test_prints_ld_preload_of_the_shim_it_found():
    shim, _ = nccl_env.find_shim()
    assert shim is not None and shim.name == "libccc-nccl.so.2" and shim.is_file()
    r = run()
    assert r.returncode == 0, r.stderr
    env = exports(r.stdout)
    assert env["LD_PRELOAD"] == str(shim)
    assert env["CCC_NCCL_ROUTE"] == "auto"
    assert "CCC_NCCL_LIB" not in env  # under LD_PRELOAD the program's own libnccl.so.2 is the real one


def test_a_route_and_paths_with_spaces_survive_the_shell(tmp_path):
    odd = tmp_path / "a dir; with $pace"
    odd.mkdir()
    shim, _ = nccl_env.find_shim()
    (odd / "libccc-nccl.so.2").symlink_to(shim)
    r = run("--route", "auto,allgather=nccl", env={"CCC_NCCL_SHIM": str(odd / "libccc-nccl.so.2")})
    assert r.returncode == 0, r.stderr
    env = exports(r.stdout)
    assert env["LD_PRELOAD"] == str(shim)  # resolved
    assert env["CCC_NCCL_ROUTE"] == "auto,allgather=nccl"
    assert run("--route", "fast").returncode == 2


def test_soname_dir_links_libnccl_to_the_shim_and_finds_the_wheels_nccl(tmp_path):
    # A stand-in for the nvidia-nccl wheel, on this interpreter's path.
    site = tmp_path / "site-packages"
    wheel = site / "nvidia" / "nccl" / "lib"
    wheel.mkdir(parents=True)
    (wheel / "libnccl.so.2").write_bytes(b"\x7fELF")
    folder = tmp_path / "soname"
    r = run("--soname-dir", str(folder), env={"PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(site)])})
    assert r.returncode == 0, r.stderr
    link = folder / "libnccl.so.2"
    assert link.is_symlink() and link.resolve() == nccl_env.find_shim()[0]
    env = exports(r.stdout)
    assert env["LD_LIBRARY_PATH"] == str(folder)
    assert env["CCC_NCCL_LIB"] == str((wheel / "libnccl.so.2").resolve())
    assert "LD_PRELOAD" not in env
    # Again: the old link is replaced; a file of the user's is never.
    assert run("--soname-dir", str(folder)).returncode == 0
    link.unlink()
    link.write_text("mine")
    r = run("--soname-dir", str(folder))
    assert r.returncode == 1 and "is not a link" in r.stderr
    assert link.read_text() == "mine"


def test_no_shim_says_where_it_looked(tmp_path):
    r = run(env={"CCC_NCCL_SHIM": str(tmp_path / "nowhere.so")})
    # The build tree's own library is still found after the variable's path.
    assert r.returncode == 0 and str(tmp_path) not in r.stdout
    missing = subprocess.run(
        [sys.executable, "-c",
         "import sys, ccc.nccl_env as m; m.shim_candidates = lambda: [m.Path(sys.argv[1])]; sys.exit(m.main([]))",
         str(tmp_path / "nowhere.so")],
        capture_output=True, text=True)
    assert missing.returncode == 1
    assert "libccc-nccl.so.2 not found; looked at:" in missing.stderr
    assert f"{tmp_path / 'nowhere.so'}: no such file" in missing.stderr


@pytest.mark.skipif(not os.environ.get("CCC_FAKE_NCCL"), reason="the stand-in NCCL comes with the build's tests")
def test_check_loads_the_shim_and_reaches_the_real_nccl():
    r = run("--check", env={"CCC_NCCL_LIB": os.environ["CCC_FAKE_NCCL"]})
    assert r.returncode == 0, r.stderr
    assert "# checked: libccc-nccl loads and forwards to NCCL 2.28." in r.stderr
    broken = run("--check", env={"CCC_NCCL_LIB": "/nonexistent/libnccl.so.2"})
    assert broken.returncode == 1
    assert "ncclGetVersion failed" in broken.stderr and "/nonexistent/libnccl.so.2" in broken.stderr
