"""ccc.Communicator on the host backend with NumPy arrays: every collective, every element type
NumPy has that ccc supports (bfloat16 is not in NumPy), in place and not, and the errors."""
import pathlib

import numpy as np
import pytest

import ccc
from conftest import RANKS

DTYPES = [np.float64, np.float32, np.float16, np.int64, np.uint64, np.int32, np.uint32, np.int8, np.uint8]
COUNT = 1001  # odd: the last tile and chunk are partial


def inputs(dtype, count=COUNT):
    # Small values so that sums and products of RANKS of them fit every type, exactly.
    return [((np.arange(count) + r) % 3 + 1).astype(dtype) for r in range(RANKS)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_all_reduce(comm, dtype, in_place):
    xs = inputs(dtype)
    want = sum(x.astype(np.float64) for x in xs)
    if in_place:
        comm.all_reduce(xs)
        out = xs
    else:
        out = [np.zeros_like(x) for x in xs]
        comm.all_reduce(xs, out)
    for o in out:
        np.testing.assert_array_equal(o.astype(np.float64), want)


@pytest.mark.parametrize("op, fold", [("prod", np.prod), ("min", np.min), ("max", np.max),
                                      ("avg", lambda a, axis: np.sum(a, axis=axis) / RANKS)])
def test_all_reduce_ops(comm, op, fold):
    xs = inputs(np.float32)
    out = [np.zeros_like(x) for x in xs]
    comm.all_reduce(xs, out, op=op)
    for o in out:
        np.testing.assert_allclose(o, fold(np.stack(xs), axis=0).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
@pytest.mark.parametrize("in_place", [False, True])
def test_all_reduce_with_residual_adds_it_once(comm, dtype, in_place):
    """The fused allreduce + residual: recv = sum + residual on every rank (docs/epilogue.md)."""
    xs = inputs(dtype)
    residual = [((np.arange(COUNT) * 7) % 5).astype(dtype) for _ in range(RANKS)]  # the same on every rank
    want = sum(x.astype(np.float64) for x in xs) + residual[0].astype(np.float64)
    out = xs if in_place else [np.zeros_like(x) for x in xs]
    comm.all_reduce(xs, None if in_place else out, residual=residual)
    for o in out:
        np.testing.assert_array_equal(o.astype(np.float64), want)
    ys = f32()
    with pytest.raises(ccc.InvalidArgumentError, match="the residual buffer overlaps recv"):
        comm.all_reduce(ys, residual=ys)  # in place on the residual: partial sums pass through recv
    with pytest.raises(ccc.InvalidArgumentError, match="residual: 1002 elements per rank where send has 1001"):
        comm.all_reduce(f32(), [np.zeros(COUNT, np.float32) for _ in range(RANKS)], residual=f32(COUNT + 1))


def e4m3_values():
    """Every fp8 e4m3 (OCP, 'fn') value by its bits; NaN at 0x7f and 0xff."""
    bits = np.arange(256)
    exponent, mantissa = (bits >> 3) & 15, bits & 7
    magnitude = np.where(exponent == 0, mantissa * 2.0 ** -9, (8 + mantissa) * 2.0 ** (exponent - 10))
    magnitude[(bits & 0x7f) == 0x7f] = np.nan
    return np.where(bits & 0x80, -magnitude, magnitude)


@pytest.mark.parametrize("dtype, rtol", [(np.float32, 1e-6), (np.float16, 2e-3)])
def test_all_reduce_with_residual_and_rmsnorm(comm, dtype, rtol):
    """Then RMSNorm over rows of rms_weight's length, in the same kernel; residual_out gets the
    pre-norm sums (docs/epilogue.md). Three rows of 77: not a multiple of a vector."""
    hidden, rows = 77, 3
    xs = [((np.arange(rows * hidden) * (r + 1)) % 7 - 3).astype(dtype) for r in range(RANKS)]
    residual = [(np.arange(rows * hidden) % 5).astype(dtype) for _ in range(RANKS)]
    weight = [np.linspace(0.5, 2.0, hidden).astype(dtype) for _ in range(RANKS)]
    out = [np.zeros_like(x) for x in xs]
    sums = [np.zeros_like(x) for x in xs]
    comm.all_reduce(xs, out, residual=residual, rms_weight=weight, eps=1e-5, residual_out=sums)
    s = (sum(x.astype(np.float64) for x in xs) + residual[0]).reshape(rows, hidden)
    want = s / np.sqrt((s * s).mean(axis=1, keepdims=True) + 1e-5) * weight[0].astype(np.float64)
    for o, t in zip(out, sums):
        np.testing.assert_array_equal(t.astype(np.float64).reshape(rows, hidden), s)
        np.testing.assert_allclose(o.astype(np.float64).reshape(rows, hidden), want, rtol=rtol, atol=rtol)
    # The output quantised to fp8 e4m3 too (uint8 bits): each a nearest e4m3 value of out / scale,
    # saturated at 448 (scale 0.002 puts some past it).
    quant = [np.zeros(rows * hidden, np.uint8) for _ in xs]
    comm.all_reduce(xs, out, residual=residual, rms_weight=weight, eps=1e-5, quant_out=quant, scale=0.002)
    values = e4m3_values()
    for o, q in zip(out, quant):
        v = o.astype(np.float32) * np.float32(1 / np.float32(0.002))
        nearest = np.nanmin(np.abs(values[None, :] - np.clip(v, -448, 448)[:, None]), axis=1)
        np.testing.assert_array_equal(np.abs(values[q] - np.clip(v, -448, 448)), nearest)
    assert (np.abs(values[quant[0]]) == 448).any()
    with pytest.raises(ccc.InvalidArgumentError, match="the fp8 output needs both"):
        comm.all_reduce(xs, out, residual=residual, rms_weight=weight, quant_out=quant)
    with pytest.raises(ccc.InvalidArgumentError, match=r"quant_out\[0\]: must be contiguous uint8"):
        comm.all_reduce(xs, out, residual=residual, rms_weight=weight, quant_out=[q[1:] for q in quant], scale=1.0)
    with pytest.raises(ccc.InvalidArgumentError, match="count 231 is not a whole number of rows of hidden 50"):
        comm.all_reduce(xs, out, residual=residual, rms_weight=[w[:50] for w in weight])
    with pytest.raises(ccc.InvalidArgumentError, match="the RMSNorm comes after the residual add"):
        comm.all_reduce(xs, out, rms_weight=weight)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_reduce(comm, dtype, in_place):
    root = 1
    xs = inputs(dtype)
    want = sum(x.astype(np.float64) for x in xs)
    out = xs if in_place else [np.zeros_like(x) for x in xs]
    comm.reduce(xs, None if in_place else out, root=root)
    np.testing.assert_array_equal(out[root].astype(np.float64), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_broadcast(comm, dtype, in_place):
    root = 2
    xs = inputs(dtype)
    want = xs[root].copy()
    out = xs if in_place else [np.zeros_like(x) for x in xs]
    comm.broadcast(xs, None if in_place else out, root=root)
    for o in out:
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_all_gather(comm, dtype, in_place):
    xs = inputs(dtype)
    want = np.concatenate(xs)
    out = [np.zeros(RANKS * COUNT, dtype=dtype) for _ in range(RANKS)]
    if in_place:  # send is the rank's own block of recv
        for r in range(RANKS):
            out[r][r * COUNT:(r + 1) * COUNT] = xs[r]
        send = [out[r][r * COUNT:(r + 1) * COUNT] for r in range(RANKS)]
    else:
        send = xs
    comm.all_gather(send, out)
    for o in out:
        np.testing.assert_array_equal(o, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_reduce_scatter(comm, dtype, in_place):
    xs = inputs(dtype, RANKS * COUNT)
    want = sum(x.astype(np.float64) for x in xs)
    if in_place:  # recv is the rank's own block of send
        out = [xs[r][r * COUNT:(r + 1) * COUNT] for r in range(RANKS)]
    else:
        out = [np.zeros(COUNT, dtype=dtype) for _ in range(RANKS)]
    comm.reduce_scatter(xs, out)
    for r, o in enumerate(out):
        np.testing.assert_array_equal(o.astype(np.float64), want[r * COUNT:(r + 1) * COUNT])


@pytest.mark.parametrize("dtype", DTYPES)
def test_all_to_all(comm, dtype):
    xs = inputs(dtype, RANKS * COUNT)
    out = [np.zeros(RANKS * COUNT, dtype=dtype) for _ in range(RANKS)]
    comm.all_to_all(xs, out)
    for r in range(RANKS):
        want = np.concatenate([xs[p][r * COUNT:(r + 1) * COUNT] for p in range(RANKS)])
        np.testing.assert_array_equal(out[r], want)


def test_all_to_all_refuses_a_count_that_is_not_ranks_blocks(comm):
    xs = [np.zeros(RANKS * COUNT + 1, dtype=np.float32) for _ in range(RANKS)]
    with pytest.raises(ccc.InvalidArgumentError, match="not ranks"):
        comm.all_to_all(xs, [np.zeros_like(x) for x in xs])


def test_2d_arrays_and_read_only_sends(comm):
    xs = [np.full((7, 11), r + 1, dtype=np.float32) for r in range(RANKS)]
    for x in xs:
        x.flags.writeable = False  # send is only read
    out = [np.zeros((7, 11), dtype=np.float32) for _ in range(RANKS)]
    comm.all_reduce(xs, out)
    np.testing.assert_array_equal(out[0], np.full((7, 11), 6, dtype=np.float32))


def test_properties(comm):
    assert comm.size == RANKS and comm.backend == "host"


def f32(n=COUNT):
    return [np.zeros(n, dtype=np.float32) for _ in range(RANKS)]


@pytest.mark.parametrize("call, match", [
    (lambda c: c.all_reduce(f32()[:2]), r"send: expected one array per rank \(3\), got 2"),
    (lambda c: c.all_reduce(f32(), f32()[:1]), r"recv: expected one array per rank \(3\), got 1"),
    (lambda c: c.all_reduce(f32(), [np.zeros(COUNT, np.float64)] * RANKS), r"recv\[0\]: element type f64 differs"),
    (lambda c: c.all_reduce([np.zeros(5, np.float32), np.zeros(6, np.float32), np.zeros(5, np.float32)]),
     r"send\[1\]: 6 elements where send\[0\] has 5"),
    (lambda c: c.all_reduce(f32(), f32(COUNT + 1)), "send has 1001 elements per rank, recv 1002"),
    (lambda c: c.all_reduce([np.zeros(10, np.int16)] * RANKS), r"send\[0\]: element type int16 is not supported"),
    (lambda c: c.all_reduce([np.zeros(10, np.bool_)] * RANKS), r"element type bool8 is not supported"),
    (lambda c: c.all_reduce([np.zeros((4, 4), np.float32)[:, ::2] for _ in range(RANKS)]),
     r"send\[0\]: the array is not contiguous"),
    (lambda c: c.all_reduce(f32(), op="xor"), "unknown op 'xor'"),
    (lambda c: c.all_gather(f32(), f32()), r"recv must hold ranks \(3\) x send elements \(3003\), not 1001"),
    (lambda c: c.reduce_scatter(f32(), f32()), r"send must hold ranks \(3\) x recv elements \(3003\), not 1001"),
    (lambda c: c.broadcast(f32(), root=3), "root"),
])
def test_bad_arguments_raise_invalid_argument(comm, call, match):
    with pytest.raises(ccc.InvalidArgumentError, match=match):
        call(comm)


def test_read_only_recv_is_refused(comm):
    xs = f32()
    xs[1].flags.writeable = False
    with pytest.raises(ccc.InvalidArgumentError, match=r"send\[1\]: the array is read-only"):
        comm.all_reduce(xs)


@pytest.mark.parametrize("kwargs, match", [
    ({"ranks": 0}, "rank"),
    ({"ranks": 2, "timeout": 0}, "timeout"),
    ({"ranks": 2, "backend": "tpu"}, "backend: expected 'host', 'cuda' or 'sim'"),
    ({"ranks": 2, "devices": [0, 1]}, "only the cuda backend takes devices"),
    ({}, "the host backend needs the number of ranks"),
    ({"ranks": 2, "protocol": "LL"}, r"unknown protocol 'LL' \(one of: simple, ll\)"),
    ({"ranks": 2, "block_threads": 1025}, "host_block_threads 1025: a thread block has 1 to 1024 threads"),
])
def test_bad_communicator_options(kwargs, match):
    with pytest.raises(ccc.InvalidArgumentError, match=match):
        ccc.Communicator(**kwargs)


@pytest.mark.parametrize("block_threads", [1, 7, 512])
def test_blocks_of_any_thread_count_compute_the_same(block_threads):
    """block_threads: host emulation's blocks run that many threads (fibers), same results."""
    with ccc.Communicator(RANKS, block_threads=block_threads, timeout=60) as c:
        xs = inputs(np.int32)
        out = [np.zeros_like(x) for x in xs]
        c.all_reduce(xs, out)
        for o in out:
            np.testing.assert_array_equal(o, np.stack(xs).sum(0))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8])
def test_protocol_ll_runs_every_collective(dtype):
    """CommOptions::protocol: every call goes over ll, against the reference."""
    with ccc.Communicator(RANKS, protocol="ll", timeout=60) as c:
        xs = inputs(dtype)
        rows = np.stack(xs).astype(np.float64)
        out = [np.zeros_like(x) for x in xs]
        c.all_reduce(xs, out)
        for o in out:
            np.testing.assert_array_equal(o, rows.sum(0))
        out = [np.zeros_like(x) for x in xs]
        c.all_reduce(xs, out, op="max")
        for o in out:
            np.testing.assert_array_equal(o, rows.max(0))
        out = [np.zeros_like(x) for x in xs]
        c.reduce(xs, out, root=1)
        np.testing.assert_array_equal(out[1], rows.sum(0))
        out = [np.zeros_like(x) for x in xs]
        c.broadcast(xs, out, root=2)
        for o in out:
            np.testing.assert_array_equal(o, xs[2])
        out = [np.zeros(RANKS * COUNT, dtype) for _ in xs]
        c.all_gather(xs, out)
        for o in out:
            np.testing.assert_array_equal(o, np.concatenate(xs))
        big = inputs(dtype, RANKS * COUNT)
        out = [np.zeros(COUNT, dtype) for _ in xs]
        c.reduce_scatter(big, out)
        total = np.stack(big).astype(np.float64).sum(0)
        for r, o in enumerate(out):
            np.testing.assert_array_equal(o, total[r * COUNT:(r + 1) * COUNT])
        out = [np.zeros(RANKS * COUNT, dtype) for _ in xs]
        c.all_to_all(big, out)
        for r, o in enumerate(out):
            np.testing.assert_array_equal(o, np.concatenate([b[r * COUNT:(r + 1) * COUNT] for b in big]))
        # ll's receive slots hold 256 KiB of vector: a larger call is refused, which a
        # communicator left to choose (simple above that size) would run.
        large = [np.ones(65537, np.float32) for _ in range(RANKS)]
        with pytest.raises(ccc.InvalidArgumentError, match="protocol ll moves at most 262144 bytes per call"):
            c.all_reduce(large)


def test_a_schedule_given_as_text_runs(schedules):
    text = (schedules / "ring.sched").read_text()
    with ccc.Communicator(RANKS, schedule=text) as c:
        xs = [np.full(64, r + 1, dtype=np.float32) for r in range(RANKS)]
        c.all_reduce(xs)
        np.testing.assert_array_equal(xs[2], np.full(64, 6, dtype=np.float32))


def test_a_bad_schedule_fails_its_first_collective_with_the_diagnostics():
    # The schedule compiles for N when a collective needs it (the C++ library's behaviour).
    with ccc.Communicator(2, schedule="allreduce x(N) {\n  oops\n}\n") as c:
        with pytest.raises(ccc.InvalidArgumentError, match=r"(?s)<string>:1:12: error: .*\^"):
            c.all_reduce([np.zeros(4, np.float32) for _ in range(2)])


def test_a_schedule_that_does_not_fit_n_says_why_in_its_first_line():
    with ccc.Communicator(3, algo="butterfly") as c:
        with pytest.raises(ccc.InvalidArgumentError) as e:
            c.all_reduce(f32())
    assert str(e.value).splitlines()[0].endswith(
        "cannot generate a kernel for N = 3: requirement 'N is pow2' does not hold for N = 3"), str(e.value)


@pytest.mark.parametrize("shape", [(0,), (0, 4), (4, 0)])
def test_empty_arrays_are_a_no_op_as_count_0_is_in_c(comm, shape):
    xs = [np.zeros(shape, np.float32) for _ in range(RANKS)]
    comm.all_reduce(xs)
    comm.all_gather(xs, [np.zeros(shape, np.float32) for _ in range(RANKS)])
    comm.broadcast(xs, root=1)


def test_an_unreadable_schedule_file_is_a_diagnostic_error(tmp_path):
    with pytest.raises(ccc.DiagnosticError, match="missing.sched"):
        ccc.Communicator(2, schedule=tmp_path / "missing.sched")


def test_use_after_destroy_is_invalid_usage():
    c = ccc.Communicator(2)
    c.destroy()
    with pytest.raises(ccc.InvalidUsageError):
        c.all_reduce([np.zeros(4, np.float32)] * 2)


def test_destroy_while_another_thread_is_inside_a_call_raises_there():
    # destroy() used to free the communicator under a running call (a segfault in 1-3 of 25).
    import threading
    for _ in range(20):
        c = ccc.Communicator(2)
        xs = [np.ones(1 << 16, np.float32) for _ in range(2)]
        outcome = []

        def calls():
            try:
                while True:
                    c.all_reduce(xs)
            except ccc.Error as e:
                outcome.append(e)

        t = threading.Thread(target=calls)
        t.start()
        threading.Event().wait(0.01)
        c.destroy()
        t.join(30)
        assert not t.is_alive()
        assert len(outcome) == 1 and isinstance(outcome[0], (ccc.InvalidUsageError, ccc.RemoteError)), outcome
        with pytest.raises(ccc.InvalidUsageError, match="after destroy"):
            c.destroy()


def test_cuda_without_a_driver_is_no_device():
    # This machine class has no GPU (the driver library is absent or a stub); with one, skip.
    try:
        c = ccc.Communicator(backend="cuda", devices=[0])
    except ccc.NoDeviceError:
        return
    c.destroy()
    pytest.skip("a CUDA device is present")


def test_host_backend_refuses_gpu_arrays_descriptively(comm):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch")
    with pytest.raises(ccc.InvalidArgumentError, match="host backend needs host"):
        comm.all_reduce([torch.zeros(4, device="cuda") for _ in range(RANKS)])


def test_registration_in_one_process_has_nothing_to_do(comm):
    """One process: register and graph_capture succeed with nothing to exchange; the handles
    are still checked."""
    x = np.ones(16, np.float32)
    registration = comm.register(x)
    assert repr(registration).startswith("<ccc.Registration 0x")
    comm.deregister(registration)
    assert repr(registration) == "<ccc.Registration deregistered>"
    again = comm.register(x)  # may get the same runtime handle: the old object must not free it
    with pytest.raises(ccc.InvalidUsageError, match="it was deregistered already"):
        comm.deregister(registration)
    comm.deregister(again)
    with pytest.raises(ccc.InvalidArgumentError, match="expected a ccc.Registration, not int"):
        comm.deregister(5)
    with pytest.raises(ccc.InvalidArgumentError, match="size is 0"):
        comm.register(np.ones(0, np.float32))
    with pytest.raises(ccc.InvalidArgumentError, match="not contiguous"):
        comm.register(np.ones(16, np.float32)[::2])

    with comm.graph_capture() as captured:
        assert repr(captured) == "<ccc.Registration pending>"
        with pytest.raises(ccc.InvalidUsageError, match="its graph_capture block has not ended"):
            comm.deregister(captured)
        comm.all_reduce([x.copy() for _ in range(comm.size)])
        with pytest.raises(ccc.InvalidUsageError, match="do not nest"):
            with comm.graph_capture():
                pass
    comm.deregister(captured)
    # A block that raises still ends (the peers would wait otherwise); its exception propagates.
    with pytest.raises(ZeroDivisionError):
        with comm.graph_capture() as failed:
            raise ZeroDivisionError
    comm.deregister(failed)


def virtual_all_reduce(c, out_fill=0):
    """One f32 all_reduce on the simulator communicator ``c``: its virtual seconds, the inputs
    and the outputs (filled with ``out_fill`` before)."""
    xs = inputs(np.float32)
    out = [np.full_like(x, out_fill) for x in xs]
    before = c.virtual_seconds()
    c.all_reduce(xs, out)
    return c.virtual_seconds() - before, xs, out


def test_sim_runs_in_virtual_time():
    """backend="sim": the same results, a virtual clock that repeats, and a critical path."""
    topo = str(pathlib.Path(__file__).resolve().parents[2] / "topologies" / "dgx-h100.topo")
    times = []
    for _ in range(2):
        with ccc.Communicator(RANKS, backend="sim", topology_file=topo, timeout=60) as c:
            assert c.backend == "sim"
            took, xs, out = virtual_all_reduce(c)
            times.append(took)
            for o in out:
                np.testing.assert_array_equal(o, sum(xs))
            path = c.critical_path()
            assert "launch" in path.splitlines()[0] and "end" in path.splitlines()[-1], path
    assert times[0] == times[1] and 2.5e-6 < times[0] < 100e-6, times
    with pytest.raises(ccc.InvalidArgumentError, match="the simulator needs a topology"):
        ccc.Communicator(2, backend="sim")
    with ccc.Communicator(2) as host, pytest.raises(ccc.InvalidUsageError, match="only a simulator"):
        host.virtual_seconds()
    # timing_only: the same virtual time, and protocol simple moves no data (the outputs stay).
    with ccc.Communicator(RANKS, backend="sim", topology_file=topo, timeout=60, protocol="simple") as full, \
            ccc.Communicator(RANKS, backend="sim", topology_file=topo, timeout=60, protocol="simple",
                             timing_only=True) as timing:
        took = []
        for c in (full, timing):
            seconds, _, out = virtual_all_reduce(c, out_fill=-7)
            took.append(seconds)
        assert took[0] == took[1], took
        for o in out:
            assert (o == -7).all()
    with pytest.raises(ccc.InvalidArgumentError, match="timing_only: only the sim backend"):
        ccc.Communicator(2, timing_only=True)
    # graph_replays: each launch priced as a CUDA graph's replay (dgx-h100: graph_launch 1.3 us,
    # launch 2.5 us), the same kernel otherwise.
    took = []
    for graph in (False, True):
        with ccc.Communicator(RANKS, backend="sim", topology_file=topo, timeout=60, algo="ring", protocol="simple",
                              graph_replays=graph) as c:
            seconds, xs, out = virtual_all_reduce(c)
            took.append(seconds)
            for o in out:
                np.testing.assert_array_equal(o, sum(xs))
    assert abs(took[0] - took[1] - 1.2e-6) < 1e-9, took
    with pytest.raises(ccc.InvalidArgumentError, match="graph_replays: only the sim backend"):
        ccc.Communicator(2, graph_replays=True)
