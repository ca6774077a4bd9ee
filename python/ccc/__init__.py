"""ccc: a compiler for GPU collective schedules, and collectives that run them.

Compile-time API (the ``ccc`` command's ``check`` and ``compile``, without a subprocess)::

    import ccc
    info = ccc.check("schedules/ring.sched", ranks=8)      # raises ccc.DiagnosticError
    cuda_source = ccc.compile("schedules/ring.sched", ranks=8, emit="cu")

Collectives: one process drives every rank (like ``ncclCommInitAll``); each collective takes
one array per rank (NumPy arrays on the host backend; any DLPack or buffer-protocol array)::

    import numpy as np
    comm = ccc.Communicator(ranks=4)                       # host backend: ranks are threads
    xs = [np.full(1000, r, dtype=np.float32) for r in range(4)]
    comm.all_reduce(xs)                                    # in place: each xs[r] is now 6.0

One rank per process: ``ccc.get_unique_id()`` and ``ccc.Communicator(rank=, nranks=, uid=)``;
under torch.distributed, ``ccc.torch.Communicator(group)`` on torch tensors (``ccc.torch`` imports
torch when first used; ``import ccc`` never does).

Errors are exceptions derived from ``ccc.Error`` (see ``ccc._errors``).
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator, Literal, Optional, Sequence, TypeVar, Union

from . import _ccc
from ._ccc import CheckResult, Collective, DataType, Protocol, ReduceOp
from ._errors import (
    CompileError,
    CudaError,
    DiagnosticError,
    Error,
    InternalError,
    InvalidArgumentError,
    InvalidUsageError,
    NoDeviceError,
    RemoteError,
    SystemResourceError,
)

__all__ = [
    "CheckResult", "Collective", "DataType", "Protocol", "ReduceOp", "Communicator", "Registration", "check", "compile", "get_unique_id", "Error", "DiagnosticError", "InvalidArgumentError",
    "InvalidUsageError", "NoDeviceError", "CudaError", "CompileError", "RemoteError", "SystemResourceError",
    "InternalError",
]

#: A schedule: a path (``str`` without a newline, or ``os.PathLike``), or its text (a ``str``
#: with at least one newline).
Source = Union[str, "os.PathLike[str]"]

#: ``check(root=None)`` proves a broadcast or reduce for every root up to this many ranks (as
#: ``ccc check`` does without ``--root``); beyond it, root 0 only.
EVERY_ROOT_UP_TO = 64


def __getattr__(name: str) -> Any:
    """``ccc.torch``, imported on first use so that ``import ccc`` works without torch."""
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'ccc' has no attribute {name!r}")


_Enum = TypeVar("_Enum", DataType, ReduceOp, Protocol)


def _enum(kind: type[_Enum], value: Union[_Enum, str], what: str) -> _Enum:
    """``value`` as a member of ``kind``: a member, or ccc's name for one ("bf16", "sum", "ll")."""
    if isinstance(value, kind):
        return value
    for member in kind:
        if isinstance(value, str) and member.name.lower() == value:
            return member
    names = ", ".join(m.name.lower() for m in kind)
    raise InvalidArgumentError(f"unknown {what} {value!r} (one of: {names})")


def _source(source: Source, name: Optional[str]) -> tuple[str, Optional[str]]:
    """(name, text) for the extension: text None means "read the file called name"."""
    if isinstance(source, os.PathLike):
        return os.fspath(source), None
    if not isinstance(source, str):
        raise TypeError(f"source: expected a path or schedule text, not {type(source).__name__}")
    if "\n" in source:
        return (name or "<string>"), source
    return source, None


def check(source: Source, ranks: int, *, root: Optional[int] = None, in_place: bool = False,
          name: Optional[str] = None) -> CheckResult:
    """Parses, instantiates and verifies a schedule for ``ranks`` ranks, plans its syncs and
    lowers it with the default kernel options, as ``ccc check``: what it accepts, ``compile``
    emits.

    Args:
        source: a schedule file's path, or the schedule's text (see ``Source``).
        ranks: the number of ranks N.
        root: broadcast and reduce: the root to prove; None proves every root while
            ``ranks <= EVERY_ROOT_UP_TO``, else root 0 (like ``ccc check`` without ``--root``).
        in_place: verify for input and output being one buffer.
        name: the file name diagnostics report for schedule text (default "<string>").

    Raises:
        DiagnosticError: the schedule is wrong for N (or unreadable); carries file, line, column
            and the rendered caret text.
    """
    n, text = _source(source, name)
    return _ccc.check(n, text, ranks, root=root, every_root_up_to=EVERY_ROOT_UP_TO, in_place=in_place)


