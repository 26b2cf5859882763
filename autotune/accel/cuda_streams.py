"""CUDA streams, events, copies and launches through the driver API itself (libcuda by ctypes).

pycuda makes streams of one priority only, and launches and records events on its own stream
objects. What it cannot do is done here, on raw handles:

- :class:`RawStream`: a stream of a chosen priority (``cuStreamCreateWithPriority``), for the
  queues of :meth:`CudaContext.create_command_queue` with ``priority="high"``;
- :class:`RawFunction`: a kernel's function loaded from its program's image a second time, so
  that it can be launched on such a stream (``cuLaunchKernel`` with the arguments packed as
  pycuda packs them);
- events (markers) and the asynchronous copies, on any queue's stream handle, so that every
  queue's markers and copies are one kind whatever its stream.

Every call needs the stream's context current (the callers' ``_in_context``).
"""

from __future__ import annotations

import ctypes
import functools
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .errors import AccelError

_NOT_READY = 600  # CUDA_ERROR_NOT_READY
_EVENT_DISABLE_TIMING = 2
_CARVEOUT = 9  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
_BUFFER_POINTER, _BUFFER_SIZE, _END = 1, 2, 0  # CU_LAUNCH_PARAM_*

_P, _U, _I, _S = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
_SIGNATURES = {
    "cuPointerGetAttribute": [_P, _I, ctypes.c_uint64],
    "cuEventCreate": [ctypes.POINTER(_P), _U],
    "cuEventRecord": [_P, _P],
    "cuStreamWaitEvent": [_P, _P, _U],
    "cuEventDestroy_v2": [_P],
    "cuCtxGetStreamPriorityRange": [ctypes.POINTER(_I), ctypes.POINTER(_I)],
    "cuCtxGetCurrent": [ctypes.POINTER(_P)],
    "cuStreamCreateWithPriority": [ctypes.POINTER(_P), _U, _I],
    "cuStreamSynchronize": [_P],
    "cuStreamDestroy_v2": [_P],
    "cuEventQuery": [_P],
    "cuEventSynchronize": [_P],
    "cuModuleLoadData": [ctypes.POINTER(_P), ctypes.c_char_p],
    "cuModuleGetFunction": [ctypes.POINTER(_P), _P, ctypes.c_char_p],
    "cuModuleUnload": [_P],
    "cuFuncSetAttribute": [_P, _I, _I],
    "cuLaunchKernel": [_P, _U, _U, _U, _U, _U, _U, _U, _P, _P, ctypes.POINTER(_P)],
    "cuMemcpyHtoDAsync_v2": [ctypes.c_uint64, _P, _S, _P],
    "cuMemcpyDtoHAsync_v2": [_P, ctypes.c_uint64, _S, _P],
    "cuMemcpyDtoDAsync_v2": [ctypes.c_uint64, ctypes.c_uint64, _S, _P],
    "cuMemsetD8Async": [ctypes.c_uint64, ctypes.c_ubyte, _S, _P],
}
#: calls that only enqueue or read a handle: made without releasing the GIL (ctypes.PyDLL),
#: which saves a hot loop the GIL's hand-over on every call; blocking calls (synchronize,
#: copies that may wait for the device) go through driver(), which releases it
_FAST = ("cuCtxGetCurrent", "cuLaunchKernel", "cuEventRecord", "cuStreamWaitEvent",
         "cuMemcpyDtoDAsync_v2", "cuMemsetD8Async")
_lib: Any = None
_fast: Any = None


def driver() -> Any:
    """libcuda with the signatures this module calls (an AccelError where it cannot load)."""
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name, argtypes in _SIGNATURES.items():
                getattr(lib, name).argtypes = argtypes
        except (OSError, AttributeError) as exc:
            raise AccelError(f"the CUDA driver API needs libcuda.so.1 through ctypes: {exc}") from exc
        _lib = lib
    return _lib


def fast_driver() -> Any:
    """libcuda's enqueuing calls (:data:`_FAST`), made without releasing the GIL."""
    global _fast
    if _fast is None:
        slow = driver()
        lib = ctypes.PyDLL(slow._name)
        for name in _FAST:
            function = getattr(lib, name)
            function.argtypes = getattr(slow, name).argtypes
        _fast = lib
    return _fast


_current = threading.local()


def current_context() -> int:
    """The raw handle of the context current on this thread (0: none)."""
    out = getattr(_current, "out", None)
    if out is None:
        out = _current.out = _P()
    check(fast_driver().cuCtxGetCurrent(ctypes.byref(out)), "cuCtxGetCurrent")
    return out.value or 0


def in_context(method: Callable) -> Callable:
    """Run a method of an array or queue with its context current: a process may hold contexts
    on several GPUs, and the driver applies a call to whichever is current on the thread."""

    @functools.wraps(method)
    def run(self: Any, *args: Any) -> Any:
        context = self.context
        if current_context() == context.handle:  # the driver's: no pycuda object
            return method(self, *args)
        with context.thread_scope():
            return method(self, *args)

    return run


def check(status: int, what: str) -> None:
    """An AccelError naming the driver call ``what`` unless ``status`` is CUDA_SUCCESS."""
    if status != 0:
        raise AccelError(f"{what} failed: CUDA error {status}")


