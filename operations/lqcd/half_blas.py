"""BLAS-1 and reductions on half precision spinor fields (:class:`.half.HalfSpinor`): what a
solver that keeps its sloppy vectors in 16 bits needs, as QUDA's half precision solvers do.

Arithmetic is in single precision on the decoded values; every result written back is stored
in 16 bits again with its site's new norm; sums accumulate in double (per work-item, then per
work-group in local memory, the work-groups' parts added on the host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from ..scalars import finite_complex_scalar

from .half import HALF_MAX, HalfSpinor, site_launcher, spinor_from_half, spinor_to_half

TEMPLATE = Path(__file__).with_name("half_blas.mako")


def _coefficient(value: complex) -> list[np.float32]:
    value = finite_complex_scalar("half BLAS", "coefficient", value, np.float32)
    return [np.float32(value.real), np.float32(value.imag)]


class HalfBlasTemplate:
    """``axpy``, ``xpay``, ``axpy_norm``, ``norm2`` and ``dot`` on half precision fields of one
    parity (:meth:`instantiate`), one site per work-item. Needs double precision on the device
    (the sums). The work-group size is tuned; every candidate's results are checked against
    numpy on the decoded fields."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)

    def __init__(self, context: accel.Context, tuning: dict[str, Any] | None = None):
        if not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision, which the half "
                            "precision reductions accumulate in")
        self.context = context
        self.tuning = tune.tuning_for(HalfBlasTemplate, context, tuning).parameters
        self.wgs = self.tuning["wgs"]
        self.program = context.build(TEMPLATE, {"wgs": self.wgs, "half_max": HALF_MAX})
        self.groups = 4 * context.device.multiprocessors

    def instantiate(self, queue: accel.CommandQueue) -> HalfBlas:
        return HalfBlas(self, queue)

    @classmethod
    def autotune_space(cls, context: accel.Context) -> tune.Space:
        return tune.Space({"wgs": [32, 64, 128, 256, 512]},
                          [tune.at_most("wgs", context.device.max_work_group_size)])

    @classmethod
    @tune.autotuner(test={"wgs": 128})
    def autotune(cls, context: accel.Context) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        n = (1 << 20 if context.device.is_gpu else 1 << 13) + 3
        rng = np.random.default_rng(8)
        fields = [((rng.standard_normal((12, n)) + 1j * rng.standard_normal((12, n)))
                   * np.exp(rng.uniform(-3, 3, n))[None, :]) for _ in range(2)]
        halves = [HalfSpinor.allocate(context, n) for _ in range(2)]
        stored = [spinor_to_half(f) for f in fields]
        decoded = [spinor_from_half(*s) for s in stored]
        a = 0.37 - 0.21j

        def generate(wgs: int) -> tune.Measurement:
            blas = cls(context, {"wgs": wgs}).instantiate(queue)
            x, y = halves
            result: dict[str, Any] = {}

            def setup() -> None:
                for spinor, (values, norms) in zip(halves, stored):
                    spinor.values.set(queue, values)
                    spinor.norms.set(queue, norms)

            def run() -> None:  # y is overwritten each run; its norm stays finite
                result["dot"] = blas.dot(x, y)
                result["norm2"] = blas.axpy_norm(y, x, a)

            def check() -> bool:
                want_dot = np.vdot(decoded[0], decoded[1])
                got_y = spinor_from_half(y.values.get(queue), y.norms.get(queue))
                want_y = a * decoded[0] + decoded[1]
                return bool(abs(result["dot"] - want_dot) <= 1e-6 * np.linalg.norm(decoded[0])
                            * np.linalg.norm(decoded[1])
                            and np.max(np.abs(got_y - want_y)) <= 2e-4 * np.max(np.abs(want_y))
                            and abs(result["norm2"] - np.vdot(got_y, got_y).real)
                            <= 1e-6 * result["norm2"])

            return tune.make_measure(queue, run, check, setup=setup, restore=setup,
                                     bytes=3 * n * (48 + 4) + n * 52)

        return tune.autotune(generate)


class HalfBlas:
    """The half precision BLAS of one template on one queue. The updates are enqueued; the
    reductions wait for their sums (a double each, a complex for ``dot``)."""

    def __init__(self, template: HalfBlasTemplate, queue: accel.CommandQueue):
        self.template = template
        self.queue = queue
        self._kernels = {name: template.program.get_kernel("half_" + name)
                         for name in ("axpy", "xpay", "axpy_norm", "norm2", "dot")}
        self._launchers: dict[tuple[str, int], Any] = {}
        self._partials: dict[int, tuple[accel.DeviceArray, np.ndarray]] = {}

    def _sites(self, *fields: Any) -> int:
        for f in fields:
            if not isinstance(f, HalfSpinor):
                raise TypeError(f"expected HalfSpinor fields, not {type(f).__name__}")
        sites = fields[0].sites
        if any(f.sites != sites for f in fields):
            raise ValueError(f"fields of {[f.sites for f in fields]} sites: they must match")
        return sites

    def _launch(self, name: str, sites: int, args: list[Any], partial: int = 0) -> np.ndarray | None:
        launch, groups = site_launcher(self.queue, self._kernels, self._launchers, name, sites,
                                       self.template.wgs, self.template.groups)
        if not partial:
            launch(args + [np.uint64(sites)])
            return None
        size = partial * groups
        buffers = self._partials.get(size)
        if buffers is None:
            buffers = self._partials[size] = (self.template.context.allocate(size, np.float64),
                                              np.empty(size, np.float64))
        launch(args + [np.uint64(sites), buffers[0]])
        return buffers[0].get(self.queue, out=buffers[1])

    def axpy(self, y: HalfSpinor, x: HalfSpinor, a: complex) -> None:
        """y = a x + y."""
        self._launch("axpy", self._sites(y, x), [y.values, y.norms, x.values, x.norms,
                                                 *_coefficient(a)])

    def xpay(self, y: HalfSpinor, x: HalfSpinor, b: complex) -> None:
        """y = x + b y."""
        self._launch("xpay", self._sites(y, x), [y.values, y.norms, x.values, x.norms,
                                                 *_coefficient(b)])

    def axpy_norm(self, y: HalfSpinor, x: HalfSpinor, a: complex) -> float:
        """y = a x + y; returns |y|^2 of the y stored (the 16-bit values), summed in double."""
        parts = self._launch("axpy_norm", self._sites(y, x),
                             [y.values, y.norms, x.values, x.norms, *_coefficient(a)], 1)
        return float(parts.sum())

    def norm2(self, x: HalfSpinor) -> float:
        """|x|^2, summed in double."""
        return float(self._launch("norm2", self._sites(x), [x.values, x.norms], 1).sum())

    def dot(self, x: HalfSpinor, y: HalfSpinor) -> complex:
        """<x, y> = sum conj(x) y, summed in double."""
        parts = self._launch("dot", self._sites(x, y), [x.values, x.norms, y.values, y.norms], 2)
        return complex(parts[0::2].sum(), parts[1::2].sum())
