"""The shared mechanism behind reductions and fused BLAS-1: one tuned pass over some vectors.

An operation is declared as data (:class:`FusedOp`): which vectors it reads and writes, its
scalars, an elementwise body and the values it accumulates. :class:`FusedTemplate` renders
``fused.mako`` for it, tunes the launch (work-group size, items per work-item, work-groups per
compute unit, warp shuffles on CUDA) and checks every candidate against a numpy reference.
Accumulation is in double precision for sums of single-precision data.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .fused_data import close, outputs_close, sample_scalars, tuning_data
from .scalars import finite_complex_scalar, finite_real_scalar

TEMPLATE = Path(__file__).with_name("fused.mako")

#: The element types of fused passes.
DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float64, np.complex64, np.complex128))
WGS_SPACE = (128, 256, 512, 1024)
IPT_SPACE = (1, 2, 4, 8)
GROUPS_PER_CU_SPACE = (2, 4, 8, 16)
VEC_SPACE = (1, 2, 4)  # elements per load; only those of at most 16 bytes are tried
# CPU devices compile slowly (PoCL) and gain little from large spaces.
CPU_WGS_SPACE = (16, 64, 256)
CPU_IPT_SPACE = (1, 4)
CPU_GROUPS_PER_CU_SPACE = (1, 4)
CPU_VEC_SPACE = (1, 4)
#: GPUs tune on vectors of this many bytes: more than any current GPU's last-level cache, so
#: candidates are timed streaming from memory, as large reductions and solvers run.
GPU_TUNING_BYTES = 1 << 28
CPU_TUNING_LENGTH = 1 << 20
#: The part of the space scanned when tuning online, while a solver runs: few enough candidates
#: to compile in the background and time within the first hundred iterations, around the
#: parameters that won offline on the H100 and H200 (tune.db.example).
ONLINE_GPU = {"wgs": (256, 512, 1024), "ipt": (4, 8), "groups_per_cu": (4, 16)}
ONLINE_CPU = {"wgs": (16, 64), "ipt": (4,), "groups_per_cu": (1, 4)}
#: Parameters used inside test suites (and the schema every stored result must match).
TEST_PARAMETERS = {"wgs": 64, "ipt": 1, "groups_per_cu": 4, "vec": 1, "shuffle": False}


@dataclass(frozen=True)
class DeviceRatio:
    """A real scalar computed on the device when the kernel runs: ``numerator / denominator[at]``.

    ``denominator`` is a float64 device array, typically another pass's ``out`` (its reductions):
    a solver can then enqueue the update that needs ``rr / <p, A p>`` without waiting for the
    dot product to reach the host.
    """

    numerator: float
    denominator: accel.DeviceArray
    at: int = 0


@dataclass(frozen=True)
class Output:
    """One value an operation returns: a ``real`` or a ``field`` (element-typed) scalar."""

    kind: str
    expressions: tuple[str, ...]  #: (re,) for real; (re, im) for field (im unused for real data)


@dataclass(frozen=True)
class FusedOp:
    name: str
    vectors: tuple[str, ...]  #: vector arguments, in call order
    written: tuple[str, ...] = ()
    scalars: tuple[tuple[str, str], ...] = ()  #: (name, "real" | "field" | "ratio")
    body: str = ""
    outputs: tuple[Output, ...] = ()
    combine: str = "sum"  #: "sum", "min" or "max"
    real_only: bool = False
    complex_only: bool = False
    #: numpy reference: (vectors, scalars) -> (updated vectors, outputs), in float64/complex128
    reference: Callable[[dict, dict], tuple[dict, tuple]] | None = field(default=None, compare=False)

    def supports(self, dtype: np.dtype) -> bool:
        is_complex = dtype.kind == "c"
        return not ((self.real_only and is_complex) or (self.complex_only and not is_complex))

    def reductions(self, is_complex: bool) -> list[str]:
        exprs: list[str] = []
        for out in self.outputs:
            exprs += list(out.expressions if (out.kind == "field" and is_complex) else out.expressions[:1])
        return exprs


def restrictions(context: accel.Context, dtype: np.dtype) -> list:
    """What a fused pass's launch parameters must satisfy on ``context`` for ``dtype``: what the
    kernel assumes (power-of-two work-groups, loads of at most 16 bytes, warp shuffles on CUDA
    with whole warps) and what the device allows."""
    limit = min(1024, context.device.max_work_group_size)
    cuda = context.backend == "cuda"
    return [
        tune.limit(f"wgs a power of two up to {limit} (the device's limit)",
                   lambda p: 1 <= p["wgs"] <= limit and p["wgs"] & (p["wgs"] - 1) == 0),
        tune.limit("ipt is 1, 2, 4, 8 or 16", lambda p: p["ipt"] in (1, 2, 4, 8, 16)),
        tune.limit("groups_per_cu from 1 to 64", lambda p: 1 <= p["groups_per_cu"] <= 64),
        tune.limit("vec is 1, 2 or 4, loading at most 16 bytes",
                   lambda p: p["vec"] in (1, 2, 4) and p["vec"] * dtype.itemsize <= 16),
        tune.limit("warp shuffles need CUDA and a work-group of at least 64",
                   lambda p: not p["shuffle"] or (cuda and p["wgs"] >= 64)),
    ]


def program_variables(backend: str, is_gpu: bool, dtype: np.dtype, op: FusedOp,
                      tuning: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The variables ``fused.mako`` renders a pass of ``op`` with, on a device of ``backend``
    (a GPU or not) with ``tuning``; and, where the reductions take a second kernel, those of
    the program ``fused_finish`` is taken from (else None). That one is rendered with test='s
    ``ipt`` and ``vec``, which ``fused_finish`` does not depend on, so that every candidate of a
    work-group size shares one: a device that compiles a kernel at its first launch (PoCL:
    0.35-0.54 s for fused_finish on a 2-core AMD EPYC with an empty cache) then compiles it
    once for them, not once a candidate. (``.ci/restamp-rows`` renders these for a stored
    row's key to compare two revisions' kernels.)"""
    real, elem = accel.c_type(accel.real_dtype(dtype)), accel.c_type(dtype)
    is_complex = dtype.kind == "c"
    reductions = op.reductions(is_complex)
    # OpenCL 1.2 does not promise that one work-group sees another's writes within a launch,
    # so only CUDA reduces in one launch (fused.mako).
    single_pass = backend == "cuda" and len(reductions) > 0
    render = {
        "real": real, "elem": elem, "is_complex": is_complex,
        "acc": "double" if op.combine == "sum" else real,
        "combine": op.combine, "vectors": list(op.vectors), "written": list(op.written),
        "scalars": list(op.scalars), "body": op.body, "reductions": reductions,
        "wgs": tuning["wgs"], "ipt": tuning["ipt"], "vec": tuning["vec"],
        "shuffle": tuning["shuffle"], "single_pass": single_pass,
        # (a CPU device runs a work-group's items in turn: one adds them, fused.mako)
        "serial_group": not is_gpu,
    }
    if not reductions or single_pass:
        return render, None
    return render, {**render, "ipt": TEST_PARAMETERS["ipt"], "vec": TEST_PARAMETERS["vec"]}


