"""The Wilson operator's public building blocks (``apply_full``, ``apply_pc_normal``,
``linear_operator``, ``check_spinor``) against references built apart from them in numpy: the
dense blocks of D on a tiny lattice, each column the reference hop of a unit spinor, and the
host operator of :mod:`operations.lqcd.reference`."""

from __future__ import annotations

import numpy as np
import pytest

from operations.lqcd import SpinorField, WilsonOperator, haar_field, reference, weak_field
from operations.lqcd.wilson import WilsonLinearOperator, host_spinor

KAPPA = 0.124
TINY = (4, 4, 4, 4)  # X, Y, Z, T: 256 sites, dense parity blocks of 1536 x 1536
TINY_SHAPE = TINY[::-1]  # T, Z, Y, X
DIMS = (4, 4, 6, 8)  # unequal extents
SHAPE = (8, 6, 4, 4)


def _spinor(seed, shape=SHAPE):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape + (4, 3)) + 1j * rng.standard_normal(shape + (4, 3))


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def _parity(shape):
    t, z, y, x = np.indices(shape)
    return (t + z + y + x) % 2


def _on(parity, psi):
    """``psi`` with the sites of the other parity zeroed."""
    return np.where((_parity(psi.shape[:4]) == parity)[..., None, None], psi, 0)


def _hop_block(u, rows, cols):
    """The block of the dense hopping matrix D from the components ``cols`` to ``rows``
    (boolean masks of the flattened spinor): one column per unit spinor, its reference hop,
    which must vanish off ``rows`` (D couples only opposite parities)."""
    block = np.empty((rows.sum(), cols.sum()), dtype=np.complex128)
    unit = np.zeros(rows.size, dtype=np.complex128)
    for k, j in enumerate(np.flatnonzero(cols)):
        unit[j] = 1
        column = reference.hop(u, unit.reshape(TINY_SHAPE + (4, 3)), -1).reshape(-1)
        unit[j] = 0
        assert not np.any(column[~rows])
        block[:, k] = column[rows]
    return block


@pytest.fixture(scope="module")
def tiny():
    """The links of the tiny lattice, which of its 12 V spinor components sit on even sites,
    and the dense Schur complement S = M_ee - M_eo M_oo^-1 M_oe of M = 1 - kappa D (t_boundary
    -1): D has no same-parity blocks (asserted), so M_ee = M_oo = 1 and S = 1 - kappa^2 D_eo
    D_oe, the two blocks dense matrices of reference hops."""
    u = haar_field(TINY, seed=21)
    even = np.repeat(_parity(TINY_SHAPE).reshape(-1) == 0, 12)
    d_eo, d_oe = _hop_block(u, even, ~even), _hop_block(u, ~even, even)
    return u, even, np.eye(d_eo.shape[0]) - KAPPA ** 2 * (d_eo @ d_oe)


@pytest.mark.parametrize("precision,reconstruct,tol", [
    ("double", 18, 1e-12), ("single", 12, 1e-5), ("half", 12, 5e-3)])
def test_apply_pc_normal_is_the_dense_schur_complements_normal_matrix(context, tiny, precision,
                                                                      reconstruct, tol):
    """M_pc^dag M_pc psi_e, host and device forms, equals S^dag S psi_e with S the dense Schur
    complement (the conjugate transpose, not gamma_5 hermiticity), and M_pc^dag after M_pc;
    a half operator keeps M_pc psi_e in 16 bits between the two."""
    if precision == "double" and not context.device.double_precision:
        pytest.skip("no double precision")
    u, even, schur = tiny
    op = WilsonOperator(context, u, KAPPA, precision, reconstruct)
    psi = _spinor(30, TINY_SHAPE)
    want = schur.conj().T @ (schur @ psi.reshape(-1)[even])
    got = op.apply_pc_normal(psi)
    assert got.shape == psi.shape and not np.any(got.reshape(-1)[~even])  # zeros on odd sites
    assert _rel(got.reshape(-1)[even], want) < tol
    assert _rel(got, op.apply_pc_dagger(op.apply_pc(psi))) < tol
    # the device form: (12, V/2) even-site arrays, the result written into out and returned
    inp = op.to_device(psi).even
    out = context.allocate(inp.shape, op.dtype)
    assert op.apply_pc_normal(inp, out) is out
    even_sites = out.get(op.queue)
    on_device = op.lattice.spinor_from_device((even_sites, np.zeros_like(even_sites)))
    assert _rel(on_device.reshape(-1)[even], want) < tol
    with pytest.raises(ValueError, match="distinct out="):
        op.apply_pc_normal(inp, inp)
    with pytest.raises(ValueError, match="distinct out="):
        op.apply_pc_normal(inp)


def test_apply_pc_is_the_dense_schur_complement(context, tiny):
    """M_pc psi_e, and M_pc^dag psi_e, equal S psi_e and S^dag psi_e of the dense matrix."""
    u, even, schur = tiny
    op = WilsonOperator(context, u, KAPPA, "double", 18)
    psi = _spinor(31, TINY_SHAPE)
    assert _rel(op.apply_pc(psi).reshape(-1)[even], schur @ psi.reshape(-1)[even]) < 1e-12
    assert _rel(op.apply_pc_dagger(psi).reshape(-1)[even],
                schur.conj().T @ psi.reshape(-1)[even]) < 1e-12


