"""What every Krylov solver here shares (:mod:`.solvers`, :mod:`.gcr`): the operator protocol,
the solve's statistics, the tuned vector passes a solve uses (:class:`VectorOps`, with its pool
of work vectors), the checks of a solve's arguments, its start and finish, and the common
state of a mixed-precision solve (:class:`Mixed`)."""

from __future__ import annotations

import functools
import math
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from autotune import accel, parallel, tune

from .blas import BlasTemplate
from .multiblas import MultiBlasTemplate, blocks, parameters_from
from .precision import ConvertTemplate
from .reduce import ReduceTemplate


class LinearOperator(Protocol):
    """What a solver needs of an operator. One with a ``tuning`` attribute of ``"online"`` has
    the solver's vector passes tuned online too (its queue must then be timed); one with a
    ``comm`` attribute (an mpi4py communicator) holds, on each rank, a block of the vectors, and
    the solver sums its reductions over the ranks."""

    context: accel.Context
    queue: accel.CommandQueue
    dtype: np.dtype
    size: int

    def apply(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None: ...


class SolverBreakdown(RuntimeError):
    """BiCGstab hit rho = 0 or omega = 0 (or a NaN), and cannot continue."""


@dataclass(frozen=True)
class SolveInfo:
    """What a solve did, built whole when it ends and read-only after: a caller that adds to it
    (``WilsonOperator.solve``: the true residual of M x = b, the whole solve's time) derives a
    new one with :func:`dataclasses.replace`."""

    converged: bool
    iterations: int
    applications: int  #: operator applications (each counts once, whatever it costs)
    residual: float  #: final recursive relative residual |r| / |b|
    true_residual: float  #: |b - A x| / |b| recomputed at the end
    #: relative residual per iteration (a tuple: any sequence given is copied into one)
    history: tuple[float, ...] = ()
    seconds: float = 0.0
    reliable_updates: int = 0
    message: str = ""  #: why the solve stopped where it did not converge ("b = 0" for b = 0)
    #: the linear solver alone, from its first kernel to its solution (``WilsonOperator.solve``'s
    #: ``seconds`` also count the right-hand side's setup, the odd sites and the host-side check)
    solver_seconds: float = 0.0
    inner_iterations: int = 0  #: a preconditioner's inner solver steps, all outer steps together
    preconditioner_seconds: float = 0.0  #: wall time in the preconditioner (part of seconds)

    def __post_init__(self) -> None:
        object.__setattr__(self, "history", tuple(self.history))


class VectorOps:
    """The fused kernels for vectors of one dtype and length, instantiated once and reused."""

    def __init__(self, context: accel.Context, queue: accel.CommandQueue, dtype: Any, size: int,
                 tuning: str | None = None, comm: Any = None):
        self.context, self.queue, self.dtype, self.size = context, queue, np.dtype(dtype), size
        self.tuning = tuning  #: None (stored or tuned offline) or "online"
        #: an MPI communicator (mpi4py) when each rank holds a block of the vectors: reductions
        #: are then summed over the ranks
        self.comm = comm
        self._passes: dict[tuple[str, str], Any] = {}
        self._pool: list[accel.DeviceArray] = []  #: work vectors no solve holds now
        self._pool_lock = threading.Lock()

    def fused(self, family: type, op: str, copy: int = 0) -> Any:
        """The instantiated pass of ``op`` (``family``: BlasTemplate or ReduceTemplate), made once.

        ``copy``: which instance of it: each has its own results on the device and the host, so
        that systems stepped in lockstep enqueue their reductions side by side before one wait
        (copy 0 is the one every other caller shares)."""
        key = (family.__name__, op) if copy == 0 else (family.__name__, op, copy)
        inst = self._passes.get(key)
        if inst is None:
            tuning = self.tuning
            if tuning is None:
                tuning = self.agreed(lambda: family.autotune(self.context, self.dtype, op))
            inst = self._passes[key] = family(self.context, self.dtype, op, tuning).instantiate(
                self.queue, self.size)
        return inst

    def converter(self, src: Any) -> Any:
        """The conversion of ``src`` vectors into this dtype on this queue (``convert(out,
        inp)``, ``convert.add(out, inp)``; :class:`~operations.precision.ConvertTemplate`), made
        once: a sequence of mixed-precision solves reads its tuning once."""
        key = ("ConvertTemplate", np.dtype(src).str)
        inst = self._passes.get(key)
        if inst is None:
            tuning = self.agreed(lambda: ConvertTemplate.autotune(self.context, src, self.dtype))
            inst = self._passes[key] = ConvertTemplate(self.context, src, self.dtype,
                                                       tuning).instantiate(self.queue)
        return inst

    def multi(self, op: str, k: int) -> Any:
        """The k-vector pass ``op`` ("cdots", "csubs_dot_norm" or "caxpy_sums",
        :mod:`~operations.multiblas`), made once, with launch parameters derived from this
        queue's tuned ``caxpy`` pass."""
        name = f"{op}{k}"
        key = ("MultiBlasTemplate", name)
        inst = self._passes.get(key)
        if inst is None:
            single = self.fused(BlasTemplate, "caxpy")
            tuned = getattr(getattr(single, "template", None), "tuning", None)  # None online
            sums = -(-len(MultiBlasTemplate.ops[name].reductions(True)) // 2)  # complex sums
            inst = self._passes[key] = MultiBlasTemplate(
                self.context, self.dtype, name, parameters_from(tuned, sums)).instantiate(
                    self.queue, self.size)
        return inst

    def multi_blocks(self, k: int) -> list[range]:
        """The blocks in which :meth:`multi` passes combine k vectors on this device
        (:func:`~operations.multiblas.blocks`: every width on GPUs, powers of two elsewhere)."""
        return blocks(k, self.context.device.is_gpu)

    def agreed(self, autotune: Callable[[], dict[str, Any]]) -> dict[str, Any] | None:
        """With ``comm``: ``autotune()`` inside ``tune.collective(comm)``: one rank tunes (or
        reads the store) and tells the others, so that every rank launches the same parameters
        (QUDA's rule); without: None (the template tunes)."""
        if self.comm is None:
            return None
        with tune.collective(self.comm):
            return autotune()

    def blas(self, op: str, *vectors: Any, **scalars: Any) -> Any:
        return self.global_sum(self.fused(BlasTemplate, op)(*vectors, **scalars))

    def reduce(self, op: str, *vectors: Any) -> Any:
        return self.global_sum(self.fused(ReduceTemplate, op)(*vectors))

    def global_sum(self, value: Any) -> Any:
        """``value`` (a pass's output: a number or a tuple of them) summed over the ranks of
        ``comm``; as it is without one. One allreduce of all the numbers."""
        if self.comm is None or value is None:
            return value
        items = value if isinstance(value, tuple) else (value,)
        flat = np.array([part for v in items for part in (complex(v).real, complex(v).imag)])
        total = np.empty_like(flat)
        parallel.allreduce(self.comm, flat, total, "a solver's global sum")
        summed = tuple(complex(total[2 * i], total[2 * i + 1]) if isinstance(v, complex)
                       else float(total[2 * i]) for i, v in enumerate(items))
        return summed if isinstance(value, tuple) else summed[0]

    def publish(self, inst: Any, outputs: tuple) -> None:
        """Write global ``outputs`` over ``inst``'s results on the device (its ``out``), for a
        later pass that reads them there (a ``DeviceRatio``)."""
        parts = [part for v in outputs
                 for part in ((v.real, v.imag) if isinstance(v, complex) else (v,))]
        inst.out.set(self.queue, np.array(parts, dtype=inst.out.dtype))

    def new(self) -> accel.DeviceArray:
        """A new vector, the caller's to keep (a solution)."""
        return self.context.allocate(self.size, self.dtype)

    def work(self) -> accel.DeviceArray:
        """A work vector (contents undefined) for the solve running on this thread, given back
        to this object's pool when that solve returns (see :func:`solver_entry`): the next solve
        takes it again instead of allocating, and every free waits for the whole device. Up
        to :data:`POOL_SIZE` are kept between solves; outside a solve, a new vector."""
        with self._pool_lock:
            vector = self._pool.pop() if self._pool else None
        if vector is None:
            vector = self.new()
        frames = getattr(_solving, "frames", None)
        if frames:
            frames[-1].append((self, vector))
        return vector

    def _give_back(self, vector: accel.DeviceArray) -> None:
        with self._pool_lock:
            if len(self._pool) < POOL_SIZE:
                self._pool.append(vector)

    def prepare(self, blas: tuple[str, ...] = (), reduce: tuple[str, ...] = ()) -> None:
        """Instantiate (compile, allocate) the passes a loop will use, before it starts."""
        for op in blas:
            self.fused(BlasTemplate, op)
        for op in reduce:
            self.fused(ReduceTemplate, op)


#: Work vectors a :class:`VectorOps` keeps between solves: enough for any one solver here
#: (mixed BiCGstab holds 6 in low precision), not GCR's whole basis.
POOL_SIZE = 8
_solving = threading.local()  #: per thread, a stack of the work vectors each running solve took


def solver_entry(solver: Callable) -> Callable:
    """Give the work vectors a solver takes (:meth:`VectorOps.work`) back to their pools when
    it returns or raises; a solve nested inside another (an inner solve of a preconditioner)
    gives back its own. The solution it returns comes from :meth:`VectorOps.new`, never from
    a pool: the caller keeps it."""

    @functools.wraps(solver)
    def run(*args: Any, **kwargs: Any) -> Any:
        frames = getattr(_solving, "frames", None)
        if frames is None:
            frames = _solving.frames = []
        taken: list[tuple[VectorOps, accel.DeviceArray]] = []
        frames.append(taken)
        try:
            return solver(*args, **kwargs)
        finally:
            frames.pop()
            for ops, vector in taken:  # later work on them runs after the solve's, in order
                ops._give_back(vector)

    return run


def _tuning(A: LinearOperator) -> str | None:
    return "online" if getattr(A, "tuning", None) == "online" else None


#: The vector passes outlive a solve (per queue, dtype, length and tuning): a sequence of
#: solves (an HMC trajectory) reuses their buffers, and an online-tuned pass launched once or
#: twice a solve finishes its scan over several solves instead of starting afresh in each.
#: Solves on one queue run one at a time, as the queue runs their work.
_shared_ops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_shared_ops_lock = threading.Lock()


def vector_ops(A: LinearOperator) -> VectorOps:
    """The vector passes a solver uses for ``A``'s vectors: those its queue already has (for
    this dtype, length, tuning and communicator), else new ones."""
    tuning = _tuning(A)
    comm = getattr(A, "comm", None)
    with _shared_ops_lock:
        per_queue = _shared_ops.setdefault(A.queue, {})
        key = (np.dtype(A.dtype), A.size, tuning, id(comm))
        ops = per_queue.get(key)
        if ops is None:
            ops = per_queue[key] = VectorOps(A.context, A.queue, A.dtype, A.size, tuning, comm)
        return ops


def check_stopping(tol: Any, maxiter: Any) -> tuple[float, int]:
    """``(tol, maxiter)`` as a float and an int, or a clear error: ``tol`` a finite number > 0
    (a NaN, zero or negative tolerance is never reached, and the solve would run to
    ``maxiter``), ``maxiter`` an int of at least 1."""
    if not _is_real(tol):
        raise TypeError(f"tol must be a real number (the relative residual |r| / |b| to reach, "
                        f"such as 1e-10), not {type(tol).__name__} {tol!r}")
    if not (math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a finite number > 0 (the relative residual |r| / |b| to "
                         f"reach, such as 1e-10), got {tol!r}")
    if isinstance(maxiter, bool) or not isinstance(maxiter, (int, np.integer)):
        raise TypeError(f"maxiter must be an int (the most iterations to run), not "
                        f"{type(maxiter).__name__} {maxiter!r}")
    if maxiter < 1:
        raise ValueError(f"maxiter must be at least 1, got {maxiter}")
    return float(tol), int(maxiter)


def _is_real(value: Any) -> bool:
    """Whether ``value`` is a real number (not a bool, complex, string or None)."""
    return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))


def _check_delta(delta: Any) -> None:
    if not _is_real(delta):
        raise TypeError(f"delta must be a real number (the fall of the residual that triggers a "
                        f"reliable update, such as 0.1), not {type(delta).__name__} {delta!r}")
    if not 0 < delta < 1:
        raise ValueError(f"delta must be between 0 and 1 (the fall of the residual that "
                         f"triggers a reliable update, such as 0.1), got {delta!r}")


def check_system(A: LinearOperator, b: accel.DeviceArray) -> None:
    if b.size != A.size or b.dtype != A.dtype:
        raise ValueError(f"b has {b.size} elements of {b.dtype}; the operator acts on {A.size} "
                         f"elements of {A.dtype}")


def finish(solver: str, A: LinearOperator, ops: VectorOps, b: accel.DeviceArray,
            x: accel.DeviceArray, bb: float, tmp: accel.DeviceArray, converged: bool,
            iterations: int, applications: int, history: list[float], start: float,
            maxiter: int, reliable_updates: int = 0) -> tuple[accel.DeviceArray, SolveInfo]:
    """The solver's answer: the true residual |b - A x| / |b| computed afresh (one more
    application of A, into ``tmp``), and a warning if the solve did not converge."""
    A.apply(tmp, x)
    true = math.sqrt(ops.blas("xmy_norm", b, tmp) / bb)
    seconds = time.perf_counter() - start
    message = "" if converged else (f"{solver} did not converge in {maxiter} iterations "
                                    f"(|r|/|b| = {history[-1]:.3e})")
    info = SolveInfo(converged, iterations, applications + 1, history[-1], true, history,
                     seconds, solver_seconds=seconds, reliable_updates=reliable_updates,
                     message=message)
    if not converged:
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return x, info


def zero_solution(queue: accel.CommandQueue, x: accel.DeviceArray,
                   start: float) -> tuple[accel.DeviceArray, SolveInfo]:
    """The answer for b = 0: x = 0, nothing iterated."""
    x.zero(queue)
    return x, SolveInfo(True, 0, 0, 0.0, 0.0, [0.0], time.perf_counter() - start, message="b = 0")


def initial_residual(A: LinearOperator, ops: VectorOps, b: accel.DeviceArray, bb: float,
                      x0: accel.DeviceArray | None, x: accel.DeviceArray,
                      r: accel.DeviceArray) -> tuple[int, float]:
    """x = x0 (or 0) and r = b - A x; returns (operator applications, |r|^2)."""
    if x0 is None:
        x.zero(A.queue)
        r.copy_from(A.queue, b)
        return 0, bb
    x.copy_from(A.queue, flat(x0))
    A.apply(r, x)
    return 1, ops.blas("xmy_norm", b, r)  # r = b - A x0


def flat(v: accel.DeviceArray) -> accel.DeviceArray:
    return v if len(v.shape) == 1 else v.view(0, v.size)


@dataclass
class Mixed:
    """A mixed-precision solve's common state: both precisions' vector passes, the
    converters, high-precision x = 0, r = b and scratch, and x_low = 0, r_low = r."""

    hi: VectorOps
    lo: VectorOps
    down: Any
    up: Any
    b: accel.DeviceArray
    bb: float
    x: accel.DeviceArray
    r: accel.DeviceArray
    tmp: accel.DeviceArray
    xs: accel.DeviceArray
    rs: accel.DeviceArray

    def fold(self, queue: accel.CommandQueue) -> None:
        """x += x_low in high precision, x_low = 0: the low precision progress since the last
        reliable update kept (also where a solve stops at ``maxiter`` between updates)."""
        self.up.add(self.x, self.xs)
        self.xs.zero(queue)

    def reliable_update(self, A: LinearOperator) -> float:
        """x += x_low in high precision, x_low = 0, r = b - A x there and r_low = r; returns
        |r|^2 (one application of A)."""
        self.fold(A.queue)
        A.apply(self.r, self.x)
        rr = self.hi.blas("xmy_norm", self.b, self.r)
        self.down(self.rs, self.r)
        return rr


def mixed_start(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray, tol: Any,
                 maxiter: Any, delta: Any, blas_low: tuple[str, ...]) -> tuple[float, int, Mixed]:
    """Check the arguments, prepare the passes (``blas_low`` and ``dot`` in low precision) and
    set the starting vectors (not when b = 0: ``bb`` says so)."""
    tol, maxiter = check_stopping(tol, maxiter)
    _check_delta(delta)
    check_system(A, b)
    if A_low.size != A.size:
        raise ValueError("the two operators act on vectors of different lengths")
    hi, lo = vector_ops(A), vector_ops(A_low)
    hi.prepare(blas=("xmy_norm",), reduce=("sumsq",))
    lo.prepare(blas=blas_low, reduce=("dot",))
    queue = A.queue
    m = Mixed(hi, lo, lo.converter(A.dtype), hi.converter(A_low.dtype), flat(b), 0.0,
               hi.new(), hi.work(), hi.work(), lo.work(), lo.work())
    m.bb = hi.reduce("sumsq", m.b)
    if m.bb != 0:
        m.x.zero(queue)
        m.r.copy_from(queue, m.b)
        m.down(m.rs, m.r)
        m.xs.zero(queue)
    return tol, maxiter, m
