"""Converting vectors between single and double precision on the device (mixed-precision solvers).

>>> down = ConvertTemplate(context, np.complex128, np.complex64).instantiate(queue)
>>> down(out_low, inp)        # out_low = inp in single precision
>>> up = ConvertTemplate(context, np.complex64, np.complex128).instantiate(queue)
>>> up.add(x, x_low)          # x += x_low in double precision
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

TEMPLATE = Path(__file__).with_name("precision.mako")
DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float64, np.complex64, np.complex128))


class ConvertTemplate:
    """``out = in`` and ``out += in`` between two dtypes of the same kind (real or complex)."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)

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
        if self.src not in DTYPES or self.dst not in DTYPES or self.src.kind != self.dst.kind:
            raise TypeError(f"cannot convert {self.src} to {self.dst}: both must be float or "
                            "both complex, of single or double precision")
        self.context = context
        self.tuning = tune.tuning_for(ConvertTemplate, context, tuning, src=self.src,
                                      dst=self.dst).parameters
        self.wgs = self.tuning["wgs"]
        self.program = context.build(TEMPLATE, {"src": accel.c_type(self.src),
                                                "dst": accel.c_type(self.dst), "wgs": self.wgs})
        self.groups = 4 * context.device.multiprocessors

    def instantiate(self, queue: accel.CommandQueue) -> Convert:
        return Convert(self, queue)

    @classmethod
    def autotune_space(cls, context: accel.Context, src: Any, dst: Any) -> tune.Space:
        limit = context.device.max_work_group_size
        return tune.Space({"wgs": [64, 128, 256, 512, 1024]},
                          [tune.at_most("wgs", limit)])

    @classmethod
    @tune.autotuner(test={"wgs": 256})
    def autotune(cls, context: accel.Context, src: Any, dst: Any) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        n = (1 << 22 if context.device.is_gpu else 1 << 18) + 5
        host = np.random.default_rng(0).standard_normal(n)
        src, dst = np.dtype(src), np.dtype(dst)
        data = (host + 1j * host[::-1]).astype(src) if src.kind == "c" else host.astype(src)
        inp = context.to_device(queue, data)
        out = context.allocate(n, dst)
        want = data.astype(dst)  # converted once, not for every candidate

        def generate(wgs: int) -> tune.Measurement:
            convert = cls(context, src, dst, {"wgs": wgs}).instantiate(queue)
            return tune.make_measure(queue, lambda: convert(out, inp),
                                     lambda: np.array_equal(out.get(queue), want),
                                     bytes=n * (src.itemsize + dst.itemsize))

        return tune.autotune(generate)


class Convert:
    """One conversion on one queue: ``convert(out, inp)`` sets ``out = inp``,
    ``convert.add(out, inp)`` does ``out += inp``, both in ``out``'s precision."""

    def __init__(self, template: ConvertTemplate, queue: accel.CommandQueue):
        self.template = template
        self.queue = queue
        self._kernels = {name: template.program.get_kernel(name) for name in ("convert", "add_converted")}
        self._launchers: dict[tuple[str, int], Any] = {}

    def _enqueue(self, name: str, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        t = self.template
        if out.size != inp.size or out.dtype != t.dst or inp.dtype != t.src:
            raise ValueError(f"{name}: expected {inp.size} elements {t.src} -> {t.dst}, "
                             f"got {inp.dtype} -> {out.size} x {out.dtype}")
        groups = max(1, min(t.groups, -(-out.size // t.wgs)))
        launch = self._launchers.get((name, groups))
        if launch is None:
            launch = self._launchers[(name, groups)] = self.queue.launcher(
                self._kernels[name], groups * t.wgs, t.wgs)
        launch([out, inp, np.uint64(out.size)])

    def __call__(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        """out = inp in out's precision."""
        self._enqueue("convert", out, inp)

    def add(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        """out += inp, converted to out's precision."""
        self._enqueue("add_converted", out, inp)
