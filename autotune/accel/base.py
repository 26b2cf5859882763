"""Backend-neutral device layer: contexts, programs, kernels, queues and device arrays.

The CUDA and OpenCL backends subclass these and fill in the ``_``-prefixed hooks; everything a
user or an operation touches (argument checks, caching, timing rules) lives here once.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import helpers, interop
from .errors import AccelError, LaunchError
from .identity import DeviceIdentity
from .render import RenderedSource, render
from .sources import note_used

logger = logging.getLogger("autotune.accel")

Shape = tuple[int, ...]

_turn: ContextVar[Callable[[], None] | None] = ContextVar("autotune_tuning_turn", default=None)


@contextlib.contextmanager
def tuning_turn(wait: Callable[[], None]) -> Iterator[None]:
    """Within the block, work this thread puts on a *tuning* queue first calls ``wait()``.

    A caller that prepares work ahead of time in other threads (the tuner compiles candidates
    in a pool) uses it to keep that work's device commands in order: ``wait`` returns when it is
    this thread's turn. Compiling and allocating do not wait; uploads, copies, fills, launches,
    downloads and ``finish`` on a tuning queue do.
    """
    token = _turn.set(wait)
    try:
        yield
    finally:
        _turn.reset(token)


def _as_shape(shape: int | Sequence[int]) -> Shape:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"shape {out} has a negative extent")
    return out


def _as_sizes(sizes: int | Sequence[int], what: str) -> tuple[int, ...]:
    if isinstance(sizes, (int, np.integer)):
        sizes = (int(sizes),)
    sizes = tuple(int(s) for s in sizes)
    if not 1 <= len(sizes) <= 3 or any(s <= 0 for s in sizes):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {sizes}")
    return sizes


@dataclass(frozen=True)
class KernelLimits:
    """Per-kernel limits known after compilation."""

    max_work_group_size: int  #: given this kernel's registers and local memory
    registers: int | None  #: per work-item, CUDA only
    local_memory: int  #: static local/shared memory per work-group, bytes
    private_memory: int  #: per work-item spill/private memory, bytes
    preferred_multiple: int  #: warp size / preferred work-group size multiple


class Kernel(ABC):
    """One kernel function of a :class:`Program`."""

    def __init__(self, program: Program, name: str):
        self.program = program
        self.name = name

    @property
    @abstractmethod
    def limits(self) -> KernelLimits: ...

    def set_carveout(self, percent: int) -> None:
        """Prefer ``percent`` (0 to 100) of the multiprocessor's combined L1 cache and local
        (shared) memory as local memory for this kernel's launches, or -1 for the driver's own
        choice (CUDA's preferred shared memory carve-out; a hint the driver may round). A
        backend without the setting (OpenCL) accepts only -1."""
        if isinstance(percent, bool) or not isinstance(percent, int) or not -1 <= percent <= 100:
            raise ValueError(f"carve-out must be an int from 0 to 100 (percent of the L1/shared "
                             f"storage as shared memory) or -1 (the driver's choice), got {percent!r}")
        self._set_carveout(percent)

    def _set_carveout(self, percent: int) -> None:
        if percent != -1:
            raise LaunchError(f"kernel {self.name}: this backend has no L1/shared carve-out "
                              "setting; leave it at -1 (the driver's choice)")

    def check_launch(self, global_size: Sequence[int], local_size: Sequence[int]) -> None:
        """Raise :class:`LaunchError` if this launch configuration cannot run on the device."""
        g = _as_sizes(global_size, "global_size")
        loc = _as_sizes(local_size, "local_size")
        if len(g) != len(loc):
            raise LaunchError(f"global_size {g} and local_size {loc} have different dimensions")
        for gs, ls in zip(g, loc):
            if gs % ls:
                raise LaunchError(
                    f"global_size {g} is not a multiple of local_size {loc}; round the global "
                    "size up and guard the tail in the kernel"
                )
        wgs = math.prod(loc)
        limit = self.limits.max_work_group_size
        if wgs > limit:
            raise LaunchError(
                f"kernel {self.name}: work-group of {wgs} items exceeds its limit of {limit} "
                f"(registers {self.limits.registers}, local memory {self.limits.local_memory} B)"
            )


class Program(ABC):
    """A compiled kernel source. ``compile_seconds`` is how long the compiler took."""

    def __init__(self, context: Context, source: RenderedSource, compile_seconds: float,
                 log: str, compiler: str):
        self.context = context
        self.source = source
        self.compile_seconds = compile_seconds
        self.log = log
        self.compiler = compiler
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def get_kernel(self, name: str) -> Kernel:
        with self._lock:
            kernel = self._kernels.get(name)
            if kernel is None:
                kernel = self._kernels[name] = self._get_kernel(name)
            return kernel

    @abstractmethod
    def _get_kernel(self, name: str) -> Kernel: ...


class DeviceArray(ABC):
    """A contiguous array in device memory."""

    #: where an array viewing another library's memory came from (:class:`.interop.Foreign`:
    #: the object, kept alive, and how to order work after its producer's); None for ours
    foreign: Any = None

    def __init__(self, context: Context, shape: int | Sequence[int], dtype: Any):
        self.context = context
        self.shape = _as_shape(shape)
        self.dtype = np.dtype(dtype)
        if self.dtype.hasobject:
            raise TypeError(f"dtype {self.dtype} holds Python objects and cannot live on a device")
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize

    def __repr__(self) -> str:
        return f"<{type(self).__name__} shape={self.shape} dtype={self.dtype}>"

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A DLPack capsule of this array's memory (no copy) where the backend can export one
        (CUDA); BufferError otherwise. See :mod:`.interop`."""
        raise BufferError(f"{self.context.backend} device arrays do not export DLPack (their "
                          "memory has no address another library could use); copy the "
                          "contents with array.get(queue)")

    def __dlpack_device__(self) -> tuple[int, int]:
        """(DLPack device type, device index) of this array's memory."""
        return (4, 0)  # kDLOpenCL: overridden where the backend exports

    def _check_host(self, host: np.ndarray, what: str) -> np.ndarray:
        if not isinstance(host, np.ndarray):
            raise TypeError(f"{what} must be a numpy array, not {type(host).__name__}")
        if host.shape != self.shape:
            raise ValueError(f"{what} has shape {host.shape}, the device array {self.shape}")
        if host.dtype != self.dtype:
            raise TypeError(
                f"{what} has dtype {host.dtype}, the device array {self.dtype}; "
                f"convert with .astype({self.dtype.name!r}) first"
            )
        return host

    def _check_peer(self, other: DeviceArray) -> None:
        if not isinstance(other, DeviceArray):
            raise TypeError(f"expected a DeviceArray, not {type(other).__name__}")
        if other.context is not self.context:
            raise AccelError("the two device arrays belong to different contexts")
        if other.shape != self.shape or other.dtype != self.dtype:
            raise ValueError(
                f"shape/dtype mismatch: {other.shape} {other.dtype} vs {self.shape} {self.dtype}"
            )

    def set(self, queue: CommandQueue, host: np.ndarray, *, wait: bool = True) -> None:
        """Copy a numpy array of the same shape and dtype to the device (waits for it).

        ``wait=False`` only enqueues the copy (``host`` must be C-contiguous, and stay
        unchanged until the queue has run the copy); from an array of
        :meth:`Context.empty_host` it is truly asynchronous on CUDA."""
        self._check_host(host, "host array")
        if not wait and not host.flags.c_contiguous:
            raise ValueError("an asynchronous copy needs a C-contiguous host array")
        host = np.ascontiguousarray(host)
        queue._wait_turn()
        queue._before_waiting()
        if self.nbytes:
            queue._record(self._upload(queue, host))
            if wait:
                queue.finish()

    def get(self, queue: CommandQueue, out: np.ndarray | None = None, *,
            wait: bool = True) -> np.ndarray:
        """Copy the device contents to a new (or the given) numpy array.

        ``wait=False`` only enqueues the copy: ``out`` holds the contents once ``queue.finish()``
        returns. Into an array from :meth:`Context.empty_host` the copy is then truly
        asynchronous on CUDA, and costs the least latency.
        """
        if out is None:
            out = np.empty(self.shape, self.dtype)
        else:
            self._check_host(out, "out")
            if not out.flags.c_contiguous:
                raise ValueError("out must be C-contiguous")
        queue._wait_turn()
        queue._before_waiting()
        if self.nbytes:
            queue._record(self._download(queue, out))
            if wait:
                queue.finish()
        return out

    def read(self, queue: CommandQueue, start: int, stop: int) -> np.ndarray:
        """Copy elements ``start:stop`` of the flattened array to a new numpy array."""
        start, stop = int(start), int(stop)
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"range {start}:{stop} is outside an array of {self.size} elements")
        out = np.empty(stop - start, self.dtype)
        queue._wait_turn()
        queue._before_waiting()
        if stop > start:
            queue._record(self._download_range(queue, out, start * self.dtype.itemsize))
            queue.finish()
        return out

    def view(self, start: int, stop: int, shape: int | Sequence[int] | None = None) -> DeviceArray:
        """Elements ``start:stop`` of the flattened array as an array of its own (no copy).

        The view shares memory with this array and keeps it alive. On OpenCL the start must
        fall on the device's base-address alignment (a clear error says so otherwise).
        """
        if not 0 <= start <= stop <= self.size:
            raise IndexError(f"range {start}:{stop} is outside an array of {self.size} elements")
        shape = (stop - start,) if shape is None else _as_shape(shape)
        if math.prod(shape) != stop - start:
            raise ValueError(f"shape {shape} does not hold {stop - start} elements")
        return self._view(start * self.dtype.itemsize, shape)

    @abstractmethod
    def _view(self, offset: int, shape: Shape) -> DeviceArray: ...

    def zero(self, queue: CommandQueue) -> None:
        """Set every byte to zero (asynchronously, on ``queue``)."""
        queue._wait_turn()
        if self.nbytes:
            queue._record(self._fill_zero(queue))

    def copy_from(self, queue: CommandQueue, other: DeviceArray) -> None:
        """Device-to-device copy of ``other`` into this array (asynchronously, on ``queue``)."""
        self._check_peer(other)
        queue._wait_turn()
        if self.nbytes:
            queue._record(self._copy_from(queue, other))

    @property
    @abstractmethod
    def kernel_arg(self) -> Any:
        """What the backend passes to a kernel for this array."""

    @abstractmethod
    def _upload(self, queue: CommandQueue, host: np.ndarray) -> Any: ...

    @abstractmethod
    def _download(self, queue: CommandQueue, host: np.ndarray) -> Any: ...

    @abstractmethod
    def _download_range(self, queue: CommandQueue, host: np.ndarray, offset: int) -> Any: ...

    @abstractmethod
    def _fill_zero(self, queue: CommandQueue) -> Any: ...

    @abstractmethod
    def _copy_from(self, queue: CommandQueue, other: DeviceArray) -> Any: ...


