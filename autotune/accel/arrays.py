"""Device memory: :class:`DeviceArray`, a contiguous array on a context's device.

The backends subclass it and fill in the ``_``-prefixed hooks; the argument checks, and the
queue's rules for each copy (a tuning queue's turn, a running interval timer), live here.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import AccelError
from .roles import ContextRole, QueueRole
from .shapes import Shape, as_shape


class DeviceArray(ABC):
    """A contiguous array in device memory."""

    #: where an array viewing another library's memory came from (:class:`.interop.Foreign`:
    #: the object, kept alive, and how to order work after its producer's); None for ours
    foreign: Any = None

    def __init__(self, context: ContextRole, shape: int | Sequence[int], dtype: Any):
        self.context = context
        self.shape = as_shape(shape)
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

    def set(self, queue: QueueRole, host: np.ndarray, *, wait: bool = True) -> None:
        """Copy a numpy array of the same shape and dtype to the device (waits for it).

        ``wait=False`` only enqueues the copy (``host`` must be C-contiguous, and stay
        unchanged until the queue has run the copy); from an array of
        :meth:`Context.empty_host` it is truly asynchronous on CUDA."""
        self._check_host(host, "host array")
        if not wait and not host.flags.c_contiguous:
            raise ValueError("an asynchronous copy needs a C-contiguous host array")
        host = np.ascontiguousarray(host)
        # a copy kept for a later turn reads a snapshot of ``host`` (the caller may change it
        # once this returns); taken only where a copy can be kept: a whole field is 200 MB
        if self.nbytes and queue._may_keep() and queue._keep(functools.partial(
                self._kept_upload, queue, np.array(host, copy=True) if wait else host, wait)):
            return  # enqueued when this thread's turn comes (see accel.tuning_turn)
        queue._wait_turn()
        self._kept_upload(queue, host, wait)

    def _kept_upload(self, queue: QueueRole, host: np.ndarray, wait: bool) -> None:
        queue._before_waiting()
        if self.nbytes:
            queue._record(self._upload(queue, host))
            if wait:
                queue._before_waiting()
                queue._finish()

    def get(self, queue: QueueRole, out: np.ndarray | None = None, *,
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

    def read(self, queue: QueueRole, start: int, stop: int) -> np.ndarray:
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
        shape = (stop - start,) if shape is None else as_shape(shape)
        if math.prod(shape) != stop - start:
            raise ValueError(f"shape {shape} does not hold {stop - start} elements")
        return self._view(start * self.dtype.itemsize, shape)

    @abstractmethod
    def _view(self, offset: int, shape: Shape) -> DeviceArray: ...

    def zero(self, queue: QueueRole) -> None:
        """Set every byte to zero (asynchronously, on ``queue``)."""
        if self.nbytes and queue._keep(lambda: queue._record(self._fill_zero(queue))):
            return
        queue._wait_turn()
        if self.nbytes:
            queue._record(self._fill_zero(queue))

    def copy_from(self, queue: QueueRole, other: DeviceArray) -> None:
        """Device-to-device copy of ``other`` into this array (asynchronously, on ``queue``)."""
        self._check_peer(other)
        if self.nbytes and queue._keep(lambda: queue._record(self._copy_from(queue, other))):
            return
        queue._wait_turn()
        if self.nbytes:
            queue._record(self._copy_from(queue, other))

    @property
    @abstractmethod
    def kernel_arg(self) -> Any:
        """What the backend passes to a kernel for this array."""

    @abstractmethod
    def _upload(self, queue: QueueRole, host: np.ndarray) -> Any: ...

    @abstractmethod
    def _download(self, queue: QueueRole, host: np.ndarray) -> Any: ...

    @abstractmethod
    def _download_range(self, queue: QueueRole, host: np.ndarray, offset: int) -> Any: ...

    @abstractmethod
    def _fill_zero(self, queue: QueueRole) -> Any: ...

    @abstractmethod
    def _copy_from(self, queue: QueueRole, other: DeviceArray) -> Any: ...
