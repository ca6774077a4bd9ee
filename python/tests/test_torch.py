"""ccc.torch: a communicator bootstrapped from a torch.distributed process group (gloo, one process
per rank, CPU tensors): every collective and dtype against a reference computed from every
rank's data, the ReduceOp mapping, the errors, a subgroup, and a killed rank. Where torch sees a
GPU (the GPU bundle), two rank processes on it: ccc.Communicator(backend="cuda") and ccc.torch on
CUDA tensors, with CUDA graph capture; they skip elsewhere. Skipped where torch is not installed
(the project's .venv has none; docs/python.md says how to run them)."""
import multiprocessing
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("this torch is built without torch.distributed", allow_module_level=True)

import ccc  # noqa: E402
import ccc.torch  # noqa: E402

COUNT = 1001  # odd: partial last tiles
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int32, torch.int64,
          torch.uint8] + [t for t in (getattr(torch, "uint32", None), getattr(torch, "uint64", None)) if t]  # >= 2.3
OP_DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.uint8]  # every ReduceOp on these
OPS = [(dist.ReduceOp.PRODUCT, "prod"), (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max"),
       (dist.ReduceOp.AVG, "avg")]  # and the ccc op each must run
CTX = multiprocessing.get_context("spawn")  # not forked: a fork would copy this process's threads' state


def data(rank, dtype, count=COUNT):
    # Small values: sums and products of four ranks' are exact in every type (bf16 and int8 too).
    return ((torch.arange(count) + rank) % 3 + 1).to(dtype)


def everyone(nranks, dtype, count=COUNT):
    """Every rank's data, exactly, as float64 (int64 for integer types) rows."""
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    return torch.stack([data(r, dtype, count).to(wide) for r in range(nranks)])


def fold(rows, op):
    if op == dist.ReduceOp.SUM:
        return rows.sum(0)
    if op == dist.ReduceOp.PRODUCT:
        return rows.prod(0)
    if op == dist.ReduceOp.MIN:
        return rows.min(0).values
    if op == dist.ReduceOp.MAX:
        return rows.max(0).values
    # AVG: ccc multiplies floats by 1/N (exact for N = 2, 4) and divides integers (values >= 0).
    return rows.sum(0) / len(rows) if rows.is_floating_point() else rows.sum(0) // len(rows)


def assert_equal(got, want, what):
    """Bit-exact: every value here is exact in every type. `what` names the call in a failure."""
    torch.testing.assert_close(got, want.to(got.dtype), rtol=0, atol=0, msg=lambda m: f"{what}: {m}")


def check_collectives(comm, nranks, rank):
    assert (comm.rank, comm.size, comm.backend, comm.device) == (rank, nranks, "host", torch.device("cpu"))
    for dtype in DTYPES:
        rows = everyone(nranks, dtype)
        x = data(rank, dtype)
        comm.all_reduce(x)
        assert_equal(x, rows.sum(0), f"all_reduce {dtype}")
        x, residual = data(rank, dtype), data(7, dtype)  # the same residual on every rank
        comm.all_reduce(x, residual=residual)
        assert_equal(x, rows.sum(0) + data(7, dtype).to(rows.dtype), f"all_reduce + residual {dtype}")
        if dtype in (torch.float32, torch.float16, torch.bfloat16):  # then RMSNorm over rows of 7
            x, sums, weight = data(rank, dtype, 7 * 11), torch.zeros(7 * 11, dtype=dtype), data(3, dtype, 7)
            comm.all_reduce(x, residual=data(7, dtype, 7 * 11), rms_weight=weight, residual_out=sums)
            s = (everyone(nranks, dtype, 7 * 11).sum(0) + data(7, dtype, 7 * 11).double()).reshape(11, 7)
            want = s / torch.sqrt((s * s).mean(1, keepdim=True) + 1e-6) * weight.double()
            assert_equal(sums, s.flatten(), f"all_reduce + residual + rmsnorm {dtype}: residual_out")
            torch.testing.assert_close(x.double().reshape(11, 7), want, rtol=1e-2, atol=1e-2)
            # And quantised to fp8 in the same kernel: torch's own conversion of the output / scale.
            x, quant = data(rank, dtype, 7 * 11), torch.zeros(7 * 11, dtype=torch.float8_e4m3fn)
            comm.all_reduce(x, residual=data(7, dtype, 7 * 11), rms_weight=weight, quant_out=quant, scale=0.01)
            want_q = (x.float() * (1 / torch.tensor(0.01))).clamp(-448, 448).to(torch.float8_e4m3fn)
            assert_equal(quant.view(torch.uint8), want_q.view(torch.uint8), f"all_reduce + rmsnorm + fp8 {dtype}")
        root = nranks - 1
        x = data(rank, dtype)
        comm.reduce(x, dst=root)
        assert_equal(x, rows.sum(0) if rank == root else rows[rank], f"reduce {dtype}")  # only dst's is written
        x = data(rank, dtype)
        comm.broadcast(x, src=root)
        assert_equal(x, rows[root], f"broadcast {dtype}")
        gathered = torch.zeros(nranks, COUNT, dtype=dtype)  # torch's shape: concatenated on dim 0
        comm.all_gather_into_tensor(gathered, data(rank, dtype))
        assert_equal(gathered, rows, f"all_gather_into_tensor {dtype}")
        block = torch.zeros(COUNT, dtype=dtype)
        comm.reduce_scatter_tensor(block, torch.cat([data(p * nranks + rank, dtype) for p in range(nranks)]))
        # Rank r's input block p is data(p * nranks + r); this rank's output sums its block.
        assert_equal(block, everyone(nranks * nranks, dtype)[rank * nranks:(rank + 1) * nranks].sum(0),
                     f"reduce_scatter_tensor {dtype}")
        out = torch.zeros(nranks * COUNT, dtype=dtype)
        comm.all_to_all_single(out, data(rank, dtype, nranks * COUNT))
        want = torch.cat([everyone(nranks, dtype, nranks * COUNT)[p, rank * COUNT:(rank + 1) * COUNT]
                          for p in range(nranks)])
        assert_equal(out, want, f"all_to_all_single {dtype}")
    for dtype in OP_DTYPES:
        rows = everyone(nranks, dtype)
        for op, _ in OPS:
            x = data(rank, dtype)
            comm.all_reduce(x, op=op)
            assert_equal(x, fold(rows, op), f"all_reduce {op} {dtype}")


def check_errors(comm, nranks, rank):
    """Each is refused before any rank communicates, so every rank raises it and goes on."""
    x = data(rank, torch.float32)
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR, dist.ReduceOp.PREMUL_SUM):
        with pytest.raises(ccc.InvalidArgumentError, match="not supported; ccc reduces with ReduceOp.SUM"):
            comm.all_reduce(x, op=op)
    with pytest.raises(ccc.InvalidArgumentError, match="unknown op 'xor'"):
        comm.all_reduce(x, op="xor")
    for dtype in (torch.bool, torch.complex64, torch.int16):
        with pytest.raises(ccc.InvalidArgumentError, match=f"tensor: {dtype} is not supported"):
            comm.all_reduce(torch.ones(8, dtype=dtype))
    with pytest.raises(ccc.InvalidArgumentError, match="tensor: the tensor is not contiguous"):
        comm.all_reduce(torch.ones(8, 8).t())
    with pytest.raises(ccc.InvalidArgumentError, match="tensor: the tensor is not contiguous"):
        comm.broadcast(torch.ones(16)[::2])
    with pytest.raises(ccc.InvalidArgumentError, match="output_tensor: torch.int32 differs from the other"):
        comm.all_gather_into_tensor(torch.zeros(nranks * 8, dtype=torch.int32), torch.ones(8))
    with pytest.raises(ccc.InvalidArgumentError, match=r"recv must hold ranks \(\d\) x send elements"):
        comm.all_gather_into_tensor(torch.zeros(8), torch.ones(8))
    with pytest.raises(ccc.InvalidArgumentError, match="expected a torch.Tensor, not list"):
        comm.all_reduce([1.0, 2.0])
    with pytest.raises(ccc.InvalidArgumentError, match="tensor is on meta, the communicator on cpu"):
        comm.all_reduce(torch.ones(8, device="meta"))
    with pytest.raises(ccc.InvalidArgumentError, match="not 'meta'"):
        ccc.torch.Communicator(device="meta")
    if not torch.cuda.is_available():  # with a GPU, test_two_cuda_ranks runs CUDA communicators
        with pytest.raises(ccc.NoDeviceError, match="torch sees no CUDA device"):
            ccc.torch.Communicator(device="cuda")
    # Still in step after the refusals; a tensor that requires grad is fine (ccc takes it detached).
    y = torch.ones(8, requires_grad=True)
    comm.all_reduce(y)
    assert_equal(y.detach(), torch.full((8,), float(nranks)), "all_reduce of a tensor that requires grad")


