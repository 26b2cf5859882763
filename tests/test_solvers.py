"""CG and BiCGstab on tuned kernels: true residuals checked with the host reference operator."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from operations import solvers
from operations.lqcd import WilsonOperator, haar_field, reference, weak_field

KAPPA = 0.12


def _b(dims, seed=0):
    x, y, z, t = dims
    rng = np.random.default_rng(seed)
    return rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))


def _true_residual(u, x, b):
    return np.linalg.norm(b - reference.wilson(u, x, KAPPA, -1)) / np.linalg.norm(b)


@pytest.fixture(scope="module")
def weak8():
    return weak_field((8, 8, 8, 8), 0.1, seed=3)


@pytest.mark.parametrize("field", ["weak", "haar"])
@pytest.mark.parametrize("method,even_odd,precision", [
    ("cg", True, "double"), ("cg", False, "double"), ("bicgstab", True, "double"),
    ("bicgstab", False, "double"), ("cg", True, "mixed"), ("bicgstab", True, "mixed"),
    ("bicgstab", False, "mixed"), ("gcr", True, "double"), ("gcr", False, "double"),
])
def test_every_method_reaches_the_true_residual(context, field, method, even_odd, precision):
    dims = (4, 4, 4, 4)
    u = weak_field(dims, 0.1, 1) if field == "weak" else haar_field(dims, 2)
    b = _b(dims)
    op = WilsonOperator(context, u, KAPPA, "double", 12)
    x, info = op.solve(b, method, 1e-10, even_odd, precision)
    print(f"{field} {method} even_odd={even_odd} {precision}: {info.iterations} iterations, "
          f"{info.applications} applications, {info.reliable_updates} reliable updates")
    assert info.converged
    assert _true_residual(u, x, b) < 1e-10
    assert abs(info.true_residual - _true_residual(u, x, b)) < 1e-12


def test_methods_and_forms_agree(context, weak8):
    b = _b((8, 8, 8, 8), 1)
    op = WilsonOperator(context, weak8, KAPPA, "double", 18)
    solutions = [op.solve(b, m, 1e-11, eo)[0] for m in ("cg", "bicgstab") for eo in (True, False)]
    for x in solutions[1:]:
        assert np.linalg.norm(x - solutions[0]) / np.linalg.norm(solutions[0]) < 1e-9


def test_even_odd_cg_iteration_count_on_8_4(context, weak8):
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    x, info = op.solve(_b((8, 8, 8, 8), 2), "cg", 1e-8, True)
    print(f"8^4, eps 0.1, kappa 0.12, even-odd CG on the normal equations: {info.iterations} iterations")
    assert info.converged and 25 <= info.iterations <= 50


def test_mixed_precision_meets_1e_10(context, weak8):
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    b = _b((8, 8, 8, 8), 3)
    x, info = op.solve(b, "cg", 1e-10, True, "mixed")
    assert info.converged and info.reliable_updates >= 3
    assert _true_residual(weak8, x, b) < 1e-10


def test_too_small_maxiter_reports_non_convergence(context, weak8):
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        x, info = op.solve(_b((8, 8, 8, 8)), "cg", 1e-10, True, maxiter=3)
    assert not info.converged and info.iterations == 3
    assert info.true_residual > 1e-6


@pytest.mark.parametrize("method", ["cg", "bicgstab", "gcr"])
def test_a_mixed_solve_stopped_by_maxiter_returns_all_its_progress(context, weak8, method):
    """Stopped between reliable updates (delta 1e-6: none in 4 steps), a mixed solve returns x
    with the low precision steps folded in: its true residual, recomputed from the formula,
    is the smaller one the steps reached, not that of x = 0 (1.0)."""
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    b = _b((8, 8, 8, 8), 5)
    with pytest.warns(RuntimeWarning, match="did not converge"):
        x, info = op.solve(b, method, 1e-10, True, "mixed", maxiter=4, delta=1e-6)
    assert not info.converged and info.iterations == 4 and info.reliable_updates == 0
    true = _true_residual(weak8, x, b)
    assert true < 0.5 and true == pytest.approx(info.true_residual, rel=1e-6)


def test_solve_info_is_built_whole_read_only_and_says_why_a_solve_stopped(context, weak8):
    """A solve's SolveInfo comes whole: a solve stopped by maxiter says so in its message (the
    warning's text), its history is a tuple of every iteration's residual, its true residual
    and times are the whole solve's, and nothing can be changed after; a converged solve has
    no message, and a device solver's info is frozen too."""
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    b = _b((8, 8, 8, 8), 4)
    with pytest.warns(RuntimeWarning, match="did not converge") as warned:
        x, info = op.solve(b, "cg", 1e-10, True, maxiter=3)
    assert info.message == f"CG did not converge in 3 iterations (|r|/|b| = {info.residual:.3e})"
    assert [str(w.message) for w in warned] == [info.message]
    assert isinstance(info.history, tuple) and len(info.history) == 4
    assert info.history[-1] == info.residual and not info.converged
    assert info.true_residual == pytest.approx(_true_residual(weak8, x, b), rel=1e-9)
    assert info.seconds >= info.solver_seconds > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.message = ""
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.true_residual = 0.0
    with pytest.raises(AttributeError):
        info.history.append(0.0)
    x, done = op.solve(b, "bicgstab", 1e-8, True, "mixed")
    assert done.converged and done.message == "" and done.reliable_updates >= 1
    A = op.linear_operator("Mpc")
    rhs = op.to_device(b).even
    with pytest.warns(RuntimeWarning):
        _, device = solvers.bicgstab(A, rhs, 1e-10, 2)
    assert device.message.startswith("BiCGstab did not converge in 2 iterations (|r|/|b| = ")
    with pytest.raises(dataclasses.FrozenInstanceError):
        device.iterations = 0


