"""Shapes and launch sizes as the device layer takes them: an int or a sequence of ints,
checked and made a tuple."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .errors import LaunchError

Shape = tuple[int, ...]


def as_shape(shape: int | Sequence[int]) -> Shape:
    """``shape`` (an int or a sequence of ints) as a tuple of non-negative ints: TypeError or
    ValueError naming the problem otherwise."""
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, not {shape!r}") from None
    if any(s < 0 for s in out):
        raise ValueError(f"shape {out} has a negative extent")
    return out


def as_sizes(sizes: int | Sequence[int], what: str) -> tuple[int, ...]:
    """A launch size (``what``: its name in the message) as 1 to 3 positive ints, else
    :class:`LaunchError`."""
    if isinstance(sizes, (int, np.integer)):
        sizes = (int(sizes),)
    sizes = tuple(int(s) for s in sizes)
    if not 1 <= len(sizes) <= 3 or any(s <= 0 for s in sizes):
        raise LaunchError(f"{what} must be 1 to 3 positive integers, got {sizes}")
    return sizes