class IntervalTimer(ABC):
    """The device time of the work a queue runs between :meth:`start` and :meth:`stop`, read
    later without stalling the host: :meth:`ready` asks whether that work has finished,
    :meth:`seconds` waits for it. One timer is reused for many intervals (start it again once
    read); at most one timer of a queue runs at a time. From :meth:`CommandQueue.interval_timer`.

    The device's wait for the host before the first command is not counted (OpenCL profiles
    from the first command's start; CUDA holds the queue at :meth:`start` until :meth:`stop`,
    so the work then runs back to back, gaps between its commands left out too). So the work
    timed must not wait for itself: a call that waits for the queue (``queue.finish()``, a
    blocking copy) lets it run first.
    """

    def __init__(self, queue: CommandQueue):
        self.queue = queue
        self.running = False

    def _open(self) -> None:
        """Let the timed work run now (before a wait for the queue); nothing where it runs."""

    def start(self) -> None:
        if self.running:
            raise AccelError("IntervalTimer.start called twice without stop")
        if self.queue._interval is not None:
            raise AccelError("another interval timer of this queue is running")
        self.running = True
        self.queue._interval = self
        self._start()

    def stop(self) -> None:
        if not self.running:
            raise AccelError("IntervalTimer.stop called without start")
        self.running = False
        self.queue._interval = None
        self._stop()

    def ready(self) -> bool:
        """Whether the timed work has finished (never waits)."""
        return not self.running and self._ready()

    def seconds(self) -> float:
        """Device seconds from the start of the first command timed to the end of the last;
        waits for them to finish."""
        if self.running:
            raise AccelError("IntervalTimer.seconds called before stop")
        return self._seconds()

    @abstractmethod
    def _start(self) -> None: ...

    @abstractmethod
    def _stop(self) -> None: ...

    @abstractmethod
    def _ready(self) -> bool: ...

    @abstractmethod
    def _seconds(self) -> float: ...