def compile(source: Source, ranks: int, *, emit: str = "cu", root: int = 0, in_place: bool = False,
            dtype: Union[DataType, str] = DataType.F32, op: Union[ReduceOp, str] = ReduceOp.SUM,
            tile_bytes: Optional[int] = None, channels: Optional[int] = None, pipeline: Optional[int] = None,
            protocol: Union[Protocol, str, None] = None, arch: str = "sm_90",
            show_syncs: bool = False,
            topology: Optional[str] = None, name: Optional[str] = None) -> Union[str, bytes]:
    """Compiles a schedule for ``ranks`` ranks, like ``ccc compile --emit EMIT``.

    Args:
        source: a schedule file's path, or the schedule's text (see ``Source``).
        ranks: the number of ranks N.
        emit: what to produce: "steps", "graph", "dot", "syncs", "svg", "cost" (predicted time per
            size on ``topology``, as TSV), "cu" (CUDA C++), "ptx" or "cubin" (NVRTC for ``arch``).
            ``ccc compile --help`` describes each.
        root: broadcast and reduce: the root.
        in_place: compile for input and output being one buffer.
        dtype, op: the element type (a ``DataType``, or its name: "f64", "f32", "f16", "bf16",
            "i64", "u64", "i32", "u32", "i8", "u8") and reduction (a ``ReduceOp``, or "sum",
            "prod", "min", "max", "avg") of the kernel.
        tile_bytes, channels, pipeline: kernel shape; None takes ``ccc compile``'s defaults.
        protocol: ``Protocol.SIMPLE`` (peer loads) or ``Protocol.LL`` (data and flag pushed in
            8-byte lines, for small messages), or their names; None: simple, and for "cost" both
            are priced (``ccc compile --protocol``).
        arch: the GPU architecture for "ptx" and "cubin".
        show_syncs: "svg": also draw the waits the sync planner kept.
        topology: "cost": the topology file to price the schedule on (required there, refused
            elsewhere); ``channels``, ``tile_bytes`` or ``protocol`` given pin the search.
        name: the file name diagnostics report for schedule text (default "<string>").

    Returns:
        The result as text; ``bytes`` for "cubin".

    Raises:
        DiagnosticError: the schedule is wrong (file, line, column, caret text).
        InvalidArgumentError: an unknown emit target, dtype, op or protocol, or an option out of
            range.
        CompileError: NVRTC refused the kernel.
    """
    n, text = _source(source, name)
    return _ccc.compile(n, text, ranks, root=root, emit=emit, in_place=in_place, dtype=_enum(DataType, dtype, "dtype"),
                        op=_enum(ReduceOp, op, "op"), tile_bytes=tile_bytes, channels=channels, pipeline=pipeline,
                        protocol=None if protocol is None else _enum(Protocol, protocol, "protocol"), arch=arch,
                        show_syncs=show_syncs, topology=topology)


def _current_stream(array: Any) -> int:
    """The CUDA stream its library would use for ``array`` now (0: the default stream)."""
    module = type(array).__module__
    if module.startswith("torch"):
        import torch
        return int(torch.cuda.current_stream(array.device).cuda_stream)
    if module.startswith("cupy"):
        import cupy
        with array.device:
            return int(cupy.cuda.get_current_stream().ptr)
    return 0


def get_unique_id() -> bytes:
    """A new multi-process communicator's id (128 bytes; ``cccGetUniqueId``).

    Starts the communicator's bootstrap root on a thread of this process, which must live until
    every rank has joined. Send the bytes to every rank's process, each of which passes them to
    ``Communicator(rank=..., nranks=..., uid=...)``."""
    return _ccc.get_unique_id()


_Handle = TypeVar("_Handle", bound="_CommunicatorHandle")


class Registration:
    """A registration of buffers with a communicator (``Communicator.register``, or
    ``Communicator.graph_capture`` once its block has ended), for ``Communicator.deregister``.
    Registrations not deregistered go with the communicator."""

    __slots__ = ("_handle", "_state")

    def __init__(self) -> None:
        self._handle = 0  # the runtime's, once registered (its address: reused after deregistering)
        self._state: Literal["pending", "registered", "failed", "deregistered"] = "pending"

    def _registered(self, handle: int) -> Registration:
        self._handle, self._state = handle, "registered"
        return self

    def __repr__(self) -> str:
        return f"<ccc.Registration {hex(self._handle) if self._state == 'registered' else self._state}>"


