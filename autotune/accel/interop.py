"""Arrays of other libraries as device arrays, without copying ("arrays as they are").

:meth:`Context.as_array <autotune.accel.Context.as_array>` (which every operation's device entry
points use) and :meth:`Context.wrap <autotune.accel.Context.wrap>` come here for anything that
is not already one of our :class:`~autotune.accel.DeviceArray` objects:

- on CUDA, objects with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, pycuda) or with
  ``__dlpack__``/``__dlpack_device__`` (JAX, PyTorch, CuPy, ...) on this context's GPU
  (:mod:`.cuda_interop`);
- on OpenCL, ``pyopencl.array.Array`` and ``pyopencl.Buffer`` objects of this context.

The result views the same memory and keeps the object alive; its :attr:`DeviceArray.foreign`
says where it came from and orders a queue's later work after the producer's (CAI v3's
``stream``, DLPack's ``__dlpack__(stream=...)``, a pyopencl array's queue and events).
Where viewing would need a copy (a non-contiguous view, memory of another device or device
type, another OpenCL context, a sub-buffer OpenCL cannot cut) the object is refused with an
error saying so: nothing is ever copied silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from .base import CommandQueue, Context, DeviceArray

_NO_COPY = "viewing it would need a copy, which is never made silently"


class Foreign:
    """Where a device array viewing another library's array came from
    (:attr:`DeviceArray.foreign`); :meth:`order` makes a queue's later work wait for the work
    the producer enqueued on the array so far."""

    protocol = "none"

    def __init__(self, obj: Any):
        self.obj = obj

    def order(self, queue: CommandQueue) -> None:
        """Nothing to wait for (the protocol gives no stream or event)."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {type(self.obj).__name__} via {self.protocol}>"


def type_name(obj: Any) -> str:
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    return cls.__name__ if module == "builtins" else f"{module}.{cls.__name__}"


def non_contiguous_error(name: str, obj: Any) -> ValueError:
    return ValueError(f"{name} ({type_name(obj)}) is not C-contiguous; the kernels need "
                      f"contiguous memory and {_NO_COPY}: pass a contiguous copy "
                      "(x.copy(), x.contiguous(), ascontiguousarray) yourself")


def check_c_contiguous(name: str, obj: Any, shape: tuple[int, ...],
                       strides: tuple[int, ...] | None, unit: int) -> None:
    """ValueError unless ``strides`` (None: C-contiguous) describe C order; ``unit`` is what a
    stride of one element counts (the item size for byte strides, 1 for element strides).
    Extents of 1 may have any stride; an empty array is contiguous."""
    if strides is None or 0 in shape:
        return
    if len(strides) != len(shape):
        raise ValueError(f"{name} ({type_name(obj)}) has {len(strides)} strides for "
                         f"{len(shape)} dimensions; pass a well-formed array")
    step = unit
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != step:
            raise non_contiguous_error(name, obj)
        step *= extent


def elsewhere_error(name: str, obj: Any, where: str, backend: str, fix: str) -> ValueError:
    return ValueError(f"{name} ({type_name(obj)}) lives on {where}, which this {backend} "
                      f"context cannot use directly; {_NO_COPY}: {fix}")


@dataclass(frozen=True)
class CudaArrayInterface:
    """A ``__cuda_array_interface__`` dictionary, checked."""

    pointer: int
    shape: tuple[int, ...]
    dtype: np.dtype
    stream: int | None  #: None: no synchronisation needed (or a v2 producer)
    version: int


def read_cuda_array_interface(name: str, obj: Any, cai: Any) -> CudaArrayInterface:
    """The checked contents of ``obj.__cuda_array_interface__`` (``cai``): ValueError or
    TypeError naming the problem for a masked, read-only, non-contiguous or malformed one."""
    if not isinstance(cai, dict) or "shape" not in cai or "typestr" not in cai or "data" not in cai:
        raise TypeError(f"{name} ({type_name(obj)}) has a malformed __cuda_array_interface__ "
                        "(needs shape, typestr and data)")
    if cai.get("mask") is not None:
        raise ValueError(f"{name} ({type_name(obj)}) is a masked array; pass its data without "
                         "the mask")
    shape = tuple(int(n) for n in cai["shape"])
    dtype = np.dtype(cai["typestr"])
    if dtype.hasobject or not dtype.isnative:
        raise TypeError(f"{name} ({type_name(obj)}) has dtype {dtype}, which kernels cannot "
                        "read; convert it to a native numeric dtype first")
    strides = cai.get("strides")
    check_c_contiguous(name, obj, shape, None if strides is None else tuple(strides),
                       dtype.itemsize)
    pointer, readonly = cai["data"]
    if readonly:
        raise ValueError(f"{name} ({type_name(obj)}) is read-only; kernels may write to "
                         "device arrays, so pass a writable array")
    version = int(cai.get("version", 0))
    stream = cai.get("stream") if version >= 3 else None
    if stream == 0:
        raise ValueError(f"{name} ({type_name(obj)}) gives stream 0 in its "
                         "__cuda_array_interface__, which the protocol forbids (ambiguous); "
                         "its producer should give 1 (legacy default stream) or 2 (per-thread)")
    return CudaArrayInterface(int(pointer or 0), shape, dtype,
                              None if stream is None else int(stream), version)


# OpenCL --------------------------------------------------------------------------------------
class PyOpenCLSource(Foreign):
    """A ``pyopencl.array.Array``: our queue waits for the events its contents depend on and,
    when it has a queue other than ours, for everything enqueued there so far."""

    protocol = "pyopencl"

    def order(self, queue: CommandQueue) -> None:
        import pyopencl as cl

        waits = list(self.obj.events)
        theirs = self.obj.queue
        if theirs is not None and theirs != queue.handle:
            waits.append(cl.enqueue_marker(theirs))
        if waits:
            cl.enqueue_barrier(queue.handle, wait_for=waits)


