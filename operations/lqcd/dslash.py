"""The tuned Wilson dslash kernels (one parity per launch), for every precision and reconstruct."""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune
from autotune.tune.fill import Fill

from ..scalars import finite_real_scalar

from . import gauge as gauge_fields
from . import half as half_storage
from . import reference
from .dslash_links import (PRECISIONS, gauge_to_device, layout_links, link_groups, link_loads,
                           link_values)
from .gamma import upper_right_blocks
from .lattice import Lattice

TEMPLATE = Path(__file__).with_name("dslash.mako")
#: the distributed kernels' own parts, which dslash.mako includes by the name its render
#: argument dist gives (so they are no part of the single-GPU kernels' sources)
REGIONS_TEMPLATE = Path(__file__).with_name("dslash_regions.mako")
#: precision -> the (real, complex) dtypes of the arithmetic; "half" stores 16-bit fixed point
#: (operations.lqcd.half) and computes in single precision
ARITHMETIC = {**PRECISIONS, "half": PRECISIONS["single"]}
#: Floating-point operations per site of one parity (the standard Wilson dslash count).
FLOPS_PER_SITE = 1320
RECONSTRUCTS = (18, 12, 8)
#: (parity, dagger, xpay) of the kernels an even-odd CG launches: D_oe, then x + a D_eo, and
#: both daggered (built ahead for every online candidate; others are built on first use).
SOLVER_VARIANTS = ((1, False, False), (0, False, True), (1, True, False), (0, True, True))
#: the same for a half precision operator's M_pc^dag M_pc with single precision vectors in and
#: out (WilsonOperator): its first dslash reads single, its last writes single
HALF_SOLVER_VARIANTS = ((1, False, False, "hss"), (0, False, True, "hhs"),
                        (1, True, False, "hhh"), (0, True, True, "shh"))


def _coefficient(z: complex) -> str:
    for text, value in (("0", 0), ("1", 1), ("-1", -1), ("i", 1j), ("-i", -1j)):
        if abs(z - value) < 1e-12:
            return text
    raise ValueError(f"gamma block entry {z} is not 0, +-1 or +-i")


BLOCKS = [[[_coefficient(z) for z in row] for row in a] for a in upper_right_blocks()]


def check_options(dims: Any, precision: str, reconstruct: int, t_boundary: int) -> Lattice:
    """The lattice of ``dims``, once the options are checked."""
    lattice = Lattice(tuple(dims))
    if precision not in ARITHMETIC:
        raise ValueError(f"precision must be {' or '.join(map(repr, ARITHMETIC))}, "
                         f"got {precision!r}")
    if reconstruct not in RECONSTRUCTS:
        raise ValueError(f"reconstruct must be 18, 12 or 8, got {reconstruct!r}")
    if t_boundary not in (1, -1):
        raise ValueError(f"t_boundary must be +1 (periodic) or -1 (antiperiodic), got {t_boundary!r}")
    return lattice


def check_domain(domain: Any, dims: tuple[int, int, int, int]) -> tuple[int, ...] | None:
    """Schwarz domain extents (bx, by, bz, bt), each dividing the lattice's, or None."""
    if domain is None:
        return None
    try:
        domain = tuple(int(b) for b in domain)
    except (TypeError, ValueError):
        raise TypeError(f"domain must be four ints (bx, by, bz, bt), got {domain!r}") from None
    if len(domain) != 4 or any(b < 1 or n % b for b, n in zip(domain, dims)):
        raise ValueError(f"domain {domain} must be four extents that divide the lattice's "
                         f"{tuple(dims)} (X, Y, Z, T)")
    return domain


def kernel_arguments(dims: tuple[int, int, int, int], precision: str, reconstruct: int,
                     t_boundary: int = -1, domain: tuple[int, ...] | None = None,
                     dirichlet_edges: tuple[bool, ...] | None = None) -> dict[str, Any]:
    """What ``dslash.mako`` is rendered with for a lattice, precision and link compression,
    less the tuned parameters (and the link layout they choose: :func:`render_tuned`) and
    ``variants`` (arguments as validated by :class:`DslashTemplate`)."""
    real, cplx = ARITHMETIC[precision]
    arguments = {"real": accel.c_type(np.dtype(real)), "cplx": accel.c_type(np.dtype(cplx)),
                 "dims": tuple(dims), "reconstruct": reconstruct, "t_boundary": t_boundary,
                 "blocks": BLOCKS, "domain": domain, "dirichlet_edges": dirichlet_edges,
                 "half": precision == "half", "choice_step": gauge_fields.CHOICE_STEP,
                 "choice_counts": (gauge_fields.CHOICES[4], gauge_fields.CHOICES[7])}
    if precision == "half":  # the storage's scales, from the one place that defines them
        arguments.update(half_max=half_storage.HALF_MAX, link_scales=[
            float(v) for v in half_storage.link_scales(reconstruct)])
    return arguments


