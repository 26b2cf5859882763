"""The ``busy`` test kernel (``kernels/busy.mako``: y = x iterated ``reps`` times, a cost that
grows with a runtime argument) and numpy's reference for it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

BUSY = Path(__file__).with_name("kernels") / "busy.mako"


def busy_reference(x: np.ndarray, reps: int) -> np.ndarray:
    """What the kernel computes, in float32 as it does."""
    v = x.astype(np.float32)
    for _ in range(reps):
        v = v * np.float32(0.999) + np.float32(0.001)
    return v