class _CommunicatorHandle:
    """What every communicator class here does with the extension's communicator it holds as
    ``_comm`` (``Communicator``, and ``ccc.torch.Communicator``, which holds a ``Communicator``)."""

    _comm: Any

    @property
    def backend(self) -> str:
        """"host" or "cuda"."""
        return self._comm.backend

    def synchronize(self) -> None:
        """Waits for the outstanding work (on "cuda", of every stream the calls used); raises
        RemoteError if a collective failed."""
        self._comm.synchronize()

    def destroy(self) -> None:
        """Releases the communicator; any later call raises InvalidUsageError. A call another
        thread is inside is aborted (it raises there) and waited for first."""
        self._comm.destroy()

    def __enter__(self: _Handle) -> _Handle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()


class Communicator(_CommunicatorHandle):
    """Collectives over N ranks, all driven by this process (``ccc::Communicator``), or one rank
    per process (``rank``, ``nranks``, ``uid``; host or cuda backend).

    Each collective takes one array per rank: on the "host" backend host memory (NumPy arrays,
    or anything with DLPack or the buffer protocol), on "cuda" device memory of the rank's
    device (CuPy arrays, torch tensors; issued on each array's current stream unless
    ``streams`` is given). Every array of one call has the same element type and is
    C-contiguous; recv arrays are writable. Element types: float64, float32, float16,
    bfloat16, int64, uint64, int32, uint32, int8, uint8. Ops: a ``ReduceOp``, or its name
    ("sum", "prod", "min", "max", "avg").

    Host collectives return when done. CUDA collectives are asynchronous on the streams;
    ``synchronize()`` waits and raises ``RemoteError`` if one failed. The GIL is released while
    a collective runs.

    Args:
        ranks: the number of ranks on the host backend (threads); on "cuda", defaults to
            ``len(devices)``.
        backend: "host" (the generated kernels run on threads), "cuda", or "sim": host emulation
            in virtual time on the GPUs of ``topology_file`` (docs/simulator.md), whose clock
            ``virtual_seconds()`` reads.
        devices: "cuda": one CUDA device ordinal per rank (default ``range(ranks)``).
        algo: the shipped schedule every call runs ("ring", ...); default: $CCC_ALGO, else the
            cost model's choice.
        schedule: run this schedule (a path or schedule text) for its collective.
        channels, tile_bytes: kernel shape; 0 takes the selection's choice.
        protocol: ``Protocol.SIMPLE`` or ``Protocol.LL`` (or "simple", "ll") for every call (a call over ll's 256 KiB then fails with
            InvalidArgumentError); None: the selection's choice per call.
        topology_file: the topology selection uses (host backend) and the simulator runs on
            ("sim", required); default $CCC_TOPO.
        timeout: seconds a rank waits for a peer before the collective fails (default
            $CCC_TIMEOUT, else 600: ten minutes, PyTorch's default for NCCL).
        block_threads: "host" and "sim": the threads of each thread block (1 to 1024), run as
            fibers with their own thread index and real block barriers, as on a GPU; 0:
            $CCC_HOST_BLOCK_THREADS, else 1 on "host" (the fastest), N (8 to 32) on "sim".
        timing_only: "sim": move no data (the same virtual times; the outputs are left as they
            were, protocol ll's small calls aside), so sizes beyond this machine's memory
            simulate in seconds (docs/simulator.md, "Timing only").
        graph_replays: "sim": price each launch as a replay of a CUDA graph's kernel node (the
            topology's ``graph_launch``) rather than an eager launch; selection prices alike.
        rank, nranks, uid: one rank per process (docs/runtime.md, "Multi-process
            communicators"): this process is rank ``rank`` of ``nranks``, joined through ``uid``
            from ``get_unique_id()``. The constructor returns once every rank has joined. Each
            collective then takes this rank's array alone (not a list), and ``streams`` one
            stream. On "host" it returns when done; on "cuda" it is queued on the stream and
            ``synchronize()`` waits. A failed collective leaves the communicator failed (every
            later call raises RemoteError).
        device: (rank, nranks, uid on "cuda") this rank's CUDA device ordinal; None: the device
            current in the calling thread (``torch.cuda.current_device()``, CuPy's
            ``Device()``), else 0, as ``ncclCommInitRank`` takes it.

    Raises:
        InvalidArgumentError: bad ranks, devices, device, options or timeout.
        DiagnosticError: the ``schedule`` file cannot be read. (A schedule that does not
            compile fails the first collective that runs it, with InvalidArgumentError and the
            rendered diagnostics.)
        NoDeviceError: "cuda" without a driver or device.
        CudaError: a CUDA driver call failed (named in the message).
        RemoteError: (uid) a rank did not join within the timeout.
        InvalidUsageError: (uid) the ranks disagree.
    """

    def __init__(self, ranks: Optional[int] = None, *, backend: Literal["host", "cuda", "sim"] = "host",
                 devices: Optional[Sequence[int]] = None, algo: str = "", schedule: Optional[Source] = None,
                 channels: int = 0, tile_bytes: int = 0, protocol: Union[Protocol, str, None] = None,
                 topology_file: str = "", timeout: Optional[float] = None, block_threads: int = 0,
                 timing_only: bool = False, graph_replays: bool = False, rank: Optional[int] = None,
                 nranks: Optional[int] = None,
                 uid: Optional[bytes] = None, device: Optional[int] = None) -> None:
        sched_name, sched_text = _source(schedule, None) if schedule is not None else (None, None)
        options = _ccc.comm_options(algo=algo, schedule_name=sched_name, schedule_text=sched_text, channels=channels,
                                    tile_bytes=tile_bytes,
                                    protocol=None if protocol is None else _enum(Protocol, protocol, "protocol"),
                                    topology_file=topology_file, timeout=timeout, block_threads=block_threads,
                                    timing_only=timing_only, graph_replays=graph_replays)
        self._rank = rank
        if backend not in ("host", "cuda", "sim"):
            raise InvalidArgumentError(f"backend: expected 'host', 'cuda' or 'sim', not {backend!r}")
        if timing_only and backend != "sim":
            raise InvalidArgumentError("timing_only: only the sim backend moves no data")
        if graph_replays and backend != "sim":
            raise InvalidArgumentError("graph_replays: only the sim backend prices launches (on \"cuda\", capture "
                                       "the calls in a CUDA graph)")
        if uid is not None or rank is not None or nranks is not None:
            if uid is None or rank is None or nranks is None:
                raise InvalidArgumentError("rank, nranks and uid: one rank per process needs all three")
            if ranks is not None or devices is not None:
                raise InvalidArgumentError("ranks, devices: not with rank, nranks and uid (device= is this rank's "
                                           "CUDA device)")
            if backend == "sim":
                raise InvalidArgumentError("rank, nranks, uid: the simulator runs every rank in one process")
            if backend == "host":
                if device is not None:
                    raise InvalidArgumentError("device: only the cuda backend takes a device")
                self._comm = _ccc.Communicator.host_rank(bytes(uid), nranks, rank, options)
            else:
                self._comm = _ccc.Communicator.cuda_rank(bytes(uid), nranks, rank, -1 if device is None else device,
                                                         options)
        elif device is not None:
            raise InvalidArgumentError("device: one rank per process (rank, nranks, uid) takes a device; "
                                       "a communicator of every rank takes devices")
        elif backend in ("host", "sim"):
            if ranks is None:
                raise InvalidArgumentError(f"ranks: the {backend} backend needs the number of ranks")
            if devices is not None:
                raise InvalidArgumentError("devices: only the cuda backend takes devices")
            self._comm = (_ccc.Communicator.host if backend == "host" else _ccc.Communicator.sim)(ranks, options)
        elif backend == "cuda":
            if devices is None:
                if ranks is None:
                    raise InvalidArgumentError("ranks or devices: the cuda backend needs one of them")
                devices = range(ranks)
            elif ranks is not None and ranks != len(devices):
                raise InvalidArgumentError(f"ranks ({ranks}) differs from the number of devices ({len(devices)})")
            self._comm = _ccc.Communicator.cuda(list(devices), options)

    @property
    def size(self) -> int:
        """The number of ranks."""
        return self._comm.size

    def virtual_seconds(self) -> float:
        """"sim": the virtual seconds since the communicator was made at which its last call
        ended on the simulated GPUs; the difference of two readings times the calls between.

        Raises:
            InvalidUsageError: another backend (it has no virtual time).
        """
        return self._comm.virtual_seconds()

    def critical_path(self) -> str:
        """"sim": why the last call took its time: the chain of waits, barriers and stores that
        set its end, one line each, in microseconds since its launch (docs/simulator.md).

        Raises:
            InvalidUsageError: another backend.
        """
        return self._comm.critical_path()

    @staticmethod
    def _recv(send: Sequence[Any], recv: Optional[Sequence[Any]]) -> list[Any]:
        """The arrays written: recv, or in place (None) the send arrays; each must be writable."""
        out = list(send if recv is None else recv)
        for r, a in enumerate(out):
            flags = getattr(a, "flags", None)  # NumPy (and CuPy) say it; DLPack does not
            if flags is not None and not getattr(flags, "writeable", True):
                raise InvalidArgumentError(f"{'send' if recv is None else 'recv'}[{r}]: the array is read-only")
        return out

    def _ranks(self, arrays: Any) -> Any:
        """The per-rank arrays of a call: as given, or this process's rank's array as a list."""
        return arrays if self._rank is None or arrays is None else [arrays]

    def _streams(self, send: Sequence[Any], streams: Optional[Sequence[int]]) -> list[int]:
        if streams is not None:
            return list(self._ranks(streams))
        if self.backend != "cuda":
            return []
        return [_current_stream(a) for a in send]

    def all_reduce(self, send: Sequence[Any], recv: Optional[Sequence[Any]] = None, *, op: Union[ReduceOp, str] = ReduceOp.SUM,
                   residual: Optional[Sequence[Any]] = None, rms_weight: Optional[Sequence[Any]] = None,
                   eps: float = 1e-6, residual_out: Optional[Sequence[Any]] = None,
                   quant_out: Optional[Sequence[Any]] = None, scale: Optional[float] = None,
                   streams: Optional[Sequence[int]] = None) -> None:
        """Every rank's recv gets the element-wise reduction of all sends; recv None: in place.

        residual: one array per rank (send's type and size; tensor parallelism's residual
        stream, the same on every rank) for the fused allreduce + residual: recv = reduction +
        residual, added inside the collective where each element completes (docs/epilogue.md).
        It must not overlap any recv, so it cannot be in place on the residual.

        rms_weight (with residual): one array per rank of the row's length (``hidden``; send's
        size must be a whole number of rows) for the fused RMSNorm after it: recv = s /
        sqrt(mean(s**2) + eps) * rms_weight per row, s the sum with the residual, which
        residual_out (one array per rank, send's size), when given, receives. f32 and f16 here
        (NumPy has no bf16).

        quant_out with scale (with rms_weight): one uint8 array per rank, send's size, that gets
        the output quantised to fp8 e4m3 (its bits: NumPy has no fp8), ``e4m3(recv * (1 /
        scale))`` rounded to nearest even and saturated at +-448, in the same kernel."""
        def per_rank(arrays: Any) -> list[Any]:
            return list(self._ranks(arrays)) if arrays is not None else []
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.all_reduce(list(send), self._recv(send, recv), _enum(ReduceOp, op, "op"),
                              self._streams(send, streams), per_rank(residual), per_rank(rms_weight),
                              per_rank(residual_out), float(eps), per_rank(quant_out),
                              None if scale is None else float(scale))

    def reduce(self, send: Sequence[Any], recv: Optional[Sequence[Any]] = None, *, root: int = 0,
               op: Union[ReduceOp, str] = ReduceOp.SUM, streams: Optional[Sequence[int]] = None) -> None:
        """The root's recv gets the reduction of all sends (other ranks' recv are untouched)."""
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.reduce(list(send), self._recv(send, recv), root, _enum(ReduceOp, op, "op"),
                          self._streams(send, streams))

    def broadcast(self, send: Sequence[Any], recv: Optional[Sequence[Any]] = None, *, root: int = 0,
                  streams: Optional[Sequence[int]] = None) -> None:
        """Every rank's recv gets the root's send; recv None: in place."""
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.broadcast(list(send), self._recv(send, recv), root, self._streams(send, streams))

    def all_gather(self, send: Sequence[Any], recv: Sequence[Any], *,
                   streams: Optional[Sequence[int]] = None) -> None:
        """recv[r] (ranks x count elements) gets every rank's send (count elements), in rank order.

        In place when each send[r] is recv[r]'s block r (``recv[r][r*count:(r+1)*count]``)."""
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.all_gather(list(send), self._recv(send, recv), self._streams(send, streams))

    def reduce_scatter(self, send: Sequence[Any], recv: Sequence[Any], *, op: Union[ReduceOp, str] = ReduceOp.SUM,
                       streams: Optional[Sequence[int]] = None) -> None:
        """recv[r] (count elements) gets block r of the reduction of all sends (ranks x count).

        In place when each recv[r] is send[r]'s block r."""
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.reduce_scatter(list(send), self._recv(send, recv), _enum(ReduceOp, op, "op"),
                                  self._streams(send, streams))

    def all_to_all(self, send: Sequence[Any], recv: Sequence[Any], *,
                   streams: Optional[Sequence[int]] = None) -> None:
        """Block p of recv[r] gets block r of send[p]: send and recv hold ranks blocks of equal size.

        Out of place only (recv may not overlap send)."""
        send, recv = self._ranks(send), self._ranks(recv)
        self._comm.all_to_all(list(send), self._recv(send, recv), self._streams(send, streams))

    def register(self, array: Any) -> Registration:
        """Registers this rank's ``array`` (``cccCommRegister``) so that collectives use it in
        place instead of staging it through the arena.

        One rank per process on "cuda": collective (every rank calls it, in the same order, with
        an array of its own, cudaMalloc memory such as PyTorch's caching allocator gives with
        expandable segments off); the peers open it through CUDA IPC. Not while a stream
        captures a graph (``graph_capture`` is for that). One process: nothing to do.

        Raises:
            InvalidUsageError: the host backend across processes (use arrays it never shares).
            InvalidArgumentError: memory that is not the rank's device's, or that CUDA IPC
                cannot share; on the other ranks, InvalidUsageError naming the rank.
            RemoteError: a rank did not take part within 1.5 x the timeout.
        """
        return Registration()._registered(self._comm.register_buffer(array))

    def deregister(self, registration: Registration) -> None:
        """Takes a registration back (``cccCommDeregister``; collective where ``register`` is).
        Returns once no peer maps the buffers any more, so they may be freed after it."""
        if not isinstance(registration, Registration):
            raise InvalidArgumentError(f"registration: expected a ccc.Registration, not {type(registration).__name__}")
        why = {"pending": "its graph_capture block has not ended",
               "failed": "its graph_capture block ended without registering (the block's error said why)",
               "deregistered": "it was deregistered already"}
        if registration._state != "registered":
            raise InvalidUsageError(f"registration: {why[registration._state]}")
        self._comm.deregister_buffer(registration._handle)
        registration._state = "deregistered"

    @contextlib.contextmanager
    def graph_capture(self) -> Iterator[Registration]:
        """A block around CUDA graph captures whose collectives read their arrays in place, as
        vLLM's ``capture()`` (``cccCommGraphRegisterBegin``/``End``)::

            with comm.graph_capture() as registration:
                with torch.cuda.graph(graph):
                    comm.all_reduce(x)
            graph.replay()

        Inside the block, a collective issued while its stream captures uses each cudaMalloc
        array in place (no staging copy in the graph) and remembers it. When the block ends
        (collective: every rank ends it, after its captures have ended), the ranks register
        what they remembered, and ``registration`` becomes the handle for ``deregister``. Replay
        the graphs only after that, and keep them and their memory (do not empty torch's cache)
        until the registration is taken back (or the communicator goes); launch none of them
        while ``register``, ``deregister`` or a block's end runs. If the block raises, the
        registration is still attempted, so that the peers are not left waiting, and the
        block's exception propagates. If the end fails, every rank's does and nothing is
        registered: capture those graphs again.

        Raises:
            InvalidUsageError: the host backend across processes; a block inside another; (at
                the end) a stream that captured in the block still capturing, or another rank's
                end failing.
            RemoteError: a rank did not end its block within 1.5 x the timeout.
        """
        self._comm.begin_graph_registration()
        registration = Registration()
        try:
            yield registration
        except BaseException:
            with contextlib.suppress(Error):
                registration._registered(self._comm.end_graph_registration())
            if registration._state == "pending":
                registration._state = "failed"
            raise
        try:
            registration._registered(self._comm.end_graph_registration())
        finally:
            if registration._state == "pending":
                registration._state = "failed"
