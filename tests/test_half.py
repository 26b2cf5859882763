"""Half precision (16-bit fixed point) storage and the half precision dslash, against the
independent numpy reference: the error is bounded by the 16-bit storage (5e-3 relative)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from operations.lqcd import DslashTemplate, gauge, haar_field, half, reference
from operations.lqcd.lattice import Lattice

from device_breadth import variants

DIMS = (4, 6, 2, 8)  # unequal extents: X, Y, Z, T
HALF_TOL = 5e-3


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@settings(max_examples=60, deadline=None)
@given(parts=arrays(np.float64, (12, 5, 2),
                   elements=st.floats(-1e6, 1e6, width=32).filter(lambda v: v == 0 or abs(v) > 1e-6)),
       scales=arrays(np.float64, 5, elements=st.sampled_from([0.0, 1e-20, 1e-3, 1.0, 1e20])))
def test_a_spinor_keeps_15_bits_relative_to_its_sites_largest_component(parts, scales):
    """Each site is scaled by its own norm: the error of every component is at most half a
    step of 1/32767 of the site's largest component, whatever the site's magnitude within the
    float32 range of the norms (zero sites included)."""
    field = (parts[..., 0] + 1j * parts[..., 1]) * scales[None, :]
    values, norms = half.spinor_to_half(field)
    assert values.dtype == np.int16 and values.shape == (3, 5, 4, 2)
    assert norms.dtype == np.float32 and np.all(np.abs(values) <= half.HALF_MAX)
    back = half.spinor_from_half(values, norms)
    largest = np.maximum(np.abs(field.real), np.abs(field.imag)).max(axis=0)
    step = largest / half.HALF_MAX
    err = np.maximum(np.abs(back.real - field.real), np.abs(back.imag - field.imag))
    assert np.all(err <= 0.5 * step[None, :] + 1e-7 * largest[None, :] + 1e-300)


def test_a_half_spinor_copies_and_zeroes_on_the_device(context, command_queue):
    rng = np.random.default_rng(2)
    field = rng.standard_normal((12, 40)) + 1j * rng.standard_normal((12, 40))
    source = half.to_device(context, command_queue, field)
    target = half.HalfSpinor.allocate(context, 40)
    target.copy_from(command_queue, source)
    np.testing.assert_array_equal(half.from_device(command_queue, target),
                                  half.spinor_from_half(*half.spinor_to_half(field)))
    target.zero(command_queue)
    assert not np.any(half.from_device(command_queue, target))
    assert np.any(half.from_device(command_queue, source))  # the copy was a copy


def test_links_are_stored_as_16_bit_fixed_point_and_out_of_range_ones_refused():
    dims = (2, 2, 2, 2)
    lat = Lattice(dims)
    u = haar_field(dims, seed=4)
    for reconstruct in (18, 12, 8):
        packed = gauge.pack(u, reconstruct)
        links = lat.links_to_device(packed, np.float64 if reconstruct == 8 else np.complex128)
        stored = half.links_to_half(links, reconstruct)
        assert stored.dtype == np.int16
        scales = half.link_scales(reconstruct)[None, None, :, None]
        if reconstruct == 8:
            back = stored * scales
        else:
            back = (stored[..., 0] + 1j * stored[..., 1]) * scales
        steps = np.broadcast_to(scales, back.shape)
        for part in (np.real, np.imag):  # each part within half a step
            assert np.all(np.abs(part(back) - part(links)) <= 0.5 * steps + 1e-12)
    with pytest.raises(ValueError, match="bounded by 1"):
        half.links_to_half(lat.links_to_device(gauge.pack(2 * u, 12), np.complex128), 12)


@pytest.fixture(scope="module")
def problem():
    lat = Lattice(DIMS)
    u = haar_field(DIMS, seed=7)
    rng = np.random.default_rng(8)
    psi = rng.standard_normal(lat.shape + (4, 3)) + 1j * rng.standard_normal(lat.shape + (4, 3))
    x = rng.standard_normal(lat.shape + (4, 3)) + 1j * rng.standard_normal(lat.shape + (4, 3))
    return lat, u, psi, x


# Every link compression with each way of reading 16-bit values, and with both time
# boundaries: each (reconstruct, reading) pair once, each reconstruct and each reading under
# both boundaries (the boundary's sign is one code path for every compression and reading; a
# kernel is compiled per combination, so all twelve would take twice as long to prove no more).
HALF_DSLASH_CASES = [(18, -1, "conversions"), (18, 1, "bits-fast"), (12, 1, "conversions"),
                     (12, -1, "bits-fast"), (8, -1, "conversions"), (8, 1, "bits-fast")]
HALF_READS = {"conversions": {}, "bits-fast": {"half_bits": True, "fast_math": True}}


@pytest.mark.parametrize("reconstruct,t_boundary,reads", HALF_DSLASH_CASES,
                         ids=[f"{r}-{t}-{reads}" for r, t, reads in HALF_DSLASH_CASES])
def test_the_half_dslash_matches_the_numpy_reference(context, command_queue, problem,
                                                     reconstruct, t_boundary, reads):
    """Both parities, D and D^dagger, with and without x + a D psi (on a CPU device, the four
    of the eight that meet every pair: ``device_breadth``), against reference.hop on the exact
    fields: within 5e-3, the bound 16-bit storage of input, links and output allows;
    16-bit values read by conversion instructions and by bit arithmetic (``half_bits``), the
    8-parameter form with exact and with fast square roots and division."""
    options = HALF_READS[reads]
    if options.get("fast_math") and reconstruct != 8:
        options = {"half_bits": True}  # fast_math is a parameter of the 8-parameter form only
    lat, u, psi, x = problem
    template = DslashTemplate(context, DIMS, "half", reconstruct, t_boundary,
                              {"wgs": 16, **options})
    links = template.gauge_to_device(command_queue, u)
    dslash = template.instantiate(command_queue)
    a = -0.37
    for dagger, parity, xpay in variants(context):
        full = reference.hop(u, psi, t_boundary, dagger=dagger)
        inp = half.to_device(context, command_queue,
                             lat.spinor_to_device(psi, 1 - parity, np.complex128))
        out = half.HalfSpinor.allocate(context, lat.half_volume)
        if xpay:
            x_half = half.to_device(context, command_queue,
                                    lat.spinor_to_device(x, parity, np.complex128))
            dslash(out, inp, links, parity, dagger=dagger, x=x_half, a=a)
            want = lat.spinor_to_device(x + a * full, parity, np.complex128)
        else:
            dslash(out, inp, links, parity, dagger=dagger)
            want = lat.spinor_to_device(full, parity, np.complex128)
        got = half.from_device(command_queue, out)
        assert _rel(got, want) <= HALF_TOL, (parity, dagger, xpay, _rel(got, want))


# project16 against reading every component first: each compression once, each way of
# converting, the plain shape and one with staged x neighbours, split directions and two sites
PROJECT16_CASES = [(18, "bits", {"wgs": 32}), (12, "cvt", {"wgs": 32}),
                   (8, "bits", {"wgs": 64, "dir_split": 2, "stage": True, "sites": 2}),
                   (12, "cvt", {"wgs": 64, "dir_split": 2, "stage": True, "sites": 2})]


@pytest.mark.parametrize("reconstruct,mode,shape", PROJECT16_CASES,
                         ids=[f"{r}-{m}-{len(s)}" for r, m, s in PROJECT16_CASES])
def test_projecting_the_16_bit_words_first_gives_the_same_dslash(context, command_queue, problem,
                                                                 reconstruct, mode, shape):
    """``project16`` (dslash.mako): a 16-bit neighbour's spin projection added in integers,
    then 12 conversions a hop instead of 24 ("cvt" by conversion instructions, "bits" by bit
    arithmetic). Both parities, D and D^dagger, with and without x + a D psi (a CPU device
    runs the four of the eight that meet every pair: ``device_breadth``): against the
    numpy reference within the 16-bit bound, and within two steps of the 16-bit output of the
    same kernel that converts every component first (the sums are exact either way; the
    compiler may contract the arithmetic after them differently)."""
    lat, u, psi, x = problem
    plain = DslashTemplate(context, DIMS, "half", reconstruct, -1, shape)
    projected = DslashTemplate(context, DIMS, "half", reconstruct, -1,
                               {**shape, "project16": mode})
    links = plain.gauge_to_device(command_queue, u)
    a = 0.43
    for dagger, parity, xpay in variants(context):
        full = reference.hop(u, psi, -1, dagger=dagger)
        inp = half.to_device(context, command_queue,
                             lat.spinor_to_device(psi, 1 - parity, np.complex128))
        extra = {"x": half.to_device(context, command_queue,
                                     lat.spinor_to_device(x, parity, np.complex128)),
                 "a": a} if xpay else {}
        got = {}
        for name, template in (("plain", plain), ("projected", projected)):
            out = half.HalfSpinor.allocate(context, lat.half_volume)
            template.instantiate(command_queue)(out, inp, links, parity, dagger=dagger, **extra)
            got[name] = half.from_device(command_queue, out)
        want = lat.spinor_to_device(x + a * full if xpay else full, parity, np.complex128)
        assert _rel(got["projected"], want) <= HALF_TOL, (parity, dagger, xpay)
        assert _rel(got["projected"], got["plain"]) <= 2 / 32767, (parity, dagger, xpay)


def test_each_spinor_argument_may_be_half_or_single(context, command_queue, problem):
    """A half template's kernels read and write 16-bit (HalfSpinor) or single precision
    (complex64) storage per argument: every combination of out, in and x against the
    reference, within the 16-bit bound."""
    import itertools

    lat, u, psi, x = problem
    template = DslashTemplate(context, DIMS, "half", 12, -1, {"wgs": 16, "half_bits": True})
    links = template.gauge_to_device(command_queue, u)
    dslash = template.instantiate(command_queue)
    a = 0.61
    want = lat.spinor_to_device(x + a * reference.hop(u, psi, -1, dagger=True), 1, np.complex128)

    def field(values, parity, kind):
        host = lat.spinor_to_device(values, parity, np.complex128)
        if kind == "h":
            return half.to_device(context, command_queue, host)
        return context.to_device(command_queue, host.astype(np.complex64))

    for kinds in itertools.product("hs", repeat=3):
        out = (half.HalfSpinor.allocate(context, lat.half_volume) if kinds[0] == "h"
               else context.allocate((12, lat.half_volume), np.complex64))
        dslash(out, field(psi, 0, kinds[1]), links, 1, dagger=True, x=field(x, 1, kinds[2]), a=a)
        got = half.from_device(command_queue, out) if kinds[0] == "h" else out.get(command_queue)
        assert _rel(got, want) <= HALF_TOL, ("".join(kinds), _rel(got, want))


def test_half_fields_are_asked_for_by_name(context, command_queue, problem):
    lat, u, psi, _ = problem
    template = DslashTemplate(context, DIMS, "half", 12, -1, {"wgs": 16})
    links = template.gauge_to_device(command_queue, u)
    double = context.to_device(command_queue, lat.spinor_to_device(psi, 1, np.complex128))
    out = half.HalfSpinor.allocate(context, lat.half_volume)
    with pytest.raises(TypeError, match="HalfSpinor fields .* or complex64 arrays"):
        template.instantiate(command_queue)(out, double, links, 0)
    from operations.lqcd.dslash import check_options

    with pytest.raises(ValueError, match="precision must be 'single' or 'double' or 'half'"):
        check_options(DIMS, "quarter", 12, -1)


@pytest.mark.parametrize("reconstruct", [18, 12, 8])
def test_the_half_operator_matches_the_numpy_reference(context, problem, reconstruct):
    """WilsonOperator(precision="half"): links and its own fields in 16 bits, single precision
    fields in and out; every host method within 5e-3 of the numpy reference, the even-odd
    operator M_pc psi_e = psi_e - kappa^2 D_eo D_oe psi_e (and its adjoint) too."""
    from operations.lqcd import WilsonOperator

    lat, u, psi, _ = problem
    kappa = 0.12
    op = WilsonOperator(context, u, kappa, "half", reconstruct, tuning={"wgs": 16})
    assert op.dtype == np.complex64
    hop = reference.hop(u, psi, -1)
    assert _rel(op.dslash(psi), hop) <= HALF_TOL
    assert _rel(op.apply(psi), psi - kappa * hop) <= HALF_TOL
    assert _rel(op.apply_dagger(psi), psi - kappa * reference.hop(u, psi, -1, dagger=True)) <= HALF_TOL
    even = (np.indices(lat.shape).sum(axis=0) % 2 == 0)[..., None, None]
    for dagger in (False, True):
        psi_e = np.where(even, psi, 0)
        d_oe = np.where(even, 0, reference.hop(u, psi_e, -1, dagger=dagger))
        want = psi_e - kappa**2 * np.where(even, reference.hop(u, d_oe, -1, dagger=dagger), 0)
        assert _rel(op.apply_pc(psi, dagger=dagger), want) <= HALF_TOL, dagger


def test_mixed_solvers_with_a_half_sloppy_operator_reach_double_precision(context, problem):
    """Double-half CG with reliable updates: the true residual, recomputed in double, meets
    the tolerance as double-single's does, in a comparable number of iterations; BiCGstab
    with reliable updates too, even-odd and full."""
    from operations.lqcd import WilsonOperator

    lat, u, psi, _ = problem
    op = WilsonOperator(context, u, 0.11, "double", 12, tuning={"wgs": 16})
    x_s, single = op.solve(psi, "cg", 1e-10, True, "mixed")
    x_h, half_info = op.solve(psi, "cg", 1e-10, True, "mixed", sloppy="half")
    assert half_info.converged and half_info.true_residual <= 1e-10
    assert single.true_residual <= 1e-10
    assert half_info.iterations <= 1.5 * single.iterations + 5, (half_info.iterations,
                                                                  single.iterations)
    assert _rel(x_h, x_s) <= 1e-8
    for even_odd in (True, False):  # BiCGstab with reliable updates, half sloppy operator
        x_b, bicg = op.solve(psi, "bicgstab", 1e-10, even_odd, "mixed", sloppy="half")
        assert bicg.converged and bicg.true_residual <= 1e-10 and bicg.reliable_updates > 0
        assert _rel(x_b, x_s) <= 1e-8
    with pytest.raises(ValueError, match="sloppy='half'"):
        op.solve(psi, "cg", 1e-10, True, "half")
    with pytest.raises(ValueError, match="sloppy must be"):
        op.solve(psi, "cg", 1e-10, True, "mixed", sloppy="quarter")


@pytest.mark.force_autotune
def test_every_half_dslash_candidate_is_checked(context):
    """The half dslash is tuned like the others, every candidate checked against the reference
    at sampled sites within 5e-3."""
    from autotune.tune.store import ResultStore

    DslashTemplate.autotune(context, DIMS, "half", 8)
    trials = ResultStore.open().trials(function="operations.lqcd.dslash.DslashTemplate.autotune")
    assert trials and all(t.status == "ok" for t in trials), [(t.parameters, t.message)
                                                              for t in trials]


def test_stored_parts_are_what_half_storage_holds_in_the_reference_layout(context, command_queue):
    """``stored_parts`` (what tuning checks read back) equals the decoded field in
    ``spinor_parts``' layout, part by part within each site's 16-bit resolution; a changed
    site shows."""
    rng = np.random.default_rng(2)
    n = 300
    field = (rng.standard_normal((12, n)) + 1j * rng.standard_normal((12, n))) \
        * np.exp(rng.uniform(-6, 6, n))[None, :]
    dev = half.to_device(context, command_queue, field)
    got, want = half.stored_parts(command_queue, dev), half.spinor_parts(field)
    assert got.shape == want.shape == (3, n, 4, 2) and got.dtype == np.float32
    site_max = np.max(np.abs(want), axis=(0, 2, 3))
    assert np.all(np.abs(got - want) <= 0.51 * site_max[None, :, None, None] / half.HALF_MAX
                  + 1e-6 * site_max[None, :, None, None])
    np.testing.assert_allclose(half.spinor_parts(half.from_device(command_queue, dev)), got,
                               rtol=1e-6, atol=0)
    field[5, 17] += 0.1 * site_max[17]
    assert np.max(np.abs(got - half.spinor_parts(field))) > 0.09 * site_max[17]


@pytest.mark.parametrize("wgs", [32, 128])
def test_half_blas_and_reductions_match_numpy_on_the_stored_fields(context, command_queue, wgs):
    """axpy, xpay and axpy_norm against numpy on the decoded 16-bit fields, within the 16-bit
    step of the result; norm2, dot and axpy_norm's |y|^2 against numpy sums of the stored
    values, to double precision rounding (the sums accumulate in double); sites spanning many
    work-groups and a partial last one, norms from 1e-3 to 1e3. (A float accumulation would
    be off by 1e-6 or more.)"""
    from operations.lqcd.half_blas import HalfBlasTemplate

    if not context.device.double_precision:
        pytest.skip("no double precision")
    rng = np.random.default_rng(17)
    n = 3001
    fields = [(rng.standard_normal((12, n)) + 1j * rng.standard_normal((12, n)))
              * np.exp(rng.uniform(-7, 7, n))[None, :] for _ in range(2)]
    blas = HalfBlasTemplate(context, {"wgs": wgs}).instantiate(command_queue)

    def fresh():
        return [half.to_device(context, command_queue, f) for f in fields]

    def stored(spinor):
        return half.from_device(command_queue, spinor)

    def decoded32(spinor):  # the values as the kernels decode them: in float, then summed in double
        scale = spinor.norms.get(command_queue) * np.float32(1 / half.HALF_MAX)
        parts = spinor.values.get(command_queue).astype(np.float32) * scale[None, :, None, None]
        return parts.transpose(0, 2, 1, 3).reshape(12, -1, 2).astype(np.float64) @ [1, 1j]

    x, y = fresh()
    xs, ys = stored(x), stored(y)
    x32, y32 = decoded32(x), decoded32(y)
    assert blas.norm2(x) == pytest.approx(np.vdot(x32, x32).real, rel=1e-12)
    assert blas.dot(x, y) == pytest.approx(np.vdot(x32, y32), rel=1e-12)
    for name, a, want in (("axpy", 0.6 - 0.8j, (0.6 - 0.8j) * xs + ys),
                          ("xpay", -1.3 + 0.2j, xs + (-1.3 + 0.2j) * ys),
                          ("axpy_norm", 0.25, 0.25 * xs + ys)):
        x, y = fresh()
        got_norm = getattr(blas, name)(y, x, a)
        got = stored(y)
        step = np.abs(want).max(axis=0) / half.HALF_MAX  # per site: the 16-bit step
        assert np.all(np.abs(got - want).max(axis=0) <= 2 * step + 1e-6 * np.abs(want).max(axis=0)), name
        if name == "axpy_norm":
            assert got_norm == pytest.approx(np.vdot(decoded32(y), decoded32(y)).real, rel=1e-12)
        assert np.array_equal(stored(x), xs)  # x is only read
    with pytest.raises(ValueError, match="must match"):
        blas.dot(x, half.HalfSpinor.allocate(context, n - 1))


@pytest.mark.force_autotune
def test_every_half_blas_candidate_is_checked(context):
    from autotune.tune.store import ResultStore
    from operations.lqcd.half_blas import HalfBlasTemplate

    if not context.device.double_precision:
        pytest.skip("no double precision")
    HalfBlasTemplate.autotune(context)
    trials = ResultStore.open().trials(function="operations.lqcd.half_blas.HalfBlasTemplate.autotune")
    assert len(trials) == len(HalfBlasTemplate.autotune_space(context).configurations())
    assert all(t.status == "ok" for t in trials), [(t.parameters, t.message) for t in trials]


@pytest.mark.force_autotune
def test_every_half_conversion_candidate_is_checked(context):
    """Every work-group size of the conversions is tuned and checked (both directions, the
    whole field) on the tuning's field, whose site norms span e^-20 to e^20."""
    from autotune.tune.store import ResultStore

    half.HalfConvertTemplate.autotune(context, np.complex64)
    trials = ResultStore.open().trials(function="operations.lqcd.half.HalfConvertTemplate.autotune")
    assert len(trials) == len(half.HalfConvertTemplate.autotune_space(
        context, np.complex64).configurations())
    assert all(t.status == "ok" for t in trials), [(t.parameters, t.message) for t in trials]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_the_conversion_check_takes_what_half_storage_holds_and_nothing_else(dtype):
    """The tuning's check of from_half (half._holds, a component at a time) passes the decoded
    field in the field's precision and fails a part off by 2e-6, a site's values taken from its
    neighbour's, a NaN and a field of another length."""
    from autotune import accel

    n = 1001
    field = half._tuning_field(np.dtype(dtype), n)
    assert field.shape == (12, n) and field.dtype == dtype
    values, norms = half.spinor_to_half(field)
    scale = (norms.astype(np.float64) / half.HALF_MAX).astype(accel.real_dtype(dtype))[:, None]
    back = half.spinor_from_half(values, norms).astype(dtype)
    assert half._holds(back, values, scale)
    for wrong in ((5, 123, 1 + 2e-6), (11, n - 1, 1 - 2e-6), (0, 0, 1 + 2e-6j)):
        bad = back.copy()
        bad[wrong[:2]] *= wrong[2]
        assert not half._holds(bad, values, scale), wrong
    bad = back.copy()
    bad[:, 10] = back[:, 11]
    assert not half._holds(bad, values, scale)
    bad[2, 500] = np.nan
    assert not half._holds(bad, values, scale)
    assert not half._holds(back[:, :-1], values, scale)
