"""The Schwarz preconditioner of GCR (the QUDA seed's scalable solver): additive,
non-overlapping blocks with Dirichlet boundaries, a few minimal-residual steps on the even-odd
block system in a low precision.

``K r`` approximates ``M_pc^-1 r`` by ``M_pc`` restricted to blocks: the hops that leave a
block are dropped (``DslashTemplate(..., domain=block)``), so the blocks decouple and, on many
GPUs with blocks inside each GPU's part, the preconditioner communicates nothing. Its inner
solver is MR, ``iterations`` steps from z = 0: ``A r`` with the block operator, then per block
``alpha_b = <A r, r>_b / |A r|^2_b``, ``z += alpha_b r``, ``r -= alpha_b A r``: each block
solves its own system, with nothing summed across blocks or processes ("communication switched
off"), and the step lengths stay on the device (:class:`SchwarzMRTemplate`, one reduction pass
and one update pass per step), so the host never waits inside the preconditioner.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune
from operations import solvers
from operations.precision import ConvertTemplate

from . import half as half_storage
from .dslash import check_domain
from .lattice import Lattice

MR_TEMPLATE = Path(__file__).with_name("schwarz_mr.mako")

#: inner precisions the preconditioner runs in
INNER_PRECISIONS = ("half", "single", "double")


def check_schwarz(block: Any, inner_iterations: Any, inner_precision: Any) -> tuple[int, ...]:
    """The preconditioner's arguments, checked: ``block`` four positive ints (that they divide
    the lattice is checked by the operator), ``inner_iterations`` an int >= 1,
    ``inner_precision`` one of :data:`INNER_PRECISIONS`."""
    if block is None:
        raise ValueError("preconditioner='schwarz' needs block=(bx, by, bz, bt): the extents "
                         "of the Schwarz blocks, each dividing the lattice's (or each GPU's part)")
    try:
        block = tuple(int(b) for b in block)
    except (TypeError, ValueError):
        raise TypeError(f"block must be four ints (bx, by, bz, bt), got {block!r}") from None
    if len(block) != 4 or min(block) < 1:
        raise ValueError(f"block must be four positive extents (bx, by, bz, bt), got {block}")
    if (isinstance(inner_iterations, bool) or not isinstance(inner_iterations, (int, np.integer))
            or inner_iterations < 1):
        raise ValueError(f"inner_iterations must be an int of at least 1, got {inner_iterations!r}")
    if inner_precision not in INNER_PRECISIONS:
        raise ValueError(f"inner_precision must be one of {', '.join(INNER_PRECISIONS)}, "
                         f"got {inner_precision!r}")
    return block


class SchwarzMRTemplate:
    """One minimal-residual step per Schwarz block on even-site vectors (``schwarz_mr.mako``):
    ``step(r, z, ar)`` enqueues ``d_b = (<A r, r>_b, |A r|^2_b)`` for every block (a
    work-group each) and ``z += alpha_b r``, ``r -= alpha_b A r`` with ``alpha_b`` read from
    ``d`` on the device. The work-group size is tuned; every candidate is checked against numpy.
    With ``half=True`` the vectors are :class:`.half.HalfSpinor` fields (16-bit values and a
    norm per site; ``dtype`` complex64, the arithmetic single precision)."""

    autotune_version = 1
    autotune_sources = (MR_TEMPLATE,)

    def __init__(self, context: accel.Context, dims: tuple[int, int, int, int],
                 block: tuple[int, int, int, int], dtype: Any, parity: int = 0,
                 tuning: dict[str, Any] | None = None, half: bool = False):
        self.lattice = Lattice(tuple(int(n) for n in dims))
        self.block = check_domain(block, self.lattice.dims)
        if self.block is None:
            raise ValueError("the Schwarz MR step needs block=(bx, by, bz, bt)")
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.dtype(np.complex64), np.dtype(np.complex128)):
            raise TypeError(f"the Schwarz MR step works on complex64 or complex128 vectors, not "
                            f"{self.dtype}")
        if parity not in (0, 1):
            raise ValueError(f"parity must be 0 or 1, got {parity!r}")
        self.half = bool(half)
        if self.half and self.dtype != np.dtype(np.complex64):
            raise TypeError("a half precision MR step computes in single precision: "
                            f"dtype=complex64, not {self.dtype}")
        self.context, self.parity = context, parity
        self.blocks = int(np.prod([n // b for n, b in zip(self.lattice.dims, self.block)]))
        self.tuning = tune.tuning_for(SchwarzMRTemplate, context, tuning, dims=self.lattice.dims,
                                      block=self.block, dtype=self.dtype,
                                      half=self.half).parameters
        self.wgs, self.splits = self.tuning["wgs"], self.tuning["splits"]
        self.program = context.build(MR_TEMPLATE, {
            "cplx": accel.c_type(self.dtype), "real": accel.c_type(accel.real_dtype(self.dtype)),
            "dims": self.lattice.dims, "block": self.block, "parity": parity, "wgs": self.wgs,
            "splits": self.splits, "half": self.half, "half_max": half_storage.HALF_MAX})

    def instantiate(self, queue: accel.CommandQueue) -> SchwarzMR:
        return SchwarzMR(self, queue)

    @classmethod
    def autotune_space(cls, context: accel.Context, dims: tuple[int, int, int, int],
                       block: tuple[int, int, int, int], dtype: Any,
                       half: bool = False) -> tune.Space:
        """Work-group sizes, powers of two the device allows, and how many work-groups share
        one block's sums (``splits``: a few large blocks, such as one GPU's part, would leave
        most of a GPU idle with one work-group each); a block's sites must fill its groups."""
        gpu = context.device.is_gpu
        sizes = [32, 64, 128, 256, 512] if gpu else [16, 64, 256]
        volume = int(np.prod(block))
        return tune.Space({"wgs": sizes,
                           "splits": [2 ** i for i in range(11)] if gpu else [1, 4, 16]},
                          [tune.at_most("wgs", context.device.max_work_group_size),
                           tune.limit("wgs x splits at most the block's sites",
                                      lambda p: p["wgs"] * p["splits"] <= volume)])

    @classmethod
    @tune.autotuner(test={"wgs": 128, "splits": 1})
    def autotune(cls, context: accel.Context, dims: tuple[int, int, int, int],
                 block: tuple[int, int, int, int], dtype: Any, half: bool = False) -> dict[str, Any]:
        lattice = Lattice(tuple(dims))
        dtype = np.dtype(dtype)
        queue = context.create_tuning_command_queue()
        rng = np.random.default_rng(7)
        shape = (12, lattice.half_volume)
        host = {name: (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
                for name in ("r", "z", "ar")}
        if half:  # the step starts from what half storage holds
            host = {k: half_storage.spinor_from_half(*half_storage.spinor_to_half(v))
                    for k, v in host.items()}
        want_r, want_z = _reference_step(lattice, tuple(block), 0, host["r"], host["z"], host["ar"])
        vectors = _MRVectors(context, queue, shape, dtype, half)
        pristine = {k: vectors.to_device(v) for k, v in host.items()}
        r, z = vectors.allocate(), vectors.allocate()
        # each output, its reference in the layout the device's vectors come back in, and the
        # reference's largest real or imaginary part (a GPU's part of the lattice is checked
        # in a fraction of a second per candidate)
        wanted = []
        for got, want in ((r, want_r), (z, want_z)):
            want = vectors.reference_parts(want)
            wanted.append((got, want, float(np.max(np.abs(want)))))
        # half: each stored part within half a unit of its site's 16 bits (relative to the
        # largest |part| of the field, at most its site's)
        tol = 2.0 / half_storage.HALF_MAX if half else 1e-5 if dtype == np.complex64 else 1e-12

        def generate(**params: Any) -> tune.Measurement:
            step = cls(context, lattice.dims, block, dtype, 0, params, half).instantiate(queue)

            def setup() -> None:
                r.copy_from(queue, pristine["r"])
                z.copy_from(queue, pristine["z"])

            def check() -> bool:
                for got, want, scale in wanted:
                    error = vectors.parts(got)  # a new array: worked on in place
                    error -= want
                    if not np.max(np.abs(error, out=error)) <= tol * scale:
                        return False
                return True

            width = 52 if half else 12 * dtype.itemsize  # bytes a site of one vector
            return tune.make_measure(queue, lambda: step(r, z, pristine["ar"]), check, setup=setup,
                                     bytes=shape[1] * width * 7)

        return tune.autotune(generate)


class _MRVectors:
    """The MR step's vectors on the host and the device, in single/double or half storage."""

    def __init__(self, context: accel.Context, queue: accel.CommandQueue, shape: tuple[int, int],
                 dtype: np.dtype, half: bool):
        self.context, self.queue, self.shape, self.dtype, self.half = context, queue, shape, dtype, half

    def to_device(self, host: np.ndarray) -> Any:
        if self.half:
            return half_storage.to_device(self.context, self.queue, host)
        return self.context.to_device(self.queue, host.astype(self.dtype))

    def allocate(self) -> Any:
        if self.half:
            return half_storage.HalfSpinor.allocate(self.context, self.shape[1])
        return self.context.allocate(self.shape, self.dtype)

    def parts(self, vector: Any) -> np.ndarray:
        """The real and imaginary parts a device vector holds (compared with
        :meth:`reference_parts`)."""
        if self.half:
            return half_storage.stored_parts(self.queue, vector)
        return vector.get(self.queue).view(accel.real_dtype(self.dtype))

    def reference_parts(self, host: np.ndarray) -> np.ndarray:
        if self.half:
            return half_storage.spinor_parts(host)
        return host.astype(self.dtype).view(accel.real_dtype(self.dtype))


class SchwarzMR:
    """The MR step of one template on one queue (enqueued, never waited for)."""

    def __init__(self, template: SchwarzMRTemplate, queue: accel.CommandQueue):
        self.template = template
        self.queue = queue
        t = template
        self.d = t.context.allocate(3 * t.blocks, np.float64)  #: per block <A r, r>, |A r|^2
        self.partials = t.context.allocate(3 * t.blocks * t.splits, np.float64)
        self._dots = queue.launcher(t.program.get_kernel("block_dots"),
                                    t.blocks * t.splits * t.wgs, t.wgs)
        self._finish = queue.launcher(t.program.get_kernel("block_finish"), t.blocks * t.wgs,
                                      t.wgs)
        sites = t.lattice.half_volume
        self._update = queue.launcher(t.program.get_kernel("block_update"),
                                      -(-sites // t.wgs) * t.wgs, t.wgs)

    def __call__(self, r: Any, z: Any, ar: Any) -> None:
        """z += alpha_b r, r -= alpha_b ar with alpha_b = <ar, r>_b / |ar|^2_b per block (device
        arrays, or :class:`.half.HalfSpinor` fields for a half precision step)."""
        r, z, ar = (self._args(v) for v in (r, z, ar))
        self._dots([*ar, *r, self.partials])
        self._finish([self.partials, self.d])
        self._update([*r, *z, *ar, self.d])

    def _args(self, vector: Any) -> list[Any]:
        if not self.template.half:
            return [vector]
        code, args = half_storage.kernel_args(vector, self.template.lattice.half_volume)
        if code != "h":
            raise TypeError("a half precision MR step takes HalfSpinor vectors")
        return args


def _reference_step(lattice: Lattice, block: tuple[int, ...], parity: int, r: np.ndarray,
                    z: np.ndarray, ar: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One MR step per block in numpy (float64/complex128): the new r and z."""
    sites = lattice.sites(parity)  # lexicographic index of each even-odd site
    coords = np.stack(np.unravel_index(sites, lattice.shape), axis=-1)[:, ::-1]  # x, y, z, t
    counts = [n // b for n, b in zip(lattice.dims, block)]
    ids = np.zeros(len(sites), dtype=np.int64)
    for mu in (3, 2, 1, 0):
        ids = ids * counts[mu] + coords[:, mu] // block[mu]
    r, z, ar = (a.astype(np.complex128) for a in (r, z, ar))
    dot = np.bincount(ids, weights=np.sum(np.conj(ar) * r, axis=0).real) \
        + 1j * np.bincount(ids, weights=np.sum(np.conj(ar) * r, axis=0).imag)
    nn = np.bincount(ids, weights=np.sum(np.abs(ar) ** 2, axis=0))
    alpha = np.divide(dot, nn, out=np.zeros_like(dot), where=nn > 0)[ids]
    return r - alpha * ar, z + alpha * r


class SchwarzPreconditioner:
    """``K(out, inp)``: out = K inp for flexible GCR (:func:`operations.solvers.gcr`).

    ``outer``: the outer solver's linear operator (a :class:`~.wilson.WilsonLinearOperator` of
    kind "Mpc"); ``block``: the block system's, ``local.linear_operator("Mpc")`` of a
    :class:`~.wilson.WilsonOperator` ``local`` with ``domain=`` the blocks, in the inner
    precision, acting on this process's sites. Counts the inner steps
    (:attr:`inner_iterations`) and the wall time spent (:attr:`seconds`, each call waiting for
    its work: GCR waits once per step anyway).
    """

    def __init__(self, outer: Any, block: Any, iterations: int):
        local = block.wilson
        self.iterations = int(iterations)
        self.A = block
        if self.A.size != outer.size:
            raise ValueError("the block operator acts on vectors of another length than the "
                             "outer operator's")
        self.queue = outer.queue
        # the block operator's vector passes (no communicator: nothing summed across ranks),
        # kept per queue like a solver's, so a sequence of solves builds them once
        self.ops = solvers.vector_ops(self.A)
        #: half precision inner solves keep their vectors in half precision storage too (16-bit
        #: values and a norm per site, :mod:`.half`): the MR step and the block dslash move half
        #: the bytes, as the QUDA seed's preconditioner does
        self.half = getattr(local, "precision", None) == "half"
        # the outer operator's passes carry its communicator: on many ranks, rank 0 tunes the
        # preconditioner's kernels (or reads the store) and every rank launches the same
        # parameters, as for the dslash (QUDA's rule); on one process each template tunes itself
        hi = solvers.vector_ops(outer)
        context, dims, domain = local.context, local.lattice.dims, local.domain
        self.step = SchwarzMRTemplate(
            context, dims, domain, self.A.dtype, half=self.half,
            tuning=hi.agreed(lambda: SchwarzMRTemplate.autotune(context, dims, domain,
                                                                 self.A.dtype, self.half)),
        ).instantiate(local.queue)
        if self.half:
            convert = half_storage.HalfConvertTemplate(
                context, outer.dtype,
                hi.agreed(lambda: half_storage.HalfConvertTemplate.autotune(context, outer.dtype)),
            ).instantiate(self.queue)
            self._down, self._up = convert.to_half, convert.from_half
            self.r, self.z, self.ar = (half_storage.HalfSpinor.allocate(
                context, local.lattice.half_volume) for _ in range(3))
        else:
            same = np.dtype(outer.dtype) == np.dtype(self.A.dtype)
            self._down = None if same else ConvertTemplate(
                context, outer.dtype, self.A.dtype,
                hi.agreed(lambda: ConvertTemplate.autotune(context, outer.dtype, self.A.dtype)),
            ).instantiate(self.queue)
            self._up = None if same else hi.converter(self.A.dtype)
            self.r, self.z, self.ar = self.ops.new(), self.ops.new(), self.ops.new()
        self.inner_iterations = 0
        self.seconds = 0.0

    def __call__(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        started = time.perf_counter()
        q = self.queue
        if self._down is None:
            self.r.copy_from(q, inp)
        else:
            self._down(self.r, inp)
        self.z.zero(q)
        for _ in range(self.iterations):
            self.A.apply(self.ar, self.r)
            self.step(self.r, self.z, self.ar)  # per block: z += alpha_b r, r -= alpha_b A r
        self.inner_iterations += self.iterations
        if self._up is None:
            out.copy_from(q, self.z)
        else:
            self._up(out, self.z)
        q.finish()
        self.seconds += time.perf_counter() - started