class BufferSource(Foreign):
    """A bare ``pyopencl.Buffer``: it names no queue, so nothing can be waited for (finish the
    work that writes it first)."""

    protocol = "cl.Buffer"


def _opencl_types() -> tuple[Any, Any]:
    try:
        import pyopencl as cl
        import pyopencl.array as cl_array
    except ImportError:  # pragma: no cover - an OpenCL context implies pyopencl
        return None, None
    return cl, cl_array


def view_opencl(context: Any, obj: Any, name: str, dtype: Any = None,
                shape: Any = None) -> DeviceArray | None:
    """``obj`` (a pyopencl array or buffer of this context) as an OpenCL device array without
    copying; None if it is neither; an error naming the problem where it cannot be viewed."""
    cl, cl_array = _opencl_types()
    if cl is None:
        return None
    if isinstance(obj, cl_array.Array):
        _same_context(context, obj, name)
        if not obj.flags.c_contiguous:
            raise non_contiguous_error(name, obj)
        if obj.base_data is None:  # an empty pyopencl array has no buffer
            array = context.allocate(obj.shape, obj.dtype)
        else:
            array = _buffer_view(context, obj.base_data, obj.offset, obj.shape, obj.dtype, name,
                                 obj)
        array.foreign = PyOpenCLSource(obj)
        return array
    if isinstance(obj, cl.Buffer):
        _same_context(context, obj, name)
        if dtype is None:
            raise TypeError(f"{name} is a bare pyopencl.Buffer, which carries no dtype; "
                            "view it with context.wrap(buffer, dtype, shape)")
        dtype = np.dtype(dtype)
        if shape is None:
            if obj.size % dtype.itemsize:
                raise ValueError(f"{name}: a buffer of {obj.size} bytes does not hold whole "
                                 f"{dtype} elements; pass shape= explicitly")
            shape = (obj.size // dtype.itemsize,)
        array = _buffer_view(context, obj, 0, shape, dtype, name, obj)
        array.foreign = BufferSource(obj)
        return array
    return None


def _same_context(context: Any, obj: Any, name: str) -> None:
    if obj.context != context.cl_context:
        raise ValueError(f"{name} ({type_name(obj)}) belongs to another OpenCL context; "
                         f"{_NO_COPY}: make it with this context's context.cl_context (and a "
                         "queue of it), or copy it through the host yourself")


def _buffer_view(context: Any, buffer: Any, offset: int, shape: Any, dtype: Any, name: str,
                 obj: Any) -> DeviceArray:
    from .base import _as_shape
    from .opencl import OpenCLArray

    shape, dtype = _as_shape(shape), np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes > buffer.size:
        raise ValueError(f"{name}: {shape} {dtype} from byte {offset} needs {offset + nbytes} "
                         f"bytes, but its buffer has {buffer.size}")
    if offset == 0:
        return OpenCLArray(context, shape, dtype, buffer=buffer)
    align = context.cl_device.mem_base_addr_align // 8
    if offset % align:
        raise ValueError(f"{name} ({type_name(obj)}) starts at byte {offset} of its buffer, "
                         f"not at a multiple of the device's {align}-byte sub-buffer alignment; "
                         f"{_NO_COPY}: pass a copy (x.copy()) or an aligned slice")
    # our views of this one are cut from the whole buffer (OpenCL has no sub-sub-buffers)
    whole = OpenCLArray(context, buffer.size, np.uint8, buffer=buffer)
    return OpenCLArray(context, shape, dtype, buffer=buffer.get_sub_region(offset, max(nbytes, 1)),
                       parent=whole, offset=offset)


def refuse_elsewhere_on_opencl(context: Any, obj: Any, name: str) -> None:
    """Named errors for arrays of other device kinds offered to an OpenCL context."""
    fix = "copy it to the host yourself (numpy) and then with context.to_device(queue, a)"
    if getattr(obj, "__cuda_array_interface__", None) is not None:
        raise elsewhere_error(name, obj, "a CUDA device", "OpenCL", fix)
    device = _dlpack_device(obj)
    if device is not None:
        from .dlpack import device_name

        raise elsewhere_error(name, obj, f"DLPack device {device_name(device[0])}", "OpenCL", fix)


def _dlpack_device(obj: Any) -> tuple[int, int] | None:
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        return None
    kind, index = obj.__dlpack_device__()
    return int(kind), int(index)


# Entry points ----------------------------------------------------------------------------------
def as_array(context: Context, obj: Any, name: str, numpy_hint: str, *,
             queue: CommandQueue | None = None, dtype: Any = None,
             shape: Any = None) -> DeviceArray:
    """``obj`` viewed as a device array of ``context`` (see the module docstring); with
    ``queue``, that queue's later work is ordered after the producer's."""
    if isinstance(obj, np.ndarray):
        raise TypeError(f"{name} is a numpy array; "
                        f"{numpy_hint or 'copy it with context.to_device(queue, a)'}")
    array = context._view_foreign(obj, name, dtype, shape, queue)
    if array is None:
        raise TypeError(f"{name} must be a device array, not {type_name(obj)} (this context "
                        f"views {accepted(context)})")
    if queue is not None:
        array.foreign.order(queue)
    return array


def accepted(context: Any) -> str:
    """What ``context`` views without copying, for messages."""
    if context.backend == "cuda":
        return ("ours, or any object with __cuda_array_interface__ or __dlpack__ on this GPU: "
                "CuPy, PyTorch, JAX, Numba")
    if context.backend == "opencl":
        return "ours, a pyopencl.array.Array or a pyopencl.Buffer of this context"
    return "ours"