# Streams -------------------------------------------------------------------------------------
def priority_range() -> tuple[int, int]:
    """The current context's stream priorities: (least, greatest); the greatest is the lowest
    number (-5 .. 0 on recent GPUs)."""
    least, greatest = _I(), _I()
    check(driver().cuCtxGetStreamPriorityRange(ctypes.byref(least), ctypes.byref(greatest)),
           "cuCtxGetStreamPriorityRange")
    return least.value, greatest.value


def _release(function: Any, handle: int) -> None:
    """``function(handle)`` (a driver call that frees ``handle``), errors ignored."""
    try:
        function(handle)
    except Exception:  # pragma: no cover - at interpreter exit the driver may be gone
        pass


class RawStream:
    """A blocking stream (it waits for the legacy default stream, as pycuda's do) of the
    current context, made with ``priority`` (see :func:`priority_range`); destroyed with the
    object."""

    def __init__(self, priority: int):
        lib = driver()
        handle = _P()
        check(lib.cuStreamCreateWithPriority(ctypes.byref(handle), 0, priority),
               "cuStreamCreateWithPriority")
        self.handle = int(handle.value)
        self.priority = priority
        weakref.finalize(self, _release, lib.cuStreamDestroy_v2, self.handle)

    def synchronize(self) -> None:
        check(driver().cuStreamSynchronize(self.handle), "cuStreamSynchronize")


# Events --------------------------------------------------------------------------------------
def new_event() -> int:
    """A new event without timing (destroy it with :func:`destroy_event`)."""
    handle = _P()
    check(driver().cuEventCreate(ctypes.byref(handle), _EVENT_DISABLE_TIMING), "cuEventCreate")
    return int(handle.value)


def destroy_event(handle: int) -> None:
    _release(driver().cuEventDestroy_v2, handle)


def record(event: int, stream: int) -> None:
    check(fast_driver().cuEventRecord(event, stream), "cuEventRecord")


def wait_event(stream: int, event: int) -> None:
    """``stream``'s later work waits for the work before ``event``'s record."""
    check(fast_driver().cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")


def event_done(event: int) -> bool:
    status = driver().cuEventQuery(event)
    if status == _NOT_READY:
        return False
    check(status, "cuEventQuery")
    return True


def event_wait(event: int) -> None:
    check(driver().cuEventSynchronize(event), "cuEventSynchronize")


# Copies --------------------------------------------------------------------------------------
def upload(pointer: int, host: Any, stream: int) -> None:
    """Host (a contiguous numpy array) to device, enqueued on ``stream``."""
    check(driver().cuMemcpyHtoDAsync_v2(pointer, host.ctypes.data, host.nbytes, stream),
           "cuMemcpyHtoDAsync")


def download(host: Any, pointer: int, stream: int) -> None:
    """Device to host (a contiguous numpy array), enqueued on ``stream``."""
    check(driver().cuMemcpyDtoHAsync_v2(host.ctypes.data, pointer, host.nbytes, stream),
           "cuMemcpyDtoHAsync")


def copy(dest: int, source: int, nbytes: int, stream: int) -> None:
    check(fast_driver().cuMemcpyDtoDAsync_v2(dest, source, nbytes, stream), "cuMemcpyDtoDAsync")


def zero(pointer: int, nbytes: int, stream: int) -> None:
    check(fast_driver().cuMemsetD8Async(pointer, 0, nbytes, stream), "cuMemsetD8Async")


# Launches ------------------------------------------------------------------------------------
class RawFunction:
    """Kernel ``name`` of a module ``image`` (cubin or PTX) loaded in the current context, to
    launch on raw streams; the module is unloaded with the object."""

    def __init__(self, image: bytes, name: str):
        lib = driver()
        module, function = _P(), _P()
        check(lib.cuModuleLoadData(ctypes.byref(module), image), "cuModuleLoadData")
        weakref.finalize(self, _release, lib.cuModuleUnload, int(module.value))
        check(lib.cuModuleGetFunction(ctypes.byref(function), module, name.encode()),
               f"cuModuleGetFunction({name})")
        self.handle = int(function.value)
        self._buffers: dict[int, tuple] = {}  # by size: (buffer, the launch's extra, its size)
        self._launch = fast_driver().cuLaunchKernel
        self._lock = threading.Lock()  # one buffer a size: one launch at a time fills it

    def set_carveout(self, percent: int) -> None:
        check(driver().cuFuncSetAttribute(self.handle, _CARVEOUT, percent), "cuFuncSetAttribute")

    def launch(self, grid: tuple[int, ...], block: tuple[int, ...], stream: int,
               packed: bytes) -> None:
        """Enqueue on ``stream`` with the arguments ``packed`` as one buffer (pycuda's
        ``_pvt_struct.pack`` of the launch format: each argument at its natural alignment).
        The driver copies the arguments at the call, so one buffer a size is reused."""
        kept = self._buffers.get(len(packed))
        if kept is None:
            buffer, size = ctypes.create_string_buffer(len(packed)), _S(len(packed))
            extra = (_P * 5)(_BUFFER_POINTER, ctypes.cast(buffer, _P), _BUFFER_SIZE,
                             ctypes.cast(ctypes.pointer(size), _P), _END)
            kept = self._buffers[len(packed)] = (buffer, extra, size)
        buffer, extra, _ = kept
        with self._lock:
            ctypes.memmove(buffer, packed, len(packed))
            status = self._launch(self.handle, grid[0], grid[1], grid[2], block[0], block[1],
                                  block[2], 0, stream, None, extra)
        if status:
            check(status, "cuLaunchKernel")
