"""A dslash's operands for the benchmarks: random spinors and outputs of one parity on the
device, in the layout of a template's precision (half precision as values with their norms)."""

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


def output(context: Any, halved: bool, dtype: Any, sites: int) -> Any:
    """An output spinor of ``sites`` sites: 16-bit (``halved``) or of ``dtype``."""
    return (half.HalfSpinor.allocate(context, sites) if halved
            else context.allocate((12, sites), dtype))


def empty(context: Any, template: Any, lattice: Lattice) -> Any:
    """An output spinor of one parity as ``template`` writes it."""
    return output(context, template.half, template.dtype, lattice.half_volume)


def fields(context: Any, queue: Any, template: Any, lattice: Lattice, rng: Any,
           n: int) -> list[Any]:
    """``n`` random spinors of one parity on the device, as the template takes them."""
    made = []
    for _ in range(n):
        h = rng.standard_normal((12, lattice.half_volume)) + 1j * rng.standard_normal(
            (12, lattice.half_volume))
        made.append(half.to_device(context, queue, h) if template.half
                    else context.to_device(queue, h.astype(template.dtype)))
    return made


def on_device(context: Any, queue: Any, lattice: Lattice, psi: np.ndarray,
              precision: str) -> tuple[Any, Any]:
    """``psi``'s odd sites on the device as the dslash of ``precision`` reads them, and an
    output for the even sites."""
    halved, dtype = precision == "half", ARITHMETIC[precision][1]
    flat = lattice.spinor_to_device(psi, 1, np.complex128 if halved else dtype)
    src = half.to_device(context, queue, flat) if halved else context.to_device(queue, flat)
    return src, output(context, halved, dtype, lattice.half_volume)
