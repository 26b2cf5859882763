"""Host spinors to and from the operators' device layout, on the device
(:class:`SpinorLayoutTemplate`).

A host spinor is a (T, Z, Y, X, 4, 3) array: sites in lexicographic order, 12 complex numbers
each. An operator's device field is (2, 12, V/2): each parity's sites in checkerboard order,
component-major (:mod:`.lattice`). Reordering on the host is a gather and a transpose of the
whole field (on a 32^4 lattice 0.3-0.4 s for one field on a 2-core AMD EPYC, against about
30 ms for a whole double-half CG solve on an H200), so :meth:`WilsonOperator.to_device
<operations.lqcd.wilson.WilsonOperator.to_device>` and ``from_device`` copy the host array as it
is and reorder it here, converting to and from the device's precision on the way (QUDA
reorders its host fields on the GPU too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .half import SiteKernels, SiteKernelTemplate
from .lattice import Lattice

TEMPLATE = Path(__file__).with_name("spinor_layout.mako")
DEVICE_DTYPES = (np.dtype(np.complex64), np.dtype(np.complex128))


class SpinorLayoutTemplate(SiteKernelTemplate):
    """Both reorders between the host's complex128 spinors and device fields of ``dtype``
    (complex64 or complex128): ``to_checkerboard(out, inp)`` and ``from_checkerboard(out,
    inp)`` (:meth:`instantiate`), for any lattice. The work-group size is tuned; every
    candidate is checked against the host's reorder, both ways."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """Single and double precision fields, where the device has double precision (the
        host side is complex128)."""
        if not context.device.double_precision:
            return []
        return [{"dtype": d} for d in DEVICE_DTYPES]

    def __init__(self, context: accel.Context, dtype: Any, tuning: dict[str, Any] | None = None):
        self.dtype = np.dtype(dtype)
        if self.dtype not in DEVICE_DTYPES:
            raise TypeError(f"device spinors are complex64 or complex128, not {self.dtype}")
        if not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision for the host's "
                            "complex128 spinors: reorder them on the host")
        self._build(context, tuning, TEMPLATE, {"dst": accel.c_type(self.dtype)},
                    dtype=self.dtype)

    def instantiate(self, queue: accel.CommandQueue) -> SpinorLayout:
        return SpinorLayout(self, queue)

    @classmethod
    @tune.autotuner(test={"wgs": 128})
    def autotune(cls, context: accel.Context, dtype: Any) -> dict[str, Any]:
        dtype = np.dtype(dtype)
        queue = context.create_tuning_command_queue()
        # on a GPU a lattice whose fields overflow the L2 cache (24^4: 64 MB a complex128
        # field, against the H200's 50 MB), as a solve's do, and whose run (0.11-0.15 ms)
        # outlasts launching its two kernels: at 16^4 a run took 22 us from the cache, the
        # host's launches showed in it, and wgs 64 was chosen over a wgs 128 that was 3-7%
        # faster every time the two were timed side by side
        lattice = Lattice((24, 24, 24, 24) if context.device.is_gpu else (8, 8, 8, 8))
        rng = np.random.default_rng(9)
        shape = lattice.shape + (4, 3)
        host = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
        if dtype != np.complex128:  # what the device can hold: the round trip is exact then
            host = host.astype(dtype).astype(np.complex128)
        want = np.stack([lattice.spinor_to_device(host, p, dtype) for p in (0, 1)])
        inp = context.to_device(queue, host)
        field = context.allocate(want.shape, dtype)
        back = context.allocate(host.shape, np.complex128)

        def generate(wgs: int) -> tune.Measurement:
            layout = cls(context, dtype, {"wgs": wgs}).instantiate(queue)

            def run() -> None:
                layout.to_checkerboard(field, inp, lattice)
                layout.from_checkerboard(back, field, lattice)

            def check() -> bool:
                return bool(np.array_equal(field.get(queue), want)
                            and np.array_equal(back.get(queue), host))

            return tune.make_measure(queue, run, check,
                                     bytes=2 * host.size * (16 + dtype.itemsize))

        return tune.autotune(generate)


class SpinorLayout(SiteKernels):
    """The reorders of one template on one queue (enqueued, not waited for)."""

    def __init__(self, template: SpinorLayoutTemplate, queue: accel.CommandQueue):
        super().__init__(template, queue, ("to_checkerboard", "from_checkerboard"))

    def _enqueue(self, name: str, host_side: accel.DeviceArray, field: accel.DeviceArray,
                 lattice: Lattice, args: list[Any]) -> None:
        t = self.template
        size = 12 * lattice.volume
        if host_side.dtype != np.complex128 or host_side.size != size:
            raise ValueError(f"{name}: expected the host layout as {size} complex128, got "
                             f"{host_side.size} x {host_side.dtype}")
        if field.dtype != t.dtype or field.size != size:
            raise ValueError(f"{name}: expected a device field of {size} {t.dtype}, got "
                             f"{field.size} x {field.dtype}")
        x, y, z, _ = lattice.dims
        self._launch(name, lattice.half_volume,
                     args + [np.uint64(v) for v in (lattice.half_volume, x // 2, y, z)])

    def to_checkerboard(self, out: accel.DeviceArray, inp: accel.DeviceArray,
                        lattice: Lattice) -> None:
        """``out`` (a (2, 12, V/2) field) = ``inp`` (the host's layout, complex128) reordered
        and in out's precision."""
        self._enqueue("to_checkerboard", inp, out, lattice, [out, inp])

    def from_checkerboard(self, out: accel.DeviceArray, inp: accel.DeviceArray,
                          lattice: Lattice) -> None:
        """``out`` (the host's layout, complex128) = ``inp`` (a (2, 12, V/2) field)
        reordered."""
        self._enqueue("from_checkerboard", out, inp, lattice, [out, inp])


__all__ = ["SpinorLayout", "SpinorLayoutTemplate"]
