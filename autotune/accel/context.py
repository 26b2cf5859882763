"""The :class:`Context`: a device plus everything made on it, the cache of its builds
(render and compile a kernel template once per set of arguments), its arrays, queues and
views of other libraries' arrays.

The backends subclass it and fill in the ``_``-prefixed hooks.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import helpers
from .arrays import DeviceArray
from .errors import AccelError
from .identity import DeviceIdentity
from .interop import type_name
from .kernels import Program
from .queues import CommandQueue
from .render import RenderedSource, render
from .shapes import Shape, as_shape
from .sources import note_used


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
        #: set where other processes of this host run the same kernels on this device at the
        #: same moment (MPI ranks sharing a CPU device): compiling for them is then shared
        #: (:mod:`.build_locks`), even where that costs this process a wait
        self.shared_with_processes = False

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
        return np.empty(as_shape(shape), np.dtype(dtype))

    def zeros(self, queue: CommandQueue, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        """A new device array set to zero (asynchronously, on ``queue``)."""
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
        return self._foreign_array(obj, name, numpy_hint, queue=queue, dtype=dtype)

    def wrap(self, obj: Any, dtype: Any = None, shape: int | Sequence[int] | None = None, *,
             queue: CommandQueue | None = None) -> DeviceArray:
        """View another library's device array without copying (see :meth:`as_array`);
        ``dtype`` and ``shape`` describe a bare ``pyopencl.Buffer`` (the shape defaults to
        the whole buffer)."""
        if isinstance(obj, DeviceArray):
            return obj
        return self._foreign_array(obj, "the array", "", queue=queue, dtype=dtype, shape=shape)

    def _foreign_array(self, obj: Any, name: str, numpy_hint: str, *,
                       queue: CommandQueue | None = None, dtype: Any = None,
                       shape: Any = None) -> DeviceArray:
        """``obj``, not one of our arrays, viewed as a device array of this context (see
        :mod:`.interop`); with ``queue``, that queue's later work is ordered after the
        producer's."""
        if isinstance(obj, np.ndarray):
            raise TypeError(f"{name} is a numpy array; "
                            f"{numpy_hint or 'copy it with context.to_device(queue, a)'}")
        array = self._view_foreign(obj, name, dtype, shape, queue)
        if array is None:
            raise TypeError(f"{name} must be a device array, not {type_name(obj)} (this context "
                            f"views {self._views_foreign})")
        if queue is not None:
            array.foreign.order(queue)
        return array

    #: what :meth:`as_array` views without copying, for messages
    _views_foreign = "ours"

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
        return bytes(handle), as_shape(shape), dtype

    @abstractmethod
    def create_command_queue(self, *, timed: bool = False, priority: str = "normal") -> CommandQueue:
        """An in-order queue; ``timed``: its work can be timed by interval timers (on OpenCL
        this enables profiling, which some drivers make slightly slower). ``priority``
        "high": its work is scheduled ahead of other queues' pending work where the device
        can (CUDA: the greatest stream priority; a kernel's waiting blocks start before those
        of kernels on normal queues), else the queue is a normal one (OpenCL);
        :attr:`CommandQueue.priority` says which it got. Not with ``timed``."""

    @abstractmethod
    def create_tuning_command_queue(self) -> CommandQueue:
        """A timed queue whose work between :meth:`CommandQueue.start_tuning` and
        :meth:`CommandQueue.stop_tuning` is timed on the device, and which keeps
        :func:`tuning_turn`'s order."""

    @contextlib.contextmanager
    def thread_scope(self) -> Iterator[None]:
        """Make this context usable from the calling thread for the duration of the block.

        Worker threads (the tuner compiles in a pool) wrap their work in this.
        """
        yield
