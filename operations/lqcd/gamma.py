"""DeGrand-Rossi gamma matrices, the basis of every host-facing spinor."""

from __future__ import annotations

import numpy as np

I = 1j
GAMMA = np.array([
    [[0, 0, 0, I], [0, 0, I, 0], [0, -I, 0, 0], [-I, 0, 0, 0]],   # x
    [[0, 0, 0, -1], [0, 0, 1, 0], [0, 1, 0, 0], [-1, 0, 0, 0]],   # y
    [[0, 0, I, 0], [0, 0, 0, -I], [-I, 0, 0, 0], [0, I, 0, 0]],   # z
    [[0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]],     # t
], dtype=np.complex128)
GAMMA5 = GAMMA[0] @ GAMMA[1] @ GAMMA[2] @ GAMMA[3]


def upper_right_blocks() -> list[np.ndarray]:
    """The 2x2 block A of each gamma_mu = [[0, A], [A^dagger, 0]] (chiral basis).

    The dslash kernel projects (1 -+ gamma_mu) psi onto the half spinor psi_up -+ A psi_down
    and rebuilds the lower half as -+ A^dagger times it.
    """
    blocks = []
    for g in GAMMA:
        a = g[:2, 2:]
        assert np.allclose(g[:2, :2], 0) and np.allclose(g[2:, 2:], 0)
        assert np.allclose(g[2:, :2], a.conj().T)
        blocks.append(a)
    return blocks