class Zero:
    """A singular (zero) operator."""

    def __init__(self, context, n):
        self.context, self.queue = context, context.create_command_queue()
        self.dtype, self.size = np.dtype(np.complex128), n

    def apply(self, out, inp):
        out.zero(self.queue)


class Negative(Zero):
    """-1: Hermitian but negative definite."""

    def apply(self, out, inp):
        if not hasattr(self, "ops"):
            self.ops = solvers.VectorOps(self.context, self.queue, self.dtype, self.size)
        out.zero(self.queue)  # axpby reads y even for b = 0 (0 * NaN is NaN)
        self.ops.blas("axpby", inp, out, a=-1.0, b=0.0)


def test_singular_and_indefinite_operators_are_reported(context):
    queue = context.create_command_queue()
    b = context.to_device(queue, np.ones(96, np.complex128))
    with pytest.raises(solvers.SolverBreakdown, match="positive-definite"):
        solvers.cg(Zero(context, 96), b)
    with pytest.raises(solvers.SolverBreakdown, match="r0"):
        solvers.bicgstab(Zero(context, 96), b)
    with pytest.raises(solvers.SolverBreakdown, match="<p, A p> = -"):
        solvers.cg(Negative(context, 96), b)
    x, info = solvers.bicgstab(Negative(context, 96), b, tol=1e-12)  # general: fine for BiCGstab
    assert info.converged and np.allclose(x.get(queue), -1)


def test_gcr_restarts_and_takes_a_flexible_preconditioner(context, weak8):
    """Restarted GCR reaches the true residual with short and long bases; with an exact
    preconditioner (a BiCGstab solve to 1e-13 per step, a different K each time) it needs one
    or two steps; a preconditioner that returns zero is a breakdown, named."""
    b = _b((8, 8, 8, 8), 3)
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    A = op.linear_operator("Mpc")
    rhs = op.to_device(b).even
    runs = {}
    for nkrylov in (2, 8, 64):
        x, info = solvers.gcr(A, rhs, 1e-10, 500, nkrylov=nkrylov)
        assert info.converged and info.true_residual < 1e-10, (nkrylov, info.true_residual)
        runs[nkrylov] = info.iterations
    assert runs[64] <= runs[8] <= runs[2]  # a longer basis never needs more steps here

    def exact(out, inp):
        y, _ = solvers.bicgstab(A, inp, 1e-13, 500)
        out.copy_from(op.queue, y)

    x, info = solvers.gcr(A, rhs, 1e-10, 50, preconditioner=exact)
    assert info.converged and info.iterations <= 2 and info.true_residual < 1e-10

    def nothing(out, inp):
        out.zero(op.queue)

    with pytest.raises(solvers.SolverBreakdown, match="A z = 0"):
        solvers.gcr(A, rhs, 1e-10, 50, preconditioner=nothing)
    with pytest.raises(ValueError, match="nkrylov"):
        solvers.gcr(A, rhs, nkrylov=0)
    with pytest.raises(TypeError, match="callable"):
        solvers.gcr(A, rhs, preconditioner="schwarz")


def test_mixed_gcr_reaches_double_precision(context, weak8):
    """GCR iterating in single precision with reliable updates in double: the true residual
    recomputed in double meets 1e-10, as plain GCR's does, with updates on the way."""
    b = _b((8, 8, 8, 8), 3)
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    x, info = op.solve(b, "gcr", 1e-10, precision="mixed")
    assert info.converged and info.true_residual < 1e-10, info
    assert info.reliable_updates >= 2, info
    _, plain = op.solve(b, "gcr", 1e-10)
    assert abs(info.iterations - plain.iterations) <= max(3, plain.iterations // 3), (
        info.iterations, plain.iterations)


