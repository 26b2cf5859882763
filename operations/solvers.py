"""Krylov solvers on tuned kernels: CG, BiCGstab, and mixed-precision CG with reliable updates.

An operator is any object with ``apply(out, inp)`` that enqueues ``out = A inp`` on device
vectors, plus ``context``, ``queue``, ``dtype`` and ``size`` (elements per vector). Every vector
update and reduction is a fused tuned kernel from :mod:`operations.blas` / :mod:`operations.reduce`;
per iteration only the reduction scalars cross to the host, and nothing is allocated in the loop.
A solve's work vectors come from its :class:`VectorOps`'s pool and go back to it when the solve
returns (:meth:`VectorOps.work`): a sequence of solves allocates them once.
"""

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

from .blas import BlasTemplate, DeviceRatio
from .multiblas import MAX_VECTORS, MultiBlasTemplate, parameters_from
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

    def fused(self, family: type, op: str) -> Any:
        """The instantiated pass of ``op`` (``family``: BlasTemplate or ReduceTemplate), made once."""
        key = (family.__name__, op)
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
        to this object's pool when that solve returns (see :func:`_solve`): the next solve
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


def _solve(solver: Callable) -> Callable:
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


def _check(A: LinearOperator, b: accel.DeviceArray) -> None:
    if b.size != A.size or b.dtype != A.dtype:
        raise ValueError(f"b has {b.size} elements of {b.dtype}; the operator acts on {A.size} "
                         f"elements of {A.dtype}")


