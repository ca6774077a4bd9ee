"""ccc collectives on torch tensors, for a job that runs one process per rank under torch.distributed.

``import ccc`` never imports torch; ``import ccc.torch`` (or the first use of ``ccc.torch``)
does. The communicator is bootstrapped from a process group::

    import torch.distributed as dist
    import ccc.torch

    dist.init_process_group("gloo", init_method=..., rank=rank, world_size=world_size)
    comm = ccc.torch.Communicator()            # over dist's default group; CPU tensors
    x = torch.ones(1000)
    comm.all_reduce(x)                         # in place, like dist.all_reduce(x)
    comm.all_gather_into_tensor(out, x)        # out: world_size x x.numel() elements

On CPU tensors every collective returns when done (the host backend across processes). With
``device="cuda"`` (ccc's CUDA backend, one GPU per process) the calls take CUDA tensors and are
queued on torch's current stream without waiting, so they order with the surrounding torch work
and can be captured by ``torch.cuda.graph``; ``synchronize()`` waits and reports a failure.
docs/python.md, "PyTorch", has the semantics and what is not done yet.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Optional, Union

import torch
import torch.distributed as dist

from . import Communicator as _Communicator
from . import Registration, _CommunicatorHandle
from . import InvalidArgumentError, InvalidUsageError, NoDeviceError, get_unique_id

__all__ = ["Communicator", "DTYPES"]

#: The torch element types ccc reduces and moves (ccc's f64, f32, f16, bf16, i64, u64, i32, u32,
#: i8, u8; torch's uint32 and uint64 are the shell types of torch >= 2.3).
DTYPES = tuple(t for t in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                           getattr(torch, "uint64", None), torch.int32, getattr(torch, "uint32", None),
                           torch.int8, torch.uint8) if t is not None)

# torch.distributed.ReduceOp -> ccc's op. BAND, BOR, BXOR and PREMUL_SUM have no ccc kernel.
_OPS = ((dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.PRODUCT, "prod"), (dist.ReduceOp.MIN, "min"),
        (dist.ReduceOp.MAX, "max"), (dist.ReduceOp.AVG, "avg"))

Op = Union["dist.ReduceOp", str]


def _op(op: Op) -> str:
    """ccc's name of a torch.distributed.ReduceOp; a str is ccc's own name, which ccc checks."""
    if isinstance(op, str):
        return op
    for torch_op, name in _OPS:
        if op == torch_op:
            return name
    raise InvalidArgumentError(f"op: {op!r} is not supported; ccc reduces with ReduceOp.SUM, PRODUCT, MIN, MAX "
                               "and AVG")


def _device(device: Union[str, "torch.device", int, None]) -> "torch.device":
    """The device the communicator's tensors live on; "cuda" without an index is the current one."""
    d = torch.device("cpu" if device is None else device)
    if d.type == "cpu":
        return d
    if d.type != "cuda":
        raise InvalidArgumentError(f"device: ccc runs on 'cpu' or 'cuda' tensors, not {d.type!r}")
    if not torch.cuda.is_available():
        raise NoDeviceError(f"device {str(d)!r}: torch sees no CUDA device")
    return torch.device("cuda", torch.cuda.current_device() if d.index is None else d.index)


