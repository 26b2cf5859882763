"""How the Wilson dslash's links lie on the device: how many of a link's stored parameters each
load reads (``link_load`` bytes, a tuned parameter), the blocked layout that follows from it,
and the host-side making of that layout (16-bit fixed point in half precision)."""

from __future__ import annotations

import numpy as np

from autotune import accel

from . import gauge as gauge_fields
from . import half as half_storage
from .lattice import Lattice

#: precision -> (real dtype, complex dtype) (half precision links: :mod:`.half`'s int16)
PRECISIONS = {"single": (np.float32, np.complex64), "double": (np.float64, np.complex128)}


def link_loads(precision: str, reconstruct: int) -> list[int]:
    """The bytes a dslash may read a link with in one load (the tuned ``link_load``): 16 or
    8, but only 16 for double precision 18 and 12 (one complex number each). 16 is declared
    first: it is ``test=``'s and the usual best (all but one of the H200, H100 and CPU rows of
    ``tune.db.example``), and among candidates timed as ties the earliest declared wins (on an
    H200, 8-byte loads tied within a process came out 0.8-1.7% slower in three others)."""
    return [16] if precision == "double" and reconstruct != 8 else [16, 8]


def link_groups(precision: str, reconstruct: int, load: int = 16) -> tuple[int, ...]:
    """How many of a link's stored parameters each of the dslash's loads reads, in order,
    with loads of ``load`` bytes (8 or 16: :func:`link_loads`).

    The dslash layout keeps, per direction and parity, one block of V/2 sites per group, a
    site's group contiguous: groups of 16 bytes (QUDA's float4 / short4 blocking) are read with
    one vector load, groups of 8 with one 8-byte load. Width 1 everywhere is the plain
    component-major layout (double precision complex entries: already 16 bytes).
    """
    if load not in link_loads(precision, reconstruct):
        raise ValueError(f"{precision} precision links with reconstruct {reconstruct} are read "
                         f"{' or '.join(map(str, link_loads(precision, reconstruct)))} bytes "
                         f"at a time, not {load!r}")
    wide = load == 16
    if precision == "half":  # 2 bytes a parameter
        return ({18: (4, 4, 1), 12: (4, 2), 8: (8,)} if wide else
                {18: (2, 2, 2, 2, 1), 12: (2, 2, 2), 8: (4, 4)})[reconstruct]
    if reconstruct == 8:  # real parameters
        if precision == "single":
            return (4, 4) if wide else (2, 2, 2, 2)
        return (2, 2, 2, 2) if wide else (1,) * 8
    n = {18: 9, 12: 6}[reconstruct]  # complex parameters
    if precision == "single" and wide:
        return (2,) * (n // 2) + (1,) * (n % 2)
    return (1,) * n


def group_links(links: np.ndarray, widths: tuple[int, ...]) -> np.ndarray:
    """(4, 2, n, V/2, ...) links in :func:`link_groups`'s layout: (4, 2, n * V/2, ...)."""
    if sum(widths) != links.shape[2]:
        raise ValueError(f"groups {widths} do not cover {links.shape[2]} link parameters")
    blocks, first = [], 0
    for w in widths:
        part = np.swapaxes(links[:, :, first:first + w], 2, 3)  # (4, 2, V/2, w, ...)
        blocks.append(part.reshape((4, 2, -1) + links.shape[4:]))
        first += w
    return np.ascontiguousarray(np.concatenate(blocks, axis=2))


def gauge_to_device(context: accel.Context, queue: accel.CommandQueue, lattice: Lattice,
                    u: np.ndarray, precision: str, reconstruct: int,
                    link_load: int = 16) -> accel.DeviceArray:
    """Links compressed to ``reconstruct`` parameters, in the dslash layout for loads of
    ``link_load`` bytes (:func:`link_groups`), on the device (half precision: 16-bit fixed
    point, :func:`.half.links_to_half`)."""
    packed = lattice.links_by_parity(gauge_fields.pack(u, reconstruct))  # (4, 2, V/2, n)
    return context.to_device(queue, device_links(packed, precision, reconstruct, link_load))


def device_links(packed: np.ndarray, precision: str, reconstruct: int,
                 link_load: int = 16) -> np.ndarray:
    """Packed links in checkerboard order, site-major (4, 2, V/2, n) (:func:`.gauge.pack`'s
    parameters: float64 for 8, complex128 otherwise), as the dslash reads them: in its dtype
    and :func:`link_groups`'s layout, what :func:`group_links` makes of
    :meth:`.Lattice.links_to_device`'s component-major order (half precision: of
    :func:`.half.links_to_half`'s), made from the site-major order without transposing it
    (:func:`link_values`, then :func:`layout_links`)."""
    return layout_links(link_values(packed, precision, reconstruct), precision, reconstruct,
                        link_load)


def link_values(packed: np.ndarray, precision: str, reconstruct: int) -> np.ndarray:
    """The numbers :func:`layout_links` lays out: in half precision the links' 16-bit fixed
    point (:func:`.half.links_to_half`, (4, 2, V/2, n[, 2])), else the packed links themselves
    (cast as they are laid out). The same for every ``link_load``: made once for all of them."""
    if precision == "half":
        return half_storage.links_to_half(packed, reconstruct, axis=-1)
    return packed


def layout_links(values: np.ndarray, precision: str, reconstruct: int,
                 link_load: int = 16) -> np.ndarray:
    """:func:`link_values`' numbers in the dslash's dtype and :func:`link_groups`' layout for
    loads of ``link_load`` bytes."""
    dtype = np.dtype(np.int16 if precision == "half"
                     else PRECISIONS[precision][0 if reconstruct == 8 else 1])
    sites = values.shape[2]
    widths = link_groups(precision, reconstruct, link_load)
    if sum(widths) != values.shape[3]:
        raise ValueError(f"groups {widths} do not cover {values.shape[3]} link parameters")
    out = np.empty((4, 2, sites * values.shape[3]) + values.shape[4:], dtype)
    first = 0
    for w in widths:  # a group's block: its parameters of every site, a site's together
        block = out[:, :, first * sites:(first + w) * sites].reshape(
            (4, 2, sites, w) + values.shape[4:])
        for start in range(0, sites, 8192):  # a few sites at a time: strided reads that cache
            block[:, :, start:start + 8192] = values[:, :, start:start + 8192, first:first + w]
        first += w
    return out
