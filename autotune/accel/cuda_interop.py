"""CUDA's side of :mod:`.interop`: foreign arrays in, DLPack out, and stream ordering.

In: an object with ``__cuda_array_interface__`` (version 3 with a ``stream``, or without
``__dlpack__``) is viewed through the interface; one with ``__dlpack__`` otherwise (PyTorch's
interface is version 2, without a stream, so its tensors take the DLPack path). Ordering:

- CAI v3: the producer names the stream its work on the array was enqueued on; our queue's
  stream waits for an event recorded there (``cuEventRecord`` + ``cuStreamWaitEvent``: the host
  does not wait). No ``stream`` (or None) means no synchronisation is needed.
- DLPack: ``obj.__dlpack__(stream=our stream)``: the producer makes our stream wait for its work.

Out: ``CudaArray.__dlpack__(stream=s)`` makes the consumer's stream ``s`` wait for the work of
every live queue of the array's context (an array does not know which queue last wrote it),
then exports a ``"dltensor"`` capsule (:mod:`.dlpack`) that keeps the array alive.

The driver calls go through ctypes (``libcuda.so.1``), the events are reused: one per queue.
"""

from __future__ import annotations

import contextlib
import ctypes
import weakref
from typing import Any

from . import dlpack
from .interop import (Foreign, check_c_contiguous, elsewhere_error, read_cuda_array_interface,
                      type_name)

_POINTER_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
_EVENT_DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING
LEGACY_STREAM = 1  # CU_STREAM_LEGACY / cudaStreamLegacy, as in both protocols
_libcuda: Any = None


def _driver() -> Any:
    """libcuda through ctypes (False where it cannot be loaded)."""
    global _libcuda
    if _libcuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            lib.cuPointerGetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64]
            lib.cuEventCreate.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
            lib.cuEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
            lib.cuStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
            lib.cuEventDestroy_v2.argtypes = [ctypes.c_void_p]
            _libcuda = lib
        except (OSError, AttributeError):
            _libcuda = False
    return _libcuda


def _check(status: int, what: str) -> None:
    if status != 0:
        from .errors import AccelError

        raise AccelError(f"{what} failed with CUDA error {status}")


def pointer_device(pointer: int) -> int | None:
    """The ordinal of the GPU whose memory ``pointer`` is in (the driver's pointer attribute),
    or None where the driver cannot say (host or managed memory, an old driver)."""
    lib = _driver()
    if not lib or not pointer:
        return None
    ordinal = ctypes.c_int(-1)
    if lib.cuPointerGetAttribute(ctypes.byref(ordinal), _POINTER_DEVICE_ORDINAL,
                                 ctypes.c_uint64(pointer)) != 0:
        return None
    return ordinal.value if ordinal.value >= 0 else None


def _destroy_event(lib: Any, handle: int) -> None:
    try:
        lib.cuEventDestroy_v2(handle)
    except Exception:  # pragma: no cover - at interpreter exit the driver may be gone
        pass


def queue_event(queue: Any) -> int:
    """The queue's reusable ordering event (made on first use, destroyed with the queue)."""
    event = getattr(queue, "_order_event", None)
    if event is None:
        lib = _driver()
        if not lib:
            from .errors import AccelError

            raise AccelError("stream ordering needs libcuda.so.1 through ctypes, which did not "
                             "load")
        handle = ctypes.c_void_p()
        with queue.context.thread_scope():
            _check(lib.cuEventCreate(ctypes.byref(handle), _EVENT_DISABLE_TIMING), "cuEventCreate")
        event = queue._order_event = int(handle.value)
        weakref.finalize(queue, _destroy_event, lib, event)
    return event


def _in_context_of(context: Any, stream: int) -> Any:
    """Where the driver call needs ``context`` current: the special streams 1 and 2 name the
    current context's default streams (a real handle names its own context)."""
    return context.thread_scope() if stream in (1, 2) else contextlib.nullcontext()


def wait_for_stream(queue: Any, stream: int) -> None:
    """Make ``queue``'s later work wait (on the device) for the work enqueued on the raw
    CUDA stream ``stream`` so far (1: legacy default, 2: per-thread default, else a handle)."""
    ours = queue.stream.handle
    if stream == ours:
        return  # the same in-order stream
    event = queue_event(queue)
    lib = _libcuda
    with _in_context_of(queue.context, stream):
        _check(lib.cuEventRecord(event, stream), "cuEventRecord")
    _check(lib.cuStreamWaitEvent(ours, event, 0), "cuStreamWaitEvent")