class Marker(ABC):
    """A point in a queue's work (from :meth:`CommandQueue.mark`)."""

    queue: CommandQueue

    @abstractmethod
    def ready(self) -> bool:
        """Whether the work enqueued before the marker has finished (never waits)."""

    @abstractmethod
    def wait(self) -> None:
        """Wait until the work enqueued before the marker has finished."""


class CommandQueue(ABC):
    """An in-order queue of device work.

    A *tuning* queue times everything enqueued between :meth:`start_tuning` and
    :meth:`stop_tuning` with device-side timestamps, copies included. Any queue whose context
    made it with ``timed=True`` (and every tuning queue) can also time intervals of its work
    without waiting for it (:meth:`interval_timer`), as online tuning does.
    """

    def __init__(self, context: Context, tuning: bool, timed: bool = False):
        self.context = context
        self.tuning = tuning
        self.timed = tuning or timed
        self._timing = False
        self._interval: IntervalTimer | None = None

    def interval_timer(self) -> IntervalTimer:
        """A new reusable :class:`IntervalTimer` on this queue (allocate them up front: a
        timer holds device events)."""
        if not self.timed:
            raise AccelError("timing intervals needs a queue made with "
                             "context.create_command_queue(timed=True)")
        return self._interval_timer()

    @abstractmethod
    def _interval_timer(self) -> IntervalTimer: ...

    def mark(self) -> Marker:
        """A :class:`Marker` of the work enqueued so far: waiting on it does not wait for work
        enqueued after it (the host can act on a copy while a later kernel runs)."""
        return self._mark()

    @abstractmethod
    def _mark(self) -> Marker: ...

    def wait_for(self, marker: Marker) -> None:
        """Make work enqueued on this queue from now on wait (on the device, the host does not)
        until the work before ``marker`` has finished: ``marker`` may come from another queue
        of the same context, so that a copy on a second queue overlaps a kernel on the first."""
        if not isinstance(marker, Marker):
            raise TypeError(f"expected a Marker from queue.mark(), not {type(marker).__name__}")
        if marker.queue.context is not self.context:
            raise AccelError("the marker belongs to a queue of another context")
        self._wait_for(marker)

    @abstractmethod
    def _wait_for(self, marker: Marker) -> None: ...

    def enqueue_kernel(self, kernel: Kernel, args: Sequence[Any],
                       global_size: int | Sequence[int], local_size: int | Sequence[int]) -> None:
        """Launch ``kernel`` over ``global_size`` work-items in groups of ``local_size``.

        ``args`` are :class:`DeviceArray` objects and numpy scalars (``np.int32(n)``): a bare
        Python number is rejected because its C type would be a guess.
        """
        kernel.check_launch(global_size, local_size)
        g = _as_sizes(global_size, "global_size")
        loc = _as_sizes(local_size, "local_size")
        self._check_args(kernel, args)
        self._wait_turn()
        self._record(self._launch(kernel, list(args), g, loc))

    def launcher(self, kernel: Kernel, global_size: int | Sequence[int],
                 local_size: int | Sequence[int]) -> Callable[[Sequence[Any]], None]:
        """``enqueue_kernel`` with the launch configuration checked once, for hot loops.

        The returned ``launch(args)`` checks its arguments on the first call and again whenever
        their types change; otherwise it only enqueues.
        """
        kernel.check_launch(global_size, local_size)
        g = _as_sizes(global_size, "global_size")
        loc = _as_sizes(local_size, "local_size")
        checked: list[tuple] = []
        ordered = self.tuning

        def launch(args: Sequence[Any]) -> None:
            types = tuple(map(type, args))
            if not checked or checked[0] != types:
                self._check_args(kernel, args)
                checked[:] = [types]
            if ordered:
                self._wait_turn()
            self._record(self._launch(kernel, args, g, loc))

        return launch

    def _check_args(self, kernel: Kernel, args: Sequence[Any]) -> None:
        for i, a in enumerate(args):
            if isinstance(a, DeviceArray):
                if a.context is not self.context:
                    raise AccelError(f"argument {i} belongs to another context")
            elif not isinstance(a, np.generic):
                raise TypeError(
                    f"kernel {kernel.name} argument {i} is {type(a).__name__}; pass a DeviceArray "
                    "or a numpy scalar such as np.int32(n) or np.float32(x)"
                )

    @abstractmethod
    def _launch(self, kernel: Kernel, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...]) -> Any: ...

    def finish(self) -> None:
        """Wait until everything enqueued so far has completed."""
        self._wait_turn()
        self._before_waiting()
        self._finish()

    def _before_waiting(self) -> None:
        """Before anything that may wait for this queue (finish, a marker's wait, a copy
        between host and device: from pageable host memory the driver waits): the running
        interval's work may run now."""
        if self._interval is not None:
            self._interval._open()

    @abstractmethod
    def _finish(self) -> None: ...

    def _wait_turn(self) -> None:
        if self.tuning:
            wait = _turn.get()
            if wait is not None:
                wait()

    def start_tuning(self) -> None:
        if not self.tuning:
            raise AccelError("start_tuning needs a queue from context.create_tuning_command_queue()")
        if self._timing:
            raise AccelError("start_tuning called twice without stop_tuning")
        self._timing = True
        self._start_timing()

    def stop_tuning(self) -> float:
        """Seconds of device time from :meth:`start_tuning` to the end of the last command."""
        if not self._timing:
            raise AccelError("stop_tuning called without start_tuning")
        self._timing = False
        return self._stop_timing()

    def _record(self, event: Any) -> None:
        """Called with whatever the backend returns for each enqueued command."""

    @abstractmethod
    def _start_timing(self) -> None: ...

    @abstractmethod
    def _stop_timing(self) -> float: ...