class Communicator(_CommunicatorHandle):
    """A ccc communicator over the ranks of a torch.distributed process group, one per process.

    Every rank of ``group`` constructs it at the same point of the program (like any collective on
    the group). Group rank 0 makes the unique id (``ccc.get_unique_id()``) and the group's own
    ``broadcast_object_list`` hands it to the others, so it works on gloo and nccl groups (on
    nccl, set the rank's CUDA device first, as that broadcast needs). Its rank and size are the
    group's.

    Args:
        group: the process group (default: torch.distributed's default group).
        device: where the tensors live: "cpu" (default; ccc's host backend, across processes
            through shared memory) or "cuda"/"cuda:N" (ccc's CUDA backend on that device, "cuda"
            being ``torch.cuda.current_device()``; calls are queued on
            ``torch.cuda.current_stream()`` and return without waiting).
        **options: ``ccc.Communicator``'s options (``algo``, ``schedule``, ``channels``,
            ``tile_bytes``, ``protocol``, ``topology_file``, ``timeout`` in seconds).

    Raises:
        InvalidArgumentError: a device that is neither CPU nor CUDA, or a bad option.
        NoDeviceError: a CUDA device where torch sees none (or ccc finds no driver).
        InvalidUsageError: a group this process is not in.
        RemoteError: a rank did not join within the timeout.
    """

    def __init__(self, group: Optional["dist.ProcessGroup"] = None, *,
                 device: Union[str, "torch.device", int, None] = None, **options: Any) -> None:
        group = group if group is not None else dist.group.WORLD
        self.device = _device(device)
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise InvalidUsageError("group: this process is not one of its ranks (dist.new_group gave it "
                                    "GroupMember.NON_GROUP_MEMBER)")
        self.size = dist.get_world_size(group)
        uid = [get_unique_id() if self.rank == 0 else None]
        dist.broadcast_object_list(uid, src=dist.get_global_rank(group, 0), group=group)
        backend, index = ("host", None) if self.device.type == "cpu" else ("cuda", self.device.index)
        self._comm = _Communicator(rank=self.rank, nranks=self.size, uid=uid[0], backend=backend, device=index,
                                   **options)

    def _tensor(self, name: str, tensor: Any, like: Optional["torch.Tensor"] = None) -> "torch.Tensor":
        """The tensor as ccc takes it (detached: DLPack refuses tensors that require grad), after
        the checks worded in torch's terms; ``like``: the other tensor of the call."""
        if not isinstance(tensor, torch.Tensor):
            raise InvalidArgumentError(f"{name}: expected a torch.Tensor, not {type(tensor).__name__}")
        if tensor.device != self.device:
            raise InvalidArgumentError(f"{name}: the tensor is on {tensor.device}, the communicator on {self.device}"
                                       " (ccc.torch.Communicator(device=...) names the device)")
        if tensor.dtype not in DTYPES:
            raise InvalidArgumentError(f"{name}: {tensor.dtype} is not supported "
                                       f"({', '.join(str(t) for t in DTYPES)})")
        if like is not None and tensor.dtype != like.dtype:
            raise InvalidArgumentError(f"{name}: {tensor.dtype} differs from the other tensor's {like.dtype}")
        if not tensor.is_contiguous():
            raise InvalidArgumentError(f"{name}: the tensor is not contiguous (ccc writes tensors in place; "
                                       "pass x.contiguous() and copy the result back)")
        return tensor.detach()

    def _fp8(self, name: str, tensor: Optional["torch.Tensor"], like: "torch.Tensor") -> Optional["torch.Tensor"]:
        """An fp8 e4m3 output as ccc takes it: its bits, viewed as uint8 (DLPack has no fp8)."""
        if tensor is None:
            return None
        if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float8_e4m3fn:
            raise InvalidArgumentError(f"{name}: expected a torch.float8_e4m3fn tensor, not "
                                       f"{getattr(tensor, 'dtype', type(tensor).__name__)}")
        if tensor.device != self.device or not tensor.is_contiguous() or tensor.numel() != like.numel():
            raise InvalidArgumentError(f"{name}: must be contiguous, on {self.device}, with {like.numel()} elements")
        return tensor.detach().view(torch.uint8)

    def all_reduce(self, tensor: "torch.Tensor", op: Op = dist.ReduceOp.SUM,
                   residual: Optional["torch.Tensor"] = None, rms_weight: Optional["torch.Tensor"] = None,
                   eps: float = 1e-6, residual_out: Optional["torch.Tensor"] = None,
                   quant_out: Optional["torch.Tensor"] = None, scale: Optional[float] = None) -> None:
        """Every rank's tensor becomes the element-wise reduction of all ranks' tensors.

        ``residual`` (a tensor like ``tensor``, the same on every rank, as tensor parallelism's
        residual stream is): the fused allreduce + residual, ``tensor = allreduce(tensor) +
        residual`` in the collective's kernel, the residual added where each element completes
        (docs/epilogue.md). It is only read and must not be ``tensor`` itself.

        ``rms_weight`` (with ``residual``; the row's ``hidden`` elements): then RMSNorm over each
        row, ``tensor = s / sqrt(mean(s**2) + eps) * rms_weight`` with ``s`` the sum with the
        residual, which ``residual_out`` (a tensor like ``tensor``), when given, receives.

        ``quant_out`` (a ``torch.float8_e4m3fn`` tensor of ``tensor``'s size) with ``scale`` (with
        ``rms_weight``): the output quantised to fp8 in the same kernel, ``quant_out =
        (tensor / scale).to(torch.float8_e4m3fn)`` with saturation at +-448 (FlashInfer's
        "residual + RMSNorm + fp8 quant" pattern, the norm's output kept in ``tensor``)."""
        x = self._tensor("tensor", tensor)
        def like_x(name: str, t: Optional["torch.Tensor"]) -> Optional["torch.Tensor"]:
            return None if t is None else self._tensor(name, t, like=x)
        self._comm.all_reduce(x, op=_op(op), residual=like_x("residual", residual),
                              rms_weight=like_x("rms_weight", rms_weight), eps=eps,
                              residual_out=like_x("residual_out", residual_out),
                              quant_out=self._fp8("quant_out", quant_out, like=x), scale=scale)

    def reduce(self, tensor: "torch.Tensor", dst: int = 0, op: Op = dist.ReduceOp.SUM) -> None:
        """Rank ``dst``'s tensor becomes the reduction of all ranks' tensors; the others' are left
        as they were. ``dst`` is a rank of this communicator (the group's rank)."""
        self._comm.reduce(self._tensor("tensor", tensor), root=dst, op=_op(op))

    def broadcast(self, tensor: "torch.Tensor", src: int = 0) -> None:
        """Every rank's tensor becomes rank ``src``'s (a rank of this communicator)."""
        self._comm.broadcast(self._tensor("tensor", tensor), root=src)

    def all_gather_into_tensor(self, output_tensor: "torch.Tensor", input_tensor: "torch.Tensor") -> None:
        """``output_tensor`` (size x input's elements) gets every rank's ``input_tensor`` in rank
        order, as torch.distributed's: concatenated along the first dimension, or in a flat tensor."""
        x = self._tensor("input_tensor", input_tensor)
        self._comm.all_gather(x, self._tensor("output_tensor", output_tensor, like=x))

    def reduce_scatter_tensor(self, output: "torch.Tensor", input: "torch.Tensor",
                              op: Op = dist.ReduceOp.SUM) -> None:
        """``output`` gets this rank's block (the rank-th ``output.numel()`` elements) of the
        reduction of every rank's ``input`` (size x output's elements)."""
        x = self._tensor("input", input)
        self._comm.reduce_scatter(x, self._tensor("output", output, like=x), op=_op(op))

    def register(self, tensor: "torch.Tensor") -> Registration:
        """Registers this rank's ``tensor`` with the communicator (``ccc.Communicator.register``):
        collectives on it then run in place, with no staging copy. Collective on "cuda" (every
        rank calls it, in the same order); the tensor's memory must come from cudaMalloc (torch's
        caching allocator without expandable segments). Keep the tensor until ``deregister``."""
        return self._comm.register(self._tensor("tensor", tensor))

    def deregister(self, registration: Registration) -> None:
        """Takes back a registration of ``register`` or ``graph_capture`` (collective on "cuda")."""
        self._comm.deregister(registration)

    def graph_capture(self) -> AbstractContextManager[Registration]:
        """A block around ``torch.cuda.graph`` captures whose collectives read their tensors in
        place, registered when the block ends (``ccc.Communicator.graph_capture``)::

            graph = torch.cuda.CUDAGraph()
            with comm.graph_capture():
                with torch.cuda.graph(graph):
                    comm.all_reduce(x)
            graph.replay()

        Without it, a captured collective copies each tensor into ccc's shared arena and back
        (two copies per call in the graph)."""
        return self._comm.graph_capture()

    def all_to_all_single(self, output: "torch.Tensor", input: "torch.Tensor") -> None:
        """Equal splits: block p of this rank's ``output`` is block (this rank) of rank p's
        ``input``; both hold size blocks of one size. Out of place only (no split sizes)."""
        x = self._tensor("input", input)
        self._comm.all_to_all(x, self._tensor("output", output, like=x))