class FusedTemplate:
    """Base of the tuned fused-pass templates; subclasses set ``ops`` and ``autotune_version``."""

    ops: dict[str, FusedOp] = {}
    autotune_version = 1
    autotune_sources = (TEMPLATE,)

    @classmethod
    def warm_configurations(cls, context: accel.Context) -> list[dict[str, Any]]:
        """Every op in single precision, and in double where the device has it."""
        dtypes = [np.float32, np.complex64]
        if context.device.double_precision:
            dtypes += [np.float64, np.complex128]
        return [{"dtype": np.dtype(d), "op": op} for op in cls.ops for d in dtypes
                if cls.ops[op].supports(np.dtype(d))]

    @classmethod
    @tune.autotuner(test=TEST_PARAMETERS)
    def autotune(cls, context: accel.Context, dtype: Any, op: str) -> dict[str, Any]:
        """Tune ``op`` for ``dtype``; keys are per subclass (``ReduceTemplate``, ``BlasTemplate``)."""
        return cls._tune(context, np.dtype(dtype), op)

    def __init__(self, context: accel.Context, dtype: Any, op: str,
                 tuning: dict[str, Any] | str | None = None):
        self.context = context
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPES:
            raise TypeError(f"{type(self).__name__} supports float32, float64, complex64 and "
                            f"complex128, not {self.dtype}")
        if op not in self.ops:
            raise ValueError(f"unknown operation {op!r}; choose from {', '.join(sorted(self.ops))}")
        self.op = self.ops[op]
        if not self.op.supports(self.dtype):
            kind = "real" if self.op.real_only else "complex"
            raise TypeError(f"{op} is defined for {kind} data only, not {self.dtype}")
        if self.dtype in (np.float64, np.complex128) and not context.device.double_precision:
            raise TypeError(f"{context.device.name} has no double precision")
        # online=True: instantiate() makes an OnlineFusedPass, whose tuner builds the
        # candidates for its queue and length
        chosen = tune.tuning_for(type(self), context, tuning, online=True, dtype=self.dtype, op=op)
        self.online = chosen.is_online
        self.tuning = chosen.parameters
        if self.online:
            return
        self.is_complex = self.dtype.kind == "c"
        self.components = len(self.op.reductions(self.is_complex))
        render, finish = program_variables(context.backend, context.device.is_gpu, self.dtype,
                                           self.op, self.tuning)
        # Sums accumulate in double; min/max stay in the data's own precision.
        self.acc_dtype = np.dtype(np.float64 if render["acc"] == "double" else np.float32)
        self.single_pass = render["single_pass"]
        self.program = context.build(TEMPLATE, render)
        #: where the reductions take a second kernel, the program it is taken from (see
        #: :func:`program_variables`)
        self.finish_program = None if finish is None else context.build(TEMPLATE, finish)

    def instantiate(self, queue: accel.CommandQueue, n: int) -> FusedPass | OnlineFusedPass:
        """The pass for vectors of length ``n`` on ``queue`` (tuned online, for a template made
        with ``tuning="online"``: then ``queue`` must be timed)."""
        if self.online:
            return OnlineFusedPass(type(self), self.context, queue, self.dtype, self.op.name, n)
        return FusedPass(self, queue, n)

    @classmethod
    def autotune_online_space(cls, context: accel.Context, dtype: Any, op: str) -> tune.Space:
        """What an online tuner scans: work-group size, items per thread and work-groups per
        compute unit, with the widest load the element allows and (CUDA) warp shuffles."""
        dtype = np.dtype(dtype)
        lists: dict[str, Any] = dict(ONLINE_GPU if context.device.is_gpu else ONLINE_CPU)
        vec = max(v for v in (VEC_SPACE if context.device.is_gpu else CPU_VEC_SPACE)
                  if v * dtype.itemsize <= 16)
        lists.update(vec=(vec,), shuffle=(context.backend == "cuda" and context.device.is_gpu,))
        return tune.Space(lists, restrictions(context, dtype))

    @classmethod
    def autotune_online_seeds(cls, context: accel.Context, dtype: Any, op: str) -> list[dict[str, Any]]:
        """Where an online scan starts on a GPU with nothing stored for these passes: the
        shapes offline searches chose most often for streaming passes on the H200 and H100
        (``tune.db.example``: 8 items a work-item, 16 work-groups a compute unit; the tuner
        leaves out those the device cannot take). On CPUs, none."""
        if not context.device.is_gpu:
            return []
        return [{"wgs": 512, "ipt": 8, "groups_per_cu": 16},
                {"wgs": 256, "ipt": 8, "groups_per_cu": 16}]

    @classmethod
    def autotune_space(cls, context: accel.Context, dtype: Any, op: str) -> tune.Space:
        """The launch parameters worth trying on ``context`` (a smaller space on CPU devices,
        which compile slowly and gain little), restricted to what can run."""
        if context.device.is_gpu:
            lists = {"wgs": WGS_SPACE, "ipt": IPT_SPACE, "groups_per_cu": GROUPS_PER_CU_SPACE,
                     "vec": VEC_SPACE,
                     "shuffle": (False, True) if context.backend == "cuda" else (False,)}
        else:
            lists = {"wgs": CPU_WGS_SPACE, "ipt": CPU_IPT_SPACE,
                     "groups_per_cu": CPU_GROUPS_PER_CU_SPACE, "vec": CPU_VEC_SPACE,
                     "shuffle": (False,)}
        return tune.Space(lists, restrictions(context, np.dtype(dtype)))

    @classmethod
    def _tune(cls, context: accel.Context, dtype: np.dtype, op_name: str) -> dict[str, Any]:
        op = cls.ops[op_name]
        queue = context.create_tuning_command_queue()
        n = tuning_length(context.device, dtype, len(op.vectors))
        # Reading back every element of every candidate would cost more than timing it: compare
        # windows at the start, inside (later grid-stride steps) and at the tail.
        width = 1 << 14
        windows = [(start, start + width) for start in (0, n // 3, (2 * n) // 3, n - width)]
        scalars = sample_scalars(op, dtype)
        host, expected_vectors, expected_outputs = tuning_data(op, dtype, n, windows, scalars)
        kernel_scalars = dict(scalars)
        ratios = [name for name, kind in op.scalars if kind == "ratio"]
        if ratios:  # the same values, computed on the device
            den = context.to_device(queue, np.array([0.5, 4.0]))
            kernel_scalars.update({name: DeviceRatio(scalars[name] * 4.0, den, 1) for name in ratios})
        pristine = {v: context.to_device(queue, a) for v, a in host.items()}
        del host  # on the device now (GPU-sized: a quarter of a gigabyte a vector)
        # Written vectors get a working copy, put back before each candidate's check. On a CPU
        # device, two sets of the vectors, allocated apart, and the calls alternate between
        # them: where a set lands can halve a configuration's speed there (PoCL on a 2-core
        # Xeon, docs/performance.md), and one set for a whole search ranks that placement.
        sets = [_vector_set(context, queue, op, pristine, n, dtype, copies=i > 0)
                for i in range(1 if context.device.is_gpu else 2)]

        def generate(**params: Any) -> tune.Measurement:
            inst = cls(context, dtype, op_name, params).instantiate(queue, n)

            def setup() -> None:  # every candidate starts from the same data
                for work in sets:
                    for v in op.written:
                        work[v].copy_from(queue, pristine[v])

            def run_on(work: dict[str, accel.DeviceArray]) -> Any:
                return lambda: inst.enqueue([work[v] for v in op.vectors], kernel_scalars,
                                            fetch=False)

            def check() -> bool:  # after setup and one run: the first set
                outputs = inst.result()
                for v in op.written:
                    got = np.concatenate([sets[0][v].read(queue, a, b) for a, b in windows])
                    if not close(got, expected_vectors[v], dtype):
                        return False
                return outputs_close(outputs, expected_outputs, dtype, op.combine)

            moved = (len(op.vectors) + len(op.written)) * n * dtype.itemsize
            return tune.make_measure(queue, [run_on(work) for work in sets], check,
                                     setup=setup, bytes=moved)

        return tune.autotune(generate)


def _vector_set(context: accel.Context, queue: accel.CommandQueue, op: Any,
                pristine: dict[str, accel.DeviceArray], n: int, dtype: np.dtype,
                copies: bool) -> dict[str, accel.DeviceArray]:
    """The vectors a tuning call runs on: a working copy of each written vector, and the
    pristine read-only ones (``copies``: copies of them too, so that the set lands apart from
    the pristine vectors)."""
    made = {}
    for v in op.vectors:
        if v in op.written or copies:
            made[v] = context.allocate(n, dtype)
            if v not in op.written:
                made[v].copy_from(queue, pristine[v])
        else:
            made[v] = pristine[v]
    return made


def tuning_length(device: accel.DeviceIdentity, dtype: np.dtype, vectors: int) -> int:
    """The vector length candidates are timed at (+ 3: not a multiple of any load width, so that
    every candidate's tail code is checked too)."""
    if not device.is_gpu:
        return CPU_TUNING_LENGTH + 3
    n = GPU_TUNING_BYTES // dtype.itemsize
    # a pristine and a working copy of each vector (at most), within a quarter of the device's memory
    while n > CPU_TUNING_LENGTH and 2 * vectors * n * dtype.itemsize > device.global_memory // 4:
        n //= 2
    return n + 3


class FusedPass:
    """A fused pass for vectors of length ``n``: call it with vectors and scalars."""

    def __init__(self, template: FusedTemplate, queue: accel.CommandQueue, n: int):
        n = int(n)
        if n < 1:
            raise ValueError(f"{template.op.name}: empty input (n = {n}); there is nothing to reduce")
        # No upper limit on n: fused.mako counts elements and indexes vectors with 64-bit
        # integers (u64: n, chunks, base, stride); only the number of work-groups, a few
        # thousand at most, is passed as a 32-bit unsigned int (to fused_finish).
        self.template = template
        self.queue = queue
        self.n = n
        ctx = template.context
        t = template.tuning
        self.wgs = t["wgs"]
        self.vec = t["vec"]
        needed = -(-n // (self.wgs * t["ipt"] * self.vec))
        self.groups = max(1, min(t["groups_per_cu"] * ctx.device.multiprocessors, needed))
        self.kernel = template.program.get_kernel("fused_pass")
        self._launch_pass = queue.launcher(self.kernel, self.groups * self.wgs, self.wgs)
        k = max(template.components, 1)
        self.partials = ctx.allocate(k * self.groups, template.acc_dtype)
        self._launch_finish = None
        self._reduction_args: list[Any] = [self.partials]
        self._fetched = False  # whether the last enqueue also enqueued the copy of its results
        self._copied: accel.Marker | None = None  # the copy of the last results, where marked
        if template.components:
            self.out = ctx.allocate(template.components, template.acc_dtype)
            self._host = ctx.empty_host(template.components, template.acc_dtype)
            if template.single_pass:
                tickets = ctx.zeros(queue, 1, np.uint32)
                self._reduction_args += [tickets, self.out]
            else:
                self._launch_finish = queue.launcher(
                    template.finish_program.get_kernel("fused_finish"), self.wgs, self.wgs)
                self._finish_args = [self.partials, np.uint32(self.groups), self.out]
        #: the vectors last passed and their checked arrays (other libraries' arrays: each call
        #: orders the queue after their producers' work again)
        self._last = accel.LastViews()
        real = np.float32 if template.dtype in (np.float32, np.complex64) else np.float64
        self._real = real
        self._real_max = float(np.finfo(real).max)  # larger scalars would become inf on the device

    def _scalar_args(self, scalars: dict[str, Any]) -> list[Any]:
        """The kernel arguments of the scalars: each a finite number (None, NaN and inf are
        refused here, once for every fused op, rather than computed with)."""
        args: list[Any] = []
        op = self.template.op
        missing = [name for name, _ in op.scalars if name not in scalars]
        if missing:
            raise TypeError(f"{op.name} needs scalar(s) {', '.join(missing)}")
        limit = self._real_max
        for name, kind in op.scalars:
            value = scalars[name]
            if kind == "ratio":
                args += self._ratio_args(name, value)
            elif kind == "field" and self.template.is_complex:
                # the common case (a Python complex from a solver) costs three tests
                if type(value) is not complex or not (abs(value.real) <= limit
                                                      and abs(value.imag) <= limit):
                    value = finite_complex_scalar(op.name, f"scalar {name}", value, self._real)
                args += [self._real(value.real), self._real(value.imag)]
            else:
                # the common case (a Python float from a solver) costs two tests; NaN fails
                # abs(value) <= limit, and so do inf and what would overflow the data's precision
                if type(value) is not float or not abs(value) <= limit:
                    value = finite_real_scalar(op.name, f"scalar {name}", value, self._real,
                                               self.template.dtype)
                args.append(self._real(value))
        return args

    def _ratio_args(self, name: str, value: Any) -> list[Any]:
        op = self.template.op
        if not isinstance(value, DeviceRatio):
            raise TypeError(f"{op.name}: scalar {name} is computed on the device; pass "
                            f"DeviceRatio(numerator, denominator_array), not {type(value).__name__}")
        den = value.denominator
        if not isinstance(den, accel.DeviceArray) or den.dtype != np.float64:
            raise TypeError(f"{op.name}: the denominator of {name} must be a float64 device array")
        if den.context is not self.template.context:
            raise ValueError(f"{op.name}: the denominator of {name} belongs to another context")
        if not 0 <= value.at < den.size:
            raise IndexError(f"{op.name}: {name} reads element {value.at} of a denominator of "
                             f"{den.size} elements")
        numerator = value.numerator
        if type(numerator) is not float or not math.isfinite(numerator):
            numerator = finite_real_scalar(op.name, f"the numerator of scalar {name}",
                                           numerator, np.float64, np.dtype(np.float64))
        return [np.float64(numerator), den, np.uint32(value.at)]

    def enqueue(self, vectors: Sequence[Any], scalars: dict[str, Any], *, fetch: bool = True,
                mark: bool = False) -> None:
        """Enqueue the pass (asynchronously); :meth:`result` then reads the reductions.

        With ``fetch`` the copy of the results to the host is enqueued right behind the kernel,
        so that :meth:`result` only waits; without it (to time the kernels alone) :meth:`result`
        enqueues the copy itself. With ``mark`` (and ``fetch``), :meth:`result` waits for that
        copy alone, not for work enqueued after the pass (a pipelined solver's next operator
        application runs while the host reads the sums).
        """
        vectors = tuple(vectors)
        arrays = self._last.get(vectors, self.queue)  # ordered after foreign producers again
        if arrays is None:
            arrays = self._checked(vectors)  # orders after foreign producers' work
            self._last.keep(vectors, arrays)
        self._launch_pass([*arrays, *self._scalar_args(scalars), *self._reduction_args,
                           np.uint64(self.n)])
        if self._launch_finish is not None:
            self._launch_finish(self._finish_args)
        self._fetched = fetch and bool(self.template.components)
        self._copied = None
        if self._fetched:
            self.out.get(self.queue, self._host, wait=False)
            if mark:
                self._copied = self.queue.mark()

    def _checked(self, vectors: tuple) -> list[accel.DeviceArray]:
        """Validate (and for CuPy/PyTorch, wrap) the vectors of a call."""
        op = self.template.op
        if len(vectors) != len(op.vectors):
            raise TypeError(f"{op.name} takes {len(op.vectors)} vectors ({', '.join(op.vectors)}), "
                            f"got {len(vectors)}")
        arrays = [as_device_array(self.template.context, v, self.n, self.template.dtype, name,
                                  self.queue) for v, name in zip(vectors, op.vectors)]
        chunk = self.vec * self.template.dtype.itemsize
        for arr, name in zip(arrays, op.vectors):
            pointer = getattr(arr, "pointer", None)  # CUDA; OpenCL buffers are always aligned
            if chunk > 1 and pointer is not None and pointer % chunk:
                raise ValueError(
                    f"vector {name} starts at an address that is not a multiple of {chunk} bytes, "
                    f"which this tuning's {self.vec}-element loads need; pass an aligned array "
                    "(an offset view of a larger array may not be)")
        return arrays

    def result(self) -> tuple:
        """The operation's outputs (waits for the device; one small copy)."""
        if not self.template.components:
            self.queue.finish()
            return ()
        if not self._fetched:
            self.out.get(self.queue, self._host, wait=False)
            self._fetched = True
        copied, self._copied = self._copied, None
        if copied is not None:
            copied.wait()
        else:
            self.queue.finish()
        return unpack_outputs(self.template.op, self._host, self.template.is_complex,
                              self.template.dtype)

    def __call__(self, *vectors: Any, **scalars: Any) -> Any:
        """Run the pass; returns its single output or a tuple of outputs, after waiting for them.

        An operation without outputs (``axpy``, ``axpy_zpbx``, ...) is only enqueued and returns
        None at once, like a kernel launch: the host can queue the next work while it runs.
        Reading a vector back (``get``) or ``queue.finish()`` waits for it.
        """
        self.enqueue(vectors, scalars)
        if not self.template.components:
            return None
        outputs = self.result()
        return outputs[0] if len(outputs) == 1 else outputs


class OnlineFusedPass:
    """A fused pass tuned online while it runs (HOOMD-style, :class:`autotune.tune.OnlineTuner`):
    one :class:`FusedPass` per candidate, built ahead in the tuner's background threads; each
    launch uses the candidate the tuner gives. Called like a :class:`FusedPass`; ``out`` and
    :meth:`result` are those of the last launch."""

    def __init__(self, family: type[FusedTemplate], context: accel.Context,
                 queue: accel.CommandQueue, dtype: np.dtype, op: str, n: int):
        self.family, self.context, self.queue, self.dtype, self.n = family, context, queue, dtype, n
        if not getattr(queue, "timed", False):
            raise ValueError(f"{family.__name__} {op}: online tuning times its launches; make the "
                             "queue with context.create_command_queue(timed=True)")
        self._passes: dict[tuple, FusedPass] = {}
        self._guard = threading.Lock()
        self.op_name = op
        self.tuner = tune.tuning_for(family, context, "online", online={"prepare": self._pass},
                                     dtype=dtype, op=op).online
        self._last = self._pass(self.tuner.best or self.tuner.test)
        self._memo: tuple[Any, FusedPass | None] = (None, None)

    def _pass(self, params: Any) -> FusedPass:
        """The pass of one candidate, built on first use (by a worker thread, ahead)."""
        key = tuple(sorted(params.items()))
        found = self._passes.get(key)
        if found is None:
            made = self.family(self.context, self.dtype, self.op_name, dict(params)).instantiate(
                self.queue, self.n)
            with self._guard:
                found = self._passes.setdefault(key, made)
        return found

    @property
    def template(self) -> FusedTemplate:
        return self._last.template

    @property
    def out(self) -> accel.DeviceArray:
        return self._last.out

    def enqueue(self, vectors: Sequence[Any], scalars: dict[str, Any], *, fetch: bool = True,
                mark: bool = False) -> None:
        with self.tuner.measure(self.queue) as params:
            memo = self._memo  # locked, the tuner gives the same mapping every launch
            chosen = memo[1] if memo[0] is params else self._choose(params)
            chosen.enqueue(vectors, scalars, fetch=fetch, mark=mark)
        self._last = chosen

    def _choose(self, params: Any) -> FusedPass:
        chosen = self._pass(params)
        self._memo = (params, chosen)
        return chosen

    def result(self) -> tuple:
        return self._last.result()

    def __call__(self, *vectors: Any, **scalars: Any) -> Any:
        self.enqueue(vectors, scalars)
        if not self._last.template.components:
            return None
        outputs = self.result()
        return outputs[0] if len(outputs) == 1 else outputs


def as_device_array(context: accel.Context, obj: Any, n: int, dtype: np.dtype, name: str,
                    queue: accel.CommandQueue | None = None) -> accel.DeviceArray:
    """A device array of ``n`` elements of ``dtype``: ours, or another library's viewed in place
    (``Context.as_array``: CuPy, PyTorch, JAX, pyopencl, ...), ``queue`` ordered after its
    producer's work."""
    arr = context.as_array(obj, f"vector {name}", numpy_hint=(
        "use the host entry points (operations.reduce.sum(x), operations.blas.axpy(...)) or "
        "copy it with context.to_device(queue, x)"), queue=queue, dtype=dtype)
    if arr.size != n:
        raise ValueError(f"vector {name} has {arr.size} elements, expected {n} (lengths differ)")
    if arr.dtype != dtype:
        raise TypeError(f"vector {name} has dtype {arr.dtype}, expected {dtype}; convert it "
                        f"(.astype) or use a template of dtype {arr.dtype}")
    return arr


def unpack_outputs(op: FusedOp, values: np.ndarray, is_complex: bool, dtype: np.dtype) -> tuple:
    out = []
    i = 0
    for spec in op.outputs:
        if spec.kind == "field" and is_complex:
            out.append(complex(values[i], values[i + 1]))
            i += 2
        else:
            value = values[i]
            out.append(dtype.type(value) if op.combine != "sum" else float(value))
            i += 1
    return tuple(out)
