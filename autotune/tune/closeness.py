"""The answer check of :func:`~.kernels.tune_kernel`: each candidate's output compared with the
expected one as ``numpy.allclose(result, expected, atol=atol)`` does (numpy's default
``rtol``), made once per answer and applied to every candidate.

- :class:`Closeness` checks a result on the host.
- :class:`DeviceCloseness` checks it where it is, on the device: the expected array and its
  bound are copied there once, a small kernel compares, and one number comes back. On a GPU,
  copying a large output back and comparing it on the host took longer than timing the
  candidate (16M floats: tens of milliseconds a candidate).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from .. import accel

logger = logging.getLogger("autotune.tune")

#: The comparison kernel (:class:`DeviceCloseness`).
KERNEL = Path(__file__).with_name("closeness.mako")
#: Its work-group size.
WGS = 256


class Closeness:
    """``numpy.allclose(result, expected, atol=atol)`` (numpy's default ``rtol``) for one
    expected array that every candidate's result is checked against: the bound
    ``atol + rtol * |expected|`` is made once, and each check is a subtraction, an absolute value
    and a comparison in scratch buffers (``allclose`` allocates and checks for infinities every
    time: on millions of elements it cost more than timing a candidate). Expected arrays that are
    not finite real floats are checked by ``numpy.allclose`` itself."""

    RTOL = 1e-5  #: numpy.allclose's default

    def __init__(self, expected: np.ndarray, atol: float):
        self.expected = np.ascontiguousarray(expected).ravel()
        self.atol = atol
        e = self.expected
        self.plain = e.dtype.kind == "f" and bool(np.all(np.isfinite(e)))
        if self.plain:
            self.bound = np.abs(e) * e.dtype.type(self.RTOL) + e.dtype.type(atol)
        #: the host check's work arrays, made at its first use (a device check needs none)
        self.scratch: np.ndarray | None = None
        self.within: np.ndarray | None = None

    def __call__(self, result: np.ndarray) -> bool:
        r = np.asarray(result).ravel()
        if not self.plain or r.dtype != self.expected.dtype:
            return bool(np.allclose(r, self.expected, atol=self.atol))
        if self.scratch is None:
            e = self.expected
            self.scratch, self.within = np.empty_like(e), np.empty(e.shape, dtype=bool)
        np.subtract(r, self.expected, out=self.scratch)
        np.abs(self.scratch, out=self.scratch)
        np.less_equal(self.scratch, self.bound, out=self.within)  # NaN: not within
        return bool(self.within.all())

    @property
    def device_checkable(self) -> bool:
        """Whether :class:`DeviceCloseness` can check against this answer: finite real floats
        of 32 or 64 bits (others are checked by ``numpy.allclose`` on the host)."""
        return self.plain and self.expected.dtype in (np.float32, np.float64)


class DeviceCloseness:
    """:class:`Closeness` on the device: ``close(result)`` for a device array ``result`` of the
    answer's dtype and size, with the same bound and the same rule (NaN is not within).
    Make it with :meth:`make`, which gives None where the host must check."""

    def __init__(self, context: accel.Context, queue: Any, close: Closeness):
        e = close.expected
        self.queue = queue
        self.size = e.size
        self.expected = context.to_device(queue, e)
        self.bound = context.to_device(queue, close.bound)
        self.far = context.zeros(queue, 1, np.uint32)
        self.kernel = context.build(KERNEL, {"ctype": accel.c_type(e.dtype), "wgs": WGS}
                                    ).get_kernel("count_far")

    @classmethod
    def make(cls, context: accel.Context, queue: Any, close: Closeness) -> DeviceCloseness | None:
        """The device check of ``close``'s answer, or None where it cannot be made (the
        answer's dtype; doubles on a device without them; more than 2^32 elements; a device
        that cannot build the comparison)."""
        e = close.expected
        if not close.device_checkable or e.size >= 1 << 32 or e.size == 0 or (
                e.dtype == np.float64 and not context.device.double_precision):
            return None
        try:
            return cls(context, queue, close)
        except accel.AccelError as exc:  # (a device that cannot build it: the host checks)
            logger.info("the answer is checked on the host: %s", exc)
            return None

    def __call__(self, result: Any) -> bool:
        self.far.zero(self.queue)
        groups = -(-self.size // WGS)
        self.queue.enqueue_kernel(self.kernel, [self.far, result, self.expected, self.bound,
                                                np.uint32(self.size)], groups * WGS, WGS)
        return int(self.far.get(self.queue)[0]) == 0
