"""A numpy Wilson operator on host arrays: the reference for tuning checks and true residuals.

Written with ``np.roll`` over the full lattice; the tests check it against a dense matrix built
independently, site by site, from the formula.
"""

from __future__ import annotations

import numpy as np

from .gamma import GAMMA

_SITE_AXIS = {0: 3, 1: 2, 2: 1, 3: 0}  # direction -> axis of (T, Z, Y, X)


def _spin(matrix: np.ndarray, psi: np.ndarray) -> np.ndarray:
    return np.einsum("ab,...bc->...ac", matrix, psi)


def hop(u: np.ndarray, psi: np.ndarray, t_boundary: int = -1, dagger: bool = False) -> np.ndarray:
    """D psi = sum_mu (1 - g_mu) U_mu(x) psi(x+mu) + (1 + g_mu) U_mu(x-mu)^dag psi(x-mu); D^dag if asked."""
    eye = np.eye(4)
    sign = 1 if dagger else -1
    out = np.zeros(np.broadcast_shapes(psi.shape), dtype=np.result_type(u, psi))
    for mu in range(4):
        axis = _SITE_AXIS[mu]
        forward = np.roll(psi, -1, axis=axis)
        backward = np.roll(psi, 1, axis=axis)
        if mu == 3:
            forward[-1] *= t_boundary
            backward[0] *= t_boundary
        out += np.einsum("...ij,...sj->...si", u[mu], _spin(eye + sign * GAMMA[mu], forward))
        u_back = np.roll(u[mu], 1, axis=axis)
        out += np.einsum("...ji,...sj->...si", u_back.conj(), _spin(eye - sign * GAMMA[mu], backward))
    return out


def wilson(u: np.ndarray, psi: np.ndarray, kappa: float, t_boundary: int = -1,
           dagger: bool = False) -> np.ndarray:
    """M psi = psi - kappa D psi (or M^dag psi)."""
    return psi - kappa * hop(u, psi, t_boundary, dagger)


def hop_at(u: np.ndarray, psi: np.ndarray, coords: np.ndarray, t_boundary: int = -1,
           dagger: bool = False) -> np.ndarray:
    """D psi at the sites ``coords`` (rows of t, z, y, x) only: (n, 4, 3)."""
    extents = np.array(psi.shape[:4])
    sign = 1 if dagger else -1
    eye = np.eye(4)
    here = tuple(coords.T)
    out = np.zeros((len(coords), 4, 3), dtype=np.result_type(u, psi))
    for mu in range(4):
        step = np.zeros(4, dtype=int)
        step[3 - mu] = 1  # direction mu moves coordinate axis 3 - mu of (t, z, y, x)
        forward = tuple(((coords + step) % extents).T)
        backward = tuple(((coords - step) % extents).T)
        f_sign = np.where((mu == 3) & (coords[:, 0] == extents[0] - 1), t_boundary, 1)
        b_sign = np.where((mu == 3) & (coords[:, 0] == 0), t_boundary, 1)
        out += f_sign[:, None, None] * np.einsum(
            "nij,nsj->nsi", u[mu][here], _spin(eye + sign * GAMMA[mu], psi[forward]))
        out += b_sign[:, None, None] * np.einsum(
            "nji,nsj->nsi", u[mu][backward].conj(), _spin(eye - sign * GAMMA[mu], psi[backward]))
    return out
