"""ccc.Communicator(rank=, nranks=, uid=): one rank per process on the host backend, NumPy
arrays, every collective; a rank that never joins; a killed rank. On the cuda backend, against
the fake driver (tests/fake_cuda, which runs no kernel): the join, the errors, the teardown."""
import functools
import multiprocessing
import os
import pathlib
import signal

import numpy as np
import pytest

import ccc

COUNT = 1001  # odd: partial last tiles
DTYPES = [np.float32, np.int32]  # every dtype runs in test_communicator.py; here the transport
# Spawned, not forked: a forked child would inherit the test process's threads' state.
CTX = multiprocessing.get_context("spawn")


def data(rank, dtype, count=COUNT):
    return ((np.arange(count) + rank) % 3 + 1).astype(dtype)


def collectives(uid, nranks, rank, results):
    try:
        comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid, timeout=10)
        assert comm.size == nranks
        everyone = lambda dtype, count=COUNT: [data(r, dtype, count) for r in range(nranks)]
        for dtype in DTYPES:
            x = data(rank, dtype)
            out = np.zeros_like(x)
            comm.all_reduce(x, out)
            np.testing.assert_array_equal(out, sum(everyone(dtype)).astype(dtype))
            comm.all_reduce(x, op="max")  # in place
            np.testing.assert_array_equal(x, np.max(everyone(dtype), axis=0))
            gathered = np.zeros(nranks * COUNT, dtype)
            comm.all_gather(data(rank, dtype), gathered)
            np.testing.assert_array_equal(gathered, np.concatenate(everyone(dtype)))
            block = np.zeros(COUNT, dtype)
            comm.reduce_scatter(np.concatenate([data(rank, dtype)] * nranks), block)
            np.testing.assert_array_equal(block, sum(everyone(dtype)).astype(dtype))
            b = data(rank, dtype) if rank == nranks - 1 else np.zeros(COUNT, dtype)
            comm.broadcast(b, root=nranks - 1)
            np.testing.assert_array_equal(b, data(nranks - 1, dtype))
            r = np.zeros(COUNT, dtype)
            comm.reduce(data(rank, dtype), r, root=0, op="min")
            if rank == 0:
                np.testing.assert_array_equal(r, np.min(everyone(dtype), axis=0))
        # Another process cannot map malloc memory: nothing to register, no graphs to capture.
        for refused in (lambda: comm.register(np.ones(8, np.float32)), lambda: comm.graph_capture().__enter__()):
            try:
                refused()
                raise AssertionError("the host backend across processes registered a buffer")
            except ccc.InvalidUsageError as e:
                assert "the host backend across processes" in str(e), e
        comm.destroy()
        results.put((rank, "ok"))
    except BaseException as e:  # reported to the test, which names the rank
        results.put((rank, f"{type(e).__name__}: {e}"))


def join_only(uid, nranks, rank, results, **kwargs):
    try:
        ccc.Communicator(rank=rank, nranks=nranks, uid=uid, timeout=1, **kwargs)
        results.put((rank, "ok"))
    except ccc.Error as e:
        results.put((rank, f"{type(e).__name__}: {e}"))


def killed(uid, nranks, rank, results):
    comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid, timeout=1)
    x = np.ones(1000, np.int32)
    comm.all_reduce(x)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        comm.all_reduce(x)
        results.put((rank, "no error"))
    except ccc.RemoteError as e:
        results.put((rank, f"RemoteError: {e}"))


def warm_up(nranks):
    """Compiles the kernels the ranks run, once, into the JIT cache they share (the same calls on
    an in-process communicator), instead of every rank process compiling each at once."""
    with ccc.Communicator(nranks, backend="host") as c:
        for dtype in DTYPES:
            xs = [data(r, dtype) for r in range(nranks)]
            c.all_reduce(xs, [np.zeros_like(x) for x in xs])
            c.all_reduce(xs, op="max")
            c.all_gather(xs, [np.zeros(nranks * COUNT, dtype) for _ in xs])
            c.reduce_scatter([np.concatenate([x] * nranks) for x in xs], [np.zeros_like(x) for x in xs])
            c.broadcast(xs, root=nranks - 1)
            c.reduce(xs, [np.zeros_like(x) for x in xs], root=0, op="min")