def check_subgroup(nranks, rank):
    """A communicator over a subgroup: its ranks and src are the group's (not the global ones)."""
    if nranks < 3:
        return
    members = [1, nranks - 1]
    group = dist.new_group(members)  # every rank takes part in making it
    if rank not in members:
        with pytest.raises(ccc.InvalidUsageError, match="not one of its ranks"):
            ccc.torch.Communicator(group)
        return
    with ccc.torch.Communicator(group, timeout=10) as comm:
        assert (comm.rank, comm.size) == (members.index(rank), 2)
        x = torch.full((8,), rank, dtype=torch.int64)
        comm.broadcast(x, src=1)
        assert_equal(x, torch.full((8,), nranks - 1), "broadcast on a subgroup")


def every_check(nranks, rank):
    with ccc.torch.Communicator(timeout=10) as comm:
        check_collectives(comm, nranks, rank)
        check_errors(comm, nranks, rank)
    check_subgroup(nranks, rank)
    return "ok"


def killed(nranks, rank):
    comm = ccc.torch.Communicator(timeout=1)
    x = torch.ones(1000, dtype=torch.int32)
    comm.all_reduce(x)
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        comm.all_reduce(x)
        return "no error"
    except ccc.RemoteError as e:
        return f"RemoteError after {time.monotonic() - start:.1f} s: {e}"