def _finish(solver: str, A: LinearOperator, ops: VectorOps, b: accel.DeviceArray,
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


def _zero_solution(queue: accel.CommandQueue, x: accel.DeviceArray,
                   start: float) -> tuple[accel.DeviceArray, SolveInfo]:
    """The answer for b = 0: x = 0, nothing iterated."""
    x.zero(queue)
    return x, SolveInfo(True, 0, 0, 0.0, 0.0, [0.0], time.perf_counter() - start, message="b = 0")


def _initial_residual(A: LinearOperator, ops: VectorOps, b: accel.DeviceArray, bb: float,
                      x0: accel.DeviceArray | None, x: accel.DeviceArray,
                      r: accel.DeviceArray) -> tuple[int, float]:
    """x = x0 (or 0) and r = b - A x; returns (operator applications, |r|^2)."""
    if x0 is None:
        x.zero(A.queue)
        r.copy_from(A.queue, b)
        return 0, bb
    x.copy_from(A.queue, _flat(x0))
    A.apply(r, x)
    return 1, ops.blas("xmy_norm", b, r)  # r = b - A x0


def _flat(v: accel.DeviceArray) -> accel.DeviceArray:
    return v if len(v.shape) == 1 else v.view(0, v.size)


def _step(ops: VectorOps, dot: Any, p: accel.DeviceArray, ap: accel.DeviceArray,
          r: accel.DeviceArray, rr: float) -> tuple[float, float]:
    """<p, A p>, then r -= (rr / <p, A p>) A p; returns (<p, A p>, |r|^2) after one wait.

    The update reads <p, A p> on the device, so the host waits once per CG step, not twice;
    the dot product's copy to the host, enqueued behind its kernel, is complete by then.
    """
    dot.enqueue([p, ap], {})
    if ops.comm is not None:  # the ranks' sum first: one more wait per step
        outputs = ops.global_sum(dot.result())
        ops.publish(dot, outputs)
        rr_new = ops.blas("axpy_norm_ratio", ap, r, a=DeviceRatio(-rr, dot.out))
        pap = outputs[0]
        return (pap.real if isinstance(pap, complex) else pap), rr_new
    rr_new = ops.blas("axpy_norm_ratio", ap, r, a=DeviceRatio(-rr, dot.out))
    pap = dot.result()[0]
    return (pap.real if isinstance(pap, complex) else pap), rr_new


@_solve
def cg(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
       x0: accel.DeviceArray | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """Conjugate gradients for a Hermitian positive-definite ``A``; stops at |r| / |b| < tol."""
    tol, maxiter = check_stopping(tol, maxiter)
    _check(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm", "axpy_norm_ratio", "axpy_zpbx"), reduce=("sumsq", "dot"))
    dot = ops.fused(ReduceTemplate, "dot")
    x = ops.new()
    r, p, ap = ops.work(), ops.work(), ops.work()
    b = _flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return _zero_solution(A.queue, x, start)
    applications, rr = _initial_residual(A, ops, b, bb, x0, x, r)
    p.copy_from(A.queue, r)
    history = [math.sqrt(rr / bb)]
    converged = history[-1] < tol
    iterations = 0
    while not converged and iterations < maxiter:
        A.apply(ap, p)
        applications += 1
        pap, rr_new = _step(ops, dot, p, ap, r, rr)  # r -= alpha A p
        if not pap > 0:
            raise SolverBreakdown(f"CG: <p, A p> = {pap} at iteration {iterations}; the operator "
                                  "is not Hermitian positive-definite")
        alpha = rr / pap
        beta = rr_new / rr
        ops.blas("axpy_zpbx", x, p, r, a=alpha, b=beta)  # x += alpha p; p = r + beta p
        rr = rr_new
        iterations += 1
        history.append(math.sqrt(rr / bb))
        if not math.isfinite(rr):
            raise SolverBreakdown(f"CG: the residual became {rr} at iteration {iterations}")
        converged = history[-1] < tol
    return _finish("CG", A, ops, b, x, bb, ap, converged, iterations, applications,
                   history, start, maxiter)


def _bicgstab_alpha(solver: str, A: LinearOperator, ops: VectorOps, r0: accel.DeviceArray,
                    p: accel.DeviceArray, v: accel.DeviceArray, rho: complex,
                    iterations: int) -> complex:
    """v = A p; returns alpha = rho / <r0, v> (breakdown raises)."""
    A.apply(v, p)
    r0v = ops.reduce("dot", r0, v)
    if r0v == 0 or not np.isfinite(r0v):
        raise SolverBreakdown(f"{solver}: <r0, A p> = {r0v} at iteration {iterations}")
    return rho / r0v


def _bicgstab_omega_step(solver: str, A: LinearOperator, ops: VectorOps, x: accel.DeviceArray,
                         p: accel.DeviceArray, r: accel.DeviceArray, t: accel.DeviceArray,
                         r0: accel.DeviceArray, alpha: complex,
                         iterations: int) -> tuple[complex, complex, float]:
    """t = A s (s in ``r``), omega = <t, s> / |t|^2, x += alpha p + omega s, r = s - omega t;
    returns (omega, <r0, r>, |r|^2) (breakdown raises)."""
    A.apply(t, r)
    ts, tt = ops.blas("cdot_norm", t, r)
    if tt == 0:
        raise SolverBreakdown(f"{solver}: A s = 0 at iteration {iterations}")
    omega = ts / tt
    if omega == 0 or not np.isfinite(omega):
        raise SolverBreakdown(f"{solver}: omega = {omega} at iteration {iterations}")
    rho_new, rr = ops.blas("bicgstab_xs", x, p, r, t, r0, a=alpha, w=omega)
    if not math.isfinite(rr):
        raise SolverBreakdown(f"{solver}: the residual became {rr} at iteration {iterations}")
    return omega, rho_new, rr


@_solve
def bicgstab(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
             x0: accel.DeviceArray | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """BiCGstab for a general ``A``; breakdown (rho or omega zero) raises :class:`SolverBreakdown`."""
    tol, maxiter = check_stopping(tol, maxiter)
    _check(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm", "caxpy_norm", "cdot_norm", "bicgstab_xs", "bicgstab_p"),
                reduce=("sumsq", "dot"))
    x = ops.new()
    r, r0, p, v, t = (ops.work() for _ in range(5))
    b = _flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return _zero_solution(A.queue, x, start)
    applications, rr = _initial_residual(A, ops, b, bb, x0, x, r)
    r0.copy_from(A.queue, r)
    p.copy_from(A.queue, r)
    rho = ops.reduce("dot", r0, r)
    history = [math.sqrt(rr / bb)]
    converged = history[-1] < tol
    iterations = 0
    while not converged and iterations < maxiter:
        alpha = _bicgstab_alpha("BiCGstab", A, ops, r0, p, v, rho, iterations)
        applications += 1
        ss = ops.blas("caxpy_norm", v, r, a=-alpha)  # s = r - alpha v, stored in r
        iterations += 1
        if math.sqrt(ss / bb) < tol:
            ops.blas("caxpy_norm", p, x, a=alpha)
            history.append(math.sqrt(ss / bb))
            converged = True
            break
        omega, rho_new, rr = _bicgstab_omega_step("BiCGstab", A, ops, x, p, r, t, r0, alpha,
                                                  iterations)
        applications += 1
        history.append(math.sqrt(rr / bb))
        converged = history[-1] < tol
        if converged:
            break
        if rho_new == 0:
            raise SolverBreakdown(f"BiCGstab: rho = 0 at iteration {iterations}")
        beta = (rho_new / rho) * (alpha / omega)
        ops.blas("bicgstab_p", p, r, v, b=beta, w=omega)
        rho = rho_new
    return _finish("BiCGstab", A, ops, b, x, bb, v, converged, iterations, applications,
                   history, start, maxiter)


@dataclass
class _Mixed:
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


def _mixed_start(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray, tol: Any,
                 maxiter: Any, delta: Any, blas_low: tuple[str, ...]) -> tuple[float, int, _Mixed]:
    """Check the arguments, prepare the passes (``blas_low`` and ``dot`` in low precision) and
    set the starting vectors (not when b = 0: ``bb`` says so)."""
    tol, maxiter = check_stopping(tol, maxiter)
    _check_delta(delta)
    _check(A, b)
    if A_low.size != A.size:
        raise ValueError("the two operators act on vectors of different lengths")
    hi, lo = vector_ops(A), vector_ops(A_low)
    hi.prepare(blas=("xmy_norm",), reduce=("sumsq",))
    lo.prepare(blas=blas_low, reduce=("dot",))
    queue = A.queue
    m = _Mixed(hi, lo, lo.converter(A.dtype), hi.converter(A_low.dtype), _flat(b), 0.0,
               hi.new(), hi.work(), hi.work(), lo.work(), lo.work())
    m.bb = hi.reduce("sumsq", m.b)
    if m.bb != 0:
        m.x.zero(queue)
        m.r.copy_from(queue, m.b)
        m.down(m.rs, m.r)
        m.xs.zero(queue)
    return tol, maxiter, m


@_solve
def cg_mixed(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10,
             maxiter: int = 10000, delta: float = 0.1) -> tuple[accel.DeviceArray, SolveInfo]:
    """CG iterating in ``A_low``'s (single) precision with reliable updates in ``A``'s (double).

    Whenever the iterated residual has fallen by ``delta`` since the last update, the solution
    is accumulated in high precision, the true residual b - A x is recomputed there, and the
    iteration continues from it with the same search direction.
    """
    start = time.perf_counter()
    tol, maxiter, m = _mixed_start(A, A_low, b, tol, maxiter, delta,
                                   ("axpy_norm_ratio", "axpy", "xpay", "axpy_zpbx"))
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    queue = A.queue
    if bb == 0:
        return _zero_solution(queue, x, start)
    dot = lo.fused(ReduceTemplate, "dot")
    ps, aps = lo.work(), lo.work()
    ps.copy_from(queue, rs)
    rr = bb
    r_max = rr
    history = [1.0]
    iterations = applications = updates = 0
    converged = False
    while iterations < maxiter:
        A_low.apply(aps, ps)
        applications += 1
        pap, rr_new = _step(lo, dot, ps, aps, rs, rr)
        if not pap > 0:
            raise SolverBreakdown(f"mixed CG: <p, A p> = {pap} at iteration {iterations}")
        alpha = rr / pap
        iterations += 1
        if rr_new < delta ** 2 * r_max or rr_new / bb < tol ** 2:
            lo.blas("axpy", ps, xs, a=alpha)  # x_low += alpha p
            rr_new = m.reliable_update(A)  # r = b - A x, in high precision
            applications += 1
            updates += 1
            r_max = rr_new
            history.append(math.sqrt(rr_new / bb))
            if history[-1] < tol:
                converged = True
                break
            beta = rr_new / rr
            lo.blas("xpay", rs, ps, a=beta)  # p = r + beta p
        else:
            beta = rr_new / rr
            lo.blas("axpy_zpbx", xs, ps, rs, a=alpha, b=beta)
            history.append(math.sqrt(rr_new / bb))
        rr = rr_new
        if not math.isfinite(rr):
            raise SolverBreakdown(f"mixed CG: the residual became {rr} at iteration {iterations}")
    if not converged:
        m.fold(queue)
    return _finish("mixed CG", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)


@_solve
def bicgstab_mixed(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray,
                   tol: float = 1e-10, maxiter: int = 10000,
                   delta: float = 0.1) -> tuple[accel.DeviceArray, SolveInfo]:
    """BiCGstab iterating in ``A_low``'s precision with reliable updates in ``A``'s.

    Whenever the iterated residual has fallen by ``delta`` since the last update (or looks
    converged), the solution is accumulated in high precision, the true residual b - A x is
    recomputed there, and the iteration continues from it with the same search direction
    (rho taken afresh against the new residual). Breakdown raises :class:`SolverBreakdown`.
    """
    start = time.perf_counter()
    tol, maxiter, m = _mixed_start(A, A_low, b, tol, maxiter, delta,
                                   ("caxpy_norm", "cdot_norm", "bicgstab_xs", "bicgstab_p"))
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    queue = A.queue
    if bb == 0:
        return _zero_solution(queue, x, start)
    r0, p, v, t = (lo.work() for _ in range(4))
    r0.copy_from(queue, rs)
    p.copy_from(queue, rs)
    rho = lo.reduce("dot", r0, rs)
    r_max = bb
    history = [1.0]
    iterations = applications = updates = 0
    converged = False

    def reliable_update() -> float:
        nonlocal applications, updates, r_max
        rr_true = m.reliable_update(A)
        applications += 1
        updates += 1
        r_max = rr_true
        history.append(math.sqrt(rr_true / bb))
        return rr_true

    while iterations < maxiter:
        alpha = _bicgstab_alpha("mixed BiCGstab", A_low, lo, r0, p, v, rho, iterations)
        applications += 1
        ss = lo.blas("caxpy_norm", v, rs, a=-alpha)  # s = r - alpha v, stored in rs
        iterations += 1
        if ss / bb < tol ** 2:  # s looks converged: x += alpha p, then check in high precision
            lo.blas("caxpy_norm", p, xs, a=alpha)
            if math.sqrt(reliable_update() / bb) < tol:
                converged = True
                break
            p.copy_from(queue, rs)  # not there yet: start again from the true residual
            rho = lo.reduce("dot", r0, rs)
            continue
        omega, rho_new, rr = _bicgstab_omega_step("mixed BiCGstab", A_low, lo, xs, p, rs, t, r0,
                                                  alpha, iterations)
        applications += 1
        if rr < delta ** 2 * r_max or rr / bb < tol ** 2:
            if math.sqrt(reliable_update() / bb) < tol:
                converged = True
                break
            rho_new = lo.reduce("dot", r0, rs)
        else:
            history.append(math.sqrt(rr / bb))
        if rho_new == 0:
            raise SolverBreakdown(f"mixed BiCGstab: rho = 0 at iteration {iterations}")
        beta = (rho_new / rho) * (alpha / omega)
        lo.blas("bicgstab_p", p, rs, v, b=beta, w=omega)
        rho = rho_new
    if not converged:
        m.fold(queue)
    return _finish("mixed BiCGstab", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)


def _check_gcr(nkrylov: Any, preconditioner: Any) -> None:
    if isinstance(nkrylov, bool) or not isinstance(nkrylov, (int, np.integer)) or nkrylov < 1:
        raise ValueError(f"nkrylov must be an int of at least 1 (the steps between restarts), "
                         f"got {nkrylov!r}")
    if preconditioner is not None and not callable(preconditioner):
        raise TypeError(f"preconditioner must be callable as preconditioner(out, inp), not "
                        f"{type(preconditioner).__name__}")


class _GcrBasis:
    """GCR's directions since the last restart, and one step, the way QUDA's GCR keeps them:
    the preconditioned directions p_i = K r_i as made, their images A p_i made orthogonal to
    each other (with |A p_i|^2), and the Gram-Schmidt coefficients beta_ij. The solution is not
    updated at each step: :meth:`restart` adds x += sum_i gamma_i p_i in one pass, gamma solving
    the triangular system of the coefficients, when the basis is full, before a reliable update
    and at the end. Per step this saves orthogonalising p and updating x (k + 5 vector passes
    for k earlier directions) for k + 2 passes per restart."""

    def __init__(self, A: LinearOperator, ops: VectorOps, nkrylov: int,
                 preconditioner: Callable[[accel.DeviceArray, accel.DeviceArray], None] | None):
        self.A, self.ops, self.preconditioner = A, ops, preconditioner
        ops.prepare(blas=("caxpy_norm", "cdot_norm"))
        # Every width the passes will use, built now: built when first reached, they would
        # compile in the middle of the solve.
        for m in range(1, min(nkrylov - 1, MAX_VECTORS) + 1):
            ops.multi("cdots", m)
            ops.multi("csubs_dot_norm", m)
        for m in range(1, min(nkrylov, MAX_VECTORS) + 1):
            ops.multi("caxpy_sums", m)
        self.ps = [ops.work() for _ in range(nkrylov)]
        self.aps = [ops.work() for _ in range(nkrylov)]
        self.norms = [0.0] * nkrylov  # |A p_i|^2, of the orthogonalised A p_i
        self.beta = np.zeros((nkrylov, nkrylov), dtype=np.complex128)  # beta[i, j], i < j
        self.alpha = np.zeros(nkrylov, dtype=np.complex128)  # the step lengths
        self.k = 0  # directions in the basis

    def step(self, x: accel.DeviceArray, r: accel.DeviceArray, iteration: int) -> float:
        """p = K r, A p made orthogonal to the basis, r -= alpha A p minimising |r| (x follows
        at the next :meth:`restart`); returns |r|^2. A full basis restarts first."""
        if self.k == len(self.ps):
            self.restart(x)
        ops, k = self.ops, self.k
        p, ap = self.ps[k], self.aps[k]
        if self.preconditioner is None:
            p.copy_from(self.A.queue, r)
        else:
            self.preconditioner(p, r)
        self.A.apply(ap, p)
        if k == 0:
            ap_r, norm = ops.blas("cdot_norm", ap, r)
        for first in range(0, k, MAX_VECTORS):
            block = range(first, min(k, first + MAX_VECTORS))
            m = len(block)
            dots = ops.global_sum(ops.multi("cdots", m)(ap, *(self.aps[i] for i in block)))
            dots = dots if isinstance(dots, tuple) else (dots,)
            for j, i in enumerate(block):
                self.beta[i, k] = complex(dots[j]) / self.norms[i]
            # A p -= sum beta_ik A p_i, with <A p, r> and |A p|^2 of the result in the same pass
            ap_r, norm = ops.global_sum(ops.multi("csubs_dot_norm", m)(
                ap, r, *(self.aps[i] for i in block),
                **{f"b{j}": self.beta[i, k] for j, i in enumerate(block)}))
        self.norms[k] = norm
        if not norm > 0:
            raise SolverBreakdown(f"GCR: A z = 0 at iteration {iteration} (the preconditioner "
                                  "returned a vector the operator annihilates, or zero)")
        self.alpha[k] = alpha = ap_r / norm
        rr = ops.blas("caxpy_norm", ap, r, a=-alpha)
        self.k = k + 1
        if not math.isfinite(rr):
            raise SolverBreakdown(f"GCR: the residual became {rr} at iteration {iteration + 1}")
        return rr

    def restart(self, x: accel.DeviceArray) -> None:
        """x += the update the directions since the last restart make, and an empty basis.

        The orthogonalised directions are p~_j = p_j - sum_{i<j} beta_ij p~_i, so P = P~ B with
        B unit upper triangular, and x += P~ alpha = P gamma with B gamma = alpha."""
        k = self.k
        gamma = self.alpha[:k].copy()
        for j in range(k - 1, -1, -1):  # back substitution
            gamma[j] -= self.beta[j, j + 1:k] @ gamma[j + 1:k]
        for first in range(0, k, MAX_VECTORS):
            block = range(first, min(k, first + MAX_VECTORS))
            self.ops.multi("caxpy_sums", len(block))(
                x, *(self.ps[i] for i in block),
                **{f"a{j}": complex(gamma[i]) for j, i in enumerate(block)})
        self.k = 0


@_solve
def gcr(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
        nkrylov: int = 16, preconditioner: Callable[[accel.DeviceArray, accel.DeviceArray], None]
        | None = None, x0: accel.DeviceArray | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """Flexible GCR for a general ``A``, restarted every ``nkrylov`` steps.

    Step k takes p = K r (``preconditioner(out, inp)`` enqueues ``out = K inp``; the identity
    without one, and K may change from step to step: a few iterations of an inner solver),
    makes A p orthogonal to the earlier A p (block Gram-Schmidt: for each block of up to
    :data:`~operations.multiblas.MAX_VECTORS` earlier directions, every <A p_i, A p> in one pass
    over memory, and A p updated with its <A p, r> and |A p|^2 in another,
    :mod:`~operations.multiblas`; one block, that is classical Gram-Schmidt, up to 17 steps
    between restarts), and minimises |r| along it: r -= alpha A p. The solution is updated from
    the basis at each restart and at the end (x += sum gamma_i p_i, QUDA's way: the directions
    themselves are never orthogonalised). ``iterations`` counts steps.
    """
    tol, maxiter = check_stopping(tol, maxiter)
    _check_gcr(nkrylov, preconditioner)
    _check(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm",), reduce=("sumsq",))
    queue = A.queue
    x, r = ops.new(), ops.work()
    b = _flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return _zero_solution(queue, x, start)
    applications, rr = _initial_residual(A, ops, b, bb, x0, x, r)
    basis = _GcrBasis(A, ops, nkrylov, preconditioner)
    history = [math.sqrt(rr / bb)]
    converged = history[-1] < tol
    iterations = 0
    while not converged and iterations < maxiter:
        rr = basis.step(x, r, iterations)
        applications += 1
        iterations += 1
        history.append(math.sqrt(rr / bb))
        converged = history[-1] < tol
    basis.restart(x)
    return _finish("GCR", A, ops, b, x, bb, basis.aps[0], converged, iterations, applications,
                   history, start, maxiter)


@_solve
def gcr_mixed(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray,
              tol: float = 1e-10, maxiter: int = 10000, nkrylov: int = 16,
              preconditioner: Callable[[accel.DeviceArray, accel.DeviceArray], None]
              | None = None, delta: float = 0.1) -> tuple[accel.DeviceArray, SolveInfo]:
    """Flexible GCR iterating in ``A_low``'s precision with reliable updates in ``A``'s.

    As :func:`gcr` on ``A_low``'s vectors (``preconditioner`` acts on them too); whenever the
    iterated residual has fallen by ``delta`` since the last update (or below ``tol``), the
    solution is accumulated in high precision, the true residual b - A x recomputed there, and
    GCR restarts its basis from it (the old directions were orthogonal to another residual).
    """
    _check_gcr(nkrylov, preconditioner)
    start = time.perf_counter()
    tol, maxiter, m = _mixed_start(A, A_low, b, tol, maxiter, delta, ())
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    if bb == 0:
        return _zero_solution(A.queue, x, start)
    basis = _GcrBasis(A_low, lo, nkrylov, preconditioner)
    rr = r_max = bb
    history = [1.0]
    iterations = applications = updates = 0
    converged = False
    while iterations < maxiter:
        rr = basis.step(xs, rs, iterations)
        applications += 1
        iterations += 1
        if rr < delta ** 2 * r_max or rr / bb < tol ** 2:
            basis.restart(xs)  # x_low from the basis; the next steps start a new one
            rr = m.reliable_update(A)  # x += x_low, r = b - A x in high precision
            applications += 1
            updates += 1
            r_max = rr
            history.append(math.sqrt(rr / bb))
            if history[-1] < tol:
                converged = True
                break
        else:
            history.append(math.sqrt(rr / bb))
    if not converged:
        basis.restart(xs)
        m.fold(A.queue)
    return _finish("mixed GCR", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)
