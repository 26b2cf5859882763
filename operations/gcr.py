"""GCR, with an optional (flexible) preconditioner, and mixed-precision GCR with reliable
updates, on the shared solver parts of :mod:`.krylov` (:mod:`.solvers` exports both)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from autotune import accel

from .krylov import (LinearOperator, SolveInfo, SolverBreakdown, VectorOps, check_stopping,
                     check_system, finish, flat, initial_residual, mixed_start, solver_entry,
                     vector_ops, zero_solution)


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
        def widths(most: int) -> set[int]:
            return {len(b) for k in range(1, most + 1) for b in ops.multi_blocks(k)}
        for m in sorted(widths(nkrylov - 1)):
            ops.multi("cdots", m)
            ops.multi("csubs_dot_norm", m)
        for m in sorted(widths(nkrylov)):
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
        for block in ops.multi_blocks(k):
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
        for block in self.ops.multi_blocks(k):
            self.ops.multi("caxpy_sums", len(block))(
                x, *(self.ps[i] for i in block),
                **{f"a{j}": complex(gamma[i]) for j, i in enumerate(block)})
        self.k = 0


@solver_entry
def gcr(A: LinearOperator, b: accel.DeviceArray, tol: float = 1e-10, maxiter: int = 1000,
        nkrylov: int = 16, preconditioner: Callable[[accel.DeviceArray, accel.DeviceArray], None]
        | None = None, x0: accel.DeviceArray | None = None) -> tuple[accel.DeviceArray, SolveInfo]:
    """Flexible GCR for a general ``A``, restarted every ``nkrylov`` steps.

    Step k takes p = K r (``preconditioner(out, inp)`` enqueues ``out = K inp``; the identity
    without one, and K may change from step to step: a few iterations of an inner solver),
    makes A p orthogonal to the earlier A p (block Gram-Schmidt: for each block of earlier
    directions, every <A p_i, A p> in one pass over memory, and A p updated with its <A p, r>
    and |A p|^2 in another, :mod:`~operations.multiblas`; on GPUs a block holds up to
    :data:`~operations.multiblas.MAX_VECTORS` directions, so up to 17 steps between restarts are
    classical Gram-Schmidt; on CPU devices blocks of power-of-two widths keep the programs to
    compile few: :func:`~operations.multiblas.blocks`), and minimises |r| along it:
    r -= alpha A p. The solution is updated from the basis at each restart and at the end
    (x += sum gamma_i p_i, QUDA's way: the directions themselves are never orthogonalised). ``iterations`` counts steps.
    """
    tol, maxiter = check_stopping(tol, maxiter)
    _check_gcr(nkrylov, preconditioner)
    check_system(A, b)
    start = time.perf_counter()
    ops = vector_ops(A)
    ops.prepare(blas=("xmy_norm",), reduce=("sumsq",))
    queue = A.queue
    x, r = ops.new(), ops.work()
    b = flat(b)
    bb = ops.reduce("sumsq", b)
    if bb == 0:
        return zero_solution(queue, x, start)
    applications, rr = initial_residual(A, ops, b, bb, x0, x, r)
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
    return finish("GCR", A, ops, b, x, bb, basis.aps[0], converged, iterations, applications,
                   history, start, maxiter)


@solver_entry
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
    tol, maxiter, m = mixed_start(A, A_low, b, tol, maxiter, delta, ())
    hi, lo, b, bb, x, tmp, xs, rs = m.hi, m.lo, m.b, m.bb, m.x, m.tmp, m.xs, m.rs
    if bb == 0:
        return zero_solution(A.queue, x, start)
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
    return finish("mixed GCR", A, hi, b, x, bb, tmp, converged, iterations, applications,
                   history, start, maxiter, reliable_updates=updates)
