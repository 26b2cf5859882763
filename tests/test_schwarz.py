"""GCR with the Schwarz preconditioner (operations/lqcd/schwarz.py) on one process: the true
residual recomputed from the formula, block sizes from small to the whole lattice, bad
arguments refused by name. (Many ranks: tests/test_distributed.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from operations.lqcd import WilsonOperator, reference, weak_field

DIMS = (8, 4, 4, 8)
KAPPA = 0.13


_SYSTEMS: dict = {}


@pytest.fixture
def system(context):
    if not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    if id(context) not in _SYSTEMS:
        _SYSTEMS[id(context)] = _make(context)
    return _SYSTEMS[id(context)]


def _make(context):
    u = weak_field(DIMS, 0.3, seed=5)
    op = WilsonOperator(context, u, KAPPA, "double", 12, check=False, tuning={"wgs": 16})
    rng = np.random.default_rng(6)
    x, y, z, t = DIMS
    b = rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
    return op, u, b


def _true_residual(u, x, b):
    """|b - M x| / |b| with M = 1 - kappa D from the numpy reference."""
    return float(np.linalg.norm(b - (x - KAPPA * reference.hop(u, x, -1))) / np.linalg.norm(b))


@pytest.mark.parametrize("block,inner_precision,inner_iterations", [
    ((4, 4, 4, 4), "half", 10), ((2, 4, 2, 8), "single", 5), ((8, 4, 4, 4), "double", 8)])
def test_schwarz_gcr_reaches_the_tolerance_in_fewer_outer_steps(system, block, inner_precision,
                                                                inner_iterations):
    op, u, b = system
    _, plain = op.solve(b, "gcr", 1e-10)
    x, info = op.solve(b, "gcr", 1e-10, preconditioner="schwarz", block=block,
                       inner_iterations=inner_iterations, inner_precision=inner_precision)
    assert info.converged and _true_residual(u, x, b) < 1e-10, info
    assert info.iterations < plain.iterations, (info.iterations, plain.iterations)
    assert info.inner_iterations == inner_iterations * info.iterations
    assert 0 < info.preconditioner_seconds < info.seconds


@pytest.mark.parametrize("sloppy", ["single", "half"])
def test_schwarz_gcr_in_mixed_precision_reaches_double_precision(system, sloppy):
    """The outer GCR in single precision (its operator in single or half) with reliable
    updates in double, the Schwarz blocks in half: the true residual from the formula."""
    op, u, b = system
    x, info = op.solve(b, "gcr", 1e-10, precision="mixed", sloppy=sloppy,
                       preconditioner="schwarz", block=(4, 4, 4, 4), inner_iterations=6)
    assert info.converged and info.reliable_updates >= 2, info
    assert _true_residual(u, x, b) < 1e-10


def test_a_smaller_delta_makes_fewer_reliable_updates_and_a_short_basis_still_converges(system):
    """``delta`` reaches the mixed solvers: GCR with 4 steps between restarts (the settings
    that beat BiCGstab on two GPUs, docs/performance.md) updates in double less often with
    delta 0.01 than 0.1, at the same true residual; a delta outside (0, 1) is refused."""
    op, u, b = system
    kwargs = dict(precision="mixed", preconditioner="schwarz", block=(4, 4, 4, 4),
                  inner_iterations=4, nkrylov=4)
    runs = {d: op.solve(b, "gcr", 1e-10, delta=d, **kwargs) for d in (0.1, 0.01)}
    for x, info in runs.values():
        assert info.converged and _true_residual(u, x, b) < 1e-10, info
    assert runs[0.01][1].reliable_updates < runs[0.1][1].reliable_updates
    bicg = {d: op.solve(b, "bicgstab", 1e-10, precision="mixed", delta=d)[1] for d in (0.1, 0.01)}
    assert bicg[0.01].converged and bicg[0.01].reliable_updates < bicg[0.1].reliable_updates
    with pytest.raises(ValueError, match="delta must be between 0 and 1"):
        op.solve(b, "gcr", 1e-10, delta=1.5, **kwargs)


def test_one_block_with_exact_inner_solves_takes_a_few_outer_steps(system):
    """One block per lattice and enough double precision MR steps make K nearly M_pc^-1."""
    op, u, b = system
    x, info = op.solve(b, "gcr", 1e-10, preconditioner="schwarz", block=DIMS,
                       inner_iterations=40, inner_precision="double")
    assert info.converged and info.iterations <= 4, info
    assert _true_residual(u, x, b) < 1e-10


def test_the_block_operator_drops_exactly_the_hops_that_leave_a_block(system, context):
    """with_domain's operator against the formula: the full M_pc where no hop leaves a block
    (a block as large as the lattice), and differing from it otherwise."""
    op, u, b = system
    whole = op.with_domain(DIMS, "double")
    assert np.allclose(whole.apply_pc(b), op.apply_pc(b), rtol=0, atol=1e-12)
    cut = op.with_domain((4, 4, 4, 4), "double")
    assert not np.allclose(cut.apply_pc(b), op.apply_pc(b))
    assert cut is op.with_domain((4, 4, 4, 4), "double")  # made once


@pytest.mark.parametrize("mode", ["cvt", "bits"])
def test_half_block_operators_with_projected_16_bit_reads_match_the_plain_ones(system, context,
                                                                             mode):
    """``project16`` in the Schwarz blocks' half precision kernels (the projected read sits
    inside the test that drops a hop leaving the block): the block operator within the 16-bit
    bound of the double precision one, and close to the half one that converts every
    component first."""
    op, u, b = system
    block = (4, 4, 4, 4)

    def half_block(project16):
        return WilsonOperator(context, u, KAPPA, "half", 12, check=False, domain=block,
                              tuning={"wgs": 16, "project16": project16})

    exact = op.with_domain(block, "double").apply_pc(b)
    plain, projected = half_block("none").apply_pc(b), half_block(mode).apply_pc(b)
    scale = float(np.max(np.abs(exact)))
    assert np.max(np.abs(plain - exact)) / scale < 2e-3
    assert np.max(np.abs(projected - exact)) / scale < 2e-3
    assert np.max(np.abs(projected - plain)) / scale < 5e-4
    assert not np.allclose(projected, op.apply_pc(b), atol=1e-2 * scale)  # hops were dropped


@pytest.mark.parametrize("kwargs,message", [
    ({"preconditioner": "schwarz"}, "needs block="),
    ({"preconditioner": "schwarz", "block": (3, 4, 4, 8)}, "divide"),
    ({"preconditioner": "schwarz", "block": (4, 4, 4)}, "four positive extents"),
    ({"preconditioner": "schwarz", "block": (4, 4, 4, 4), "inner_precision": "quad"},
     "inner_precision"),
    ({"preconditioner": "schwarz", "block": (4, 4, 4, 4), "inner_iterations": 0},
     "inner_iterations"),
    ({"preconditioner": "multigrid", "block": (4, 4, 4, 4)}, "None or 'schwarz'"),
])
def test_bad_preconditioner_arguments_are_refused_by_name(system, kwargs, message):
    op, _, b = system
    with pytest.raises(ValueError, match=message):
        op.solve(b, "gcr", 1e-8, **kwargs)


def test_the_preconditioner_is_gcrs_on_the_even_odd_system(system):
    op, _, b = system
    with pytest.raises(ValueError, match="method='gcr'"):
        op.solve(b, "cg", preconditioner="schwarz", block=(4, 4, 4, 4))
    with pytest.raises(ValueError, match="even-odd"):
        op.solve(b, "gcr", even_odd=False, preconditioner="schwarz", block=(4, 4, 4, 4))


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128, "half"])
@pytest.mark.parametrize("block", [(4, 4, 4, 4), (2, 4, 2, 8), DIMS, (1, 4, 4, 8)])
def test_one_mr_step_per_block_against_numpy(context, command_queue, dtype, block):
    """SchwarzMRTemplate: each block's own step length <A r, r>_b / |A r|^2_b (written here
    from the site coordinates, block by block), z += alpha_b r and r -= alpha_b A r. (Blocks
    of even x extent are summed row by row over their sites of one parity, odd ones over all
    their sites, skipping the other parity.)"""
    from operations.lqcd import Lattice, half
    from operations.lqcd.schwarz import SchwarzMRTemplate

    if dtype == np.complex128 and not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    stored = dtype == "half"  # 16-bit vectors, single precision arithmetic
    dtype = np.complex64 if stored else dtype
    lattice = Lattice(DIMS)
    rng = np.random.default_rng(3)
    shape = (12, lattice.half_volume)
    # sites of very different magnitudes: half storage keeps each relative to its own norm
    scale = np.exp(rng.uniform(-8, 8, shape[1]))[None, :]
    r, z, ar = (((rng.standard_normal(shape) + 1j * rng.standard_normal(shape)) * scale)
                .astype(dtype) for _ in range(3))
    if stored:  # what half storage holds is the step's input
        r, z, ar = (half.spinor_from_half(*half.spinor_to_half(v)) for v in (r, z, ar))
    # the even sites' coordinates, in the device order (checkerboard index)
    x_, y_, z_, t_ = DIMS
    coords = [(x, y, zz, t) for t in range(t_) for zz in range(z_) for y in range(y_)
              for x in range(x_) if (x + y + zz + t) % 2 == 0]
    want_r, want_z = r.astype(np.complex128), z.astype(np.complex128)
    blocks = {}
    for i, c in enumerate(coords):
        blocks.setdefault(tuple(ci // bi for ci, bi in zip(c, block)), []).append(i)
    assert len(blocks) == np.prod([n // b for n, b in zip(DIMS, block)])
    for sites in blocks.values():
        a, v = ar[:, sites].astype(np.complex128), r[:, sites].astype(np.complex128)
        alpha = np.vdot(a, v) / np.vdot(a, a).real
        want_z[:, sites] += alpha * v
        want_r[:, sites] -= alpha * a
    tol = 1e-5 if dtype == np.complex64 else 1e-12
    for splits in (1, 4):  # one block's sums over one or several work-groups
        step = SchwarzMRTemplate(context, DIMS, block, dtype, 0, {"wgs": 16, "splits": splits},
                                 half=stored).instantiate(command_queue)
        if stored:
            dev = [half.to_device(context, command_queue, a) for a in (r, z, ar)]
            step(*dev)
            got_r, got_z = (half.from_device(command_queue, v) for v in dev[:2])
            # each site within its own 16-bit resolution (and the step's single precision)
            for got, want in ((got_r, want_r), (got_z, want_z)):
                site_max = np.max(np.abs(np.stack([want.real, want.imag])), axis=(0, 1))
                assert np.all(np.abs(got - want) <= 1.5 * site_max / half.HALF_MAX + 1e-6 *
                              site_max), splits
        else:
            dev = [context.to_device(command_queue, a) for a in (r, z, ar)]
            step(*dev)
            assert _rel(dev[0].get(command_queue), want_r) < tol, splits
            assert _rel(dev[1].get(command_queue), want_z) < tol, splits


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.force_autotune
@pytest.mark.parametrize("half", [False, True])
def test_every_mr_step_candidate_is_checked_against_numpy(context, half):
    """The MR step is tuned like the other templates: every candidate's r and z against the
    numpy step (per real or imaginary part, within half precision's resolution when stored in
    16 bits), none refused on a correct kernel."""
    from autotune.tune.store import ResultStore
    from operations.lqcd.schwarz import SchwarzMRTemplate

    best = SchwarzMRTemplate.autotune(context, DIMS, (4, 4, 4, 4), np.complex64, half)
    trials = ResultStore.open().trials(
        function="operations.lqcd.schwarz.SchwarzMRTemplate.autotune")
    assert len(trials) >= 2 and all(t.status == "ok" for t in trials), [
        (t.parameters, t.message) for t in trials]
    assert best in [json.loads(t.parameters) for t in trials]
