"""Several right-hand sides solved together (operations/lqcd/multi_source.py,
operations.solvers.cg_many): each solution against the formula M x = b, and against the
one-source solve; the batched operator against the one-field one; bad calls refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from operations import solvers
from operations.lqcd import WilsonOperator, reference, weak_field

DIMS = (4, 4, 4, 8)
KAPPA = 0.12


def _true_residual(u, x, b):
    return float(np.linalg.norm(b - (x - KAPPA * reference.hop(u, x, -1))) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def system():
    u = weak_field(DIMS, 0.3, seed=21)
    rng = np.random.default_rng(22)
    x, y, z, t = DIMS
    bs = [rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
          for _ in range(3)]
    bs[1] *= 1e-3  # a source a thousand times smaller: its own scale, its own stopping
    return u, bs


@pytest.mark.parametrize("precision,tol", [("double", 1e-10), ("single", 1e-5)])
def test_each_source_is_solved_to_the_tolerance_as_alone(context, system, precision, tol):
    """Three sources (one a thousand times smaller) in lockstep: each x within the tolerance of
    M x = b by the numpy formula, in as many iterations as its one-source CG, its solution
    the same; a zero source gives x = 0."""
    if precision == "double" and not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    u, bs = system
    op = WilsonOperator(context, u, KAPPA, precision, 12, check=False, tuning={"wgs": 16})
    many = op.solve_many(bs + [np.zeros_like(bs[0])], tol)
    assert len(many) == 4
    for b, (x, info) in zip(bs, many[:3]):
        assert info.converged and _true_residual(u, x, b) < 10 * tol, info
        assert abs(info.true_residual - _true_residual(u, x, b)) < 1e-3 * tol + 1e-14
        x1, one = op.solve(b, "cg", tol)
        assert abs(info.iterations - one.iterations) <= 1, (info.iterations, one.iterations)
        assert np.linalg.norm(x - x1) <= 10 * tol * np.linalg.norm(x1)
    x0, info0 = many[3]
    assert info0.converged and info0.iterations == 0 and not np.any(x0)


@pytest.mark.parametrize("sloppy", ["single", "half"])
def test_mixed_precision_sources_reach_double_precision_together(context, system, sloppy):
    """Mixed CG in lockstep (the sloppy operator's dslashes one launch for every source,
    reliable updates in double one source at a time): each source to 1e-10 of M x = b by the
    formula, with reliable updates, in about as many iterations as its own mixed solve."""
    if not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    u, bs = system
    op = WilsonOperator(context, u, KAPPA, "double", 12, check=False, tuning={"wgs": 16})
    many = op.solve_many(bs, 1e-10, precision="mixed", sloppy=sloppy)
    for b, (x, info) in zip(bs, many):
        assert info.converged and info.reliable_updates >= 1, info
        assert _true_residual(u, x, b) < 1e-9, info
        _, one = op.solve(b, "cg", 1e-10, precision="mixed", sloppy=sloppy)
        assert abs(info.iterations - one.iterations) <= max(2, one.iterations // 20), \
            (info.iterations, one.iterations)


@pytest.mark.parametrize("precision,reconstruct,nrhs,same",
                         [("single", 8, 2, 1e-5), ("half", 12, 2, 1e-3), ("single", 12, 5, 1e-5)])
def test_the_batched_normal_operator_is_the_one_field_one(context, command_queue, system,
                                                          precision, reconstruct, nrhs, same):
    """ManyNormalOperator.apply_many: M_pc^dag M_pc of each vector, as the operator's own
    apply_pc_normal computes it (half: 16-bit fields between the dslashes in both); five
    vectors go in a launch of four and the operator's own for the fifth."""
    from operations.lqcd.multi_source import MOST_PER_LAUNCH, ManyNormalOperator

    u, _ = system
    op = WilsonOperator(context, u, KAPPA, precision, reconstruct, check=False,
                        tuning={"wgs": 16})
    A = ManyNormalOperator.of(op, nrhs)
    assert ManyNormalOperator.of(op, nrhs) is A  # made once: its fields and tuning kept
    assert max(g.stop - g.start for g in A.groups) <= MOST_PER_LAUNCH
    rng = np.random.default_rng(nrhs)
    shape = (12 * op.lattice.half_volume,)
    inps = [context.to_device(op.queue, (rng.standard_normal(shape) + 1j * rng.standard_normal(
        shape)).astype(A.dtype)) for _ in range(nrhs)]
    outs = [context.allocate(A.size, A.dtype) for _ in range(nrhs)]
    A.apply_many(outs, inps)
    for inp, out in zip(inps, outs):
        want = context.allocate(A.size, A.dtype)
        A.apply(want, inp)
        got, expected = out.get(op.queue), want.get(op.queue)
        assert np.max(np.abs(got - expected)) <= same * np.max(np.abs(expected))


def test_one_source_takes_the_one_field_dslash(context, system):
    """solve_many of one source is solve's CG on the operator's own dslash: no multi-RHS
    kernel is made (on an H200 its key took 83 s to tune), the same iterations and solution."""
    from operations.lqcd.multi_source import ManyNormalOperator

    u, bs = system
    op = WilsonOperator(context, u, KAPPA, "single", 12, check=False, tuning={"wgs": 16})
    [(x, info)] = op.solve_many(bs[:1], 1e-5)
    [group] = ManyNormalOperator.of(op, 1).groups
    assert group.multi is None
    x1, one = op.solve(bs[0], "cg", 1e-5)
    assert info.converged and info.iterations == one.iterations, (info, one)
    assert np.linalg.norm(x - x1) <= 1e-5 * np.linalg.norm(x1)


def test_bad_many_source_calls_are_refused_by_name(context, system):
    u, bs = system
    op = WilsonOperator(context, u, KAPPA, "single", 12, check=False, tuning={"wgs": 16})
    with pytest.raises(ValueError, match="bs must be a list of 1 to 16 host spinors"):
        op.solve_many([])
    with pytest.raises(ValueError, match="bs must be a list"):
        op.solve_many(np.stack(bs))
    with pytest.raises(ValueError, match="non-finite"):
        op.solve_many([bs[0], np.full_like(bs[0], np.nan)])
    half = WilsonOperator(context, u, KAPPA, "half", 12, check=False, tuning={"wgs": 16})
    with pytest.raises(ValueError, match="half precision is a sloppy precision"):
        half.solve_many(bs)
    with pytest.raises(ValueError, match="sloppy must be"):
        op.solve_many(bs, precision="mixed", sloppy="quarter")
    with pytest.raises(ValueError, match="at least one right-hand side"):
        solvers.cg_many(op.linear_operator("MpcdagMpc"), [])
