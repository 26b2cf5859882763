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
