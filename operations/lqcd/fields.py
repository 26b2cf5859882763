"""Spinor fields on the device: :class:`SpinorField`, both parities of a spinor in one array."""

from __future__ import annotations

from dataclasses import dataclass

from autotune import accel


@dataclass
class SpinorField:
    """A spinor on the device: one (2, 12, V/2) array ``flat``, even parity first.

    ``even`` and ``odd`` are views of its halves in the dslash layout; vector operations
    (BLAS-1, reductions, solvers) work on ``flat``.
    """

    flat: accel.DeviceArray

    def __post_init__(self) -> None:
        half = self.flat.size // 2
        shape = (12, half // 12)
        self.even = self.flat.view(0, half, shape)
        self.odd = self.flat.view(half, 2 * half, shape)

    def parity(self, p: int) -> accel.DeviceArray:
        return self.even if p == 0 else self.odd
