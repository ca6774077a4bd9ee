"""The exceptions ccc raises: one class per kind of ccc::Error, and DiagnosticError for schedules."""

from __future__ import annotations


class Error(Exception):
    """Base class of every error ccc raises."""


class InvalidArgumentError(Error, ValueError):
    """A bad array, count, element type, op, root, rank or option."""


class InvalidUsageError(Error, RuntimeError):
    """A call out of order, e.g. a communicator used after ``destroy()``."""


class NoDeviceError(Error, RuntimeError):
    """No CUDA driver, or no such device."""


class CudaError(Error, RuntimeError):
    """A CUDA driver call failed."""


class CompileError(Error, RuntimeError):
    """Generating or compiling a kernel failed (e.g. NVRTC refused it)."""


class RemoteError(Error, RuntimeError):
    """A peer rank timed out or failed during a collective."""


class SystemResourceError(Error, OSError):
    """The operating system refused a resource (a thread, memory)."""


class InternalError(Error, RuntimeError):
    """A bug in ccc."""


class DiagnosticError(Error, ValueError):
    """The compiler rejected a schedule.

    ``str(e)`` is the full report as ``ccc check`` prints it::

        ring.sched:4:10: error: MESSAGE
            <the source line>
                 ^

    Attributes:
        file: the schedule's name (its path, or the ``name=`` given with schedule text).
        line: 1-based line of the first error; 0 when it has no location (e.g. an unreadable file).
        column: 1-based column of the first error; 0 when it has no location.
        message: the first error's message alone.
        text: every diagnostic rendered with its source line and caret (``str(e)``).
    """

    def __init__(self, text: str, file: str, line: int, column: int, message: str) -> None:
        super().__init__(text.rstrip("\n"))
        self.text = text
        self.file = file
        self.line = line
        self.column = column
        self.message = message
