"""How a lattice is cut into blocks, one per MPI rank, and the faces the blocks exchange.

Ranks are laid out on a process grid ``(px, py, pz, pt)``, x fastest; each holds the block of
``local = (X/px, Y/py, Z/pz, T/pt)`` sites whose origin is ``coords * local``. Every local extent
must be even: block origins are then even, so a site's parity in its block is its global
parity, and even-odd preconditioning needs no care at block edges.

A *face* of a partitioned direction mu is the slice of the block at ``x_mu = 0`` (sent backward)
or at ``x_mu = L_mu - 1`` (sent forward), in one parity: ``L_x L_y L_z L_t / (2 L_mu)`` sites,
indexed by the lexicographic index of their other three coordinates (in x, y, z, t order,
skipping mu) halved. The kernels compute the same index (``halo.mako``, ``dslash.mako``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .lattice import Lattice

DIRECTIONS = "xyzt"


@dataclass(frozen=True)
class Partition:
    """One rank's block of a lattice cut by a process grid."""

    dims: tuple[int, int, int, int]  #: global extents (X, Y, Z, T)
    grid: tuple[int, int, int, int]  #: ranks per direction
    rank: int

    def __post_init__(self) -> None:
        dims = tuple(int(d) for d in self.dims)
        grid = tuple(int(g) for g in self.grid)
        if len(dims) != 4 or len(grid) != 4:
            raise ValueError(f"dims and grid need four entries (x, y, z, t); got {self.dims}, {self.grid}")
        if any(g < 1 for g in grid):
            raise ValueError(f"grid entries must be at least 1, got {grid}")
        for mu, (d, g) in enumerate(zip(dims, grid)):
            if d % g:
                raise ValueError(f"the lattice's {DIRECTIONS[mu]} extent {d} does not divide into "
                                 f"{g} blocks; choose a grid whose entries divide {dims}")
            if (d // g) % 2 or d // g < 2:
                raise ValueError(f"blocks of {d // g} sites in {DIRECTIONS[mu]} ({d} over {g}): "
                                 "every block extent must be even (and at least 2) for even-odd "
                                 "checkerboarding; choose another grid")
        if not 0 <= self.rank < int(np.prod(grid)):
            raise ValueError(f"rank {self.rank} is not in a grid of {int(np.prod(grid))} ranks")
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "grid", grid)

    @property
    def size(self) -> int:
        return int(np.prod(self.grid))

    @property
    def coords(self) -> tuple[int, int, int, int]:
        """This rank's place in the grid, x fastest."""
        return self.coords_of(self.rank)

    def coords_of(self, rank: int) -> tuple[int, int, int, int]:
        out, r = [], rank
        for g in self.grid:
            out.append(r % g)
            r //= g
        return tuple(out)  # type: ignore[return-value]

    def rank_of(self, coords: tuple[int, ...]) -> int:
        rank = 0
        for c, g in zip(reversed(coords), reversed(self.grid)):
            rank = rank * g + c % g
        return rank

    @property
    def local(self) -> tuple[int, int, int, int]:
        return tuple(d // g for d, g in zip(self.dims, self.grid))  # type: ignore[return-value]

    @property
    def lattice(self) -> Lattice:
        """The local block as a lattice (its own checkerboard order)."""
        return Lattice(self.local)

    @property
    def origin(self) -> tuple[int, int, int, int]:
        return tuple(c * n for c, n in zip(self.coords, self.local))  # type: ignore[return-value]

    @property
    def partitioned(self) -> tuple[bool, bool, bool, bool]:
        """Directions cut into more than one block: their hops cross to other ranks."""
        return tuple(g > 1 for g in self.grid)  # type: ignore[return-value]

    def neighbour(self, mu: int, step: int) -> int:
        """The rank ``step`` (+1 or -1) blocks away in direction ``mu`` (periodic)."""
        c = list(self.coords)
        c[mu] += step
        return self.rank_of(tuple(c))

    def face_sites(self, mu: int) -> int:
        """Sites of one parity on one face of direction ``mu``."""
        return int(np.prod(self.local)) // (2 * self.local[mu])

    def at_time_edge(self, step: int) -> bool:
        """Whether a hop ``step`` in t from this block's edge crosses the global time boundary."""
        t = self.coords[3]
        return t == self.grid[3] - 1 if step == 1 else t == 0

    # Host arrays ------------------------------------------------------------------------------
    def block(self, global_array: np.ndarray, site_axis: int = 0) -> np.ndarray:
        """This rank's block of a host array whose axes ``site_axis ..+3`` are (T, Z, Y, X)."""
        x0, y0, z0, t0 = self.origin
        lx, ly, lz, lt = self.local
        index: list[Any] = [slice(None)] * global_array.ndim
        index[site_axis:site_axis + 4] = [slice(t0, t0 + lt), slice(z0, z0 + lz),
                                          slice(y0, y0 + ly), slice(x0, x0 + lx)]
        return np.ascontiguousarray(global_array[tuple(index)])

    def face_order(self, mu: int, parity: int, coordinate: int) -> np.ndarray:
        """Checkerboard indices, in the block's ``parity`` order, of the face sites at
        ``x_mu = coordinate``, in face order (for building ghost links on the host)."""
        lat = self.lattice
        x, y, z, t = np.meshgrid(*(np.arange(n) for n in self.local), indexing="ij")
        coords = [x, y, z, t]
        on_face = (coords[mu] == coordinate) & ((x + y + z + t) % 2 == parity)
        others = [c for nu, c in enumerate(coords) if nu != mu]
        extents = [n for nu, n in enumerate(self.local) if nu != mu]
        lex = others[0] + extents[0] * (others[1] + extents[1] * others[2])
        face_index = lex[on_face] // 2
        lexicographic = ((t * self.local[2] + z) * self.local[1] + y) * self.local[0] + x
        sites = lexicographic[on_face]
        order = np.empty(self.face_sites(mu), dtype=np.int64)
        position = np.empty(lat.volume, dtype=np.int64)
        position[lat.sites(parity)] = np.arange(lat.half_volume)
        order[face_index] = position[sites]
        return order
