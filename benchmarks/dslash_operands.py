"""A dslash's operands for the benchmarks: a random spinor, and it and an output on the device
in the layout of a precision (half precision as values with their norms)."""

from __future__ import annotations

from typing import Any

import numpy as np

from operations.lqcd import Lattice, half
from operations.lqcd.dslash import ARITHMETIC


def random_spinor(lattice: Lattice, seed: int = 3) -> np.ndarray:
    """A complex Gaussian spinor field over ``lattice`` (site, spin, colour)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(lattice.shape + (4, 3))
            + 1j * rng.standard_normal(lattice.shape + (4, 3)))


def on_device(context: Any, queue: Any, lattice: Lattice, psi: np.ndarray,
              precision: str) -> tuple[Any, Any]:
    """``psi``'s odd sites on the device as the dslash of ``precision`` reads them, and an
    output for the even sites."""
    if precision == "half":
        src = half.to_device(context, queue, lattice.spinor_to_device(psi, 1, np.complex128))
        return src, half.HalfSpinor.allocate(context, lattice.half_volume)
    dtype = ARITHMETIC[precision][1]
    src = context.to_device(queue, lattice.spinor_to_device(psi, 1, dtype))
    return src, context.allocate((12, lattice.half_volume), dtype)
