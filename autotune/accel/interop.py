"""Arrays of other libraries as device arrays, without copying ("arrays as they are").

:meth:`Context.as_array <autotune.accel.Context.as_array>` (which every operation's device entry
points use) and :meth:`Context.wrap <autotune.accel.Context.wrap>` come here for anything that
is not already one of our :class:`~autotune.accel.DeviceArray` objects:

- on CUDA, objects with ``__cuda_array_interface__`` (CuPy, PyTorch, Numba, pycuda) or with
  ``__dlpack__``/``__dlpack_device__`` (JAX, PyTorch, CuPy, ...) on this context's GPU
  (:mod:`.cuda_interop`);
- on OpenCL, ``pyopencl.array.Array`` and ``pyopencl.Buffer`` objects of this context
  (:mod:`.opencl_interop`).

The result views the same memory and keeps the object alive; its :attr:`DeviceArray.foreign`
says where it came from and orders a queue's later work after the producer's (CAI v3's
``stream``, DLPack's ``__dlpack__(stream=...)``, a pyopencl array's queue and events).
Where viewing would need a copy (a non-contiguous view, memory of another device or device
type, another OpenCL context, a sub-buffer OpenCL cannot cut) the object is refused with an
error saying so: nothing is ever copied silently.

This module holds what both backends' sides share: :class:`Foreign`, the refusals' messages,
the contiguity check and the reading of ``__cuda_array_interface__``.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

import numpy as np

from .roles import QueueRole

#: why an object is refused, in the messages
NO_COPY = "viewing it would need a copy, which is never made silently"


class Foreign:
    """Where a device array viewing another library's array came from
    (:attr:`DeviceArray.foreign`); :meth:`order` makes a queue's later work wait for the work
    the producer enqueued on the array so far, and :meth:`reuse` lets a call site that keeps
    its last views (the same objects passed again) use them again, ordered anew."""

    protocol = "none"
    #: the library asked directly, where one can be (``layout(obj)``, ``wait(queue, seen)``,
    #: ``token``: :class:`.cuda_interop.Producer`); None: :meth:`reuse` reads the protocol
    producer: Any = None
    layout: tuple = ()  #: what ``producer.layout(obj)`` said when the object was viewed

    def __init__(self, obj: Any):
        self.obj = obj

    def order(self, queue: QueueRole, seen: set | None = None) -> None:
        """Nothing to wait for (the protocol gives no stream or event). ``seen``: the
        producer streams this call ordered after already (each is waited for once)."""

    def reuse(self, queue: QueueRole, seen: set | None = None) -> bool:
        """If the object still describes the memory and layout it was viewed with, order
        ``queue`` after its producer (:meth:`order`) and say True: its view may be used again.
        False where that cannot be told cheaply, or it changed: view it again."""
        producer = self.producer
        if producer is None or producer.layout(self.obj) != self.layout:
            return False
        producer.wait(queue, seen)
        return True

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {type(self.obj).__name__} via {self.protocol}>"


def type_name(obj: Any) -> str:
    """``obj``'s type for messages, with its top-level module (``torch.Tensor``)."""
    cls = type(obj)
    module = cls.__module__.split(".")[0]
    return cls.__name__ if module == "builtins" else f"{module}.{cls.__name__}"


def non_contiguous_error(name: str, obj: Any) -> ValueError:
    """The error for ``obj`` (called ``name``) whose memory is not C-contiguous."""
    return ValueError(f"{name} ({type_name(obj)}) is not C-contiguous; the kernels need "
                      f"contiguous memory and {NO_COPY}: pass a contiguous copy "
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
    """The error for ``obj`` whose memory lives ``where`` a ``backend`` context cannot use;
    ``fix`` says what to do instead."""
    return ValueError(f"{name} ({type_name(obj)}) lives on {where}, which this {backend} "
                      f"context cannot use directly; {NO_COPY}: {fix}")


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



class LastViews:
    """What one call site viewed of the arrays it was last passed (ours as they are, other
    libraries' viewed in place): passed the same objects again, :meth:`get` gives the same
    views back, each source re-checked and the queue ordered after the producers again, once
    per producer stream. It holds the last objects until the next call.

    The per-call path is written out for the common case (CuPy arrays, PyTorch tensors, whose
    sources have a :attr:`Foreign.producer`): their layouts are read here, then each distinct
    producer is asked once for its stream; other sources go through :meth:`Foreign.reuse`."""

    def __init__(self) -> None:
        self._objects: tuple = ()
        self._views: tuple = ()
        self._direct: tuple[tuple, ...] = ()  #: (read, obj, layout) of each producer's object
        self._producers: tuple = ()  #: their producers, each once
        self._others: tuple[Foreign, ...] = ()  #: sources re-checked through Foreign.reuse

    def get(self, objects: tuple, queue: QueueRole) -> tuple | None:
        """The views of ``objects`` if they are the ones last kept and none changed; else None
        (view them again and :meth:`keep` the new views)."""
        last = self._objects
        if len(objects) != len(last) or not all(map(operator.is_, objects, last)):
            return None
        for read, obj, layout in self._direct:
            if read(obj) != layout:
                return None
        producers, others = self._producers, self._others
        if len(producers) == 1 and not others:
            producers[0].wait(queue, None)
        elif producers or others:
            seen: set = set()
            for producer in producers:
                producer.wait(queue, seen)
            for source in others:
                if not source.reuse(queue, seen):
                    return None
        return self._views

    def keep(self, objects: tuple, views: tuple) -> None:
        """Remember ``views`` (device arrays, or None for an absent argument) of ``objects``."""
        sources = [v.foreign for v in views
                   if v is not None and getattr(v, "foreign", None) is not None]
        direct: list[tuple] = []
        producers: dict = {}  # by token, each once
        others: list[Foreign] = []
        for source in sources:
            producer = source.producer
            if producer is None:
                others.append(source)
            else:
                direct.append((producer.layout, source.obj, source.layout))
                producers.setdefault(producer.token, producer)
        self._objects = tuple(objects)
        self._views = tuple(views)
        self._direct = tuple(direct)
        self._producers = tuple(producers.values())
        self._others = tuple(others)