def _frozen(value: Any) -> Any:
    """A hashable stand-in for a plain render argument; TypeError for anything else."""
    if value is None or isinstance(value, (str, bool, int, float, np.dtype, np.generic)):
        return (type(value).__name__, value)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((_frozen(k), _frozen(v)) for k, v in value.items()))
    raise TypeError(type(value).__name__)


def _resolved(template: str) -> str:
    """The template's real path (a few system calls a folder: cached for absolute paths, as
    templates name themselves, and builds in background threads hold the interpreter lock
    while they look it up)."""
    if not os.path.isabs(template):
        return str(Path(template).resolve())
    return _resolved_absolute(template)


@functools.lru_cache(maxsize=256)
def _resolved_absolute(template: str) -> str:
    return str(Path(template).resolve())


def _build_key(template: str | Path, render_kws: dict[str, Any] | None,
               extra_dirs: tuple[str | Path, ...], options: Sequence[str]) -> tuple | None:
    """What identifies a build without rendering it, or None where that cannot be told: objects
    other than plain values could change behind an equal-looking key. (A cached build is reused
    only while every template file it was rendered from is unchanged.)"""
    try:
        return (_resolved(str(template)), _frozen(render_kws or {}),
                tuple(str(d) for d in extra_dirs), tuple(options))
    except TypeError:
        return None