def worker(init_file, nranks, rank, task, results):
    try:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=nranks)
        results.put((rank, task(nranks, rank)))
    except BaseException as e:  # reported to the test, which names the rank
        results.put((rank, f"{type(e).__name__}: {e}"))
    # A peer that was killed leaves gloo's teardown nothing to wait for: no destroy_process_group.


def run(tmp_path, task, nranks, timeout=300):
    results = CTX.Queue()
    init_file = tmp_path / "torch-store"
    procs = [CTX.Process(target=worker, args=(init_file, nranks, r, task, results)) for r in range(nranks)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + timeout
    while len(got) < sum(1 for p in procs if p.exitcode in (None, 0)) and time.monotonic() < deadline:
        try:
            rank, what = results.get(timeout=1)
            got[rank] = what
        except Exception:  # queue.Empty: look at who is still alive
            pass
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
    return got, [p.exitcode for p in procs]


def warm_up(nranks):
    """Compiles the ranks' kernels once, into the JIT cache they share, on an in-process
    communicator making the same calls (the same kernels), rather than in every rank at once."""
    with ccc.Communicator(nranks, backend="host") as c:
        for dtype in DTYPES:
            xs = [data(r, dtype) for r in range(nranks)]
            c.all_reduce(xs)
            c.reduce(xs, root=nranks - 1)
            c.broadcast(xs, root=nranks - 1)
            c.all_gather(xs, [torch.zeros(nranks * COUNT, dtype=dtype) for _ in xs])
            c.reduce_scatter([torch.cat([x] * nranks) for x in xs], [torch.zeros_like(x) for x in xs])
            c.all_to_all([torch.cat([x] * nranks) for x in xs], [torch.zeros(nranks * COUNT, dtype=dtype)
                                                                  for _ in xs])
        for dtype in OP_DTYPES:
            for _, name in OPS:
                c.all_reduce([data(r, dtype) for r in range(nranks)], op=name)


@pytest.mark.parametrize("nranks", [2, 4])
def test_every_collective_and_dtype(tmp_path, nranks):
    warm_up(nranks)
    got, codes = run(tmp_path, every_check, nranks)
    assert got == {r: "ok" for r in range(nranks)}, got
    assert codes == [0] * nranks


def test_a_killed_rank_fails_the_others(tmp_path):
    got, codes = run(tmp_path, killed, 3, timeout=60)
    assert codes[1] == -signal.SIGKILL
    for r in (0, 2):
        assert got[r].startswith("RemoteError") and "timed out" in got[r], got
        assert float(got[r].split()[2]) < 5, got  # the 1 s timeout, not a hang


# The CUDA tests run where torch sees a GPU (the GPU bundle's python/check.sh); two rank processes
# share the one GPU there, time-slicing it, hence the long collective timeout (as ccc_gpu_tests'
# CudaMultiProcess.TwoRanksOnOneDevice).
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
CUDA_TIMEOUT = 120


def cuda_ranks_all_reduce(nranks, rank):
    """ccc.Communicator(rank=, nranks=, uid=, backend="cuda") on torch CUDA tensors: queued on
    torch's current stream, waited for by synchronize()."""
    uid = [ccc.get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(uid, src=0)
    comm = ccc.Communicator(rank=rank, nranks=nranks, uid=uid[0], backend="cuda", device=0, timeout=CUDA_TIMEOUT)
    assert (comm.size, comm.backend) == (nranks, "cuda")
    rows = everyone(nranks, torch.float32)
    x = data(rank, torch.float32).cuda()
    out = torch.zeros_like(x)
    comm.all_reduce(x, out)
    comm.all_reduce(x, op="max")  # in place
    comm.synchronize()
    assert_equal(out.cpu(), rows.sum(0), "all_reduce on CUDA tensors")
    assert_equal(x.cpu(), rows.max(0).values, "in-place all_reduce max on CUDA tensors")
    with pytest.raises(ccc.InvalidArgumentError, match="the cuda backend needs CUDA device arrays, not host memory"):
        comm.all_reduce(torch.ones(8))
    comm.destroy()
    return "ok"


def replay(comm, graph, tensor, nranks, rank, what):
    """Replays `graph` (an all_reduce of `tensor`, float32) on new inputs and checks each sum."""
    for i in range(1, 4):
        tensor.copy_(data(rank + i, torch.float32))
        graph.replay()
        comm.synchronize()
        want = torch.stack([data(r + i, torch.float32).to(torch.float64) for r in range(nranks)]).sum(0)
        assert_equal(tensor.cpu(), want, f"replay {i} of {what}")


def cuda_tensors(nranks, rank):
    """ccc.torch on CUDA tensors: every collective on torch's current stream, with no wait
    between calls; a tensor on the wrong device; an all_reduce captured in a CUDA graph and
    replayed on new inputs, staged and (graph_capture) in place; a registered tensor."""
    comm = ccc.torch.Communicator(device="cuda", timeout=CUDA_TIMEOUT)
    assert (comm.backend, comm.device) == ("cuda", torch.device("cuda", torch.cuda.current_device()))
    f32 = torch.float32
    rows = everyone(nranks, f32)
    results = {}  # the calls are queued back to back; read once synchronize() has waited
    x = data(rank, f32).cuda()
    comm.all_reduce(x)
    results["all_reduce"] = (x, rows.sum(0))
    x = data(rank, torch.int32).cuda()
    comm.all_reduce(x, op=dist.ReduceOp.MAX)
    results["all_reduce max int32"] = (x, everyone(nranks, torch.int32).max(0).values)
    x = data(rank, f32).cuda()
    comm.reduce(x, dst=nranks - 1)
    results["reduce"] = (x, rows.sum(0) if rank == nranks - 1 else rows[rank])
    x = data(rank, f32).cuda()
    comm.broadcast(x, src=nranks - 1)
    results["broadcast"] = (x, rows[nranks - 1])
    gathered = torch.zeros(nranks, COUNT, dtype=f32, device="cuda")
    comm.all_gather_into_tensor(gathered, data(rank, f32).cuda())
    results["all_gather_into_tensor"] = (gathered, rows)
    block = torch.zeros(COUNT, dtype=f32, device="cuda")
    comm.reduce_scatter_tensor(block, torch.cat([data(p * nranks + rank, f32) for p in range(nranks)]).cuda())
    results["reduce_scatter_tensor"] = (block, everyone(nranks * nranks, f32)[rank * nranks:(rank + 1) * nranks].sum(0))
    out = torch.zeros(nranks * COUNT, dtype=f32, device="cuda")
    comm.all_to_all_single(out, data(rank, f32, nranks * COUNT).cuda())
    results["all_to_all_single"] = (out, torch.cat([everyone(nranks, f32, nranks * COUNT)[p, rank * COUNT:(rank + 1) * COUNT]
                                                    for p in range(nranks)]))
    comm.synchronize()
    for what, (got, want) in results.items():
        assert_equal(got.cpu(), want, f"{what} on CUDA tensors")

    with pytest.raises(ccc.InvalidArgumentError, match="tensor: the tensor is on cpu, the communicator on cuda:"):
        comm.all_reduce(torch.ones(8))

    static = data(rank, f32).cuda()
    comm.all_reduce(static)  # compiles the kernel and sizes the staging before the capture
    comm.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        comm.all_reduce(static)
    replay(comm, graph, static, nranks, rank, "the captured all_reduce")

    # Captured inside graph_capture: the graph reads the tensor in place, registered at the end.
    in_place = data(rank, f32).cuda()
    comm.all_reduce(in_place)
    comm.synchronize()
    graph = torch.cuda.CUDAGraph()
    with comm.graph_capture() as registration:
        with torch.cuda.graph(graph):
            comm.all_reduce(in_place)
    replay(comm, graph, in_place, nranks, rank, "the all_reduce captured in graph_capture")
    comm.deregister(registration)  # before the graph (and its memory) goes
    del graph

    # A registered tensor, eagerly.
    registered = data(rank, f32).cuda()
    handle = comm.register(registered)
    comm.all_reduce(registered)
    comm.synchronize()
    assert_equal(registered.cpu(), rows.sum(0), "all_reduce on a registered tensor")
    comm.deregister(handle)
    comm.destroy()
    return "ok"


@needs_cuda
@pytest.mark.parametrize("ranks", [cuda_ranks_all_reduce, cuda_tensors], ids=lambda f: f.__name__)
def test_two_cuda_ranks(tmp_path, ranks):
    got, codes = run(tmp_path, ranks, 2, timeout=2 * CUDA_TIMEOUT)
    assert got == {0: "ok", 1: "ok"}, got
    assert codes == [0, 0]


def test_import_ccc_does_not_import_torch():
    import subprocess
    import sys
    code = "import sys, ccc; assert 'torch' not in sys.modules; import ccc.torch; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env=os.environ)

