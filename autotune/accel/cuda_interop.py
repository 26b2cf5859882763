"""CUDA's side of :mod:`.interop`: foreign arrays in, DLPack out, and stream ordering.

In: an object with ``__cuda_array_interface__`` (version 3 with a ``stream``, or without
``__dlpack__``) is viewed through the interface; one with ``__dlpack__`` otherwise (PyTorch's
interface is version 2, without a stream, so its tensors take the DLPack path). Ordering:

- CAI v3: the producer names the stream its work on the array was enqueued on; our queue's
  stream waits for an event recorded there (``cuEventRecord`` + ``cuStreamWaitEvent``: the host
  does not wait). No ``stream`` (or None) means no synchronisation is needed. The legacy
  default stream (1, CuPy's and PyTorch's default) needs no event: our streams are blocking
  streams, which CUDA orders after it.
- DLPack: ``obj.__dlpack__(stream=our stream)``: the producer makes our stream wait for its work.

A call site that keeps its views (the same objects passed again) asks each source to
:meth:`~.interop.Foreign.reuse` it: the object's memory and layout are compared with what was
viewed, and the queue is ordered again, once per producer stream. CuPy's arrays and PyTorch's
tensors are asked directly (pointer, shape, strides, current stream: well under a microsecond)
rather than through a new interface dictionary or capsule each call.

Out: ``CudaArray.__dlpack__(stream=s)`` makes the consumer's stream ``s`` wait for the work of
every live queue of the array's context (an array does not know which queue last wrote it),
then exports a ``"dltensor"`` capsule (:mod:`.dlpack`) that keeps the array alive.

The driver calls go through ctypes (``libcuda.so.1``), the events are reused: one per queue.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys
import weakref
from collections.abc import Hashable
from typing import Any

from . import cuda_streams, dlpack
from .errors import AccelError
from .interop import (CudaArrayInterface, Foreign, check_c_contiguous, elsewhere_error,
                      read_cuda_array_interface, type_name)

_POINTER_DEVICE_ORDINAL = 9  # CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
LEGACY_STREAM = 1  # CU_STREAM_LEGACY / cudaStreamLegacy, as in both protocols
PER_THREAD_STREAM = 2  # CU_STREAM_PER_THREAD
_libcuda: Any = None
_stream_values: Any = 0  # (write, wait) functions, None where missing, 0 before the first look


def _driver() -> Any:
    """libcuda through ctypes, as :func:`cuda_streams.driver` loads it (False where it cannot
    be loaded)."""
    global _libcuda
    if _libcuda is None:
        try:
            _libcuda = cuda_streams.driver()
        except AccelError:
            _libcuda = False
    return _libcuda


def _stream_value_functions() -> tuple[Any, Any] | None:
    """libcuda's cuStreamWriteValue32 and cuStreamWaitValue32 (the _v2 entry points where the
    driver has them), or None where they cannot be had."""
    global _stream_values
    lib = _driver()
    if not lib:
        return None
    found = _stream_values
    if found == 0:
        found = None
        fast = cuda_streams.fast_driver()  # they only enqueue: called without releasing the GIL
        for suffix in ("_v2", ""):
            try:
                write = getattr(fast, f"cuStreamWriteValue32{suffix}")
                wait = getattr(fast, f"cuStreamWaitValue32{suffix}")
            except AttributeError:
                continue
            for function in (write, wait):
                function.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32,
                                     ctypes.c_uint]
            found = (write, wait)
            break
        _stream_values = found
    return found


def stream_values_available() -> bool:
    """Whether streams can write and wait for 32-bit values in device memory here."""
    return _stream_value_functions() is not None


def stream_write_value(stream: int, address: int, value: int) -> None:
    """Enqueue on ``stream``: the 32-bit word at device ``address`` becomes ``value`` (after a
    memory barrier: the stream's earlier writes are visible first)."""
    write, _ = _stream_value_functions()
    cuda_streams.check(write(stream, address, value, 0), "cuStreamWriteValue32")


_WAIT_VALUE_GEQ = 0  # CU_STREAM_WAIT_VALUE_GEQ: (int32_t)(*addr - value) >= 0


def stream_wait_value(stream: int, address: int, value: int) -> None:
    """Enqueue on ``stream``: later work waits until the 32-bit word at ``address`` has reached
    ``value`` (a cyclic comparison: counters may wrap around)."""
    _, wait = _stream_value_functions()
    cuda_streams.check(wait(stream, address, value, _WAIT_VALUE_GEQ), "cuStreamWaitValue32")


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


def queue_event(queue: Any) -> int:
    """The queue's reusable ordering event (made on first use, destroyed with the queue)."""
    event = getattr(queue, "_order_event", None)
    if event is None:
        with queue.context.thread_scope():
            event = queue._order_event = cuda_streams.new_event()
        weakref.finalize(queue, cuda_streams.destroy_event, event)
    return event


def _in_context_of(context: Any, stream: int) -> Any:
    """Where the driver call needs ``context`` current: the special streams 1 and 2 name the
    current context's default streams (a real handle names its own context)."""
    return context.thread_scope() if stream in (1, 2) else contextlib.nullcontext()


def wait_for_stream(queue: Any, stream: int, seen: set | None = None) -> None:
    """Make ``queue``'s later work wait (on the device) for the work enqueued on the raw
    CUDA stream ``stream`` so far (1: legacy default, 2: per-thread default, else a handle).
    ``seen``: the streams this call waited for already (each is waited for once).

    Our queues' streams are blocking streams: CUDA makes their work wait for the legacy
    default stream's earlier work by itself, so that stream needs no event."""
    if stream == LEGACY_STREAM and queue.blocking:
        return  # (checked first: the common case, and the cheapest)
    ours = queue.stream.handle
    if stream == ours:
        return  # the same in-order stream
    if seen is not None:
        if stream in seen:
            return
        seen.add(stream)
    event = queue.__dict__.get("_order_event") or queue_event(queue)
    lib = _libcuda
    if stream == PER_THREAD_STREAM:  # names the current context's: ours must be current
        with queue.context.thread_scope():
            status = lib.cuEventRecord(event, stream)
    else:
        status = lib.cuEventRecord(event, stream)
    cuda_streams.check(status, "cuEventRecord")
    cuda_streams.check(lib.cuStreamWaitEvent(ours, event, 0), "cuStreamWaitEvent")


def stream_waits_for_queues(context: Any, stream: int) -> None:
    """Make the raw stream ``stream`` wait for the work so far of every live queue of
    ``context`` (what a DLPack producer owes the consumer's stream)."""
    lib = _driver()
    for queue in list(context._queues):
        ours = queue.stream.handle
        if ours == stream:
            continue
        event = queue_event(queue)
        cuda_streams.check(lib.cuEventRecord(event, ours), "cuEventRecord")
        with _in_context_of(context, stream):
            cuda_streams.check(lib.cuStreamWaitEvent(stream, event, 0), "cuStreamWaitEvent")


# In ------------------------------------------------------------------------------------------
class Producer:
    """How to ask a library directly, and cheaply, what reading its protocol would say: the
    array's memory and layout (:meth:`layout`, compared between calls) and the stream its work
    on the array is on now (:meth:`stream`: a raw handle, 1 the legacy default). Every array
    of one producer in a call is on the same current stream: it is asked for once (``seen``
    holds :attr:`token`)."""

    def __init__(self, token: Hashable):
        self.token = token

    def layout(self, obj: Any) -> tuple:
        raise NotImplementedError

    def stream(self) -> int:
        raise NotImplementedError

    def wait(self, queue: Any, seen: set | None) -> None:
        """Order ``queue`` after this producer's current stream (once per call with ``seen``)."""
        if seen is not None:
            if self.token in seen:
                return
            seen.add(self.token)
        wait_for_stream(queue, self.stream(), seen)  # (the legacy one needs no event)


class CupyProducer(Producer):
    """CuPy's answers without building its interface dictionary (``data.ptr``, its current
    stream), used only where they agree with the dictionary read when the array was viewed
    (not where CuPy's interface synchronisation is switched off, for instance)."""

    def __init__(self, cupy: Any, device: int):
        super().__init__(("cupy", device))
        self.current = cupy.cuda.get_current_stream

    def layout(self, obj: Any) -> tuple:
        return (obj.data.ptr, obj.shape, obj.strides, obj.dtype)

    def stream(self) -> int:
        return self.current().ptr or LEGACY_STREAM

    @classmethod
    def of(cls, obj: Any, described: CudaArrayInterface) -> CupyProducer | None:
        cupy = sys.modules.get("cupy")
        if cupy is None or not type(obj).__module__.startswith("cupy"):
            return None
        try:
            producer = cls(cupy, int(obj.device.id))
            agrees = obj.data.ptr == described.pointer and producer.stream() == described.stream
        except Exception:  # an unexpected CuPy: read the protocol every time
            return None
        return producer if agrees else None


class TorchProducer(Producer):
    """PyTorch's answers without a DLPack capsule: its ``__dlpack__(stream=ours)`` makes our
    stream wait for its current stream on the tensor's GPU, which is what :meth:`wait` does
    with that stream (read through ``torch._C`` where it has the fast reader, else
    ``torch.cuda.current_stream``)."""

    def __init__(self, torch: Any, index: int):
        super().__init__(("torch", index))
        self.index = index
        self.raw = getattr(getattr(torch, "_C", None), "_cuda_getCurrentRawStream", None)
        self.torch = torch

    def layout(self, obj: Any) -> tuple:
        return (obj.data_ptr(), obj.shape, obj.stride(), obj.dtype)

    def stream(self) -> int:
        raw = self.raw
        handle = raw(self.index) if raw is not None else \
            self.torch.cuda.current_stream(self.index).cuda_stream
        return handle or LEGACY_STREAM  # 0: the legacy default stream

    @classmethod
    def of(cls, obj: Any, index: int) -> TorchProducer | None:
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, getattr(torch, "Tensor", ())):
            return None
        return cls(torch, index)


