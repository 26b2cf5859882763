"""Dense matrix multiply, ``C = alpha * A * B + beta * C``, float32 and float64, tuned over a
large space: work-group tiles, work-item tiles, the k-tile, vector widths, thread layouts for
loading, and local-memory staging of A and B (``gemm.mako``).

Device use (``at`` is A transposed: A stored column-major, K x M row-major)::

    gemm = GemmTemplate(context, np.float32, m, n, k).instantiate(queue)
    gemm(c, at, b, alpha=1.0, beta=0.0)       # c: M x N, at: K x M, b: K x N device arrays

Host use (numpy in, numpy out)::

    c = operations.gemm.gemm(a, b)           # a: M x K, b: K x N

Sizes that are not multiples of the tuned tiles are padded with zeros on the device (and the
result copied back), so every size is correct; multiples of the tiles run without copies.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .scalars import finite_real_scalar

TEMPLATE = Path(__file__).with_name("gemm.mako")
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
NAMES = ("MWG", "NWG", "KWG", "MDIMC", "NDIMC", "MDIMA", "NDIMB", "KWI", "VWM", "VWN",
         "STRM", "STRN", "SA", "SB")
#: Parameters used inside test suites; valid on every device (64 work-items, 4 KiB local memory).
TEST_PARAMETERS = {"MWG": 32, "NWG": 32, "KWG": 16, "MDIMC": 8, "NDIMC": 8, "MDIMA": 8, "NDIMB": 8,
                   "KWI": 2, "VWM": 2, "VWN": 2, "STRM": 0, "STRN": 0, "SA": 1, "SB": 1}
#: The GPU space: that of Kernel Tuner's GEMM example (over 15 000 valid configurations on an
#: H200 for float32).
GPU_SPACE = {"MWG": (16, 32, 64, 128), "NWG": (16, 32, 64, 128), "KWG": (16, 32),
             "MDIMC": (8, 16, 32), "NDIMC": (8, 16, 32), "MDIMA": (8, 16, 32), "NDIMB": (8, 16, 32),
             "KWI": (2,), "VWM": (1, 2, 4, 8), "VWN": (1, 2, 4, 8), "STRM": (0,), "STRN": (0,),
             "SA": (0, 1), "SB": (0, 1)}
#: CPU devices (PoCL) compile slowly and gain little from large spaces.
CPU_SPACE = {"MWG": (16, 32), "NWG": (32,), "KWG": (16,), "MDIMC": (8,), "NDIMC": (8,),
             "MDIMA": (8,), "NDIMB": (8,), "KWI": (2,), "VWM": (1, 2), "VWN": (4,),
             "STRM": (0, 1), "STRN": (0,), "SA": (0, 1), "SB": (1,)}
#: Accumulators per work-item at most (more spill out of registers).
MAX_ACCUMULATORS = {np.dtype(np.float32): 128, np.dtype(np.float64): 64}
#: Indices are 32-bit unsigned: a padded matrix must have fewer than 2^32 elements.
MAX_ELEMENTS = 2**32 - 1


def local_bytes(p: dict[str, Any], dtype: np.dtype) -> int:
    """Local memory one work-group uses."""
    return (p["SA"] * p["KWG"] * p["MWG"] + p["SB"] * p["KWG"] * p["NWG"]) * np.dtype(dtype).itemsize


def restrictions(device: accel.DeviceIdentity, dtype: Any) -> list:
    """What the kernel assumes of its parameters, and what the device allows."""
    dtype = np.dtype(dtype)

    def threads(p):
        return p["MDIMC"] * p["NDIMC"]

    return [
        tune.limit("every size is a positive int, flags 0 or 1",
                   lambda p: all(p[n] >= 1 for n in NAMES[:10])
                   and all(p[n] in (0, 1) for n in NAMES[10:])),
        tune.limit("vector widths are 1, 2, 4 or 8",
                   lambda p: p["VWM"] in (1, 2, 4, 8) and p["VWN"] in (1, 2, 4, 8)),
        tune.limit(f"a work-group of MDIMC x NDIMC fits {device.name}",
                   lambda p: threads(p) <= device.max_work_group_size),
        tune.limit("KWI divides KWG", lambda p: p["KWG"] % p["KWI"] == 0),
        tune.limit("MDIMC x VWM divides MWG and NDIMC x VWN divides NWG",
                   lambda p: p["MWG"] % (p["MDIMC"] * p["VWM"]) == 0
                   and p["NWG"] % (p["NDIMC"] * p["VWN"]) == 0),
        tune.limit("the loading layout of A fits its tile (or A is not staged: MDIMA = MDIMC)",
                   lambda p: (threads(p) % p["MDIMA"] == 0 and p["KWG"] % (threads(p) // p["MDIMA"]) == 0
                                    and p["MWG"] % (p["MDIMA"] * p["VWM"]) == 0) if p["SA"]
                         else p["MDIMA"] == p["MDIMC"]),
        tune.limit("the loading layout of B fits its tile (or B is not staged: NDIMB = NDIMC)",
                   lambda p: (threads(p) % p["NDIMB"] == 0 and p["KWG"] % (threads(p) // p["NDIMB"]) == 0
                                    and p["NWG"] % (p["NDIMB"] * p["VWN"]) == 0) if p["SB"]
                         else p["NDIMB"] == p["NDIMC"]),
        tune.preference(f"at most {MAX_ACCUMULATORS[dtype]} accumulators per work-item",
                        lambda p: (p["MWG"] // p["MDIMC"]) * (p["NWG"] // p["NDIMC"])
                        <= MAX_ACCUMULATORS[dtype]),
        tune.limit(f"the staged tiles fit {device.name}'s local memory",
                   lambda p: local_bytes(p, dtype) <= min(device.local_memory, 48 * 1024)),
    ]


def check_sizes(m: Any, n: Any, k: Any) -> tuple[int, int, int]:
    sizes = []
    for name, value in (("m", m), ("n", n), ("k", k)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, not {type(value).__name__} {value!r}")
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
        sizes.append(int(value))
    return tuple(sizes)  # type: ignore[return-value]


def _padded(size: int, tile: int) -> int:
    return -(-size // tile) * tile


class GemmTemplate:
    """``C = alpha A B + beta C`` for one dtype and one size (m x k times k x n)."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)
    #: ``AUTOTUNE_MATCH=similar`` serves an untuned size the nearest tuned one's parameters
    #: (log distance over m, n and k; the dtype must be equal). Every tile fits every size:
    #: sizes that are not multiples of the tiles are padded.
    autotune_similar = {"m": "log", "n": "log", "k": "log"}

    @classmethod
    def autotune_fill(cls, context: accel.Context, params: dict[str, Any], dtype: Any, m: int,
                      n: int, k: int) -> int:
        """The work-groups a product launches with ``params``: one per MWG x NWG tile of the
        padded C. ``similar`` serves a size's tiles only where they fill the device about as
        well as where they were measured (a 64 x 128 tile tuned at 1024^3 leaves three
        quarters of an H200's 132 compute units idle at 512^3)."""
        return _padded(m, params["MWG"]) // params["MWG"] * (_padded(n, params["NWG"])
                                                              // params["NWG"])

    @classmethod
    def autotune_scaled(cls, context: accel.Context, params: dict[str, Any],
                        here: dict[str, Any], there: dict[str, Any],
                        space: tune.Space | None = None) -> list[dict[str, Any]]:
        """``params``, tuned at the arguments ``there``, with smaller tiles for the product
        ``here``, where they would launch fewer work-groups than they did there (``similar``
        asks only where they under-fill the device here). The work-group and the shape of its
        work-items (``MDIMC`` x ``NDIMC``) are kept; ``MWG`` and ``NWG`` are halved, the larger
        first, until the product launches as many work-groups as it did there or a tile is as
        small as its work-items; then the vector widths and loading layouts nearest the tuned
        ones that the smaller tiles allow in ``space``, the product's at ``here`` (the lookup
        passes the one it made for the call; made here where not given). One configuration,
        or none where the tiles cannot shrink; the caller checks it against the space and the
        fill again. On an H200 (2026-12-01), 1024^3's 64 x 128 tiles launch 128 work-groups there
        and 32 at 512^3, where 32 x 64 tiles of the same 8 x 32 work-items, which launch 128,
        were served at 1.05x 512^3's own best; 1024^3's best trial that filled the device there
        measured 1.39x."""
        goal = cls.autotune_fill(context, params, **there)
        tiles = dict(params)
        while cls.autotune_fill(context, tiles, **here) < goal:
            halvable = [tile for tile, items in (("MWG", "MDIMC"), ("NWG", "NDIMC"))
                        if tiles[tile] % 2 == 0 and tiles[tile] // 2 >= tiles[items]]
            if not halvable:
                break
            largest = max(halvable, key=lambda tile: tiles[tile])
            tiles[largest] //= 2
        if (tiles["MWG"], tiles["NWG"]) == (params["MWG"], params["NWG"]):
            return []
        if space is None:
            space = cls.autotune_space(context, **here)
        lists = {name: [v for v in space.parameters[name] if v <= params[name]]
                 or [params[name]] for name in ("VWM", "VWN")}
        lists.update(MDIMA=list(space.parameters["MDIMA"]), NDIMB=list(space.parameters["NDIMB"]))
        nearest = sorted(
            ({**tiles, "VWM": vwm, "VWN": vwn, "MDIMA": mdima, "NDIMB": ndimb}
             for vwm in lists["VWM"] for vwn in lists["VWN"]
             for mdima in lists["MDIMA"] for ndimb in lists["NDIMB"]),
            key=lambda p: sum(abs(math.log2(p[name] / params[name]))
                              for name in ("VWM", "VWN", "MDIMA", "NDIMB")))
        return next(([candidate] for candidate in nearest
                     if space.why_not(candidate, preferences=False) is None), [])

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """4096^3 on GPUs (single, and double where the device has it), 256^3 on CPU devices."""
        if not context.device.is_gpu:
            return [{"dtype": np.dtype(np.float32), "m": 256, "n": 256, "k": 256}]
        dtypes = [np.float32] + ([np.float64] if context.device.double_precision else [])
        return [{"dtype": np.dtype(d), "m": 4096, "n": 4096, "k": 4096} for d in dtypes]

    def __init__(self, context: accel.Context, dtype: Any, m: int, n: int, k: int,
                 tuning: dict[str, Any] | None = None):
        self.context = context
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPES:
            raise TypeError(f"GemmTemplate supports float32 and float64, not {self.dtype}")
        if self.dtype == np.float64 and not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision")
        self.m, self.n, self.k = check_sizes(m, n, k)
        largest = max(self.m * self.k, self.k * self.n, self.m * self.n)
        if largest > MAX_ELEMENTS:  # before tuning allocates anything
            raise ValueError(f"a matrix of {largest} elements is more than the 2^32 - 1 the "
                             "kernel's 32-bit indices reach; split the product into blocks")
        self.tuning = t = tune.tuning_for(GemmTemplate, context, tuning, dtype=self.dtype,
                                          m=self.m, n=self.n, k=self.k).parameters
        self.mp, self.np_, self.kp = (_padded(self.m, t["MWG"]), _padded(self.n, t["NWG"]),
                                      _padded(self.k, t["KWG"]))
        largest = max(self.mp * self.kp, self.kp * self.np_, self.mp * self.np_)
        if largest > MAX_ELEMENTS:
            raise ValueError(f"a padded matrix of {largest} elements is more than the 2^32 - 1 the "
                             "kernel's 32-bit indices reach; split the product into blocks")
        self.padded = (self.mp, self.np_, self.kp) != (self.m, self.n, self.k)
        self.program = context.build(TEMPLATE, {
            "real": accel.c_type(self.dtype), "M": self.mp, "N": self.np_, "K": self.kp,
            **{name: t[name] for name in NAMES}})

    def instantiate(self, queue: accel.CommandQueue) -> Gemm:
        return Gemm(self, queue)

    @classmethod
    def autotune_space(cls, context: accel.Context, dtype: Any, m: int, n: int, k: int) -> tune.Space:
        """Kernel Tuner's GEMM space on GPUs, a small one on CPU devices; restricted to what the
        kernel assumes and the device allows."""
        lists = GPU_SPACE if context.device.is_gpu else CPU_SPACE
        return tune.Space(lists, restrictions(context.device, dtype))

    @classmethod
    @tune.autotuner(test=TEST_PARAMETERS)
    def autotune(cls, context: accel.Context, dtype: Any, m: int, n: int, k: int) -> dict[str, Any]:
        """Tune at this size: every candidate's product is checked against numpy on sampled rows
        and columns, then timed."""
        dtype = np.dtype(dtype)
        m, n, k = check_sizes(m, n, k)
        queue = context.create_tuning_command_queue()
        problem = _problem(dtype, m, n, k)
        at = context.to_device(queue, problem.at)
        b = context.to_device(queue, problem.b)
        c = context.allocate((m, n), dtype)
        poison = context.to_device(queue, np.full((m, n), np.nan, dtype))

        def generate(**params: Any) -> tune.Measurement:
            gemm = cls(context, dtype, m, n, k, params).instantiate(queue)

            return tune.make_measure(queue, lambda: gemm(c, at, b), lambda: problem.matches(c, queue),
                                     setup=lambda: c.copy_from(queue, poison),
                                     bytes=(m * k + k * n + m * n) * dtype.itemsize,
                                     flops=2 * m * n * k)

        return tune.autotune(generate)


class _Problem:
    """Random A and B, and the product in float64: whole for small sizes, else sampled rows
    (reading the whole of C back for every candidate would cost more than timing it)."""

    def __init__(self, dtype: np.dtype, m: int, n: int, k: int):
        rng = np.random.default_rng(7)
        # no copies where the dtype is already float64 (two of 128 MiB at 4096^3)
        self.at = (rng.random((k, m), dtype=np.float64) * 2 - 1).astype(dtype, copy=False)
        self.b = (rng.random((k, n), dtype=np.float64) * 2 - 1).astype(dtype, copy=False)
        at, b = self.at.astype(np.float64, copy=False), self.b.astype(np.float64, copy=False)
        self.whole = m * n <= 1 << 20
        if self.whole:
            self.expected = at.T @ b
        else:  # rows at every kind of tile edge, and random ones; each row spans every column tile
            edges = [0, 1, m // 2, m - 1] + [e + d for e in (128, 256) for d in (-1, 0) if e + d < m]
            self.rows = np.unique(np.concatenate([edges, rng.integers(0, m, 16)]))
            self.row_values = at[:, self.rows].T @ b
        # rounding grows with the length of the sums; an indexing error is of the values' size
        scale = float(np.abs(self.expected if self.whole else self.row_values).max())
        self.tolerance = 8 * np.finfo(dtype).eps * math.sqrt(k) * max(1.0, scale)

    def matches(self, c: accel.DeviceArray, queue: accel.CommandQueue) -> bool:
        if self.whole:
            return self.close(c.get(queue), self.expected)
        n = c.shape[1]
        rows = np.stack([c.read(queue, int(r) * n, (int(r) + 1) * n) for r in self.rows])
        return self.close(rows, self.row_values)

    def close(self, got: np.ndarray, expected: np.ndarray) -> bool:
        return bool(np.all(np.abs(got - expected) <= self.tolerance))


@functools.lru_cache(maxsize=4)
def _problem(dtype: np.dtype, m: int, n: int, k: int) -> _Problem:
    return _Problem(dtype, m, n, k)


class Gemm:
    """One template on one queue: ``gemm(c, at, b, alpha=1, beta=0)`` enqueues
    ``c = alpha * at.T @ b + beta * c`` on device arrays (at: K x M, b: K x N, c: M x N)."""

    def __init__(self, template: GemmTemplate, queue: accel.CommandQueue):
        self.template = t = template
        self.queue = queue
        p = t.tuning
        grid = (t.np_ // p["NWG"] * p["NDIMC"], t.mp // p["MWG"] * p["MDIMC"])
        self._launch = queue.launcher(t.program.get_kernel("gemm"), grid, (p["NDIMC"], p["MDIMC"]))
        self._real = t.dtype.type
        if t.padded:
            ctx = t.context
            self._at = ctx.allocate((t.kp, t.mp), t.dtype)
            self._b = ctx.allocate((t.kp, t.np_), t.dtype)
            self._c = ctx.allocate((t.mp, t.np_), t.dtype)
            self._copy = t.program.get_kernel("pad_copy")

    def _pad(self, dst: accel.DeviceArray, src: Any, rows: int, cols: int, src_ld: int) -> None:
        drows, dcols = dst.shape
        self.queue.enqueue_kernel(self._copy, [dst, src, np.uint32(rows), np.uint32(cols),
                                               np.uint32(src_ld), np.uint32(drows), np.uint32(dcols)],
                                  (-(-dcols // 16) * 16, -(-drows // 16) * 16), (16, 16))

    def _check(self, name: str, array: Any, shape: tuple[int, int]) -> accel.DeviceArray:
        array = self.template.context.as_array(array, name, numpy_hint=(
            "use operations.gemm.gemm(a, b) for numpy arrays, or copy them with context.to_device"),
            queue=self.queue, dtype=self.template.dtype)
        if array.shape != shape and array.size == shape[0] * shape[1]:
            array = array.view(0, array.size, shape)
        if array.shape != shape:
            raise ValueError(f"{name} has shape {array.shape}, expected {shape}")
        if array.dtype != self.template.dtype:
            raise TypeError(f"{name} has dtype {array.dtype}, expected {self.template.dtype}")
        return array

    def __call__(self, c: Any, at: Any, b: Any, alpha: float = 1.0, beta: float = 0.0) -> None:
        t = self.template
        alpha, beta = (finite_real_scalar("gemm", name, value, t.dtype.type, t.dtype)
                       for name, value in (("alpha", alpha), ("beta", beta)))
        c = self._check("c", c, (t.m, t.n))
        at = self._check("at", at, (t.k, t.m))
        b = self._check("b", b, (t.k, t.n))
        scalars = [self._real(alpha), self._real(beta)]
        if not t.padded:
            self._launch([c, at, b, *scalars])
            return
        self._pad(self._at, at, t.k, t.m, t.m)
        self._pad(self._b, b, t.k, t.n, t.n)
        if beta != 0:
            self._pad(self._c, c, t.m, t.n, t.n)
        self._launch([self._c, self._at, self._b, *scalars])
        self._pad(c, self._c, t.m, t.n, t.np_)


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, *, alpha: float = 1.0,
         beta: float = 0.0, context: Any = None) -> np.ndarray:
    """``alpha * a @ b + beta * c`` on the device for numpy arrays (float32 or float64)."""
    from .host import default_queue

    for name, x in (("a", a), ("b", b)):
        if not isinstance(x, np.ndarray) or x.ndim != 2:
            raise TypeError(f"gemm: {name} must be a 2-D numpy array")
    if a.dtype != b.dtype:
        raise TypeError(f"gemm: a and b have different dtypes ({a.dtype} and {b.dtype})")
    (m, k), (k2, n) = a.shape, b.shape
    if k != k2:
        raise ValueError(f"gemm: a is {m} x {k} and b is {k2} x {n}; the inner sizes differ")
    context, queue = default_queue(context)
    template = GemmTemplate(context, a.dtype, m, n, k)
    if c is None:
        c = np.zeros((m, n), a.dtype)
        beta = 0.0
    elif c.shape != (m, n) or c.dtype != a.dtype:
        raise ValueError(f"gemm: c must be a {m} x {n} array of {a.dtype}")
    dc = context.to_device(queue, np.ascontiguousarray(c))
    template.instantiate(queue)(dc, context.to_device(queue, np.ascontiguousarray(a.T)),
                                context.to_device(queue, np.ascontiguousarray(b)), alpha, beta)
    return dc.get(queue)