#: lattices above this volume are tuned on fields that repeat a tile (:func:`_tuning_fields`):
#: ``warm``'s 24^3 x 64 and 32^4 keys too (their full Haar fields took 3.5-4.3 s of a fresh
#: H200's ``warm --max-minutes 1``, 5 s at 32^4 on a 2-core AMD EPYC; a tile, a tenth of that)
TILED_ABOVE = 16 ** 4
#: the largest tile extent (each extent the largest even divisor of the lattice's not above it)
TILE = 16


def _tile_of(dims: tuple[int, int, int, int]) -> tuple[int, ...]:
    return tuple(max(d for d in range(2, min(n, TILE) + 1, 2) if n % d == 0) for n in dims)


def _tuning_fields(dims: tuple[int, int, int, int]):
    """A gauge field, a spinor, sampled even sites (in checkerboard order) and D psi there.

    Above :data:`TILED_ABOVE` sites the fields repeat a tile of at most :data:`TILE` sites each
    way (Haar links and a Gaussian spinor drawn on the tile): a kernel's speed does not depend
    on the values, the reference at the sampled sites is still computed on the whole lattice
    (its time boundary included), and a 32^4 problem is made in a second, a 48^3 x 96 one in
    seconds, not minutes.
    """
    lattice = Lattice(dims)
    rng = np.random.default_rng(2)
    if lattice.volume > TILED_ABOVE:
        tile = _tile_of(dims)
        reps = tuple(n // p for n, p in zip(dims, tile))[::-1]  # (t, z, y, x)
        u = np.tile(gauge_fields.haar_field(tile, seed=1), (1,) + reps + (1, 1))
        shape = Lattice(tile).shape + (4, 3)
        psi = np.tile(rng.standard_normal(shape) + 1j * rng.standard_normal(shape), reps + (1, 1))
    else:
        u = gauge_fields.haar_field(dims, seed=1)
        psi = (rng.standard_normal(lattice.shape + (4, 3))
               + 1j * rng.standard_normal(lattice.shape + (4, 3)))
    even = lattice.sites(0)
    cb = np.unique(np.concatenate([rng.integers(0, len(even), 2048), [0, len(even) - 1]]))
    coords = np.stack(np.unravel_index(even[cb], lattice.shape), axis=-1)
    expected = reference.hop_at(u, psi, coords, -1).reshape(len(cb), 12)
    return lattice, u, psi, cb, expected


@dataclass(frozen=True, eq=False)
class TuningProblem:
    """What every key of one lattice tunes on (:func:`tuning_problem`), in the orders the
    device takes: the links of :func:`_tuning_fields` by parity (4, 2, V/2, 3, 3), the spinor's
    odd sites (12, V/2), the sampled even sites and D psi there."""

    lattice: Lattice
    links: np.ndarray
    spinor: np.ndarray
    sample: np.ndarray
    expected: np.ndarray

    @functools.cached_property
    def half_spinor(self) -> tuple[np.ndarray, np.ndarray]:
        """The spinor in half precision storage (values, norms), made once for the three
        reconstructs' keys."""
        return half_storage.spinor_to_half(self.spinor)

    @functools.cached_property
    def _packed8(self) -> np.ndarray:
        return gauge_fields.pack_links(self.links, 8)

    def packed(self, reconstruct: int) -> np.ndarray:
        """The links' parameters (4, 2, V/2, n), to be read only: 18, a view of the links; 12,
        two rows (a copy, quick to make); 8, made once for the three precisions' keys (the
        costly one, a second at 32^4)."""
        if reconstruct == 18:
            return self.links.reshape(self.links.shape[:3] + (9,))
        return self._packed8 if reconstruct == 8 else gauge_fields.pack_links(self.links, 12)


@functools.lru_cache(maxsize=2)
def tuning_problem(dims: tuple[int, int, int, int]) -> TuningProblem:
    """:func:`_tuning_fields` for the device, cached (costly at 32^4; ``warm`` tunes the nine
    keys of each of its two lattices from one). Only the device orders are kept: the
    lexicographic fields would take 0.8 GB more at 32^4)."""
    lattice, u, psi, sample, expected = _tuning_fields(dims)
    spinor = lattice.spinor_to_device(psi, 1, np.complex128)
    return TuningProblem(lattice, lattice.links_by_parity(u), spinor, sample, expected)


def work_groups(sites: int, params: dict[str, Any]) -> int:
    """The work-groups that cover ``sites`` (one parity's) with ``params``: each takes ``wgs /
    dir_split`` sites a round for ``sites`` rounds."""
    per_group = params["wgs"] // params["dir_split"] * params["sites"]
    return -(-sites // per_group)


def render_tuned(precision: str, reconstruct: int, params: dict[str, Any]) -> dict[str, Any]:
    """The tuned parameters as ``dslash.mako`` takes them: ``link_load`` as its link layout."""
    return {**params, "link_groups": link_groups(precision, reconstruct, params["link_load"])}


def local_bytes(precision: str, params: dict[str, Any]) -> int:
    """Local (shared) memory a dslash work-group takes with ``params``: the staged
    neighbours (``stage``: 12 single or double precision complex numbers for each of the
    block's sites and two more; 16-bit input takes less) and the other directions' sums
    (``dir_split``)."""
    number = 16 if precision == "double" else 8
    block = params["wgs"] // params["dir_split"]
    staged = 12 * (block + 2) * number if params["stage"] else 0
    return staged + (params["dir_split"] - 1) * block * 12 * number


def bytes_per_site(precision: str, reconstruct: int) -> int:
    """Memory traffic of one site's update: eight neighbour spinors and links, one output
    (half precision: 2 bytes a number, and a 4-byte norm per spinor)."""
    if precision == "half":
        return 8 * (24 * 2 + 4) + 8 * reconstruct * 2 + 24 * 2 + 4
    real = np.dtype(PRECISIONS[precision][0]).itemsize
    return (8 * 24 + 8 * reconstruct + 24) * real


def least_bytes_per_site(precision: str, reconstruct: int, nrhs: int = 1) -> float:
    """The least memory traffic of one output site of a single-parity application: its eight
    links, and the input and output spinors once each (every other read served by caches);
    half precision: 2 bytes a number and a 4-byte norm per spinor. Divided into the copy
    bandwidth, it gives the dslash's roofline. ``nrhs``: per site and right-hand side of a
    launch that takes several (:class:`~operations.lqcd.dslash_multi.MultiDslash`), which
    share the links."""
    if precision == "half":
        links, spinors = 8 * reconstruct * 2, 2 * (24 * 2 + 4)
    else:
        real = np.dtype(PRECISIONS[precision][0]).itemsize
        links, spinors = 8 * reconstruct * real, 2 * 24 * real
    return links + spinors if nrhs == 1 else links / nrhs + spinors


class DslashTemplate:
    """Kernels ``dslash_p{0,1}[_dag][_xpay]`` for one lattice, precision and link compression."""

    # 2: fast_trig and min_blocks tuned beside wgs; 3: the 8-parameter form without
    # trigonometry (fast_trig became fast_math), half_bits; 4: sites, dir_split, stage,
    # link_load and carveout; 5: project16
    autotune_version = 5
    autotune_sources = (TEMPLATE,)
    #: ``AUTOTUNE_MATCH=similar`` serves an untuned lattice the nearest tuned one's parameters
    #: (log distance over the four extents, summed; precision and reconstruct must be equal).
    autotune_similar = {"dims": "log"}

    @classmethod
    def autotune_fill(cls, context: accel.Context, params: dict[str, Any],
                      dims: tuple[int, int, int, int], precision: str,
                      reconstruct: int) -> Fill:
        """The work-groups one parity's application launches with ``params`` (enough groups of
        ``wgs / dir_split`` sites a round, ``sites`` rounds, for half the lattice), of which a
        compute unit holds at least ``min_blocks`` at once (``__launch_bounds__``). ``similar``
        serves a lattice's launch shape only where it fills the device about as well as where
        it was measured."""
        return Fill(work_groups(math.prod(dims) // 2, params),
                    per_unit=max(1, params["min_blocks"]))
    #: ``warm`` plans each key's budget for each of the two searches of :meth:`autotune`
    autotune_warm = {"searches": 2}

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """The benchmark lattices on GPUs (32^4 and 24^3 x 64), 8^4 on CPU devices."""
        lattices = [(32, 32, 32, 32), (24, 24, 24, 64)] if context.device.is_gpu else [(8, 8, 8, 8)]
        precisions = (["half", "single", "double"] if context.device.double_precision
                      else ["half", "single"])
        return [{"dims": d, "precision": p, "reconstruct": r}
                for d in lattices for p in precisions for r in RECONSTRUCTS]

    def __init__(self, context: accel.Context, dims: tuple[int, int, int, int], precision: str,
                 reconstruct: int, t_boundary: int = -1,
                 tuning: dict[str, Any] | str | None = None, *,
                 domain: tuple[int, int, int, int] | None = None,
                 dirichlet_edges: tuple[bool, bool, bool, bool] | None = None):
        """``precision``: "double", "single" or "half" (16-bit fixed point storage,
        :mod:`.half`: the kernels then take :meth:`gauge_to_device`'s 16-bit links and, per
        spinor argument, a :class:`.half.HalfSpinor` or a single precision array). ``tuning``: explicit parameters, None (the stored
        result, tuned now on a miss) or ``"online"``: tuned while it runs (:meth:`instantiate`
        then needs a timed queue); explicit parameters may name some only (``{"wgs": 128}``),
        the others taking their ``test=`` values. ``domain``: (bx, by, bz, bt), Schwarz domains
        (Dirichlet blocks): the kernels drop every hop that leaves a domain (the block-local
        dslash of a Schwarz preconditioner; tuned parameters are the full dslash's);
        ``dirichlet_edges``: with ``domain``, four flags: directions in which the lattice's own
        edges are Dirichlet too, so that a domain as long as the lattice does not wrap around
        (one rank's part of a partitioned lattice, whose neighbours are elsewhere)."""
        self.lattice = check_options(dims, precision, reconstruct, t_boundary)
        self.context = context
        self.precision = precision
        self.half = precision == "half"
        self.reconstruct = reconstruct
        self.t_boundary = t_boundary
        self.real_dtype, self.dtype = (np.dtype(d) for d in ARITHMETIC[precision])
        if precision == "double" and not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision")
        self.domain = check_domain(domain, self.lattice.dims)
        if dirichlet_edges is not None and (self.domain is None or len(dirichlet_edges) != 4):
            raise ValueError("dirichlet_edges (4 flags) goes with domain=(bx, by, bz, bt)")
        edges = tuple(bool(e) for e in dirichlet_edges) if dirichlet_edges is not None else None
        self._render = kernel_arguments(self.lattice.dims, precision, reconstruct, t_boundary,
                                        self.domain, edges)
        self._kernels: dict[tuple, accel.Kernel] = {}  #: (parameters, *variant) -> kernel
        self._guard = threading.Lock()
        chosen = tune.tuning_for(DslashTemplate, context, tuning, online={"prepare": self.prepare},
                                 dims=self.lattice.dims, precision=precision,
                                 reconstruct=reconstruct)
        self.online: tune.OnlineTuner | None = chosen.online
        self.tuning = chosen.parameters
        if self.online is not None:
            return
        self.wgs = self.tuning["wgs"]
        self.global_size = self.launch_size(self.tuning)

    def render_arguments(self, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """What ``dslash.mako`` is rendered with for this template and the tuned parameters
        (or ``params``), less ``variants`` (for kernels built elsewhere: the distributed
        operator's)."""
        params = params if params is not None else self.parameters
        return {**self._render, **render_tuned(self.precision, self.reconstruct, params)}

    @property
    def parameters(self) -> dict[str, Any]:
        """The tuned parameters, or an online template's ``test=`` ones (which choose the
        link layout of :meth:`gauge_to_device` while it tunes)."""
        return self.tuning or self.online.test

    def launch_size(self, params: dict[str, Any]) -> int:
        """Work-items launched with ``params``: work-groups of ``wgs`` taking ``wgs /
        dir_split`` sites a round for ``sites`` rounds, enough groups for every even (odd) site."""
        return work_groups(self.lattice.half_volume, params) * params["wgs"]

    def kernel(self, parity: int, dagger: bool, xpay: bool,
               params: dict[str, Any] | None = None, storage: str = "hhh") -> accel.Kernel:
        """One variant, compiled on first use (a program each: building all eight costs 8x).

        Kept here once built: rendering the template again on every launch would leave the
        device idle while the host renders. ``params``: other parameters than the tuned ones
        (online tuning builds one kernel per candidate). ``storage`` (half precision only):
        per spinor argument (out, in, x), "h" for 16-bit, "s" for single precision storage.
        """
        params = params if params is not None else self.tuning
        variant: tuple = (parity, bool(dagger), bool(xpay))
        if self.half:
            variant += (storage,)
        kernel = self._kernels.get((tuple(sorted(params.items())), *variant))
        return kernel if kernel is not None else self._build(params, [variant])[0]

    def _build(self, params: dict[str, Any], variants: list[tuple]) -> list[accel.Kernel]:
        """Build ``variants`` with ``params`` as one program; keep and return their kernels."""
        program = self.context.build(TEMPLATE, {**self.render_arguments(params),
                                                "variants": variants})
        tuned = tuple(sorted(params.items()))
        kernels = []
        for variant in variants:
            parity, dagger, xpay = variant[:3]
            name = (f"dslash_p{parity}{'_dag' if dagger else ''}{'_xpay' if xpay else ''}"
                    f"{'_' + variant[3] if self.half else ''}")
            built = program.get_kernel(name)
            built.set_carveout(params["carveout"])  # its own module: dslash.mako names it
            with self._guard:
                kernels.append(self._kernels.setdefault((tuned, *variant), built))
        return kernels

    def prepare(self, params: dict[str, Any]) -> None:
        """Build the kernels an even-odd solve launches, for one online candidate, as one
        program: one module to load while the solve runs instead of four."""
        variants = HALF_SOLVER_VARIANTS if self.half else SOLVER_VARIANTS
        self._build(params, [v if self.half else v[:3] for v in variants])

    def gauge_to_device(self, queue: accel.CommandQueue, u: np.ndarray) -> accel.DeviceArray:
        """Compress SU(3) links and copy them to the device in this template's layout (the
        tuned ``link_load``'s)."""
        return gauge_to_device(self.context, queue, self.lattice, u, self.precision,
                               self.reconstruct, self.parameters["link_load"])

    def instantiate(self, queue: accel.CommandQueue) -> Dslash:
        """The dslash on one queue: ``dslash(out, inp, gauge, parity, dagger=, x=, a=)``."""
        if self.online is not None and not getattr(queue, "timed", False):
            raise ValueError("an online-tuned dslash times its launches; make the queue with "
                             "context.create_command_queue(timed=True)")
        return Dslash(self, queue)

    @classmethod
    def autotune_space(cls, context: accel.Context, dims: tuple[int, int, int, int], precision: str,
                       reconstruct: int) -> tune.Space:
        """What shapes the kernel, as far as the device allows:

        - ``wgs``: work-group size (32 to 1024 on GPUs);
        - ``sites``: sites per work-item (1 or 2, in rounds a grid apart);
        - ``dir_split``: work-items per site (1, 2 or 4), each taking 4 / dir_split of the
          directions, their sums added in local memory (on GPUs each part whole warps);
        - ``stage``: the x neighbours' spinors loaded by the work-group together into local
          memory first (they are read twice within a block);
        - ``link_load``: bytes per link load, 8 or 16 (:func:`link_loads`; the layout
          :meth:`gauge_to_device` writes follows it);
        - ``fast_math``: for the 8-parameter form in single or half precision, exact or fast
          square roots and division;
        - ``half_bits``: in half precision, 16-bit integers turned into floats by conversion
          instructions or by bit arithmetic;
        - ``project16``: in half precision, a 16-bit neighbour's spin projection added in
          integers before conversion (12 conversions a hop instead of 24), converted by
          conversion instructions ("cvt") or bit arithmetic ("bits"), or not (False);
        - ``min_blocks`` (CUDA GPUs): ``__launch_bounds__``'s minimum blocks per
          multiprocessor (0: none);
        - ``carveout`` (CUDA GPUs): the share of L1/shared storage preferred as shared
          memory (-1: the driver's choice, 0: the most L1, 100: the most shared memory).

        Local memory (:func:`local_bytes`) must fit the device's per work-group limit."""
        device = context.device
        gpu = device.is_gpu
        cuda = gpu and context.backend == "cuda"
        sizes = [32, 64, 128, 256, 512, 1024] if gpu else [16, 64, 256]
        warp = device.warp_size if gpu else 1
        return tune.Space({
            "wgs": sizes,
            "sites": [1, 2],
            "dir_split": [1, 2, 4],
            "stage": [False, True],
            "link_load": link_loads(precision, reconstruct),
            "fast_math": [False, True] if reconstruct == 8 and precision != "double" else [False],
            "half_bits": [False, True] if precision == "half" else [False],
            "project16": ["none", "cvt", "bits"] if precision == "half" else ["none"],
            "min_blocks": [0, 1, 2, 4] if cuda else [0],
            "carveout": [-1, 0, 100] if cuda else [-1],
        }, [tune.at_most("wgs", min(device.max_work_group_size, 1024)),
            tune.limit("dir_split divides wgs", lambda p: p["wgs"] % p["dir_split"] == 0),
            tune.limit("min_blocks x wgs at most 2048 threads per multiprocessor",
                       lambda p: p["min_blocks"] * p["wgs"] <= 2048),
            tune.preference(f"each direction part of a work-group whole warps of {warp}",
                            lambda p: p["wgs"] // p["dir_split"] % warp == 0),
            tune.limit(f"local memory within the device's {device.local_memory} bytes",
                       lambda p: local_bytes(precision, p) <= device.local_memory)])

    @classmethod
    def autotune_online_space(cls, context: accel.Context, dims: tuple[int, int, int, int],
                              precision: str, reconstruct: int) -> tune.Space:
        """What an online tuner scans: the work-group size (on GPUs up to 256: offline
        searches on the H200 and H100 never pick 512 or 1024, which ran 4% to 6x slower than
        the best in every precision and reconstruct, and each candidate is a build while the
        solve runs); on CUDA GPUs the minimum blocks per multiprocessor of
        ``__launch_bounds__`` (none, 2 or 4: 1 and 2 are close); on GPUs the directions split
        between 1 or 4 work-items a site (4 won in single and double precision with 12 and 18
        parameters, 2 only in double with 18, by less). The others stay at their ``test=``
        values, so that a solve's scan stays short: two sites a work-item and staged
        neighbours never won on these GPUs, and ``link_load``, the links' layout on the device,
        cannot change while the solve runs."""
        space = cls.autotune_space(context, dims, precision, reconstruct)
        gpu = context.device.is_gpu
        return space.narrowed(**_at_test("sites", "stage", "link_load", "carveout", "fast_math",
                                         "half_bits", "project16"),
                              wgs=[w for w in space.parameters["wgs"] if w <= 256 or not gpu],
                              dir_split=[1, 4] if gpu else [1],
                              min_blocks=[m for m in space.parameters["min_blocks"]
                                          if m in (0, 2, 4)])

    @classmethod
    def autotune_online_seeds(cls, context: accel.Context, dims: tuple[int, int, int, int],
                              precision: str, reconstruct: int) -> list[dict[str, Any]]:
        """Where an online scan starts on a GPU with nothing stored for the dslash: the
        shapes offline searches chose most often on the H200 and H100 (``tune.db.example``),
        built and timed first, the first of them launched until something is timed (the tuner
        leaves out those the device cannot take). On CPUs, none (``test=`` first)."""
        if not context.device.is_gpu:
            return []
        if precision != "half" and reconstruct != 8:
            shapes = [{"wgs": 128, "dir_split": 4, "min_blocks": 2},
                      {"wgs": 256, "dir_split": 4, "min_blocks": 2},
                      {"wgs": 128, "min_blocks": 4}]
        else:
            shapes = [{"wgs": 128, "min_blocks": 4}, {"wgs": 64, "min_blocks": 4},
                      {"wgs": 128, "min_blocks": 2}]
        if context.backend != "cuda":  # no __launch_bounds__
            shapes = [{k: v for k, v in shape.items() if k != "min_blocks"} for shape in shapes]
        return shapes

    #: configurations the structural search (after the launch shape's) measures at most
    STRUCTURE_EVALS = {"gpu": 24, "cpu": 6}

    @classmethod
    @tune.autotuner(test={"wgs": 64, "sites": 1, "dir_split": 1, "stage": False,
                          "link_load": 16, "fast_math": False, "half_bits": False,
                          "project16": "none", "min_blocks": 0, "carveout": -1})
    def autotune(cls, context: accel.Context, dims: tuple[int, int, int, int], precision: str,
                 reconstruct: int) -> dict[str, Any]:
        """In two searches: the launch shape first, every valid ``wgs``, ``min_blocks``,
        ``fast_math`` and ``project16`` (and, on GPUs, ``dir_split`` 1 or 4) with one site a
        work-item, nothing staged, 16-byte link loads, 16-bit values read by conversion
        instructions and the driver's carve-out; then, from its best, an iterated local search
        (``local``, seed 0) over the whole space within :attr:`STRUCTURE_EVALS` more
        configurations. Every candidate's output is checked against the numpy reference."""
        check_options(dims, precision, reconstruct, -1)
        problem = tuning_problem(tuple(int(d) for d in dims))
        lattice, sample, expected = problem.lattice, problem.sample, problem.expected
        queue = context.create_tuning_command_queue()
        sites = lattice.half_volume
        # On a CPU device two placements of the operands, allocated apart, and the calls
        # alternate between them: where a set lands can change a configuration's speed there
        # by a few percent (PoCL on a 2-core Xeon, docs/performance.md), and one set for a
        # whole search ranks that placement (as the fused BLAS templates do).
        layouts = _LinkLayouts(problem, precision, reconstruct)
        placements = [_TuningOperands(context, queue, problem, precision, layouts)
                      for _ in range(1 if context.device.is_gpu else 2)]
        tol = {"half": 5e-3, "single": 1e-4, "double": 1e-10}[precision]

        def generate(**params: Any) -> tune.Measurement:
            template = cls(context, lattice.dims, precision, reconstruct, -1, params)
            dslash = template.instantiate(queue)

            def run_on(p: _TuningOperands) -> Any:
                links = p.links(params["link_load"])
                return lambda: dslash(p.out, p.inp, links, 0)

            def setup() -> None:  # every candidate starts from zeroed outputs
                for p in placements:
                    zero_output(queue, p.out)

            def check() -> bool:  # after setup and one run: the first placement's output
                got = sampled_output(queue, placements[0].out, sample)
                return bool(np.max(np.abs(got - expected)) <= tol * np.max(np.abs(expected)))

            return tune.make_measure(queue, [run_on(p) for p in placements], check,
                                     setup=setup,
                                     bytes=sites * bytes_per_site(precision, reconstruct),
                                     flops=sites * FLOPS_PER_SITE)

        space = cls.autotune_space(context, lattice.dims, precision, reconstruct)
        gpu = context.device.is_gpu
        # on GPUs the launch shape is searched with the directions split between 1 or 4
        # work-items: the best shapes differ between the two, and a local search from the
        # best shape at 1 alone did not always reach the best at 4 (1 of 10 H200 runs 4% off)
        return structured_search(generate, space, gpu, {"dir_split": [1, 4]} if gpu else {})


class _LinkLayouts:
    """A tuning search's links on the host, in each layout a candidate asks for (made once a
    layout, shared by the placements; candidates are made in threads)."""

    def __init__(self, problem: Any, precision: str, reconstruct: int):
        self.problem, self.precision, self.reconstruct = problem, precision, reconstruct
        self._values: np.ndarray | None = None  # the links' numbers, made once
        self._made: dict[int, np.ndarray] = {}  # link_load -> the links in its layout
        self._guard = threading.Lock()

    def layout(self, link_load: int) -> np.ndarray:
        """The links laid out for ``link_load``."""
        with self._guard:
            if link_load not in self._made:
                if self._values is None:
                    self._values = link_values(self.problem.packed(self.reconstruct),
                                               self.precision, self.reconstruct)
                self._made[link_load] = layout_links(self._values, self.precision,
                                                     self.reconstruct, link_load)
            return self._made[link_load]


class _TuningOperands:
    """One placement of a tuning search's operands on the device: the input spinor, the output
    and the links in each layout a candidate asks for (uploaded once a layout)."""

    def __init__(self, context: accel.Context, queue: accel.CommandQueue, problem: Any,
                 precision: str, layouts: _LinkLayouts):
        self.context, self.queue, self.layouts = context, queue, layouts
        sites = problem.lattice.half_volume
        if precision == "half":
            self.inp = half_storage.HalfSpinor(*(context.to_device(queue, a)
                                                 for a in problem.half_spinor))
            self.out = half_storage.HalfSpinor.allocate(context, sites)
        else:
            dtype = PRECISIONS[precision][1]
            self.inp = context.to_device(queue, problem.spinor.astype(dtype, copy=False))
            self.out = context.allocate((12, sites), dtype)
        self._links: dict[int, accel.DeviceArray] = {}  # link_load -> the links on the device
        self._guard = threading.Lock()  # candidates are made in threads

    def links(self, link_load: int) -> accel.DeviceArray:
        """The links laid out for ``link_load``, on the device."""
        with self._guard:
            if link_load not in self._links:
                self._links[link_load] = self.context.to_device(
                    self.queue, self.layouts.layout(link_load))
            return self._links[link_load]


#: the parameters that shape the kernel rather than its launch (the second search's)
#: (and half_bits: on the H200 the 16-bit reads' arithmetic mattered less than where the
#: projection happens, so ``project16`` takes its place in the first)
STRUCTURE = ("sites", "dir_split", "stage", "link_load", "carveout", "half_bits")


def structured_search(generate: Any, space: tune.Space, gpu: bool,
                      launch: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    """The dslash kernels' search (:meth:`DslashTemplate.autotune`'s and
    :meth:`~operations.lqcd.dslash_multi.MultiDslash.autotune`'s): first the launch shape,
    every parameter of :data:`STRUCTURE` in ``space`` at its ``test=`` value (``launch``: lists
    that take their place), then from its best an iterated local search (``local``, seed 0)
    over the whole ``space`` within :attr:`DslashTemplate.STRUCTURE_EVALS` more
    configurations.

    Where the search settings name a strategy (``warm``'s plan, ``--strategy``,
    ``tune.search_settings(strategy=...)``), the second search is that strategy's over the whole
    space within the settings' budget (none given: all it reaches), not the template's own
    budget: ``warm``'s plan of a small space, ``brute_force`` every configuration, is then what
    runs. Where the first search spent the time limit of both (``warm --max-minutes``), the
    second returns its seed, the first's best, unmeasured (:func:`autotune.tune.search`)."""
    pinned = _at_test(*(name for name in STRUCTURE if name in space.parameters))
    first = tune.autotune(generate, space.narrowed(**{**pinned, **(launch or {})}))
    with tune.search_settings() as settings:  # the enclosing block's, as they are
        named = settings.strategy is not None
    budget = None if named else DslashTemplate.STRUCTURE_EVALS["gpu" if gpu else "cpu"]
    return tune.autotune(generate, space, strategy="local", max_evals=budget, seed=0,
                         seeds=[first])


def sampled_output(queue: accel.CommandQueue, out: Any, sample: np.ndarray) -> np.ndarray:
    """A tuning candidate's output at the ``sample``d sites, (sites, 12) complex: only they are
    read back and converted (a whole 48^3 x 96 field took seconds); ``out``, a device spinor
    or a :class:`.half.HalfSpinor`."""
    if isinstance(out, half_storage.HalfSpinor):
        values, norms = out.values.get(queue), out.norms.get(queue)
        return half_storage.spinor_from_half(values[:, sample], norms[sample]).T
    return out.get(queue)[:, sample].T


def zero_output(queue: accel.CommandQueue, out: Any) -> None:
    """Zero a tuning candidate's output before it runs: a candidate that skips sites must not
    pass on another's output."""
    for array in ((out.values, out.norms) if isinstance(out, half_storage.HalfSpinor)
                  else (out,)):
        array.zero(queue)


def _at_test(*names: str) -> dict[str, list[Any]]:
    """Lists pinning ``names`` to their ``test=`` values (for :meth:`tune.Space.narrowed`)."""
    test = tune.tuner_of(DslashTemplate).test
    return {name: [test[name]] for name in names}


class Dslash:
    """The dslash kernels of one template, launched on one queue."""

    def _viewed(self, out: Any, inp: Any, x: Any) -> tuple[Any, Any, Any]:
        """Spinor arguments that are other libraries' arrays (CuPy, PyTorch, pyopencl, ...)
        viewed in place (``Context.as_array``), the queue ordered after their producers."""
        passed = (out, inp, x)
        views = self._last.get(passed, self.queue)  # the same objects: ordered again
        if views is None:
            views = tuple(None if v is None else spinor_array(self.template, self.queue, v, name)
                          for v, name in zip(passed, ("out", "inp", "x")))
            self._last.keep(passed, views)
        return views

    def __init__(self, template: DslashTemplate, queue: accel.CommandQueue):
        self.template = template
        self.queue = queue
        self._launchers: dict[tuple, Any] = {}
        self._memo: dict[tuple, tuple[Any, Any]] = {}  #: variant -> (parameters, launcher)
        self._last = accel.LastViews()  #: the other libraries' spinors last passed, viewed

    def __call__(self, out: accel.DeviceArray, inp: accel.DeviceArray, gauge: accel.DeviceArray,
                 parity: int, *, dagger: bool = False, x: accel.DeviceArray | None = None,
                 a: float = 0.0) -> None:
        """out = D_{parity, 1-parity} inp, or x + a D inp when ``x`` is given (D^dag if asked).
        Half precision: each of ``out``, ``inp`` and ``x`` is a :class:`.half.HalfSpinor` (16
        bits) or a single precision (complex64) array; the arithmetic is single precision."""
        key: tuple = (parity, bool(dagger), x is not None)
        a = finite_real_scalar("dslash", "a", a, self.template.real_dtype.type)
        if self.template.half:
            sites = self.template.lattice.half_volume
            codes, args = zip(*(half_storage.kernel_args(f, sites)
                                for f in (out, inp, x if x is not None else inp)))
            key += ("".join(codes),)
            args = [*args[0], *args[1], gauge, *args[2], self.template.real_dtype.type(a)]
        else:
            if not (isinstance(out, accel.DeviceArray) and isinstance(inp, accel.DeviceArray)
                    and (x is None or isinstance(x, accel.DeviceArray))):
                out, inp, x = self._viewed(out, inp, x)
            args = [out, inp, gauge, x if x is not None else inp, self.template.real_dtype.type(a)]
        online = self.template.online
        if online is None:
            launch = self._launchers.get(key)
            if launch is None:
                t = self.template
                launch = self._launchers[key] = self.queue.launcher(
                    t.kernel(*key[:3], storage=key[3] if t.half else "hhh"), t.global_size, t.wgs)
            launch(args)
            return
        with online.measure(self.queue, key) as params:  # each variant is a part of the scan
            memo = self._memo.get(key)  # locked, the tuner gives the same mapping every launch
            if memo is not None and memo[0] is params:
                launch = memo[1]
            else:
                wgs = params["wgs"]
                mine = (tuple(sorted(params.items())), *key)
                launch = self._launchers.get(mine)
                if launch is None:
                    t = self.template
                    launch = self._launchers[mine] = self.queue.launcher(
                        t.kernel(*key[:3], params=params, storage=key[3] if t.half else "hhh"),
                        t.launch_size(params), wgs)
                self._memo[key] = (params, launch)
            launch(args)


def spinor_array(template: DslashTemplate, queue: accel.CommandQueue, obj: Any, name: str,
                 parities: int = 1) -> accel.DeviceArray:
    """``obj`` as a device spinor of ``parities`` (1 or 2) halves of the lattice in the
    template's arithmetic dtype: ours, or another library's array viewed in place."""
    array = template.context.as_array(obj, f"spinor {name}", numpy_hint=(
        "use the host methods (WilsonOperator.apply(psi) on numpy spinors) or copy it with "
        "WilsonOperator.to_device"), queue=queue, dtype=template.dtype)
    size = parities * 12 * template.lattice.half_volume
    if array.size != size or array.dtype != template.dtype:
        raise ValueError(f"spinor {name} has {array.size} elements of {array.dtype}; this "
                         f"lattice needs {size} of {template.dtype} ({parities} x 12 x V/2)")
    return array