def _cai_layout(cai: dict) -> tuple:
    strides = cai.get("strides")
    return (cai["data"][0], tuple(cai["shape"]), cai["typestr"],
            None if strides is None else tuple(strides))


class CaiSource(Foreign):
    """An object viewed through ``__cuda_array_interface__``; each :meth:`order` reads the
    interface again (CuPy names its *current* stream) and waits for that stream (CuPy's
    arrays are asked directly, :class:`CupyProducer`)."""

    protocol = "__cuda_array_interface__"

    def __init__(self, obj: Any, described: CudaArrayInterface, cai: dict):
        super().__init__(obj)
        self.stream = described.stream
        self.producer = CupyProducer.of(obj, described)
        self.layout = self.producer.layout(obj) if self.producer else _cai_layout(cai)

    def order(self, queue: Any, seen: set | None = None) -> None:
        stream = self.stream
        self.stream = None  # the interface read at wrapping time serves the first order only
        if stream is None:
            if self.producer is not None:
                self.producer.wait(queue, seen)
                return
            cai = self.obj.__cuda_array_interface__
            stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
        if stream is not None:
            wait_for_stream(queue, int(stream), seen)

    def reuse(self, queue: Any, seen: set | None = None) -> bool:
        if self.producer is not None:
            self.stream = None
            return super().reuse(queue, seen)
        cai = self.obj.__cuda_array_interface__
        if _cai_layout(cai) != self.layout:
            return False
        self.stream = None
        stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
        if stream is not None:
            wait_for_stream(queue, int(stream), seen)
        return True


class DLPackSource(Foreign):
    """An object viewed through DLPack; each :meth:`order` calls ``__dlpack__(stream=ours)``
    again, so that the producer orders its work up to now before our stream (the new capsule
    is dropped unused, which releases it). PyTorch's tensors are asked directly
    (:class:`TorchProducer`)."""

    protocol = "DLPack"

    def __init__(self, obj: Any, capsule: Any, ordered_on: int | None, index: int):
        super().__init__(obj)
        self.capsule = capsule  #: keeps the producer's memory alive while we view it
        self.ordered_on = ordered_on  #: the stream the wrapping capsule was made for
        self.producer = TorchProducer.of(obj, index)
        self.layout = self.producer.layout(obj) if self.producer is not None else None

    def order(self, queue: Any, seen: set | None = None) -> None:
        stream = queue.stream.handle
        if self.ordered_on == stream:
            self.ordered_on = None  # ordered when it was wrapped, for this one call
            return
        if self.producer is not None:
            self.producer.wait(queue, seen)
        else:
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
    array.foreign = CaiSource(obj, described, cai)
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
    array.foreign = DLPackSource(obj, capsule, stream, index)
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