class Context(ABC):
    """A device plus everything created on it: programs, arrays and queues."""

    backend: str

    def __init__(self, device: DeviceIdentity):
        self.device = device
        self._programs: dict[tuple[str, tuple[str, ...]], Program] = {}
        #: build() arguments -> (program, the template files it was rendered from)
        self._built: dict[tuple, tuple[Program, tuple]] = {}
        #: build() arguments another thread is building -> set when that build is over
        self._building: dict[tuple, threading.Event] = {}
        self._programs_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device.describe()}>"

    # Programs ------------------------------------------------------------------------------
    def build(self, template: str | Path, render_kws: dict[str, Any] | None = None, *,
              extra_dirs: tuple[str | Path, ...] = (), options: Sequence[str] = ()) -> Program:
        """Render a ``.mako`` kernel template for this device and compile it (cached)."""
        key = _build_key(template, render_kws, extra_dirs, options)
        if key is None:
            return self._build(template, render_kws, extra_dirs, options)[0]
        while True:  # skip re-rendering: a template's construction stays cheap in loops
            with self._programs_lock:
                built = self._built.get(key)
                busy = self._building.get(key)
            if built is not None and all(f.unchanged() for f in built[1]):
                note_used(built[1])
                return built[0]
            if busy is not None:
                # the same build is under way in another thread (online tuning prepares
                # candidates that differ only in launch parameters at once): use its program,
                # or build here if it failed (this thread then reports its own error)
                busy.wait()
                continue
            with self._programs_lock:
                if key in self._building:  # another thread started it meanwhile
                    continue
                done = self._building[key] = threading.Event()
            break
        try:
            program, files = self._build(template, render_kws, extra_dirs, options)
            with self._programs_lock:  # with the files of this render
                self._built[key] = (program, files)
        finally:
            with self._programs_lock:
                del self._building[key]
            done.set()
        return program

    def _build(self, template: str | Path, render_kws: dict[str, Any] | None,
               extra_dirs: tuple[str | Path, ...], options: Sequence[str]
               ) -> tuple[Program, tuple]:
        """Render and compile (in a helper process where this thread builds in helpers):
        the program and the template files it was rendered from (it may be an equal one's)."""
        source = program = None
        if helpers.active():
            source, program = self._build_in_helper(template, render_kws, extra_dirs, options)
        if source is None:
            source = render(template, self.backend, render_kws, extra_dirs=extra_dirs,
                            header_kws={"backend": self.backend})
        if program is None:
            program = self.compile(source, options)
        return program, source.files

    def compile(self, source: RenderedSource, options: Sequence[str] = ()) -> Program:
        """Compile rendered source; identical (source, options) pairs are compiled once."""
        key = (source.text, tuple(options))
        with self._programs_lock:
            program = self._programs.get(key)
        if program is not None:
            return program
        start = time.perf_counter()
        program = self._compile(source, tuple(options), start)
        with self._programs_lock:
            return self._programs.setdefault(key, program)

    @abstractmethod
    def _compile(self, source: RenderedSource, options: tuple[str, ...], start: float) -> Program:
        ...

    def _build_in_helper(self, template: str | Path, render_kws: dict[str, Any] | None,
                         extra_dirs: tuple[str | Path, ...], options: Sequence[str]
                         ) -> tuple[RenderedSource | None, Program | None]:
        """Render in a helper process, and compile there where the backend can (see
        :mod:`.helpers`); ``(None, None)`` if the helper could not, so that the build runs
        here and reports its own error."""
        reply = helpers.run(("render", str(Path(template).resolve()), self.backend,
                             dict(render_kws or {}), tuple(str(d) for d in extra_dirs),
                             self._helper_target(tuple(options))))
        if reply is None:
            return None, None
        source, compiled, seconds = reply
        note_used(source.files)
        if compiled is None:
            return source, None
        key = (source.text, tuple(options))
        with self._programs_lock:
            program = self._programs.get(key)
        if program is None:
            program = self._program_from_helper(source, compiled, seconds)
            with self._programs_lock:
                program = self._programs.setdefault(key, program)
        return source, program

    def start_build_helpers(self) -> None:
        """Start the processes that :func:`builds_in_helpers` builds go to, now and without
        waiting: they ready themselves (and, on CUDA, NVRTC) in the background, before the
        builds of a computation that is about to run (online tuning's candidates)."""
        helpers.start(self._helper_target(()))

    def _helper_target(self, options: tuple[str, ...]) -> Any:
        """What a helper needs to compile for this device, or None where only this process can
        (OpenCL programs belong to their context)."""
        return None

    def _program_from_helper(self, source: RenderedSource, compiled: Any, seconds: float) -> Program:
        raise NotImplementedError

    # Memory and queues -----------------------------------------------------------------------
    @abstractmethod
    def allocate(self, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        """A new uninitialised device array."""

    def empty_host(self, shape: int | Sequence[int], dtype: Any) -> np.ndarray:
        """A host array that the device copies to and from fastest (page-locked on CUDA)."""
        return np.empty(_as_shape(shape), np.dtype(dtype))

    def zeros(self, queue: CommandQueue, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        arr = self.allocate(shape, dtype)
        arr.zero(queue)
        return arr

    def to_device(self, queue: CommandQueue, host: np.ndarray) -> DeviceArray:
        """A new device array holding a copy of ``host``."""
        host = np.ascontiguousarray(host)
        arr = self.allocate(host.shape, host.dtype)
        arr.set(queue, host)
        return arr

    def as_array(self, obj: Any, name: str = "array", numpy_hint: str = "", *,
                 queue: CommandQueue | None = None, dtype: Any = None) -> DeviceArray:
        """``obj`` as a device array of this context: ours as is, another library's array
        viewed in place (CUDA: ``__cuda_array_interface__`` or DLPack, as CuPy, PyTorch, JAX and
        Numba export; OpenCL: ``pyopencl.array.Array`` or ``pyopencl.Buffer``; see
        :mod:`.interop`). With ``queue``, its later work waits for the producer's work on the
        array. ``dtype`` types a bare ``pyopencl.Buffer``.

        Anything that would need a copy is refused with an error saying so; a numpy array with
        ``numpy_hint`` (what to do instead).
        """
        if isinstance(obj, DeviceArray):
            if obj.context is not self:
                raise AccelError(f"{name} belongs to another context ({obj.context.device.name}); "
                                 "copy it through the host (get, then to_device) first")
            return obj
        return interop.as_array(self, obj, name, numpy_hint, queue=queue, dtype=dtype)

    def wrap(self, obj: Any, dtype: Any = None, shape: int | Sequence[int] | None = None, *,
             queue: CommandQueue | None = None) -> DeviceArray:
        """View another library's device array without copying (see :meth:`as_array`);
        ``dtype`` and ``shape`` describe a bare ``pyopencl.Buffer`` (the shape defaults to
        the whole buffer)."""
        if isinstance(obj, DeviceArray):
            return obj
        return interop.as_array(self, obj, "the array", "", queue=queue, dtype=dtype,
                                shape=shape)

    def _view_foreign(self, obj: Any, name: str, dtype: Any, shape: Any,
                      queue: CommandQueue | None) -> DeviceArray | None:
        """The backend's view of ``obj`` (None: not an array it can view)."""
        return None

    # Memory other processes open -------------------------------------------------------------
    #: the length of the handle :meth:`share` returns (0: the backend cannot share memory)
    SHARE_HANDLE_BYTES = 0

    def share(self, array: DeviceArray) -> bytes | None:
        """A handle through which another process of this host opens ``array``'s memory
        (:meth:`open_shared`), or None where the backend cannot share device memory between
        processes (OpenCL). ``array`` must be a whole allocation of this context, not a view;
        it must outlive every process that opened it."""
        return None

    def open_shared(self, handle: bytes, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        """The device array another process of this host shared (:meth:`share`), mapped into
        this context: copies into and out of it run device to device (over NVLink or PCIe
        between two GPUs). Raises :class:`AccelError` where the memory cannot be mapped here."""
        raise AccelError(f"the {self.backend} backend cannot open memory of another process; "
                         "exchange through host memory instead")

    def _check_share_handle(self, handle: Any, shape: int | Sequence[int], dtype: Any
                            ) -> tuple[bytes, Shape, np.dtype]:
        if not isinstance(handle, (bytes, bytearray)) or len(handle) != self.SHARE_HANDLE_BYTES:
            raise ValueError(f"a shared-memory handle is {self.SHARE_HANDLE_BYTES} bytes made by "
                             f"Context.share, got {type(handle).__name__} of "
                             f"{len(handle) if isinstance(handle, (bytes, bytearray)) else '?'}")
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise TypeError(f"dtype {dtype} holds Python objects and cannot live on a device")
        return bytes(handle), _as_shape(shape), dtype

    @abstractmethod
    def create_command_queue(self, *, timed: bool = False) -> CommandQueue:
        """An in-order queue; ``timed``: its work can be timed by interval timers (on OpenCL
        this enables profiling, which some drivers make slightly slower)."""

    @abstractmethod
    def create_tuning_command_queue(self) -> CommandQueue: ...

    @contextlib.contextmanager
    def thread_scope(self) -> Iterator[None]:
        """Make this context usable from the calling thread for the duration of the block.

        Worker threads (the tuner compiles in a pool) wrap their work in this.
        """
        yield
