"""Lattice geometry and the device (checkerboarded, structure-of-arrays) field layout."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

#: The dslash kernels (dslash.mako) compute every array index in 32-bit ``unsigned int``
#: arithmetic. The largest array they index is the reconstruct-18 gauge field: 4 directions x
#: 2 parities x 9 complex numbers per site of a parity, read as ``gauge[component * VH + site]``
#: (VH = V/2 sites per parity), whose last index, 72 VH - 1, must stay below 2^32. Spinors
#: (``in[k * VH + site]``, 12 VH elements) and lexicographic site numbers (below 2 VH) fit then
#: too. Lattices are refused beyond it (before anything is allocated), whatever the reconstruct,
#: so that every kernel a Lattice is given to indexes it correctly.
DSLASH_INDEX_BITS = 32
DSLASH_GAUGE_NUMBERS_PER_SITE = 4 * 2 * 9
#: The most sites per parity (V/2) the dslash kernels index: 2^32 // 72 = 59652323.
MAX_HALF_VOLUME = 2**DSLASH_INDEX_BITS // DSLASH_GAUGE_NUMBERS_PER_SITE


def _count(n: int) -> str:
    """``n`` as a power of two (2^k) where it is one, else in digits."""
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def check_volume(dims: tuple[int, int, int, int]) -> None:
    """Refuse a lattice whose sites the dslash kernels' 32-bit indices cannot reach."""
    volume = dims[0] * dims[1] * dims[2] * dims[3]  # Python ints: exact at any size
    if volume // 2 <= MAX_HALF_VOLUME:
        return
    shape = f"{dims[0]}^4" if len(set(dims)) == 1 else "x".join(map(str, dims))
    side = 2
    while (side + 2) ** 4 // 2 <= MAX_HALF_VOLUME:
        side += 2
    raise ValueError(
        f"a {shape} lattice has {_count(volume)} sites ({_count(volume // 2)} per parity); the "
        f"dslash kernels index the gauge field ({DSLASH_GAUGE_NUMBERS_PER_SITE} numbers per site "
        f"of a parity) with {DSLASH_INDEX_BITS}-bit unsigned integers, so at most "
        f"2^{DSLASH_INDEX_BITS} // {DSLASH_GAUGE_NUMBERS_PER_SITE} = {MAX_HALF_VOLUME} sites per "
        f"parity ({2 * MAX_HALF_VOLUME} in all; {side}^4 is the largest even hypercube); use a "
        "smaller lattice")


@functools.lru_cache(maxsize=8)
def _parity_orders(dims: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The lexicographic site indices of each parity (read-only; shared by equal lattices, since
    an operator, its tuning and its other precisions each make a Lattice of the same extents)."""
    x, y, z, t = np.meshgrid(*(np.arange(d) for d in dims), indexing="ij")
    parity = ((x + y + z + t) % 2).transpose(3, 2, 1, 0).reshape(-1)  # lexicographic [t,z,y,x]
    orders = tuple(np.nonzero(parity == p)[0] for p in (0, 1))
    for order in orders:
        order.flags.writeable = False
    return orders


@dataclass(frozen=True)
class Lattice:
    """Extents ``dims = (X, Y, Z, T)``; host arrays index sites as ``[t, z, y, x]``."""

    dims: tuple[int, int, int, int]
    _orders: tuple[np.ndarray, np.ndarray] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dims = tuple(int(d) for d in self.dims)
        if len(dims) != 4 or any(d < 2 for d in dims):
            raise ValueError(f"dims must be four extents (X, Y, Z, T) of at least 2, got {self.dims}")
        if any(d % 2 for d in dims):
            raise ValueError(f"every extent must be even for even-odd checkerboarding, got {dims}")
        check_volume(dims)  # before _parity_orders allocates 8 bytes per site, several times
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "_orders", _parity_orders(dims))

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """Site axes of host arrays: (T, Z, Y, X)."""
        x, y, z, t = self.dims
        return (t, z, y, x)

    @property
    def volume(self) -> int:
        return math.prod(self.dims)  # (numpy's prod costs microseconds: a launch asks for it)

    @property
    def half_volume(self) -> int:
        return self.volume // 2

    def sites(self, parity: int) -> np.ndarray:
        """Lexicographic indices of the sites of one parity, in checkerboard order."""
        return self._orders[parity]

    def spinor_to_device(self, psi: np.ndarray, parity: int, dtype: np.dtype) -> np.ndarray:
        """(T, Z, Y, X, 4, 3) -> the (12, V/2) component-major array of one parity."""
        flat = psi.reshape(self.volume, 12)[self.sites(parity)]
        return np.ascontiguousarray(flat.T, dtype=dtype)

    def spinor_from_device(self, halves: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        out = np.empty((self.volume, 12), dtype=np.complex128)
        for parity, half in enumerate(halves):
            out[self.sites(parity)] = half.reshape(12, -1).T
        return out.reshape(self.shape + (4, 3))

    def links_to_device(self, packed: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """(4, T, Z, Y, X, n) packed links -> (4, 2, n, V/2): direction, parity, component, site."""
        out = self.links_by_parity(packed)  # (4, 2, V/2, n)
        return np.ascontiguousarray(np.swapaxes(out, -1, -2), dtype=dtype)

    def links_by_parity(self, links: np.ndarray) -> np.ndarray:
        """(4, T, Z, Y, X, ...) links (packed or 3 x 3) -> (4, 2, V/2, ...): direction, parity,
        site in checkerboard order, each site's entries together."""
        inner = links.shape[5:]
        flat = links.reshape((4, self.volume) + inner)
        out = np.empty((4, 2, self.half_volume) + inner, links.dtype)
        for mu in range(4):
            for parity in (0, 1):  # "clip": the indices are in range, and take copies unbuffered
                np.take(flat[mu], self.sites(parity), axis=0, out=out[mu, parity], mode="clip")
        return out