def run(target, nranks, started=None, timeout=60):
    uid = ccc.get_unique_id()
    results = CTX.Queue()
    procs = [CTX.Process(target=target, args=(uid, nranks, r, results)) for r in range(started or nranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
    for p in procs:
        if p.is_alive():
            p.kill()
    got = {}
    for _ in range(sum(p.exitcode == 0 for p in procs)):  # each rank that exited put its result
        rank, what = results.get(timeout=10)
        got[rank] = what
    return got, [p.exitcode for p in procs]


@pytest.mark.parametrize("nranks", [2, 3])
def test_every_collective_across_processes(nranks):
    warm_up(nranks)
    got, codes = run(collectives, nranks)
    assert got == {r: "ok" for r in range(nranks)}, got
    assert codes == [0] * nranks


def test_a_rank_that_never_joins_fails_the_others():
    got, _ = run(join_only, 3, started=2)
    assert len(got) == 2, got
    for what in got.values():
        assert what.startswith("RemoteError") and "did not join" in what, got


def test_a_killed_rank_fails_the_others():
    got, codes = run(killed, 3)
    assert codes[1] == -signal.SIGKILL
    for r in (0, 2):
        assert got[r].startswith("RemoteError") and "timed out" in got[r], got


def interrupted(uid, nranks, rank, results):
    """Rank 0 waits for rank 1, which never calls, with no timeout; Ctrl-C ends the wait."""
    import threading
    import time
    comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid, timeout=float("inf"))
    if rank == 1:
        time.sleep(8)  # joined, never calls; alive while rank 0 waits
        results.put((rank, "ok"))
        return
    threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        comm.all_reduce(np.ones(100, np.float32))
        results.put((rank, "returned"))
        return
    except KeyboardInterrupt:
        waited = time.monotonic() - start
    try:
        comm.all_reduce(np.ones(100, np.float32))
        later = "later call ran"
    except ccc.RemoteError as e:
        later = f"later RemoteError: {e}"
    comm.destroy()
    results.put((rank, f"KeyboardInterrupt after {waited:.1f} s; {later}"))


def test_ctrl_c_interrupts_a_collective_waiting_for_a_peer():
    got, codes = run(interrupted, 2)
    assert codes == [0, 0], (codes, got)
    what = got[0]
    assert what.startswith("KeyboardInterrupt after "), got
    assert float(what.split()[2]) < 5, got
    assert "later RemoteError" in what and "aborted" in what, got


def two_threads(uid, nranks, rank, results):
    import threading
    import time
    comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid, timeout=20)
    x = np.ones(100, np.int32)
    if rank == 1:
        time.sleep(1.5)  # rank 0's first call waits for this one meanwhile
        comm.all_reduce(x)
        results.put((rank, "ok" if (x == 2).all() else f"wrong {x[:3]}"))
        comm.destroy()
        return
    first = threading.Thread(target=comm.all_reduce, args=(x,))
    first.start()
    time.sleep(0.5)
    try:
        comm.all_reduce(np.ones(100, np.int32))
        what = "the second thread's call was not refused"
    except ccc.InvalidUsageError as e:
        what = "refused" if "another thread" in str(e) else str(e)
    first.join()
    results.put((rank, what if (x == 2).all() else f"{what}; first call wrong: {x[:3]}"))
    comm.destroy()


def test_a_second_thread_calling_on_a_busy_rank_is_refused():
    got, codes = run(two_threads, 2)
    assert got == {0: "refused", 1: "ok"}, got
    assert codes == [0, 0]


def test_the_arguments_go_together():
    with pytest.raises(ccc.InvalidArgumentError, match="needs all three"):
        ccc.Communicator(rank=0, nranks=2)
    with pytest.raises(ccc.InvalidArgumentError, match="128 bytes"):
        ccc.Communicator(rank=0, nranks=2, uid=b"short")
    with pytest.raises(ccc.InvalidArgumentError, match="128 bytes"):
        ccc.Communicator(rank=0, nranks=2, uid=b"short", backend="cuda")
    with pytest.raises(ccc.InvalidArgumentError, match="device: only the cuda backend takes a device"):
        ccc.Communicator(rank=0, nranks=2, uid=b"x" * 128, device=0)
    with pytest.raises(ccc.InvalidArgumentError, match="a communicator of every rank takes devices"):
        ccc.Communicator(backend="cuda", device=0)
    with pytest.raises(ccc.InvalidArgumentError, match="backend: expected 'host', 'cuda' or 'sim', not 'tpu'"):
        ccc.Communicator(rank=0, nranks=2, uid=b"x" * 128, backend="tpu")


