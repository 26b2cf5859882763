"""Bad inputs get a clear error naming the argument, never a silent NaN or a huge allocation."""

from __future__ import annotations

import math
import tracemalloc

import numpy as np
import pytest

import operations.blas as B
from operations import solvers
from operations.blas import BlasTemplate, DeviceRatio
from operations.lqcd import DslashTemplate, Lattice, WilsonOperator, weak_field
from operations.lqcd.lattice import MAX_HALF_VOLUME, check_volume
from operations.scale import ScaleTemplate

N = 1000
DIMS = (4, 4, 4, 4)
SPINOR = (4, 4, 4, 4, 4, 3)
KAPPA = 0.12


def _vectors(dtype, seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((2, N)) + (1j * rng.standard_normal((2, N)) if np.dtype(dtype).kind == "c" else 0)
    return x.astype(dtype), y.astype(dtype)


# 1. Scalars of fused passes ----------------------------------------------------------------------
def test_host_blas_calls_refuse_a_none_scalar(context):
    x, y = _vectors(np.float32)
    y0 = y.copy()
    with pytest.raises(TypeError, match=r"^axpy: scalar a is None; pass a finite number$"):
        B.axpy(None, x, y, context=context)
    with pytest.raises(TypeError, match=r"^axpby: scalar b is None; pass a finite number$"):
        B.axpby(0.5, x, None, y, context=context)
    with pytest.raises(ValueError, match=r"^axpby: scalar a is nan; pass a finite number$"):
        B.axpby(math.nan, x, 0.5, y, context=context)
    np.testing.assert_array_equal(y, y0)  # nothing was computed
    B.axpby(0.5, x, 2.0, y, context=context)  # the same calls with numbers still work
    np.testing.assert_allclose(y, 0.5 * x + 2.0 * y0, rtol=1e-6)


def test_fused_pass_refuses_bad_real_scalars_before_launching(context, command_queue):
    fn = BlasTemplate(context, np.float32, "axpy").instantiate(command_queue, N)
    x, y = _vectors(np.float32, 1)
    xd, yd = context.to_device(command_queue, x), context.to_device(command_queue, y)
    cases = [
        (None, TypeError, r"^axpy: scalar a is None; pass a finite number$"),
        (math.nan, ValueError, r"^axpy: scalar a is nan; pass a finite number$"),
        (np.float32("nan"), ValueError, r"^axpy: scalar a is nan"),
        (math.inf, ValueError, r"^axpy: scalar a is inf; pass a finite number$"),
        (-np.inf, ValueError, r"^axpy: scalar a is -inf"),
        (1e300, ValueError, r"^axpy: scalar a = 1e\+300 overflows float32"),  # inf in float32
        (10**400, ValueError, r"^axpy: scalar a = 1000.* overflows float32"),
        ("0.5", TypeError, r"^axpy: scalar a is a str \('0.5'\), not a number"),
        (np.array([0.5, 1.0]), TypeError, r"^axpy: scalar a is an array of shape \(2,\)"),
        (0.5 + 1j, TypeError, r"^axpy: scalar a must be real for float32 data"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            fn(xd, yd, a=value)
    np.testing.assert_array_equal(yd.get(command_queue), y)  # no call launched the kernel
    fn(xd, yd, a=np.array(0.5))  # a 0-d array is a number; ints too
    fn(xd, yd, a=2)
    np.testing.assert_allclose(yd.get(command_queue), y + 2.5 * x, rtol=1e-6, atol=1e-6)


def test_complex_field_scalars_must_be_finite_in_each_part(context, command_queue):
    fn = BlasTemplate(context, np.complex64, "caxpy").instantiate(command_queue, N)
    x, y = _vectors(np.complex64, 2)
    xd, yd = context.to_device(command_queue, x), context.to_device(command_queue, y)
    with pytest.raises(TypeError, match=r"^caxpy: scalar a is None; pass a finite number$"):
        fn(xd, yd, a=None)
    for bad in (complex(math.nan, 1), complex(1, math.inf), np.complex128(complex(-math.inf, 0)),
                complex(0, 1e300)):
        with pytest.raises(ValueError, match=r"^caxpy: scalar a "):
            fn(xd, yd, a=bad)
    with pytest.raises(TypeError, match=r"^caxpy: scalar a is a str"):
        fn(xd, yd, a="1+2j")
    np.testing.assert_array_equal(yd.get(command_queue), y)
    fn(xd, yd, a=0.5 - 2j)
    np.testing.assert_allclose(yd.get(command_queue), y + (0.5 - 2j) * x, rtol=1e-5, atol=1e-5)


def test_device_ratio_numerators_must_be_finite(context, command_queue):
    fn = BlasTemplate(context, np.float32, "axpy_norm_ratio").instantiate(command_queue, N)
    x, y = _vectors(np.float32, 3)
    xd, yd = context.to_device(command_queue, x), context.to_device(command_queue, y)
    den = context.to_device(command_queue, np.array([2.0]))
    for bad, error in ((math.nan, ValueError), (math.inf, ValueError), (None, TypeError)):
        with pytest.raises(error, match=r"^axpy_norm_ratio: the numerator of scalar a is "):
            fn(xd, yd, a=DeviceRatio(bad, den))
    np.testing.assert_array_equal(yd.get(command_queue), y)
    norm = fn(xd, yd, a=DeviceRatio(1.0, den))  # a = 1 / 2 on the device
    expected = y.astype(np.float64) + 0.5 * x
    assert abs(norm - float(expected @ expected)) < 1e-4 * float(expected @ expected)


# 2. Gauge links and kappa -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def links():
    return weak_field(DIMS, 0.1, seed=5)


def test_wilson_operator_refuses_non_finite_links(context, links):
    for value, count in ((math.nan, 1), (complex(0, math.inf), 1), (math.nan, 3)):
        u = links.copy()
        u.reshape(-1)[[7, 100, 2000][:count]] = value
        with pytest.raises(ValueError, match=rf"^U has {count} non-finite entries \(NaN or inf\)"):
            WilsonOperator(context, u, KAPPA)
    with pytest.raises(ValueError, match=r"^links are not unitary"):  # finite and wrong: as before
        WilsonOperator(context, 2 * links, KAPPA)


def test_wilson_operator_refuses_a_non_finite_kappa(context, links):
    for kappa in (math.nan, math.inf, -np.inf, np.float32("nan")):
        with pytest.raises(ValueError, match=r"^kappa is -?(nan|inf); pass a finite hopping parameter"):
            WilsonOperator(context, links, kappa)
    for kappa, message in (("0.12", r"^kappa is a str \('0.12'\), not a number; pass a finite "
                                    r"hopping parameter \(such as 0.12\)$"),
                           (None, r"^kappa is None; pass a finite hopping parameter"),
                           (0.12 + 0j, r"^kappa must be real, got \(0.12\+0j\)$")):
        with pytest.raises(TypeError, match=message):
            WilsonOperator(context, links, kappa)


# 3. and 4. Solver arguments -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def wilson(links):
    """The operator on a context, made once per context (PoCL compiles slowly)."""
    made = {}

    def get(context):
        if id(context) not in made:
            made[id(context)] = WilsonOperator(context, links, KAPPA, "double", 12)
        return made[id(context)]

    return get


def test_solve_refuses_a_tolerance_it_cannot_reach_and_bad_maxiter(context, wilson):
    op = wilson(context)
    b = np.random.default_rng(6).standard_normal(SPINOR).astype(np.complex128)
    # maxiter=3: without the check these would iterate (and warn), not raise
    for tol in (math.nan, math.inf, 0, 0.0, -1, -1e-10):
        with pytest.raises(ValueError, match=r"^tol must be a finite number > 0"):
            op.solve(b, tol=tol, maxiter=3)
    for tol in (None, "1e-8", 1e-8j):
        with pytest.raises(TypeError, match=r"^tol must be a real number"):
            op.solve(b, tol=tol, maxiter=3)
    for maxiter in (0, -5):
        with pytest.raises(ValueError, match=r"^maxiter must be at least 1, got"):
            op.solve(b, tol=1e-8, maxiter=maxiter)
    for maxiter in (2.5, None, True):
        with pytest.raises(TypeError, match=r"^maxiter must be an int"):
            op.solve(b, "bicgstab", tol=1e-8, maxiter=maxiter)
    x, info = op.solve(b, tol=1e-8, maxiter=np.int64(200))  # and good arguments still solve
    assert info.converged and info.true_residual < 1e-8


def test_device_solvers_refuse_bad_tol_and_maxiter(context, wilson):
    op = wilson(context)
    A = op.linear_operator("MpcdagMpc")
    A_low = op.with_precision("single").linear_operator("MpcdagMpc")
    M = op.linear_operator("Mpc")
    b = context.zeros(op.queue, A.size, A.dtype)  # b = 0: without the checks each call returns at once
    calls = {"cg": lambda **kw: solvers.cg(A, b, **kw),
             "bicgstab": lambda **kw: solvers.bicgstab(M, b, **kw),
             "cg_mixed": lambda **kw: solvers.cg_mixed(A, A_low, b, **kw)}
    for name, call in calls.items():
        for tol in (math.nan, -1.0, 0.0, math.inf):
            with pytest.raises(ValueError, match=r"^tol must be a finite number > 0"):
                call(tol=tol, maxiter=3)
        with pytest.raises(TypeError, match=r"^tol must be a real number"):
            call(tol=None, maxiter=3)
        with pytest.raises(ValueError, match=r"^maxiter must be at least 1, got 0"):
            call(tol=1e-8, maxiter=0)
        with pytest.raises(TypeError, match=r"^maxiter must be an int"):
            call(tol=1e-8, maxiter=10.0)
    for delta in (math.nan, 0.0, 1.5):
        with pytest.raises(ValueError, match=r"^delta must be between 0 and 1"):
            solvers.cg_mixed(A, A_low, b, 1e-8, 10, delta=delta)


def test_solve_with_zero_rhs_is_exactly_zero_with_zero_residual(context, wilson):
    op = wilson(context)
    b = np.zeros(SPINOR)
    for method, even_odd, precision in (("cg", True, None), ("bicgstab", False, None),
                                        ("cg", True, "mixed")):
        x, info = op.solve(b, method, 1e-10, even_odd, precision)
        assert x.shape == SPINOR and not np.any(x)
        assert info.converged
        assert info.true_residual == 0.0 and info.residual == 0.0  # not 0 / 0


def test_solve_refuses_a_non_finite_rhs(context, wilson):
    op = wilson(context)
    for value, count in ((math.nan, 1), (math.inf, 2), (complex(1, -math.inf), 1)):
        b = np.ones(SPINOR, dtype=np.complex128)
        b.reshape(-1)[[3, 500][:count]] = value
        with pytest.raises(ValueError, match=rf"^b has {count} non-finite entries \(NaN or inf\)"):
            op.solve(b, maxiter=3)
        with pytest.raises(ValueError, match=rf"^b has {count} non-finite entries"):
            op.solve_many([np.ones(SPINOR, dtype=np.complex128), b], maxiter=3)
    huge = np.full(SPINOR, 1e160, dtype=np.complex128)  # finite, but |b|^2 is not
    with pytest.raises(ValueError, match=r"^b's norm overflows double precision .* scale the "
                                         r"right-hand side down"):
        op.solve(huge, maxiter=3)


# 5. Sizes past 32-bit indices ---------------------------------------------------------------------
def test_lattice_past_the_dslash_index_limit_is_refused_without_allocating():
    assert 72 * MAX_HALF_VOLUME - 1 < 2**32 <= 72 * (MAX_HALF_VOLUME + 1) - 1  # gauge[72 VH - 1]
    tracemalloc.start()
    try:
        cases = [((65536,) * 4, r"^a 65536\^4 lattice has 2\^64 sites \(2\^63 per parity\)"),
                 ((256,) * 4, r"^a 256\^4 lattice has 2\^32 sites"),
                 ((106,) * 4, r"^a 106\^4 lattice has 126247696 sites"),  # the smallest refused L^4
                 ((2, 2, 2, 14913082), r"^a 2x2x2x14913082 lattice has 119304656 sites "
                                       r"\(59652328 per parity\)")]
        for dims, start in cases:
            with pytest.raises(ValueError, match=start) as error:
                Lattice(dims)
            assert "32-bit unsigned integers, so at most 2^32 // 72 = 59652323 sites per parity" \
                in str(error.value)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"refusing the lattices allocated {peak} bytes"
    check_volume((2, 2, 2, 14913080))  # 59652320 sites per parity: at the limit, allowed
    check_volume((104,) * 4)


def test_dslash_template_refuses_an_oversized_lattice_before_touching_the_device(context):
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"^a 106\^4 lattice has .* 32-bit"):
            DslashTemplate(context, (106,) * 4, "single", 12, tuning={"wgs": 64})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


def test_scale_refuses_lengths_past_its_32_bit_index(context, command_queue):
    template = ScaleTemplate(context, np.float32, {"wgs": 64})
    for n in (2**32, 2**40):  # without the check: 2 x 16 GiB (or more) asked of the device first
        with pytest.raises(ValueError, match=rf"^n = {n} is more than the scale kernel's 32-bit "
                                             r"unsigned length holds \(at most 2\^32 - 1"):
            template.instantiate(command_queue, n)
    with pytest.raises(TypeError, match=r"^n must be an int, not float"):
        template.instantiate(command_queue, 1e3)
    fn = template.instantiate(command_queue, np.int64(100), alpha=3.0)  # numpy ints are ints
    fn.x.set(command_queue, np.arange(100, dtype=np.float32))
    fn()
    np.testing.assert_array_equal(fn.y.get(command_queue), 3 * np.arange(100, dtype=np.float32))


# 3. Every scalar of a shipped operation: one check -------------------------------------------------
BAD_SCALARS = [
    (None, TypeError, "{op}: {what} is None; pass a finite number"),
    (math.nan, ValueError, "{op}: {what} is nan; pass a finite number"),
    (-math.inf, ValueError, "{op}: {what} is -inf; pass a finite number"),
    (True, TypeError, "{op}: {what} is a bool (True), not a number; pass a finite number"),
    ("2", TypeError, "{op}: {what} is a str ('2'), not a number; pass a finite number"),
]


def _refuses(call, op, what, value, kind, message):
    with pytest.raises(kind) as info:
        call(value)
    assert str(info.value) == message.format(op=op, what=what)


@pytest.mark.parametrize("value,kind,message", BAD_SCALARS)
def test_scale_refuses_a_bad_alpha(context, command_queue, value, kind, message):
    template = ScaleTemplate(context, np.float32)
    _refuses(lambda v: template.instantiate(command_queue, 10, alpha=v), "scale", "alpha", value,
             kind, message)


def test_scale_refuses_an_alpha_its_dtype_cannot_hold_and_computes_a_good_one(context, command_queue):
    template = ScaleTemplate(context, np.float32)
    with pytest.raises(ValueError, match=r"^scale: alpha = 1e\+39 overflows float32 \(largest "
                                         r"3.403e\+38\); pass a finite number in range$"):
        template.instantiate(command_queue, 10, alpha=1e39)
    fn = template.instantiate(command_queue, 10, alpha=np.float64(1e38))  # float32 holds it
    x = np.linspace(-1, 1, 10, dtype=np.float32)
    fn.x.set(command_queue, x)
    fn()
    np.testing.assert_array_equal(fn.y.get(command_queue), np.float32(1e38) * x)


@pytest.mark.parametrize("value,kind,message", BAD_SCALARS)
@pytest.mark.parametrize("what", ["alpha", "beta"])
def test_gemm_refuses_a_bad_alpha_or_beta(context, command_queue, value, kind, message, what):
    from operations.gemm import GemmTemplate

    gemm = GemmTemplate(context, np.float32, 8, 8, 8).instantiate(command_queue)
    x = context.allocate((8, 8), np.float32)
    _refuses(lambda v: gemm(x, x, x, **{what: v}), "gemm", what, value, kind, message)


@pytest.mark.parametrize("value,kind,message", BAD_SCALARS)
def test_diffusion_refuses_a_bad_dt(context, value, kind, message):
    from operations.diffusion import DiffusionTemplate

    _refuses(lambda v: DiffusionTemplate(context, 10, 10, dt=v), "diffusion", "dt", value, kind,
             message)


@pytest.mark.parametrize("value,kind,message", BAD_SCALARS)
def test_dslash_refuses_a_bad_coefficient(context, links, value, kind, message):
    op = WilsonOperator(context, links, KAPPA)
    lattice = Lattice(DIMS)
    half = context.allocate((lattice.half_volume, 4, 3), np.complex64 if op.precision == "single"
                            else np.complex128)
    _refuses(lambda v: op.dslash_parity(half, half, 0, x=half, a=v), "dslash", "a", value, kind,
             message)


@pytest.mark.parametrize("value,kind,shown", [(None, TypeError, "None"),
                                               (math.nan, ValueError, "(nan+0j)"),
                                               (complex(1, math.inf), ValueError, "(1+infj)")])
def test_half_blas_refuses_a_bad_coefficient(value, kind, shown):
    from operations.lqcd.half_blas import _coefficient

    with pytest.raises(kind) as info:
        _coefficient(value)
    assert str(info.value) == f"half BLAS: coefficient is {shown}; pass a finite number"
    assert _coefficient(1 - 2j) == [np.float32(1), np.float32(-2)]