def stream_waits_for_queues(context: Any, stream: int) -> None:
    """Make the raw stream ``stream`` wait for the work so far of every live queue of
    ``context`` (what a DLPack producer owes the consumer's stream)."""
    lib = _driver()
    for queue in list(context._queues):
        ours = queue.stream.handle
        if ours == stream:
            continue
        event = queue_event(queue)
        _check(lib.cuEventRecord(event, ours), "cuEventRecord")
        with _in_context_of(context, stream):
            _check(lib.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")


# In ------------------------------------------------------------------------------------------
class CaiSource(Foreign):
    """An object viewed through ``__cuda_array_interface__``; each :meth:`order` reads the
    interface again (CuPy names its *current* stream) and waits for that stream."""

    protocol = "__cuda_array_interface__"

    def __init__(self, obj: Any, stream: int | None):
        super().__init__(obj)
        self.stream = stream

    def order(self, queue: Any) -> None:
        stream = self.stream
        self.stream = None  # the interface read at wrapping time serves the first order only
        if stream is None:
            cai = self.obj.__cuda_array_interface__
            stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
        if stream is not None:
            wait_for_stream(queue, int(stream))


class DLPackSource(Foreign):
    """An object viewed through DLPack; each :meth:`order` calls ``__dlpack__(stream=ours)``
    again, so that the producer orders its work up to now before our stream (the new capsule
    is dropped unused, which releases it)."""

    protocol = "DLPack"

    def __init__(self, obj: Any, capsule: Any, ordered_on: int | None):
        super().__init__(obj)
        self.capsule = capsule  #: keeps the producer's memory alive while we view it
        self.ordered_on = ordered_on  #: the stream the wrapping capsule was made for

    def order(self, queue: Any) -> None:
        stream = queue.stream.handle
        if self.ordered_on == stream:
            self.ordered_on = None  # ordered when it was wrapped, for this one call
            return
        self.obj.__dlpack__(stream=stream)


def view(context: Any, obj: Any, name: str, queue: Any = None) -> Any:
    """``obj`` as a CudaArray of ``context`` without copying (see the module docstring), or
    None if it exposes neither protocol."""
    cai = getattr(obj, "__cuda_array_interface__", None)
    has_dlpack = hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")
    if cai is not None and (not has_dlpack or (isinstance(cai, dict) and "stream" in cai
                                               and int(cai.get("version", 0)) >= 3)):
        return _view_cai(context, obj, name, cai)
    if has_dlpack:
        return _view_dlpack(context, obj, name, queue)
    return None


def _on_this_gpu(context: Any, obj: Any, name: str, device: int | None) -> None:
    if device is not None and device != context.device_index:
        # a kernel of this context would fault on it (or read another GPU over the bus)
        raise ValueError(f"{name}: the {type_name(obj)} lives on GPU {device} but this context "
                         f"is on GPU {context.device_index}; make it on that GPU (CuPy: "
                         f"with cupy.cuda.Device({context.device_index}); PyTorch: "
                         f"device='cuda:{context.device_index}') or copy it there yourself")


def _view_cai(context: Any, obj: Any, name: str, cai: Any) -> Any:
    described = read_cuda_array_interface(name, obj, cai)
    _on_this_gpu(context, obj, name, pointer_device(described.pointer))
    array = context._wrap_pointer(described.shape, described.dtype, described.pointer, obj)
    array.foreign = CaiSource(obj, described.stream)
    return array


def _view_dlpack(context: Any, obj: Any, name: str, queue: Any) -> Any:
    kind, index = (int(v) for v in obj.__dlpack_device__())
    if kind not in (dlpack.CUDA, dlpack.CUDA_MANAGED):
        raise elsewhere_error(name, obj, f"DLPack device {dlpack.device_name(kind)}", "CUDA",
                              "copy it to this GPU yourself (for host memory: "
                              "context.to_device(queue, numpy.from_dlpack(x)))")
    _on_this_gpu(context, obj, name, index)
    stream = None if queue is None else queue.stream.handle
    capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    tensor = dlpack.read_capsule(capsule)
    check_c_contiguous(name, obj, tensor.shape, tensor.strides, 1)
    array = context._wrap_pointer(tensor.shape, tensor.dtype, tensor.pointer, obj)
    array.foreign = DLPackSource(obj, capsule, stream)
    return array


# Out -----------------------------------------------------------------------------------------
def export(array: Any, stream: Any, max_version: Any, dl_device: Any, copy: Any) -> Any:
    """``CudaArray.__dlpack__``: a capsule of the array's memory, with the consumer's
    ``stream`` ordered after our queues' work (None: the legacy default stream; -1: none)."""
    here = (dlpack.CUDA, array.context.device_index)
    if dl_device is not None and tuple(int(v) for v in dl_device) != here:
        raise BufferError(f"the array lives on CUDA device {here[1]}; exporting it to "
                          f"{dlpack.device_name(int(dl_device[0]))} would need a copy, which "
                          "is never made silently: copy it yourself (array.get(queue))")
    if copy:
        raise BufferError("copy=True asks for a copy, which this array does not make; copy it "
                          "with context.allocate and copy_from, then export that")
    if stream is None or stream == 0:  # 0 (which the standard forbids): the null stream
        stream = LEGACY_STREAM
    if isinstance(stream, bool) or not isinstance(stream, int) or stream < -1:
        raise ValueError(f"stream must be a CUDA stream handle, 1 (legacy default), 2 "
                         f"(per-thread default) or -1 (no synchronisation), not {stream!r}")
    if stream != -1:
        stream_waits_for_queues(array.context, stream)
    return dlpack.export_capsule(array.pointer, array.shape, array.dtype, here, array)
