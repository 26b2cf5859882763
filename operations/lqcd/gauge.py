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
    z = rng.standard_normal((4,) + lat.shape + (2, 3)) + 1j * rng.standard_normal((4,) + lat.shape + (2, 3))
    row0 = z[..., 0, :] / np.linalg.norm(z[..., 0, :], axis=-1, keepdims=True)
    row1 = z[..., 1, :] - np.sum(row0.conj() * z[..., 1, :], axis=-1, keepdims=True) * row0
    row1 /= np.linalg.norm(row1, axis=-1, keepdims=True)
    return np.stack([row0, row1, _cross_conj(row0, row1)], axis=-2)


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
    return np.conj(np.cross(a, b))


def pack(u: np.ndarray, reconstruct: int, t_boundary: int = 1) -> np.ndarray:
    """Compress links to 12 (two rows, complex) or 8 real parameters (18: all nine, as is).

    Rows 0 and 1 determine row 2 = conj(det) conj(row0 x row1). ``t_boundary=-1`` declares that
    the time links of the last time slice carry the antiperiodic sign (det = -1); every other
    link must be in SU(3).

    The 8-parameter form keeps, for row 0, its two smallest entries and the phase of the
    largest (whose modulus, at least 1/sqrt(3), is rebuilt without loss); row 1 is written in an
    orthonormal basis of the complement of row 0 built from the axis least aligned with row 0,
    again as one complex coefficient and the phase of the larger one. A phase theta is stored as
    tan(theta / 4), in [-1, 1], so that rebuilding it takes one division and no sine or cosine
    (:func:`phase_from_tangent`); the choices travel as offsets of 4 on these two parameters
    (:data:`CHOICE_STEP`), so identity and near-degenerate links survive.
    """
    if reconstruct == 18:
        return u.reshape(u.shape[:-2] + (9,)).copy()
    if reconstruct == 12:
        return u[..., :2, :].reshape(u.shape[:-2] + (6,)).copy()
    if reconstruct != 8:
        raise ValueError(f"reconstruct must be 18, 12 or 8, got {reconstruct!r}")
    row0, row1 = u[..., 0, :], u[..., 1, :]
    mag0 = np.abs(row0)
    k = np.argmax(mag0, axis=-1)                     # largest entry of row 0: modulus rebuilt
    rest = np.sort(np.stack([(k + 1) % 3, (k + 2) % 3], axis=-1), axis=-1)
    small = np.take_along_axis(row0, rest, axis=-1)
    phase0 = _tangent(np.take_along_axis(row0, k[..., None], axis=-1)[..., 0]) + CHOICE_STEP * k
    c = np.argmin(mag0, axis=-1)                     # basis axis least aligned with row 0
    e1, e2 = _basis(row0, c)
    alpha = np.sum(np.conj(e1) * row1, axis=-1)
    beta = np.sum(np.conj(e2) * row1, axis=-1)
    s = (np.abs(beta) > np.abs(alpha)).astype(int)   # 0: alpha is the larger coefficient
    larger = np.where(s == 0, alpha, beta)
    smaller = np.where(s == 0, beta, alpha)
    phase1 = _tangent(larger) + CHOICE_STEP * (s + 2 * c)
    out = np.empty(u.shape[:-2] + (8,), dtype=u.real.dtype)
    out[..., 0], out[..., 1] = small[..., 0].real, small[..., 0].imag
    out[..., 2], out[..., 3] = small[..., 1].real, small[..., 1].imag
    out[..., 4] = phase0
    out[..., 5], out[..., 6] = smaller.real, smaller.imag
    out[..., 7] = phase1
    return out


#: the offset per choice index on the 8-parameter form's two phase parameters (components 4
#: and 7): a stored tangent lies in [-1, 1], so index j shifts it into [4 j - 1, 4 j + 1]
CHOICE_STEP = 4.0


def _tangent(z: np.ndarray) -> np.ndarray:
    """tan(arg(z) / 4), in [-1, 1] (arg in (-pi, pi])."""
    return np.tan(np.angle(z) / 4)


def phase_from_tangent(t: np.ndarray) -> np.ndarray:
    """exp(i theta) from t = tan(theta / 4): the square of (1 - t^2 + 2 i t) / (1 + t^2), what
    the kernels compute (one division, no trigonometry)."""
    half_angle = (1 - t * t + 2j * t) / (1 + t * t)
    return half_angle * half_angle


def _choice(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A phase parameter as (choice index, tangent)."""
    j = np.rint(p / CHOICE_STEP).astype(int)
    return j, p - CHOICE_STEP * j


def _basis(row0: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    axis = np.eye(3)[c]
    e1 = _cross_conj(row0, axis)
    e1 /= np.linalg.norm(e1, axis=-1, keepdims=True)
    e2 = _cross_conj(row0, e1)
    return e1, e2


def unpack(packed: np.ndarray, reconstruct: int, t_boundary: int = 1) -> np.ndarray:
    """Inverse of :func:`pack`: full 3x3 links of shape ``(4, T, Z, Y, X, 3, 3)``."""
    if reconstruct == 18:
        return packed.reshape(packed.shape[:-1] + (3, 3)).copy()
    if reconstruct == 12:
        rows = packed.reshape(packed.shape[:-1] + (2, 3))
        row0, row1 = rows[..., 0, :], rows[..., 1, :]
    elif reconstruct == 8:
        p = packed
        k, t0 = _choice(p[..., 4])
        small = np.stack([p[..., 0] + 1j * p[..., 1], p[..., 2] + 1j * p[..., 3]], axis=-1)
        big = (np.sqrt(np.maximum(0.0, 1 - np.sum(np.abs(small) ** 2, axis=-1)))
               * phase_from_tangent(t0))
        row0 = np.empty(p.shape[:-1] + (3,), dtype=np.result_type(p.dtype, np.complex64))
        rest = np.sort(np.stack([(k + 1) % 3, (k + 2) % 3], axis=-1), axis=-1)
        np.put_along_axis(row0, k[..., None], big[..., None], axis=-1)
        np.put_along_axis(row0, rest, small, axis=-1)
        q, t1 = _choice(p[..., 7])
        s, c = q % 2, q // 2
        e1, e2 = _basis(row0, c)
        smaller = p[..., 5] + 1j * p[..., 6]
        larger = np.sqrt(np.maximum(0.0, 1 - np.abs(smaller) ** 2)) * phase_from_tangent(t1)
        a = np.where(s == 0, larger, smaller)[..., None]
        b = np.where(s == 0, smaller, larger)[..., None]
        row1 = a * e1 + b * e2
    else:
        raise ValueError(f"reconstruct must be 18, 12 or 8, got {reconstruct!r}")
    row2 = _cross_conj(row0, row1)
    signs = boundary_signs(packed.shape, t_boundary)
    row2 = row2 * signs[..., None]  # conj(det) with det = +-1
    dtype = np.result_type(packed.dtype, np.complex64)  # complex64 stays single precision
    return np.stack([row0, row1, row2], axis=-2).astype(dtype, copy=False)
