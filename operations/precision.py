"""Converting vectors between single and double precision on the device (mixed-precision solvers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

TEMPLATE = Path(__file__).with_name("precision.mako")
_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
           np.dtype(np.complex64): "cfloat", np.dtype(np.complex128): "cdouble"}


class ConvertTemplate:
    """``convert(out, in)`` and ``add_converted(out, in)`` between two dtypes of the same kind."""

    autotune_version = 1

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """Both directions between single and double precision, real and complex (the
        conversions of mixed-precision solvers), where the device has double precision."""
        if not context.device.double_precision:
            return []
        pairs = ((np.complex128, np.complex64), (np.float64, np.float32))
        return [{"src": np.dtype(a), "dst": np.dtype(b)} for hi, lo in pairs
                for a, b in ((hi, lo), (lo, hi))]

    def __init__(self, context: accel.Context, src: Any, dst: Any,
                 tuning: dict[str, Any] | None = None):
        self.src, self.dst = np.dtype(src), np.dtype(dst)
        if self.src not in _CTYPES or self.dst not in _CTYPES or self.src.kind != self.dst.kind:
            raise TypeError(f"cannot convert {self.src} to {self.dst}: both must be float or "
                            "both complex, of single or double precision")
        self.context = context
        if tuning is None:
            tuning = self.autotune(context, self.src, self.dst)
        self.wgs = int(tuning["wgs"])
        program = context.build(TEMPLATE, {"src": _CTYPES[self.src], "dst": _CTYPES[self.dst],
                                           "wgs": self.wgs})
        self.kernels = {name: program.get_kernel(name) for name in ("convert", "add_converted")}
        self.groups = 4 * context.device.multiprocessors

    def _enqueue(self, name: str, queue: accel.CommandQueue, out: accel.DeviceArray,
                 inp: accel.DeviceArray) -> None:
        if out.size != inp.size or out.dtype != self.dst or inp.dtype != self.src:
            raise ValueError(f"{name}: expected {inp.size} elements {self.src} -> {self.dst}, "
                             f"got {inp.dtype} -> {out.size} x {out.dtype}")
        groups = max(1, min(self.groups, -(-out.size // self.wgs)))
        queue.enqueue_kernel(self.kernels[name], [out, inp, np.uint64(out.size)],
                             groups * self.wgs, self.wgs)

    def convert(self, queue: accel.CommandQueue, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        """out = inp in out's precision."""
        self._enqueue("convert", queue, out, inp)

    def add_converted(self, queue: accel.CommandQueue, out: accel.DeviceArray,
                      inp: accel.DeviceArray) -> None:
        """out += inp, converted to out's precision."""
        self._enqueue("add_converted", queue, out, inp)

    @classmethod
    @tune.autotuner(test={"wgs": 256})
    def autotune(cls, context: accel.Context, src: Any, dst: Any) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        n = (1 << 22 if context.device.is_gpu else 1 << 18) + 5
        host = np.random.default_rng(0).standard_normal(n).astype(np.float64)
        src, dst = np.dtype(src), np.dtype(dst)
        data = (host + 1j * host[::-1]).astype(src) if src.kind == "c" else host.astype(src)
        inp = context.to_device(queue, data)
        out = context.allocate(n, dst)

        def generate(wgs: int):
            if wgs > context.device.max_work_group_size:
                return None
            template = cls(context, src, dst, {"wgs": wgs})
            return tune.make_measure(queue, lambda: template.convert(queue, out, inp),
                                     lambda: np.array_equal(out.get(queue), data.astype(dst)))

        return tune.autotune(generate, wgs=[64, 128, 256, 512, 1024])
