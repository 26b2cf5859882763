"""Gauge fields: reproducible random SU(3) fields, the plaquette, and 12/8-parameter compression.

Host arrays follow ``U[mu, t, z, y, x]`` = the 3x3 link from site x to x + mu, shape
``(4, T, Z, Y, X, 3, 3)``. Compression keeps links exact to rounding, identity and
near-degenerate links included (see :func:`pack`).
"""

from __future__ import annotations

import numpy as np

from .lattice import Lattice


def _hermitian_traceless(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    a = rng.standard_normal(shape + (3, 3)) + 1j * rng.standard_normal(shape + (3, 3))
    h = (a + np.swapaxes(a.conj(), -1, -2)) / 2
    return h - np.trace(h, axis1=-2, axis2=-1)[..., None, None] * np.eye(3) / 3


def _expi(h: np.ndarray, eps: float) -> np.ndarray:
    """exp(i eps H) for Hermitian H, through its eigen-decomposition (exactly unitary)."""
    w, v = np.linalg.eigh(h)
    return (v * np.exp(1j * eps * w)[..., None, :]) @ np.swapaxes(v.conj(), -1, -2)


def weak_field(dims: tuple[int, int, int, int], eps: float, seed: int) -> np.ndarray:
    """U = exp(i eps H) with H Gaussian, Hermitian and traceless: close to the identity for small eps."""
    lat = Lattice(dims)
    rng = np.random.default_rng(seed)
    return _expi(_hermitian_traceless(rng, (4,) + lat.shape), eps)


def haar_field(dims: tuple[int, int, int, int], seed: int) -> np.ndarray:
    """Links drawn from the Haar measure on SU(3).

    Gram-Schmidt on two Gaussian complex 3-vectors gives Haar-distributed orthonormal rows 0
    and 1; row 2 = conj(row0 x row1) completes them to determinant 1.
    """
    lat = Lattice(dims)
    rng = np.random.default_rng(seed)
    shape = (4,) + lat.shape + (2, 3)
    z = np.empty(shape, np.complex128)  # real parts drawn first, then imaginary parts
    z.real = rng.standard_normal(shape)
    z.imag = rng.standard_normal(shape)
    links = np.empty((4,) + lat.shape + (3, 3), np.complex128)
    row0, row1 = links[..., 0, :], links[..., 1, :]
    np.divide(z[..., 0, :], np.linalg.norm(z[..., 0, :], axis=-1, keepdims=True), out=row0)
    row1[...] = z[..., 1, :] - np.sum(row0.conj() * z[..., 1, :], axis=-1, keepdims=True) * row0
    row1 /= np.linalg.norm(row1, axis=-1, keepdims=True)
    links[..., 2, :] = _cross_conj(row0, row1)
    return links


def plaquette(u: np.ndarray) -> float:
    """Average plaquette Re tr(U_mu(x) U_nu(x+mu) U_mu(x+nu)^dagger U_nu(x)^dagger) / 3 (1 for unit links)."""
    total, count = 0.0, 0
    axes = {0: 3, 1: 2, 2: 1, 3: 0}  # mu -> array axis of the site coordinates (t, z, y, x)
    for mu in range(4):
        for nu in range(mu + 1, 4):
            u_nu_xmu = np.roll(u[nu], -1, axis=axes[mu])
            u_mu_xnu = np.roll(u[mu], -1, axis=axes[nu])
            p = u[mu] @ u_nu_xmu @ np.swapaxes(u_mu_xnu.conj(), -1, -2) @ np.swapaxes(u[nu].conj(), -1, -2)
            total += float(np.trace(p, axis1=-2, axis2=-1).real.sum())
            count += p.shape[0] * p.shape[1] * p.shape[2] * p.shape[3]
    return total / (3 * count)


def nonfinite_entries(a: np.ndarray) -> int:
    """How many entries of ``a`` are NaN or infinite (in either part, for complex data)."""
    return int(a.size - np.count_nonzero(np.isfinite(a)))


def unitarity_violation(u: np.ndarray) -> tuple[float, float]:
    """(max |U^dagger U - 1|, max |det U - 1|) over all links: NaN when a link has a NaN or
    infinite entry (compare with ``not violation <= tol``, or count them with
    :func:`nonfinite_entries` first)."""
    eye = np.eye(3)
    uu = np.swapaxes(u.conj(), -1, -2) @ u
    return float(np.max(np.abs(uu - eye))), float(np.max(np.abs(np.linalg.det(u) - 1)))


def boundary_signs(shape: tuple[int, ...], t_boundary: int) -> np.ndarray:
    """+1 for every link but the time links on the last time slice, which get ``t_boundary``."""
    signs = np.ones((4,) + tuple(shape[1:5]))
    signs[3, -1] = t_boundary
    return signs


def _cross_conj(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """conj(a x b) over the last axis (np.cross's products, without its copies)."""
    out = np.empty(np.broadcast_shapes(a.shape, b.shape), np.result_type(a, b))
    for k in range(3):
        i, j = (k + 1) % 3, (k + 2) % 3
        np.multiply(a[..., i], b[..., j], out=out[..., k])
        out[..., k] -= a[..., j] * b[..., i]
    return np.conj(out, out=out)


def pack(u: np.ndarray, reconstruct: int, t_boundary: int = 1) -> np.ndarray:
    """Compress links to 12 (two rows, complex) or 8 real parameters (18: all nine, as is).

    Rows 0 and 1 determine row 2 = conj(det) conj(row0 x row1). ``t_boundary=-1`` declares that
    the time links of the last time slice carry the antiperiodic sign (det = -1); every other
    link must be in SU(3).

    The 8-parameter form (:func:`_pack8`) stores the SU(3) matrix V = U or U with columns 0
    and 1 exchanged and column 2 negated, whichever has the smaller |V_00|, as V_00, one more
    entry of row 0 and one of column 0 (complex), and the phases of the two entries whose
    moduli the rows' and columns' norms give (the larger of the two left in row 0 and in
    column 0). The other four entries follow from the cofactor identity conj(V) = adj(V)^T
    divided by 1 - |V_00|^2 >= 1/2. Every division and square root is thus bounded away from
    zero, so identity and near-degenerate links stay exact to rounding. A phase theta is
    stored as tan(theta / 4), in [-1, 1], so that rebuilding it takes no sine or cosine
    (:func:`phase_from_tangent`); the three choices travel as offsets on the two phase
    parameters (:data:`CHOICE_STEP`, :data:`CHOICES`).
    """
    if reconstruct == 8 and t_boundary != 1:  # with +1 every sign is 1: nothing to multiply
        signs = boundary_signs(u.shape, t_boundary).astype(u.real.dtype)
        u = u * signs[..., None, None]
    return pack_links(u, reconstruct)


def pack_links(links: np.ndarray, reconstruct: int) -> np.ndarray:
    """Compress SU(3) matrices ``links`` of any shape ``(..., 3, 3)`` to 12 or 8 parameters
    (18: all nine, a copy), as :func:`pack` does with a periodic time boundary: the parameters
    of each link depend on that link alone, so links in any order (the dslash's checkerboard
    order) give their parameters in that order."""
    if reconstruct == 18:
        return links.reshape(links.shape[:-2] + (9,)).copy()
    if reconstruct == 12:
        return links[..., :2, :].reshape(links.shape[:-2] + (6,)).copy()
    if reconstruct != 8:
        raise ValueError(f"reconstruct must be 18, 12 or 8, got {reconstruct!r}")
    return _pack8(links)


#: the spacing of the choices carried by the 8-parameter form's phase parameters (a stored
#: tangent lies in [-1, 1]; choice j of n shifts it by CHOICE_STEP * (j - (n - 1) / 2))
CHOICE_STEP = 3.0
#: how many choices each phase parameter carries: component 4, the exchange of columns 0 and
#: 1 (bit 0) and which entry of row 0 is rebuilt (bit 1); component 7, which of column 0
CHOICES = {4: 4, 7: 2}


def phase_parameter_limit(component: int) -> float:
    """The largest magnitude of an 8-parameter form's phase parameter (4 or 7)."""
    return CHOICE_STEP * (CHOICES[component] - 1) / 2 + 1


def _offset(choice: np.ndarray, component: int) -> np.ndarray:
    return CHOICE_STEP * (choice - (CHOICES[component] - 1) / 2)


def _choice(p: np.ndarray, component: int) -> tuple[np.ndarray, np.ndarray]:
    """A phase parameter as (choice index, tangent)."""
    j = np.rint(p / CHOICE_STEP + (CHOICES[component] - 1) / 2).astype(int)
    return j, p - _offset(j, component)


def _exchange(v: np.ndarray, swap: np.ndarray) -> np.ndarray:
    """Columns 0 and 1 exchanged and column 2 negated where ``swap`` (its own inverse; the
    determinant is kept)."""
    swapped = v[..., [1, 0, 2]] * np.array([1, 1, -1])
    return np.where(swap[..., None, None], swapped, v)


def _pack8(w: np.ndarray) -> np.ndarray:
    swap = np.abs(w[..., 0, 0]) > np.abs(w[..., 0, 1])
    # the five entries kept of V = _exchange(w, swap), made alone (not the whole matrix)
    a1 = np.where(swap, w[..., 0, 1], w[..., 0, 0])
    a2 = np.where(swap, w[..., 0, 0], w[..., 0, 1])
    a3 = np.where(swap, np.negative(w[..., 0, 2]), w[..., 0, 2])
    b1 = np.where(swap, w[..., 1, 1], w[..., 1, 0])
    c1 = np.where(swap, w[..., 2, 1], w[..., 2, 0])
    row = np.abs(a2) >= np.abs(a3)      # row 0's entry rebuilt from its phase: a2, else a3
    col = np.abs(b1) >= np.abs(c1)      # column 0's: b1, else c1
    out = np.empty(w.shape[:-2] + (8,), dtype=w.real.dtype)
    kept0, rebuilt0 = np.where(row, a3, a2), np.where(row, a2, a3)
    kept1, rebuilt1 = np.where(col, c1, b1), np.where(col, b1, c1)
    out[..., 0], out[..., 1] = a1.real, a1.imag
    out[..., 2], out[..., 3] = kept0.real, kept0.imag
    out[..., 4] = _tangent(rebuilt0) + _offset(swap + 2 * row, 4)
    out[..., 5], out[..., 6] = kept1.real, kept1.imag
    out[..., 7] = _tangent(rebuilt1) + _offset(col.astype(int), 7)
    return out


def _unpack8(p: np.ndarray) -> np.ndarray:
    """The SU(3) matrices of :func:`_pack8`'s parameters, as the kernels rebuild them."""
    j0, t0 = _choice(p[..., 4], 4)
    j1, t1 = _choice(p[..., 7], 7)
    a1 = p[..., 0] + 1j * p[..., 1]
    kept0 = p[..., 2] + 1j * p[..., 3]
    kept1 = p[..., 5] + 1j * p[..., 6]
    n = 1 - np.abs(a1) ** 2                                   # |a2|^2 + |a3|^2 >= 1/2
    rebuilt0 = np.sqrt(np.maximum(0.0, n - np.abs(kept0) ** 2)) * phase_from_tangent(t0)
    rebuilt1 = np.sqrt(np.maximum(0.0, n - np.abs(kept1) ** 2)) * phase_from_tangent(t1)
    row, col = (j0 >> 1) == 1, j1 == 1
    a2, a3 = np.where(row, rebuilt0, kept0), np.where(row, kept0, rebuilt0)
    b1, c1 = np.where(col, rebuilt1, kept1), np.where(col, kept1, rebuilt1)
    # conj(V) = adj(V)^T and the orthogonality of the rows, solved for b2, b3, c2, c3
    b1n, c1n = b1 / n, c1 / n
    ab, ac = np.conj(a1) * b1n, np.conj(a1) * c1n
    b2 = -(np.conj(a3 * c1n) + a2 * ab)
    b3 = np.conj(a2 * c1n) - a3 * ab
    c2 = np.conj(a3 * b1n) - a2 * ac
    c3 = -(np.conj(a2 * b1n) + a3 * ac)
    v = np.stack([np.stack([a1, a2, a3], -1), np.stack([b1, b2, b3], -1),
                  np.stack([c1, c2, c3], -1)], -2)
    return _exchange(v, (j0 & 1) == 1)


def _tangent(z: np.ndarray) -> np.ndarray:
    """tan(arg(z) / 4), in [-1, 1] (arg in (-pi, pi])."""
    return np.tan(np.angle(z) / 4)


def phase_from_tangent(t: np.ndarray) -> np.ndarray:
    """exp(i theta) from t = tan(theta / 4): the square of (1 - t^2 + 2 i t) / (1 + t^2), what
    the kernels compute (no trigonometry)."""
    half_angle = (1 - t * t + 2j * t) / (1 + t * t)
    return half_angle * half_angle


def unpack(packed: np.ndarray, reconstruct: int, t_boundary: int = 1) -> np.ndarray:
    """Inverse of :func:`pack`: full 3x3 links of shape ``(4, T, Z, Y, X, 3, 3)``."""
    if reconstruct == 18:
        return packed.reshape(packed.shape[:-1] + (3, 3)).copy()
    if reconstruct == 12:
        rows = packed.reshape(packed.shape[:-1] + (2, 3))
        row0, row1 = rows[..., 0, :], rows[..., 1, :]
    elif reconstruct == 8:
        signs = boundary_signs(packed.shape, t_boundary).astype(packed.dtype)[..., None, None]
        dtype = np.result_type(packed.dtype, np.complex64)
        return (_unpack8(packed) * signs).astype(dtype, copy=False)
    else:
        raise ValueError(f"reconstruct must be 18, 12 or 8, got {reconstruct!r}")
    row2 = _cross_conj(row0, row1)
    signs = boundary_signs(packed.shape, t_boundary)
    row2 = row2 * signs[..., None]  # conj(det) with det = +-1
    dtype = np.result_type(packed.dtype, np.complex64)  # complex64 stays single precision
    return np.stack([row0, row1, row2], axis=-2).astype(dtype, copy=False)