def test_bad_arguments(context, weak8):
    op = WilsonOperator(context, weak8, KAPPA, "double", 12)
    b = _b((8, 8, 8, 8))
    with pytest.raises(ValueError, match="method"):
        op.solve(b, "gmres")
    with pytest.raises(ValueError, match="precision"):
        op.solve(b, precision="quarter")
    with pytest.raises(ValueError, match="sloppy='half'"):
        op.solve(b, precision="half")
    with pytest.raises(ValueError, match="elements"):
        solvers.cg(op.linear_operator("Mpc"), op.to_device(b).flat)


@pytest.mark.autotune_database
def test_an_online_tuned_solve_is_right_and_its_tuning_serves_offline_calls(context):
    from autotune import tune
    from autotune.tune.store import ResultStore
    from operations.lqcd import DslashTemplate

    dims = (4, 4, 4, 8)
    u = weak_field(dims, 0.1, 1)
    b = _b(dims)
    op = WilsonOperator(context, u, KAPPA, "single", 12, tuning="online")
    dslash = op.template.online
    assert dslash is not None and dslash.scanning and op.queue.timed
    solves = 0
    x, info = op.solve(b, "cg", 1e-5, True, "single")  # at test= while candidates are built
    assert info.converged and _true_residual(u, x, b) < 1e-4
    assert dslash.wait_prepared(300)
    while dslash.scanning:  # every solve is right, whichever candidates it ran
        x, info = op.solve(b, "cg", 1e-5, True, "single")
        solves += 1
        assert info.converged and _true_residual(u, x, b) < 1e-4
        assert solves < 20
    space = DslashTemplate.autotune_space(context, dims, "single", 12)
    assert space.why_not(dslash.best) is None
    assert dslash.stored
    stored = ResultStore(tune.store.database_url()).get(dslash.key)
    assert stored.origin == "online" and json.loads(stored.search)["parts"] == 4
    # the key is the offline one: an offline call (or a new operator) serves the online result
    assert DslashTemplate.autotune(context, dims, "single", 12) == dslash.best
    assert WilsonOperator(context, u, KAPPA, "single", 12).template.wgs == dslash.best["wgs"]
    again = WilsonOperator(context, u, KAPPA, "single", 12, tuning="online")
    assert again.template.online.best == dslash.best and again.template.online.scans == 0
    with pytest.raises(ValueError, match="timed=True"):
        WilsonOperator(context, u, KAPPA, "single", 12, tuning="online",
                       queue=context.create_command_queue())
    with pytest.raises(ValueError, match="'online'"):
        WilsonOperator(context, u, KAPPA, "single", 12, tuning="later")


@pytest.mark.parametrize("method,work", [("cg", 3), ("bicgstab", 5), ("gcr", 1 + 2 * 16)])
def test_solves_take_their_work_vectors_from_a_pool(context, monkeypatch, method, work):
    """A solve's work vectors go back to a pool when it returns: the next solve allocates only
    its solution (GCR, whose basis is larger than the pool, what the pool did not keep), gets
    the same answer, and leaves the first solution as it was."""
    dims = (4, 4, 4, 4)
    op = WilsonOperator(context, weak_field(dims, 0.1, 5), KAPPA, "double", 12)
    A = op.linear_operator("MpcdagMpc" if method == "cg" else "Mpc")
    rng = np.random.default_rng(6)
    b = context.to_device(op.queue, (rng.standard_normal(A.size)
                                     + 1j * rng.standard_normal(A.size)).astype(A.dtype))
    solve = getattr(solvers, method)
    sizes: list[int] = []
    real = type(context).allocate

    def counting(self, shape, dtype):  # the real allocation, counted
        if int(np.prod(shape)) == A.size and np.dtype(dtype) == A.dtype:
            sizes.append(1)
        return real(self, shape, dtype)

    monkeypatch.setattr(type(context), "allocate", counting)
    first, info1 = solve(A, b, 1e-10, 500)
    made_first = len(sizes)
    kept = first.get(op.queue)
    second, info2 = solve(A, b, 1e-10, 500)
    made_second = len(sizes) - made_first
    assert info1.converged and info2.converged and info1.iterations == info2.iterations
    assert made_first == 1 + work
    assert made_second == 1 + max(0, work - solvers.POOL_SIZE)
    np.testing.assert_array_equal(first.get(op.queue), kept)  # the second solve left it alone
    np.testing.assert_array_equal(second.get(op.queue), kept)  # the same kernels, the same data
    assert len(solvers.vector_ops(A)._pool) == min(work, solvers.POOL_SIZE)
