"""Krylov solvers on tuned kernels: CG, BiCGstab, and mixed-precision CG with reliable updates.

An operator is any object with ``apply(out, inp)`` that enqueues ``out = A inp`` on device
vectors, plus ``context``, ``queue``, ``dtype`` and ``size`` (elements per vector). Every vector
update and reduction is a fused tuned kernel from :mod:`operations.blas` / :mod:`operations.reduce`;
per iteration only the reduction scalars cross to the host, and nothing is allocated in the loop.
A solve's work vectors come from its :class:`VectorOps`'s pool and go back to it when the solve
returns (:meth:`VectorOps.work`): a sequence of solves allocates them once.

The parts every solver shares (the operator protocol, :class:`VectorOps`, the checks, start and
finish of a solve, a mixed solve's state) are in :mod:`.krylov`; GCR and mixed GCR in
:mod:`.gcr`. This module is the solvers' face: every solver and those names are here.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune import accel

from .blas import BlasTemplate, DeviceRatio
from .gcr import gcr, gcr_mixed
from .krylov import (POOL_SIZE, LinearOperator, Mixed, SolveInfo, SolverBreakdown, VectorOps,
                     check_stopping, check_system, finish, flat, initial_residual, mixed_start,
                     solver_entry, vector_ops, zero_solution)
from .reduce import ReduceTemplate

#: The solvers' face: the solvers, and what their callers name (errors, statistics, passes).
__all__ = ["CG_RECURRENCES", "LinearOperator", "POOL_SIZE", "SolveInfo", "SolverBreakdown",
           "VectorOps", "bicgstab", "bicgstab_mixed", "cg", "cg_many", "cg_mixed",
           "cg_mixed_many", "check_recurrence", "check_stopping", "gcr", "gcr_mixed",
           "vector_ops"]

#: CG's recurrences: "classic" (Hestenes-Stiefel: <p, A p>, then |r|^2, two reductions a step)
#: and "single_reduction" (Chronopoulos-Gear: s = A p kept by its own recurrence, so that
#: <r, A r> and |r|^2 come from one pass after the operator, and one global sum a step across
#: ranks), and "pipelined" (Ghysels-Vanroose: also z = A s by recurrence, so that the next
#: operator application, q = A w, runs while the host waits for that one sum). In exact
#: arithmetic they make the same iterates.
CG_RECURRENCES = ("classic", "single_reduction", "pipelined")


def check_recurrence(A: LinearOperator, recurrence: str | None) -> str:
    """The recurrence a CG solve of ``A`` uses: ``recurrence``, or where None,
    "single_reduction" for an operator over several ranks (``A.comm``: each reduction is a
    global sum, which every rank waits for) and "classic" otherwise; a ValueError names the
    choices for anything else."""
    if recurrence is None:
        return "single_reduction" if getattr(A, "comm", None) is not None else "classic"
    if recurrence not in CG_RECURRENCES:
        raise ValueError(f"CG recurrence must be one of {', '.join(CG_RECURRENCES)} (or None: "
                         f"chosen by the operator), got {recurrence!r}")
    return recurrence


@solver_entry
def cg_many(A: LinearOperator, bs: Sequence[accel.DeviceArray], tol: float = 1e-10,
            maxiter: int = 1000) -> list[tuple[accel.DeviceArray, SolveInfo]]:
    """CG (the classic recurrence) on several right-hand sides of one Hermitian
    positive-definite ``A`` in lockstep: each step applies ``A`` to every search direction at
    once with ``A.apply_many(outs, inps)`` (for a Wilson operator: each dslash of the step one
    launch for all of them, :class:`~operations.lqcd.multi_source.ManyNormalOperator`), then
    each system's own scalars and vector updates. A system that has converged (|r| / |b| <
    tol) is no longer updated, and its direction still goes through ``apply_many`` (a launch
    takes a fixed number of fields); the loop ends when every one has, or at ``maxiter``.
    Returns (x, info) per right-hand side, each with its own true residual."""
    tol, maxiter = check_stopping(tol, maxiter)
    if not bs:
        raise ValueError("cg_many needs at least one right-hand side")
    for b in bs:
        check_system(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=_PlainCG.BLAS, reduce=("sumsq", "dot"))
    dot = ops.fused(ReduceTemplate, "dot")
    bs = [flat(b) for b in bs]
    bbs = [ops.reduce("sumsq", b) for b in bs]
    systems = [_PlainCG(A, ops, b, bb, tol, None, f"CG (right-hand side {i})")
               for i, (b, bb) in enumerate(zip(bs, bbs))]
    applications = 0
    while any(not s.converged for s in systems) and applications < maxiter:
        A.apply_many([s.ap for s in systems], [s.p for s in systems])
        applications += 1
        active = [s for s in systems if not s.converged]
        for system, found in zip(active, _steps(ops, dot, [(s.p, s.ap, s.r, s.rr)
                                                         for s in active])):
            system.advance(ops, *found)
    return [zero_solution(A.queue, s.x, start) if bb == 0 else
            s.finish(A, ops, start, maxiter, applications) for s, bb in zip(systems, bbs)]


class _PlainCG:
    """One system of CG (the classic recurrence) between steps: x, r, the search direction p
    and A p, |r|^2 and what it counted; :func:`cg` steps one, :func:`cg_many` several."""

    #: the vector passes a step uses, and the true residual's
    BLAS = ("xmy_norm", "axpy_norm_ratio", "axpy_zpbx")

    def __init__(self, A: LinearOperator, ops: VectorOps, b: accel.DeviceArray, bb: float,
                 tol: float, x0: accel.DeviceArray | None, label: str = "CG"):
        """x = x0 (or 0), r = b - A x, p = r (``bb``: |b|^2; a system of b = 0 is done
        before it starts)."""
        self.b, self.bb, self.tol, self.label = b, bb, tol, label
        self.x = ops.new()
        self.r, self.p, self.ap = ops.work(), ops.work(), ops.work()
        self.iterations = 0
        self.applications, self.rr = initial_residual(A, ops, b, bb, x0, self.x, self.r)
        self.p.copy_from(A.queue, self.r)
        self.history = [math.sqrt(self.rr / bb) if bb else 0.0]
        self.converged = bb == 0 or self.history[-1] < tol

    def step(self, ops: VectorOps, dot: Any) -> None:
        """One step, after ``ap = A p`` was enqueued: r -= alpha A p (with |r|^2), then
        x += alpha p and p = r + beta p in one pass."""
        self.advance(ops, *_step(ops, dot, self.p, self.ap, self.r, self.rr))

    def advance(self, ops: VectorOps, pap: float, rr_new: float) -> None:
        """The rest of a step once r -= alpha A p is enqueued and <p, A p> and the new |r|^2
        are known (:func:`_step`, :func:`_steps`): x += alpha p and p = r + beta p."""
        self.applications += 1
        if not pap > 0:
            raise SolverBreakdown(f"{self.label}: <p, A p> = {pap} at iteration "
                                  f"{self.iterations}; the operator is not Hermitian "
                                  "positive-definite")
        ops.blas("axpy_zpbx", self.x, self.p, self.r, a=self.rr / pap, b=rr_new / self.rr)
        self.rr = rr_new
        self.iterations += 1
        self.history.append(math.sqrt(self.rr / self.bb))
        if not math.isfinite(self.rr):
            raise SolverBreakdown(f"{self.label}: the residual became {self.rr} at iteration "
                                  f"{self.iterations}")
        self.converged = self.history[-1] < self.tol

    def finish(self, A: LinearOperator, ops: VectorOps, start: float, maxiter: int,
               applications: int | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
        """The answer (:func:`~.krylov.finish`); ``applications``: the operator's, where the
        system shared them with others (:func:`cg_many`'s launches)."""
        return finish("CG", A, ops, self.b, self.x, self.bb, self.ap, self.converged,
                      self.iterations, self.applications if applications is None
                      else applications, self.history, start, maxiter)


class _SingleReduction:
    """Chronopoulos-Gear CG's scalars: each step, from (<r, w>, |r|^2, Re <r, s>) with w = A r
    and s = A p of the last step, the step length alpha and the direction's beta, then
    p = r + beta p, s = w + beta s, x += alpha p, r -= alpha s (``cg_update``, one pass). p and
    s start at 0.

    <p, A p> of the new direction is <r, w> + 2 beta Re <r, s> + beta^2 <p, A p> of the last:
    A Hermitian and s = A p are all it assumes. The textbook form, <r, w> - beta |r|^2 / alpha,
    also assumes r orthogonal to the earlier residuals, which rounding in a low precision, and
    a mixed solve's reliable update (r replaced by the true residual), break: in 16 bits near
    the critical kappa that form diverged where this one converges as classic CG does.
    ``textbook``: the textbook form all the same, for the pipelined recurrence, whose w and s
    are both kept by recurrence (s = A p no longer holds; with this form it diverged in single
    precision where the textbook form converged, in twice classic CG's steps)."""

    def __init__(self, solver: str, textbook: bool = False):
        self.solver = solver
        self.textbook = textbook
        self.gamma: float | None = None  # |r|^2 of the last step
        self.pap = self.alpha = 0.0  # <p, A p> of the last step's direction, its alpha

    def scalars(self, rw: complex, gamma: float, rs: float,
                iterations: int) -> tuple[float, float]:
        """(alpha, beta) of the step from <r, w>, |r|^2 = ``gamma`` and Re <r, s>."""
        beta = 0.0 if self.gamma is None else gamma / self.gamma
        rw = rw.real if isinstance(rw, complex) else rw
        if not beta:
            pap = rw
        elif self.textbook:
            pap = rw - beta * gamma / self.alpha
        else:
            pap = rw + 2.0 * beta * rs + beta * beta * self.pap
        if not pap > 0:
            raise SolverBreakdown(f"{self.solver}: <p, A p> = {pap} at iteration "
                                  f"{iterations}; the operator is not Hermitian positive-definite")
        self.gamma, self.pap, self.alpha = gamma, pap, gamma / pap
        return self.alpha, beta

    def step(self, ops: VectorOps, x: Any, p: Any, r: Any, s: Any, w: Any,
             sums: tuple[complex, float, float], iterations: int, q: Any = None,
             z: Any = None) -> None:
        """The step's update from ``sums`` (:func:`_residual_sums`); pipelined (``q`` = A w and
        ``z`` given): also z = q + beta z and w -= alpha z, so that w stays A r and z stays A s
        without applying the operator."""
        alpha, beta = self.scalars(*sums, iterations)
        ops.blas("cg_update", x, p, r, s, w, a=alpha, b=beta)
        if q is not None:
            ops.blas("xpay", q, z, a=beta)  # z = q + beta z
            ops.blas("axpy", z, w, a=-alpha)  # w = w - alpha z


#: the pass of a single-reduction CG step's sums (:func:`_residual_sums`); the pipelined form
#: sums (<r, w>, |r|^2) alone (its <p, A p> takes the textbook form: no Re <r, s> to read)
SINGLE_REDUCTION_SUMS, PIPELINED_SUMS = "cdot_norm_redot", "cdot_norm"


def sums_pass(pipelined: bool) -> str:
    """The BLAS pass of a single-reduction (or ``pipelined``) CG step's sums."""
    return PIPELINED_SUMS if pipelined else SINGLE_REDUCTION_SUMS


def _residual_sums(A: LinearOperator, ops: VectorOps, r: Any, w: Any, s: Any,
                   q: Any) -> tuple[complex, float, float]:
    """(<r, w>, |r|^2, Re <r, s>) of a single-reduction step (plain or mixed: ``A`` and ``ops``
    the iterating precision's), in one pass and one global sum: w = A r first. Pipelined
    (``q`` given: w kept by recurrence): q = A w enqueued behind the pass that sums
    (<r, w>, |r|^2), so that it runs while the host waits for the sums (and, across ranks,
    their global sum); Re <r, s> is not needed there (0)."""
    if q is None:
        A.apply(w, r)
        return ops.blas(SINGLE_REDUCTION_SUMS, r, w, s)
    sums = ops.fused(BlasTemplate, PIPELINED_SUMS)
    sums.enqueue([r, w], {}, mark=True)
    A.apply(q, w)
    return (*ops.global_sum(sums.result()), 0.0)


def _step(ops: VectorOps, dot: Any, p: accel.DeviceArray, ap: accel.DeviceArray,
          r: accel.DeviceArray, rr: float) -> tuple[float, float]:
    """<p, A p>, then r -= (rr / <p, A p>) A p; returns (<p, A p>, |r|^2) after one wait
    (:func:`_steps` for one system).

    The update reads <p, A p> on the device, so the host waits once per CG step, not twice;
    the dot product's copy to the host, enqueued behind its kernel, is complete by then.
    """
    return _steps(ops, dot, [(p, ap, r, rr)])[0]


def _steps(ops: VectorOps, dot: Any, steps: Sequence[tuple[Any, Any, Any, float]]
           ) -> list[tuple[float, float]]:
    """For each of independent systems' ``(p, ap, r, rr)``: <p, A p>, then r -= (rr / <p, A p>)
    A p; returns each one's (<p, A p>, |r|^2). Every system's two passes are enqueued (each
    system its own instances, :meth:`VectorOps.fused`'s ``copy``; ``dot`` the first's) before
    the host waits once for them all: the device runs one system's passes while the host
    enqueues the next's, and the systems' waits are not paid one after another. Across ranks,
    or where the passes are tuned online (a tuner an instance), one system after another."""
    if ops.comm is not None:
        return [_step_across_ranks(ops, dot, *step) for step in steps]
    if ops.tuning is not None and len(steps) > 1:
        return [_step(ops, dot, *step) for step in steps]
    passes = [(dot if i == 0 else ops.fused(ReduceTemplate, "dot", i),
               ops.fused(BlasTemplate, "axpy_norm_ratio", i)) for i in range(len(steps))]
    for (dot_i, update), (p, ap, r, rr) in zip(passes, steps):
        dot_i.enqueue([p, ap], {})
        update.enqueue([ap, r], {"a": DeviceRatio(-rr, dot_i.out)})
    found = []
    for dot_i, update in passes:
        rr_new = update.result()[0]  # the first waits for every system's passes
        pap = dot_i.result()[0]
        found.append(((pap.real if isinstance(pap, complex) else pap), rr_new))
    return found


def _step_across_ranks(ops: VectorOps, dot: Any, p: accel.DeviceArray, ap: accel.DeviceArray,
                       r: accel.DeviceArray, rr: float) -> tuple[float, float]:
    """:func:`_step` where each rank holds a block of the vectors: the ranks' sum of <p, A p>
    first (one more wait a step), written back for the update to read on the device."""
    dot.enqueue([p, ap], {})
    outputs = ops.global_sum(dot.result())
    ops.publish(dot, outputs)
    rr_new = ops.blas("axpy_norm_ratio", ap, r, a=DeviceRatio(-rr, dot.out))
    pap = outputs[0]
    return (pap.real if isinstance(pap, complex) else pap), rr_new


@solver_entry
def cg(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
       x0: accel.DeviceArray | None = None, *,
       recurrence: str | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """Conjugate gradients for a Hermitian positive-definite ``A``; stops at |r| / |b| < tol.
    ``recurrence``: one of :data:`CG_RECURRENCES` (None: :func:`check_recurrence`'s choice)."""
    tol, maxiter = check_stopping(tol, maxiter)
    check_system(A, b)
    chosen = check_recurrence(A, recurrence)
    if chosen != "classic":
        return _cg_single_reduction(A, b, tol, maxiter, x0, chosen == "pipelined")
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=_PlainCG.BLAS, reduce=("sumsq", "dot"))
    dot = ops.fused(ReduceTemplate, "dot")
    b = flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return zero_solution(A.queue, ops.new(), start)
    system = _PlainCG(A, ops, b, bb, tol, x0)
    while not system.converged and system.iterations < maxiter:
        A.apply(system.ap, system.p)
        system.step(ops, dot)
    return system.finish(A, ops, start, maxiter)


def _cg_single_reduction(A: LinearOperator, b: accel.DeviceArray, tol: float, maxiter: int,
                         x0: accel.DeviceArray | None,
                         pipelined: bool = False) -> tuple[accel.DeviceArray, SolveInfo]:
    """CG with one reduction a step (:class:`_SingleReduction`): w = A r, then (<r, w>, |r|^2)
    in one pass (one global sum across ranks), then the fused update. The solve applies the
    operator once more than classic CG (w for the residual that converged). ``pipelined``:
    w = A r is kept by recurrence instead, and the step's one application, q = A w, runs while
    the host waits for the sums."""
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm", sums_pass(pipelined), "cg_update")
                + (("xpay", "axpy") if pipelined else ()), reduce=("sumsq",))
    x = ops.new()
    r, p, s, w = ops.work(), ops.work(), ops.work(), ops.work()
    q, z = (ops.work(), ops.work()) if pipelined else (None, None)
    b = flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return zero_solution(A.queue, x, start)
    applications, rr = initial_residual(A, ops, b, bb, x0, x, r)
    for v in (p, s, z) if pipelined else (p, s):
        v.zero(A.queue)
    if pipelined:
        A.apply(w, r)
        applications += 1
    history = [math.sqrt(rr / bb)]
    converged = history[-1] < tol
    iterations = 0
    steps = _SingleReduction("CG", textbook=pipelined)
    while not converged and iterations < maxiter:
        sums = _residual_sums(A, ops, r, w, s, q)
        rr = sums[1]
        applications += 1
        if iterations:  # |r|^2 of the last step's residual: the stopping test
            history.append(math.sqrt(rr / bb))
            if not math.isfinite(rr):
                raise SolverBreakdown(f"CG: the residual became {rr} at iteration {iterations}")
            converged = history[-1] < tol
            if converged:
                break
        steps.step(ops, x, p, r, s, w, sums, iterations, q, z)
        iterations += 1
    if not converged:  # stopped by maxiter: the last step's residual, not yet measured
        rr = ops.reduce("sumsq", r)
        history.append(math.sqrt(rr / bb))
        converged = history[-1] < tol
    return finish("CG", A, ops, b, x, bb, w, converged, iterations, applications,
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


@solver_entry
def bicgstab(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
             x0: accel.DeviceArray | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """BiCGstab for a general ``A``; breakdown (rho or omega zero) raises :class:`SolverBreakdown`."""
    tol, maxiter = check_stopping(tol, maxiter)
    check_system(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm", "caxpy_norm", "cdot_norm", "bicgstab_xs", "bicgstab_p"),
                reduce=("sumsq", "dot"))
    x = ops.new()
    r, r0, p, v, t = (ops.work() for _ in range(5))
    b = flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return zero_solution(A.queue, x, start)
    applications, rr = initial_residual(A, ops, b, bb, x0, x, r)
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
    return finish("BiCGstab", A, ops, b, x, bb, v, converged, iterations, applications,
                   history, start, maxiter)


@solver_entry
def cg_mixed(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10,
             maxiter: int = 10000, delta: float = 0.1, *,
             recurrence: str | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """CG iterating in ``A_low``'s (single) precision with reliable updates in ``A``'s (double).

    Whenever the iterated residual has fallen by ``delta`` since the last update, the solution
    is accumulated in high precision, the true residual b - A x is recomputed there, and the
    iteration continues from it with the same search direction. ``recurrence``: as
    :func:`cg`'s (single reduction: the low precision w = A r is made again after each update).
    """
    chosen = check_recurrence(A, recurrence)
    if chosen != "classic":
        return _cg_mixed_single_reduction(A, A_low, b, tol, maxiter, delta,
                                          chosen == "pipelined")
    start = time.perf_counter()
    tol, maxiter, m = mixed_start(A, A_low, b, tol, maxiter, delta, _MixedCG.BLAS_LOW)
    if m.bb == 0:
        return zero_solution(A.queue, m.x, start)
    system = _MixedCG(m, A.queue)
    dot = m.lo.fused(ReduceTemplate, "dot")
    while system.iterations < maxiter and not system.converged:
        A_low.apply(system.aps, system.ps)
        system.step(A, dot, delta, tol)
    return system.finish(A, start, maxiter)


class _MixedCG:
    """One system of a mixed-precision CG (the classic recurrence) between steps: its search
    direction p and A_low p in low precision, |r|^2, the residual at the last reliable update,
    and what it counted; :func:`cg_mixed` steps one, :func:`cg_mixed_many` several."""

    #: the low precision passes a step uses
    BLAS_LOW = ("axpy_norm_ratio", "axpy", "xpay", "axpy_zpbx")

    def __init__(self, m: Mixed, queue: accel.CommandQueue):
        self.m = m
        self.ps, self.aps = m.lo.work(), m.lo.work()
        self.ps.copy_from(queue, m.rs)
        self.rr = self.r_max = m.bb
        self.history = [1.0]
        self.iterations = self.applications = self.updates = 0
        self.converged = False

    def step(self, A: LinearOperator, dot: Any, delta: float, tol: float) -> None:
        """One step, after ``aps = A_low ps`` was enqueued: r -= alpha A p, then either a
        reliable update (the residual fell by ``delta`` since the last, or below ``tol``: x
        accumulated and r = b - A x in high precision) or x += alpha p, p = r + beta p."""
        self.advance(A, *_step(self.m.lo, dot, self.ps, self.aps, self.m.rs, self.rr),
                     delta, tol)

    def advance(self, A: LinearOperator, pap: float, rr_new: float, delta: float,
                tol: float) -> None:
        """The rest of a step once r -= alpha A p is enqueued and <p, A p> and the new |r|^2
        are known (:func:`_step`, :func:`_steps`)."""
        m, lo = self.m, self.m.lo
        self.applications += 1
        if not pap > 0:
            raise SolverBreakdown(f"mixed CG: <p, A p> = {pap} at iteration {self.iterations}")
        alpha = self.rr / pap
        self.iterations += 1
        if rr_new < delta ** 2 * self.r_max or rr_new / m.bb < tol ** 2:
            lo.blas("axpy", self.ps, m.xs, a=alpha)  # x_low += alpha p
            rr_new = m.reliable_update(A)  # r = b - A x, in high precision
            self.applications += 1
            self.updates += 1
            self.r_max = rr_new
            self.history.append(math.sqrt(rr_new / m.bb))
            if self.history[-1] < tol:
                self.converged = True
                return
            lo.blas("xpay", m.rs, self.ps, a=rr_new / self.rr)  # p = r + beta p
        else:
            lo.blas("axpy_zpbx", m.xs, self.ps, m.rs, a=alpha, b=rr_new / self.rr)
            self.history.append(math.sqrt(rr_new / m.bb))
        self.rr = rr_new
        if not math.isfinite(self.rr):
            raise SolverBreakdown(f"mixed CG: the residual became {self.rr} at iteration "
                                  f"{self.iterations}")

    def finish(self, A: LinearOperator, start: float,
               maxiter: int) -> tuple[accel.DeviceArray, SolveInfo]:
        m = self.m
        if not self.converged:
            m.fold(A.queue)
        return finish("mixed CG", A, m.hi, m.b, m.x, m.bb, m.tmp, self.converged,
                      self.iterations, self.applications, self.history, start, maxiter,
                      reliable_updates=self.updates)


@solver_entry
def cg_mixed_many(A: LinearOperator, A_low: LinearOperator, bs: Sequence[accel.DeviceArray],
                  tol: float = 1e-10, maxiter: int = 10000,
                  delta: float = 0.1) -> list[tuple[accel.DeviceArray, SolveInfo]]:
    """:func:`cg_mixed` on several right-hand sides in lockstep: each step one
    ``A_low.apply_many(outs, inps)`` for every system's direction (as :func:`cg_many`), then
    each system's own step and reliable updates (in ``A``'s precision, one system at a time).
    A system that has converged is no longer stepped. Returns (x, info) per right-hand side."""
    if not bs:
        raise ValueError("cg_mixed_many needs at least one right-hand side")
    start = time.perf_counter()
    starts = [mixed_start(A, A_low, b, tol, maxiter, delta, _MixedCG.BLAS_LOW) for b in bs]
    tol, maxiter = starts[0][0], starts[0][1]
    systems = [_MixedCG(m, A.queue) if m.bb else None for _, _, m in starts]
    lo = starts[0][2].lo
    dot = lo.fused(ReduceTemplate, "dot")
    idle = lo.work()  # what a b = 0 system's place in the launch reads and writes: zeros
    idle.zero(A.queue)
    outs = [s.aps if s else idle for s in systems]
    inps = [s.ps if s else idle for s in systems]
    steps = 0
    while steps < maxiter and any(s is not None and not s.converged for s in systems):
        A_low.apply_many(outs, inps)
        steps += 1
        active = [s for s in systems if s is not None and not s.converged]
        for system, found in zip(active, _steps(lo, dot, [(s.ps, s.aps, s.m.rs, s.rr)
                                                        for s in active])):
            system.advance(A, *found, delta, tol)
    return [system.finish(A, start, maxiter) if system is not None
            else zero_solution(A.queue, m.x, start) for system, (_, _, m) in zip(systems, starts)]


def _cg_mixed_single_reduction(A: LinearOperator, A_low: LinearOperator, b: accel.DeviceArray,
                               tol: float, maxiter: int, delta: float,
                               pipelined: bool = False) -> tuple[accel.DeviceArray, SolveInfo]:
    """Mixed CG with one reduction a step (``pipelined``: the next application runs while the
    host waits for it, as in :func:`_cg_single_reduction`; after a reliable update w = A r is
    applied again, and the q applied beside the sums is made again from it). Where the
    recurrence's <p, A p> falls to zero or below in the low precision, the solve restarts from
    a reliable update with new directions (counted among the updates); a second breakdown on
    the step right after such a restart raises :class:`SolverBreakdown`."""
    start = time.perf_counter()
    tol, maxiter, m = mixed_start(A, A_low, b, tol, maxiter, delta,
                                  (sums_pass(pipelined), "cg_update")
                                  + (("xpay", "axpy") if pipelined else ()))
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    queue = A.queue
    if bb == 0:
        return zero_solution(queue, x, start)
    p, s, w = lo.work(), lo.work(), lo.work()
    q, z = (lo.work(), lo.work()) if pipelined else (None, None)
    directions = (p, s, z) if pipelined else (p, s)  # zero at the start and at a restart
    for v in directions:
        v.zero(queue)
    r_max = bb
    history = [1.0]
    iterations = applications = updates = 0
    converged = False
    steps = _SingleReduction("mixed CG", textbook=pipelined)
    restarted = -1  # the iteration of the last restart after a breakdown (none yet)

    def update() -> bool:
        """A reliable update (x += x_low, r = b - A x in high precision); True where it meets
        the tolerance. Pipelined: w = A r applied again, for the true residual."""
        nonlocal r_max, applications, updates
        r_max = m.reliable_update(A)
        applications += 1
        updates += 1
        history.append(math.sqrt(r_max / bb))
        if history[-1] < tol:
            return True
        if pipelined:
            A_low.apply(w, rs)
            applications += 1
        return False

    if pipelined:
        A_low.apply(w, rs)
        applications += 1
    while iterations < maxiter:
        sums = _residual_sums(A_low, lo, rs, w, s, q)
        rr = sums[1]
        applications += 1
        if iterations and (rr < delta ** 2 * r_max or rr / bb < tol ** 2):
            if update():
                converged = True
                break
            sums = _residual_sums(A_low, lo, rs, w, s, q)  # (pipelined: q from the new w)
            rr = sums[1]
            applications += 1
        elif iterations:
            history.append(math.sqrt(rr / bb))
        if not math.isfinite(rr):
            raise SolverBreakdown(f"mixed CG: the residual became {rr} at iteration {iterations}")
        try:
            steps.step(lo, xs, p, rs, s, w, sums, iterations, q, z)
        except SolverBreakdown:
            # <p, A p> by recurrence fell to <= 0: rounding in the low precision (the pipelined
            # form in 16 bits drifts), unless it happens again on a fresh start, where it is
            # <r, A r> itself. Restart from the true residual, with new directions.
            if restarted == iterations:
                raise
            restarted = iterations
            if update():
                converged = True
                break
            steps = _SingleReduction("mixed CG", textbook=pipelined)
            for v in directions:
                v.zero(queue)
            continue
        iterations += 1
    if not converged:
        m.fold(queue)
    return finish("mixed CG", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)


@solver_entry
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
    tol, maxiter, m = mixed_start(A, A_low, b, tol, maxiter, delta,
                                   ("caxpy_norm", "cdot_norm", "bicgstab_xs", "bicgstab_p"))
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    queue = A.queue
    if bb == 0:
        return zero_solution(queue, x, start)
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
    return finish("mixed BiCGstab", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)
