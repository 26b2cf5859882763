"""Half precision storage (QUDA's 16-bit fixed point): what the kernels read and write, made
and read back on the host.

- A spinor field of one parity is a :class:`HalfSpinor`: ``values``, int16 of shape
  (3, V/2, 4, 2): the 12 components in three groups of four (:data:`GROUP`), a site's group
  16 contiguous bytes that a kernel reads with one vector load (QUDA's short4 blocking), real
  and imaginary parts as a pair; and ``norms``, float32 of shape (V/2,): the largest |real or
  imaginary part| of the site's 12 components. A component is ``values * norm / 32767``, so every site keeps 15 bits
  relative to its own largest component, whatever its magnitude within the range of a float32
  norm (about 1e-38 to 3e38; a site below it is stored as zero).
- Links are int16 in the dslash layout: entries of SU(3) matrices are bounded by 1 and stored
  times 32767 (18 and 12 parameters, real and imaginary parts as a pair); the 8-parameter form's
  two phase parameters (a quarter-angle tangent in [-1, 1] plus an offset that carries choices:
  :func:`.gauge.pack`) are stored times 32767 over their largest magnitude
  (:func:`.gauge.phase_parameter_limit`), its other six (entries bounded by 1) times 32767.

Arithmetic on half fields is in single precision, in registers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from . import gauge

#: the largest stored magnitude
HALF_MAX = 32767
#: spinor components per 16-byte group of a site (values are (12 // GROUP, V/2, GROUP, 2))
GROUP = 4
#: the 8-parameter form's phase parameters (their own scales: gauge.phase_parameter_limit)
PHASE_COMPONENTS = (4, 7)


@dataclass
class HalfSpinor:
    """One parity of a half precision spinor on the device (see the module's docstring)."""

    values: accel.DeviceArray
    norms: accel.DeviceArray

    @classmethod
    def allocate(cls, context: accel.Context, sites: int) -> HalfSpinor:
        return cls(context.allocate((12 // GROUP, sites, GROUP, 2), np.int16),
                   context.allocate(sites, np.float32))

    @property
    def sites(self) -> int:
        return self.norms.size

    def copy_from(self, queue: accel.CommandQueue, other: HalfSpinor) -> None:
        """Enqueue a copy of ``other`` (as a device array's ``copy_from``)."""
        self.values.copy_from(queue, other.values)
        self.norms.copy_from(queue, other.norms)

    def zero(self, queue: accel.CommandQueue) -> None:
        """Enqueue zeroing (as a device array's ``zero``): the norms alone, since a site of
        norm 0 holds zeros whatever its values."""
        self.norms.zero(queue)


def spinor_to_half(field: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A (12, n) complex field as (values int16 (3, n, 4, 2), norms float32 (n,))."""
    field = np.asarray(field)
    if field.ndim != 2 or field.shape[0] != 12:
        raise ValueError(f"expected a (12, sites) field, got shape {field.shape}")
    parts = _pairs(field)  # (12, n, 2), in the field's own precision (the largest is exact)
    magnitudes = np.abs(parts)
    # the largest over the parts, then over the components (ten times faster than both at once)
    norms = np.maximum(magnitudes[..., 0], magnitudes[..., 1]).max(axis=0).astype(np.float32)
    # scale by the stored norm (float32), as the kernels will read it
    inv = np.divide(HALF_MAX, norms.astype(np.float64), out=np.zeros(norms.shape),
                    where=norms > 0)
    values = np.empty((12 // GROUP, field.shape[1], GROUP, 2), np.int16)
    for k in range(12):  # a component at a time, into storage order: small temporaries
        scaled = parts[k] * inv[:, None]  # in double precision
        np.clip(np.rint(scaled, out=scaled), -HALF_MAX, HALF_MAX, out=scaled)
        values[k // GROUP, :, k % GROUP] = scaled
    return values, norms


def _pairs(field: np.ndarray) -> np.ndarray:
    """A field's real and imaginary parts as a last axis of 2 ((12, n) -> (12, n, 2)): a view
    of complex data."""
    if np.iscomplexobj(field):
        return np.ascontiguousarray(field).view(field.real.dtype).reshape(field.shape + (2,))
    return np.stack([field, np.zeros_like(field)], axis=-1)


def _storage_order(parts: np.ndarray) -> np.ndarray:
    """(12, n, 2) real and imaginary parts -> (3, 4, n, 2) -> (3, n, 4, 2), contiguous: a
    site's group of four components together, as half storage keeps them."""
    n = parts.shape[1]
    return np.ascontiguousarray(parts.reshape(12 // GROUP, GROUP, n, 2).transpose(0, 2, 1, 3))


def spinor_from_half(values: np.ndarray, norms: np.ndarray) -> np.ndarray:
    """The (12, n) complex128 field that half storage holds."""
    values = np.asarray(values)
    if values.ndim != 4 or values.shape[0] * values.shape[2] != 12 or values.shape[3] != 2:
        raise ValueError(f"expected half values of shape (3, sites, 4, 2), got {values.shape}")
    n = values.shape[1]
    scale = norms.astype(np.float64) / HALF_MAX
    parts = values.transpose(0, 2, 1, 3).reshape(12, n, 2).astype(np.float64) * scale[None, :, None]
    return parts[..., 0] + 1j * parts[..., 1]


def spinor_parts(field: np.ndarray) -> np.ndarray:
    """A (12, n) complex field's real and imaginary parts as float32, in half storage's order
    (3, n, 4, 2) and unscaled: what :func:`stored_parts` of its half storage approximates."""
    field = np.asarray(field)
    return _storage_order(np.stack([field.real, field.imag], axis=-1).astype(np.float32))


def stored_parts(queue: accel.CommandQueue, spinor: HalfSpinor) -> np.ndarray:
    """The parts a half spinor on the device holds, float32 (3, n, 4, 2): checks compare these
    with :func:`spinor_parts` of a reference without reordering or complex arithmetic (several
    times faster than :func:`from_device` on a GPU's worth of sites)."""
    parts = spinor.values.get(queue).astype(np.float32)
    parts *= (spinor.norms.get(queue) / np.float32(HALF_MAX))[None, :, None, None]  # in place
    return parts


def link_scales(reconstruct: int) -> np.ndarray:
    """What each stored link parameter is multiplied by (per component of the dslash layout)."""
    if reconstruct == 8:
        scales = np.full(8, 1.0 / HALF_MAX)
        for k in PHASE_COMPONENTS:
            scales[k] = gauge.phase_parameter_limit(k) / HALF_MAX
        return scales
    return np.full({18: 9, 12: 6}[reconstruct], 1.0 / HALF_MAX)


def links_to_half(links: np.ndarray, reconstruct: int, axis: int = 2) -> np.ndarray:
    """Links in the dslash layout (4, 2, n, V/2) (complex; real for 8 parameters) as int16:
    (4, 2, n, V/2, 2) for 18 and 12 parameters, (4, 2, 8, V/2) for 8. ``axis``: the axis of
    the n parameters, for links in another order (-1: site-major, (4, 2, V/2, n))."""
    links = np.asarray(links)
    shape = [1] * links.ndim
    shape[axis] = -1
    scales = link_scales(reconstruct).reshape(shape)
    if reconstruct == 8:
        parts = links.real / scales
    else:  # real and imaginary parts as pairs (viewed rather than copied where complex)
        parts = _pairs(links) / scales[..., None]
    if parts.size and max(parts.max(), -parts.min()) > HALF_MAX + 0.5:
        raise ValueError("links out of the half precision range: entries must be bounded by 1 "
                         "(SU(3) links) and the 8-parameter phase parameters by "
                         f"{[gauge.phase_parameter_limit(k) for k in PHASE_COMPONENTS]}")
    return np.rint(parts, out=parts).astype(np.int16)


def links_as_stored(links: np.ndarray, reconstruct: int, axis: int = 2) -> np.ndarray:
    """The links' values as their 16-bit storage (:func:`links_to_half`) holds them, in the
    links' own dtype and layout: what a half precision dslash multiplies by (a distributed
    block's ghost links, kept in single precision, are rounded so)."""
    links = np.asarray(links)
    stored = links_to_half(links, reconstruct, axis).astype(np.float64)
    shape = [1] * links.ndim
    shape[axis] = -1
    scales = link_scales(reconstruct).reshape(shape)
    if reconstruct == 8:
        return (stored * scales).astype(links.dtype)
    return ((stored[..., 0] + 1j * stored[..., 1]) * scales).astype(links.dtype)


def to_device(context: accel.Context, queue: accel.CommandQueue, field: np.ndarray) -> HalfSpinor:
    """A (12, n) complex field in half precision on the device."""
    values, norms = spinor_to_half(field)
    return HalfSpinor(context.to_device(queue, values), context.to_device(queue, norms))


def from_device(queue: accel.CommandQueue, spinor: HalfSpinor) -> np.ndarray:
    """The (12, n) complex128 field a half spinor on the device holds."""
    return spinor_from_half(spinor.values.get(queue), spinor.norms.get(queue))


def kernel_args(spinor: Any, sites: int) -> tuple[str, list[Any]]:
    """A spinor argument of ``sites`` sites as a half precision kernel takes it: ("h", [values,
    norms]) for a :class:`HalfSpinor`, ("s", [array]) for single precision storage (a complex64
    array of 12 x ``sites`` elements)."""
    if isinstance(spinor, HalfSpinor):
        if spinor.sites != sites:
            raise ValueError(f"expected a half spinor of {sites} sites, got {spinor.sites}")
        return "h", [spinor.values, spinor.norms]
    dtype = getattr(spinor, "dtype", None)
    if dtype is not None and np.dtype(dtype) == np.complex64 and spinor.size == 12 * sites:
        return "s", [spinor]
    raise TypeError(f"a half precision kernel takes HalfSpinor fields (16 bits; "
                    f"operations.lqcd.half.to_device makes one) or complex64 arrays of 12 x "
                    f"{sites} elements, not {type(spinor).__name__}"
                    f"{f' of {dtype} x {spinor.size}' if dtype is not None else ''}")


CONVERT_TEMPLATE = Path(__file__).with_name("half_convert.mako")


class SiteKernelTemplate:
    """Base of the templates whose kernels take a site a work-item in a grid-stride loop, their
    work-group size tuned (:func:`site_kernel_space`; :class:`HalfConvertTemplate`,
    :class:`~operations.lqcd.spinor_layout.SpinorLayoutTemplate`); :class:`SiteKernels`
    launches them."""

    @classmethod
    def autotune_space(cls, context: accel.Context, dtype: Any) -> tune.Space:
        """Every subclass's space: :func:`site_kernel_space` (its key's ``dtype`` aside)."""
        return site_kernel_space(context)

    def _build(self, context: accel.Context, tuning: dict[str, Any] | None, source: Path,
               render: dict[str, Any], **key: Any) -> None:
        """Read the tuning of ``key`` (``tuning``: as :func:`tune.tuning_for` takes it) and
        build ``source`` with ``render`` and the tuned ``wgs``."""
        self.context = context
        self.tuning = tune.tuning_for(type(self), context, tuning, **key).parameters
        self.wgs = self.tuning["wgs"]
        self.program = context.build(source, {**render, "wgs": self.wgs})
        #: the most work-groups a launch takes (the grid-stride loop covers the other sites)
        self.groups = 8 * context.device.multiprocessors


class SiteKernels:
    """The kernels ``names`` of a :class:`SiteKernelTemplate` on one queue (enqueued, not
    waited for)."""

    def __init__(self, template: SiteKernelTemplate, queue: accel.CommandQueue,
                 names: tuple[str, ...]):
        self.template = template
        self.queue = queue
        self._kernels = {name: template.program.get_kernel(name) for name in names}
        self._launchers: dict[tuple[str, int], Any] = {}

    def _launch(self, name: str, sites: int, args: list[Any]) -> None:
        """Kernel ``name`` over ``sites`` sites with ``args``."""
        launch, _ = site_launcher(self.queue, self._kernels, self._launchers, name, sites,
                                  self.template.wgs, self.template.groups)
        launch(args)


class HalfConvertTemplate(SiteKernelTemplate):
    """Spinor fields of one parity between half precision and ``dtype`` (complex64 or
    complex128), one site per work-item: ``to_half(out, inp)`` and ``from_half(out, inp)``
    (:meth:`instantiate`). The work-group size is tuned; every candidate is checked against
    the host conversion (within one 16-bit step)."""

    autotune_version = 1
    autotune_sources = (CONVERT_TEMPLATE,)

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """To and from single precision (the half sloppy operator's), and double where the
        device has it."""
        dtypes = [np.complex64] + ([np.complex128] if context.device.double_precision else [])
        return [{"dtype": np.dtype(d)} for d in dtypes]

    def __init__(self, context: accel.Context, dtype: Any, tuning: dict[str, Any] | None = None):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.complex64), np.dtype(np.complex128)):
            raise TypeError(f"half precision converts to and from complex64 or complex128, "
                            f"not {self.dtype}")
        if self.dtype == np.complex128 and not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision")
        self._build(context, tuning, CONVERT_TEMPLATE,
                    {"cplx": accel.c_type(self.dtype), "half_max": HALF_MAX}, dtype=self.dtype)

    def instantiate(self, queue: accel.CommandQueue) -> HalfConvert:
        return HalfConvert(self, queue)

    @classmethod
    @tune.autotuner(test={"wgs": 128})
    def autotune(cls, context: accel.Context, dtype: Any) -> dict[str, Any]:
        dtype = np.dtype(dtype)
        queue = context.create_tuning_command_queue()
        n = (1 << 20 if context.device.is_gpu else 1 << 14) + 3
        field = _tuning_field(dtype, n)
        want_values, want_norms = spinor_to_half(field)
        inp = context.to_device(queue, field)
        del field  # on the device now
        half = HalfSpinor.allocate(context, n)
        back = context.allocate((12, n), dtype)
        real = accel.real_dtype(dtype)
        # what from_half multiplies a site's stored values by, in its precision
        scale = (want_norms.astype(np.float64) / HALF_MAX).astype(real)[:, None]

        def generate(wgs: int) -> tune.Measurement:
            convert = cls(context, dtype, {"wgs": wgs}).instantiate(queue)

            def run() -> None:
                convert.to_half(half, inp)
                convert.from_half(back, half)

            def check() -> bool:
                values, norms = half.values.get(queue), half.norms.get(queue)
                if not np.array_equal(norms, want_norms):
                    return False
                if np.max(np.abs(values.astype(np.int32) - want_values)) > 1:
                    return False
                return _holds(back.get(queue), values, scale)

            item = dtype.itemsize
            return tune.make_measure(queue, run, check, bytes=n * 12 * (2 * item + 8) + 8 * n)

        return tune.autotune(generate)


def _tuning_field(dtype: np.dtype, n: int) -> np.ndarray:
    """A (12, n) Gaussian field of ``dtype``, each site scaled by its own factor from e^-20 to
    e^20 (so that the norms span the range half storage keeps), drawn in the field's own
    precision (no double precision copy to convert)."""
    rng = np.random.default_rng(5)
    real = accel.real_dtype(dtype)
    parts = rng.standard_normal((12, n, 2), dtype=real)  # real and imaginary parts
    parts *= np.exp(rng.uniform(-20, 20, n)).astype(real)[None, :, None]
    return parts.view(dtype)[..., 0]


def _holds(back: np.ndarray, values: np.ndarray, scale: np.ndarray) -> bool:
    """Whether ``back`` (12, n) holds what half storage ``values`` (3, n, 4, 2) holds, each
    real and imaginary part within 1e-6 of its own value (the product of a stored value and
    its site's scale, which from_half computes once: so that each part is within rounding of
    it, and the complex values too), a component at a time."""
    got = np.ascontiguousarray(back).view(back.real.dtype).reshape(12, -1, 2)
    if got.shape[1] != values.shape[1]:
        return False
    for k in range(12):  # a component at a time: small temporaries
        # the int16 values reordered (not the result), times the scales in back's precision
        want = values[k // GROUP, :, k % GROUP] * scale
        error = np.abs(got[k] - want)
        np.abs(want, out=want)
        want *= 1e-6
        if not np.all(error <= want):
            return False
    return True


def site_kernel_space(context: accel.Context) -> tune.Space:
    """The space of a kernel a site a work-item in a grid-stride loop (:func:`site_launcher`):
    its work-group size, up to 512 and the device's limit."""
    return tune.Space({"wgs": [32, 64, 128, 256, 512]},
                      [tune.at_most("wgs", context.device.max_work_group_size)])


def site_launcher(queue: accel.CommandQueue, kernels: dict[str, accel.Kernel],
                  launchers: dict[tuple[str, int], Any], name: str, sites: int, wgs: int,
                  most_groups: int) -> tuple[Any, int]:
    """The launcher (kept in ``launchers``) of kernel ``name`` over ``sites`` sites, a site a
    work-item in a grid-stride loop of at most ``most_groups`` work-groups of ``wgs``; and the
    number of work-groups."""
    groups = max(1, min(most_groups, -(-sites // wgs)))
    launch = launchers.get((name, groups))
    if launch is None:
        launch = launchers[(name, groups)] = queue.launcher(kernels[name], groups * wgs, wgs)
    return launch, groups


class HalfConvert(SiteKernels):
    """The conversions of one template on one queue (enqueued, not waited for)."""

    def __init__(self, template: HalfConvertTemplate, queue: accel.CommandQueue):
        super().__init__(template, queue, ("to_half", "from_half"))

    def _enqueue(self, name: str, sites: int, args: list[Any]) -> None:
        self._launch(name, sites, args + [np.uint64(sites)])

    def _check(self, field: accel.DeviceArray, spinor: HalfSpinor) -> int:
        if not isinstance(spinor, HalfSpinor):
            raise TypeError(f"expected a HalfSpinor, not {type(spinor).__name__}")
        sites = spinor.sites
        if field.dtype != self.template.dtype or field.size != 12 * sites:
            raise ValueError(f"expected a {self.template.dtype} field of 12 x {sites} elements, "
                             f"got {field.dtype} x {field.size}")
        return sites

    def to_half(self, out: HalfSpinor, inp: accel.DeviceArray) -> None:
        """out = inp in half precision."""
        sites = self._check(inp, out)
        self._enqueue("to_half", sites, [out.values, out.norms, inp])

    def from_half(self, out: accel.DeviceArray, inp: HalfSpinor) -> None:
        """out = the values ``inp`` holds, in out's precision."""
        sites = self._check(out, inp)
        self._enqueue("from_half", sites, [out, inp.values, inp.norms])
