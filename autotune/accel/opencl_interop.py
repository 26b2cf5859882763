"""OpenCL's side of :mod:`.interop`: ``pyopencl.array.Array`` and ``pyopencl.Buffer`` objects
of a context viewed as its device arrays, and ordering after their producer's work.

A pyopencl array's events and queue order our queue's later work after its producer's; a bare
buffer names no queue, so its writer's work must be finished first. Arrays of other device
kinds (CUDA, other DLPack devices) are refused by name.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .interop import NO_COPY, Foreign, elsewhere_error, non_contiguous_error, type_name
from .shapes import as_shape

if TYPE_CHECKING:  # pragma: no cover
    from .arrays import DeviceArray
    from .queues import CommandQueue


class PyOpenCLSource(Foreign):
    """A ``pyopencl.array.Array``: our queue waits for the events its contents depend on and,
    when it has a queue other than ours, for everything enqueued there so far."""

    protocol = "pyopencl"

    def __init__(self, obj: Any):
        super().__init__(obj)
        self.layout = _layout(obj)

    def reuse(self, queue: CommandQueue, seen: set | None = None) -> bool:
        if _layout(self.obj) != self.layout:
            return False
        self.order(queue, seen)
        return True

    def order(self, queue: CommandQueue, seen: set | None = None) -> None:
        """Make ``queue``'s later work wait for the array's events and its queue's work."""
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

    def reuse(self, queue: CommandQueue, seen: set | None = None) -> bool:
        return True  # a buffer's memory and size never change; it orders nothing


def _layout(array: Any) -> tuple:
    """What a pyopencl array's view depends on: its buffer, offset, shape and dtype."""
    return (array.base_data, array.offset, array.shape, array.dtype)


def _opencl_types() -> tuple[Any, Any]:
    try:
        import pyopencl as cl
        import pyopencl.array as cl_array
    except ImportError:  # pragma: no cover - an OpenCL context implies pyopencl
        return None, None
    return cl, cl_array


def view(context: Any, obj: Any, name: str, dtype: Any = None,
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
                         f"{NO_COPY}: make it with this context's context.cl_context (and a "
                         "queue of it), or copy it through the host yourself")


def _buffer_view(context: Any, buffer: Any, offset: int, shape: Any, dtype: Any, name: str,
                 obj: Any) -> DeviceArray:
    shape, dtype = as_shape(shape), np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    if offset + nbytes > buffer.size:
        raise ValueError(f"{name}: {shape} {dtype} from byte {offset} needs {offset + nbytes} "
                         f"bytes, but its buffer has {buffer.size}")
    if offset == 0:
        return context._wrap_buffer(buffer, shape, dtype)
    align = context.cl_device.mem_base_addr_align // 8
    if offset % align:
        raise ValueError(f"{name} ({type_name(obj)}) starts at byte {offset} of its buffer, "
                         f"not at a multiple of the device's {align}-byte sub-buffer alignment; "
                         f"{NO_COPY}: pass a copy (x.copy()) or an aligned slice")
    # our views of this one are cut from the whole buffer (OpenCL has no sub-sub-buffers)
    whole = context._wrap_buffer(buffer, (buffer.size,), np.dtype(np.uint8))
    return context._wrap_buffer(buffer.get_sub_region(offset, max(nbytes, 1)), shape, dtype,
                                parent=whole, offset=offset)


def refuse_elsewhere(context: Any, obj: Any, name: str) -> None:
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
