"""Answers written into the caller's host array (``WilsonOperator.solve(out=)``,
``solve_many(out=)``, ``from_device(out=)``): the same numbers as a new array, every entry
written, the array itself returned; a bad ``out`` refused by name before anything is solved,
and left as it was."""

from __future__ import annotations

import numpy as np
import pytest

from operations.lqcd import WilsonOperator, reference, weak_field

DIMS = (4, 4, 4, 8)
KAPPA = 0.12
SHAPE = (8, 4, 4, 4, 4, 3)


@pytest.fixture(scope="module")
def problem():
    u = weak_field(DIMS, 0.3, seed=31)
    rng = np.random.default_rng(32)
    bs = [rng.standard_normal(SHAPE) + 1j * rng.standard_normal(SHAPE) for _ in range(2)]
    return u, bs


def _operator(context, u):
    precision = "double" if context.device.double_precision else "single"
    return WilsonOperator(context, u, KAPPA, precision, 12, check=False, tuning={"wgs": 16})


def _residual(u, x, b):
    return float(np.linalg.norm(b - (x - KAPPA * reference.hop(u, x, -1))) / np.linalg.norm(b))


def test_a_solve_writes_its_answer_into_out_and_returns_it(context, problem):
    """x written into ``out`` (NaN before: every entry is written) equals the new array's x
    bit for bit and solves M x = b by the numpy formula; a zero right-hand side zeroes ``out``;
    ``from_device`` fills ``out`` with the field's spinor."""
    u, (b, _) = problem
    op = _operator(context, u)
    tol = 1e-10 if op.precision == "double" else 1e-5
    x_new, info_new = op.solve(b, "cg", tol)
    out = np.full(SHAPE, np.nan, dtype=np.complex128)
    x, info = op.solve(b, "cg", tol, out=out)
    assert x is out
    assert np.array_equal(x, x_new) and info.iterations == info_new.iterations
    assert _residual(u, x, b) < 10 * tol
    zero = np.full(SHAPE, np.nan, dtype=np.complex128)
    x0, info0 = op.solve(np.zeros(SHAPE), out=zero)
    assert x0 is zero and not np.any(zero) and info0.iterations == 0
    back = np.full(SHAPE, np.nan, dtype=np.complex128)
    assert op.from_device(op.to_device(b), out=back) is back
    assert np.allclose(back, b, rtol=0, atol=1e-6 * np.max(np.abs(b)))


def test_solve_many_writes_each_answer_into_its_out(context, problem):
    """One array per right-hand side, each returned and holding that system's x (as the new
    arrays' x, bit for bit)."""
    u, bs = problem
    op = _operator(context, u)
    tol = 1e-10 if op.precision == "double" else 1e-5
    fresh = op.solve_many(bs, tol)
    outs = [np.full(SHAPE, np.nan, dtype=np.complex128) for _ in bs]
    many = op.solve_many(bs, tol, out=outs)
    for (x, _), into, (x_new, _) in zip(many, outs, fresh):
        assert x is into and np.array_equal(x, x_new)


@pytest.mark.parametrize("bad,error,message", [
    (np.empty((8, 4, 4, 4, 12), dtype=np.complex128), ValueError, r"^out has shape \(8, 4, 4, 4, 12\)"),
    (np.empty(SHAPE, dtype=np.complex64), ValueError, r"^out has shape .* dtype complex64, expected"),
    (np.empty(SHAPE[::-1], dtype=np.complex128).T, ValueError, r"^out must be writeable and C-contiguous"),
    ("x", TypeError, r"^out must be a numpy array of shape \(8, 4, 4, 4, 4, 3\) or None, not str"),
])
def test_a_bad_out_is_refused_before_anything_runs(context, problem, bad, error, message):
    """Wrong shape, dtype, layout or type: one-line errors that say how to make a right one,
    before the solve starts (a read-only array too), and the array left as it was."""
    u, (b, _) = problem
    op = _operator(context, u)
    before = bad.copy() if isinstance(bad, np.ndarray) else bad
    with pytest.raises(error, match=message) as raised:
        op.solve(b, maxiter=2, out=bad)
    assert "\n" not in str(raised.value) and "numpy.empty(" in str(raised.value)
    if isinstance(bad, np.ndarray):
        assert np.array_equal(bad, before, equal_nan=True)
    frozen = np.zeros(SHAPE, dtype=np.complex128)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match=r"^out must be writeable"):
        op.solve(b, maxiter=2, out=frozen)
    with pytest.raises(ValueError, match=r"^out must be None or a list of 2 host spinors"):
        op.solve_many(list(problem[1]), maxiter=2, out=[np.empty(SHAPE, np.complex128)])
