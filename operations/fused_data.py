"""The data fused passes are tuned on, and the checks of their candidates: vectors that repeat
a random tile with a random sign each repeat (quick to make at a GPU's tuning sizes), the numpy
reference computed on the tile, and the comparisons within each precision's tolerance
(:func:`tuning_data`, :func:`close`, :func:`outputs_close`). :mod:`.fused` tunes with them;
``op`` is always its :class:`.fused.FusedOp` (not imported here: :mod:`.fused` imports this)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def random_vector(rng: np.random.Generator, n: int, dtype: np.dtype) -> np.ndarray:
    """Uniform in [-1, 1) (and in the imaginary part for complex): quick to make at tuning sizes."""
    dtype = np.dtype(dtype)
    real = np.float32 if dtype in (np.float32, np.complex64) else np.float64
    values = rng.random(n * (2 if dtype.kind == "c" else 1), dtype=real)
    values *= 2  # in place: no temporaries of the vector's size
    values -= 1
    return values.view(dtype)


#: Tuning vectors repeat a random tile of this many elements (:func:`tuning_data`): a prime,
#: so that no launch's stride, chunk or tail (products of powers of two and a device's compute
#: units) is a multiple of it, and more than 2^16.
TUNING_TILE = 65537


def tuning_data(op: Any, dtype: np.dtype, n: int, windows: Sequence[tuple[int, int]],
                scalars: dict[str, Any], seed: int = 12345) -> tuple[dict, dict, tuple]:
    """The vectors of length ``n`` ``op`` is tuned on, the updated vectors its numpy reference
    gives at ``windows`` (concatenated) and its outputs over the whole vectors.

    Making GPU-sized random vectors and running the reference over all of them in double
    precision took most of a key's time, so each vector (``op.combine == "sum"``) repeats a
    random tile of :data:`TUNING_TILE` elements, each repeat multiplied by a random sign of its
    own (drawn for each vector: negation is exact). ``op.reference`` is elementwise in the
    vectors and sums elementwise terms (what ``fused.mako`` computes), so it runs on the tile
    once per pattern of signs (at most 2^vectors) and the outputs are those of the repeats
    added up; the windows read the tile's results. A wrong kernel still fails: an element read
    from the wrong place holds another value unless the error is a multiple of the prime tile
    (and the two repeats' signs agree), which no launch's indexing produces; and with the
    signs the sums and dot products add up like a random walk, growing with the square root
    of ``n`` as those of independent random values do, so that a chunk dropped or counted
    twice moves them as much as before (norms grow with ``n`` either way).

    ``min`` and ``max`` are not tiled (a repeated extreme would hide a skipped chunk): they
    get independent random values, and their reference runs in the data's own precision
    (exact for a minimum or maximum; no double precision copy of the vector).
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    sample = np.concatenate([np.arange(a, b) for a, b in windows])
    if op.combine != "sum":
        host = {v: random_vector(rng, n, dtype) for v in op.vectors}
        updated, outputs = op.reference(dict(host), scalars)
        return host, {v: a[sample] for v, a in updated.items()}, outputs
    wide = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    tile = min(TUNING_TILE, n)
    repeats = -(-n // tile)  # the last one is cut short unless the tile divides n
    last = n - (repeats - 1) * tile
    tiles = {v: random_vector(rng, tile, dtype) for v in op.vectors}
    signs = {v: rng.integers(0, 2, repeats).astype(bool) for v in op.vectors}  # True: negated
    host = {v: _repeat(tiles[v], signs[v], n) for v in op.vectors}
    # each repeat's pattern of signs (bit i: vector i negated), and the reference per pattern
    patterns = sum(signs[v].astype(np.int64) << i for i, v in enumerate(op.vectors))
    results: dict[tuple[int, int], tuple[dict, tuple]] = {}

    def reference(pattern: int, length: int) -> tuple[dict, tuple]:
        if (pattern, length) not in results:
            results[pattern, length] = op.reference(
                {v: (-tiles[v][:length] if pattern >> i & 1 else tiles[v][:length]).astype(wide)
                 for i, v in enumerate(op.vectors)}, scalars)
        return results[pattern, length]

    counts = np.bincount(patterns[:repeats - 1], minlength=1 << len(op.vectors))
    weighted = [(int(c), reference(p, tile)[1]) for p, c in enumerate(counts) if c]
    weighted.append((1, reference(int(patterns[-1]), last)[1]))
    outputs = tuple(sum(c * out[k] for c, out in weighted) for k in range(len(weighted[0][1])))
    at, within = sample // tile, sample % tile
    expected = {}
    for v in op.written:
        got = np.empty(len(sample), wide)
        for pattern in np.unique(patterns[at]):
            chosen = patterns[at] == pattern
            got[chosen] = reference(int(pattern), tile)[0][v][within[chosen]]
        expected[v] = got
    return host, expected, outputs


def _repeat(tile: np.ndarray, negated: np.ndarray, n: int) -> np.ndarray:
    """``tile`` repeated over ``n`` elements, the repeats marked in ``negated`` negated."""
    out = np.empty(n, tile.dtype)
    full = n // len(tile)
    body = out[:full * len(tile)].reshape(full, len(tile))
    body[~negated[:full]] = tile
    body[negated[:full]] = -tile
    if full < len(negated):
        rest = n - full * len(tile)
        out[full * len(tile):] = -tile[:rest] if negated[-1] else tile[:rest]
    return out


def sample_scalars(op: Any, dtype: np.dtype) -> dict[str, Any]:
    """Small scalars (so repeated application while timing stays bounded)."""
    values = {}
    for i, (name, kind) in enumerate(op.scalars):
        re = 0.25 + 0.125 * i
        values[name] = complex(re, -0.5 * re) if (kind == "field" and np.dtype(dtype).kind == "c") else re
    return values


def tolerance(dtype: np.dtype) -> float:
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12


def close(got: np.ndarray, expected: np.ndarray, dtype: np.dtype) -> bool:
    tol = tolerance(dtype)
    scale = max(float(np.max(np.abs(expected))), 1.0) if expected.size else 1.0
    return bool(np.allclose(got, expected, rtol=tol, atol=tol * scale, equal_nan=True))


def outputs_close(got: tuple, expected: tuple, dtype: np.dtype, combine: str) -> bool:
    if len(got) != len(expected):
        return False
    for g, e in zip(got, expected):
        if combine != "sum":
            if not (g == e or (math.isnan(g) and math.isnan(e))):
                return False
        elif not np.isclose(g, e, rtol=tolerance(dtype) * 10, atol=0, equal_nan=True):
            return False
    return True