@pytest.fixture(scope="module")
def weak():
    return weak_field(DIMS, 0.1, seed=12)


def test_apply_full_on_device_fields_is_m_or_d_and_their_daggers(context, weak):
    op = WilsonOperator(context, weak, KAPPA, "double", 12)
    psi = _spinor(32)
    field, out = op.to_device(psi), op.new_field()
    for dagger in (False, True):
        hop = reference.hop(weak, psi, -1, dagger)
        for xpay, want in ((True, psi - KAPPA * hop), (False, hop)):
            assert op.apply_full(out, field, dagger=dagger, xpay=xpay) is None  # enqueued
            assert _rel(op.from_device(out), want) < 1e-13, (dagger, xpay)
    op.apply_full(out, field)  # M by default
    assert _rel(op.from_device(out), reference.wilson(weak, psi, KAPPA, -1)) < 1e-13
    with pytest.raises(ValueError, match="distinct out="):
        op.apply_full(field, field)


def _host_operator(u, kind):
    """The numpy operator of ``kind`` on host spinors (even-site kinds on the even sites)."""
    def m(psi, dagger=False):
        return reference.wilson(u, psi, KAPPA, -1, dagger)

    def m_pc(psi, dagger=False):  # psi_e - kappa^2 D_eo D_oe psi_e
        hops = _on(0, reference.hop(u, _on(1, reference.hop(u, psi, -1, dagger)), -1, dagger))
        return _on(0, psi) - KAPPA ** 2 * hops

    return {"M": m, "MdagM": lambda psi: m(m(psi), True),
            "Mpc": m_pc, "MpcdagMpc": lambda psi: m_pc(m_pc(psi), True)}[kind]


@pytest.mark.parametrize("precision,tol", [("double", 1e-13), ("single", 2e-6)])
@pytest.mark.parametrize("kind", WilsonLinearOperator.KINDS)
def test_each_linear_operator_kind_matches_the_numpy_operator(context, weak, kind, precision,
                                                              tol):
    """``linear_operator(kind)``: what the solvers call, ``apply(out, inp)`` on flat device
    vectors of both parities (M, M^dag M) or the even sites (M_pc, M_pc^dag M_pc), against
    the numpy operator; sizes, dtype and no communicator as a solver reads them."""
    if precision == "double" and not context.device.double_precision:
        pytest.skip("no double precision")
    op = WilsonOperator(context, weak, KAPPA, precision, 12)
    A = op.linear_operator(kind)
    pc = kind.startswith("Mpc")
    half_volume = op.lattice.half_volume
    assert isinstance(A, WilsonLinearOperator) and A.kind == kind and A.wilson is op
    assert A.size == (1 if pc else 2) * 12 * half_volume and A.dtype == np.dtype(op.dtype)
    assert A.comm is None and A.queue is op.queue
    psi = _on(0, _spinor(33)) if pc else _spinor(33)
    # flat vectors, as a solver's: the even sites, or both parities even first
    halves = [op.lattice.spinor_to_device(psi, p, op.dtype).reshape(-1)
              for p in ((0,) if pc else (0, 1))]
    inp = context.to_device(op.queue, np.concatenate(halves))
    out = context.allocate(A.size, A.dtype)
    A.apply(out, inp)
    if pc:
        even = out.get(op.queue).reshape(12, half_volume)
        got = op.lattice.spinor_from_device((even, np.zeros_like(even)))
    else:
        got = op.from_device(SpinorField(out))
    assert _rel(got, _host_operator(weak, kind)(psi)) < tol


def test_a_linear_operator_of_an_unknown_kind_is_refused(context, weak):
    op = WilsonOperator(context, weak, KAPPA, "single", 12)
    with pytest.raises(ValueError, match="^kind must be one of M, MdagM, Mpc, MpcdagMpc, got 'Mdag'"):
        op.linear_operator("Mdag")


def test_check_spinor_returns_a_host_spinor_or_says_what_it_must_be(context, weak):
    op = WilsonOperator(context, weak, KAPPA, "single", 12)
    psi = _spinor(34)
    assert op.check_spinor(psi) is psi
    with pytest.raises(ValueError, match=r"^spinor has shape \(8, 6, 4, 4, 3, 4\), expected "
                                         r"\(8, 6, 4, 4, 4, 3\) \(T, Z, Y, X, spin, colour\)$"):
        op.check_spinor(np.zeros(SHAPE + (3, 4), complex))
    with pytest.raises(TypeError, match="^spinor must be a numpy array of shape"):
        op.check_spinor(psi.tolist())
    with pytest.raises(TypeError, match="^spinor must be numeric, got <U1"):
        op.check_spinor(np.full(SHAPE + (4, 3), "a"))
    # the shared check, as a distributed operator words it for its global arrays
    with pytest.raises(ValueError, match=r"expected the global \(2, 2, 2, 2, 4, 3\) \(T, Z"):
        host_spinor(np.zeros((2, 2, 2, 4, 4, 3)), (2, 2, 2, 2, 4, 3), "the global ")