# The fake libcuda ctest names (CCC_FAKE_LIBCUDA), else the build tree's this package is in.
FAKE_LIBCUDA = pathlib.Path(os.environ.get("CCC_FAKE_LIBCUDA") or
                            pathlib.Path(ccc.__file__).resolve().parents[2] / "tests" / "libccc_fake_libcuda.so")
needs_fake_driver = pytest.mark.skipif(not FAKE_LIBCUDA.is_file(), reason=f"no fake libcuda at {FAKE_LIBCUDA}")


def cuda_rank(libcuda, uid, nranks, rank, results):
    """A cuda rank against the fake driver (set before ccc first opens a driver, in this process
    only): it joins, refuses host memory, synchronizes, destroys."""
    os.environ["CCC_LIBCUDA"] = libcuda
    try:
        comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid, backend="cuda", device=rank, timeout=5)
        assert (comm.size, comm.backend) == (nranks, "cuda")
        try:
            comm.all_reduce(np.ones(8, np.float32))
            raise AssertionError("a host array was taken by a cuda communicator")
        except ccc.InvalidArgumentError as e:
            assert "the cuda backend needs CUDA device arrays, not host memory" in str(e), e
        comm.synchronize()  # nothing queued: returns, no failure to report
        comm.destroy()
        try:
            comm.synchronize()
            raise AssertionError("synchronize after destroy")
        except ccc.InvalidUsageError:
            pass
        results.put((rank, "ok"))
    except BaseException as e:  # reported to the test, which names the rank
        results.put((rank, f"{type(e).__name__}: {e}"))


@needs_fake_driver
def test_cuda_ranks_join_through_the_fake_driver_and_destroy_cleanly():
    got, codes = run(functools.partial(cuda_rank, str(FAKE_LIBCUDA)), 2)
    assert got == {0: "ok", 1: "ok"}, got
    assert codes == [0, 0]


def cuda_join_only(libcuda, uid, nranks, rank, results):
    os.environ["CCC_LIBCUDA"] = libcuda
    join_only(uid, nranks, rank, results, backend="cuda", device=rank)


@needs_fake_driver
def test_a_cuda_rank_that_never_joins_fails_the_others():
    got, codes = run(functools.partial(cuda_join_only, str(FAKE_LIBCUDA)), 3, started=2)
    assert len(got) == 2, got
    for what in got.values():
        assert what.startswith("RemoteError") and "did not join" in what, got
    assert codes == [0, 0]


def cuda_refusals(libcuda, results):
    """A cuda rank on a device the (fake) driver lacks, and with no driver at all: each fails at
    once, before joining (the id is this process's own, so its root goes with it)."""
    def attempt(**kwargs):
        try:
            ccc.Communicator(rank=0, nranks=2, uid=ccc.get_unique_id(), backend="cuda", timeout=5, **kwargs)
            return "no error"
        except ccc.Error as e:
            return f"{type(e).__name__}: {e}"
    os.environ["CCC_LIBCUDA"] = libcuda
    results.put(attempt(device=5))


@needs_fake_driver
@pytest.mark.parametrize("libcuda, want", [
    (str(FAKE_LIBCUDA), "InvalidArgumentError: CUDA device 5 does not exist (2 present)"),
    ("/nonexistent/libcuda.so.1", "NoDeviceError: no CUDA device: cannot load the driver (/nonexistent/libcuda.so.1"),
])
def test_a_cuda_rank_on_a_missing_device_or_without_a_driver_fails_at_once(libcuda, want):
    results = CTX.Queue()
    p = CTX.Process(target=cuda_refusals, args=(libcuda, results))
    p.start()
    got = results.get(timeout=60)
    p.join(10)
    assert got.startswith(want), got
    assert p.exitcode == 0
