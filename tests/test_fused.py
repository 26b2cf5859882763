"""The data fused passes are tuned on (operations.fused_data.tuning_data): vectors that repeat a
tile with random signs, whose reference is computed on the tile, against the reference over
the whole vectors; and what a wrong kernel would change."""

from __future__ import annotations

import numpy as np
import pytest

from operations import fused_data
from operations.blas import BlasTemplate
from operations.reduce import ReduceTemplate

#: three whole tiles and a part: every pattern of signs of two vectors, and a cut-short repeat
N = 3 * fused_data.TUNING_TILE + 1001
WINDOWS = [(0, 4096), (N // 3, N // 3 + 4096), (N - 4096, N)]
OPS = [(template, name) for template in (ReduceTemplate, BlasTemplate) for name in template.ops]


def _dtypes(op):
    return [np.dtype(d) for d in (np.float32, np.complex128) if op.supports(np.dtype(d))]


def _whole(op, host, scalars):
    """The op's reference over the whole vectors, in double precision."""
    return op.reference({v: a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)
                         for v, a in host.items()}, scalars)


@pytest.mark.parametrize("template, name", OPS)
def test_tuning_data_matches_the_reference_over_the_whole_vectors(template, name):
    op = template.ops[name]
    sample = np.concatenate([np.arange(a, b) for a, b in WINDOWS])
    for dtype in _dtypes(op):
        scalars = fused_data.sample_scalars(op, dtype)
        host, vectors, outputs = fused_data.tuning_data(op, dtype, N, WINDOWS, scalars)
        assert all(a.shape == (N,) and a.dtype == dtype for a in host.values())
        want_vectors, want_outputs = _whole(op, host, scalars)
        assert set(vectors) == set(op.written)
        for v in op.written:
            np.testing.assert_array_equal(vectors[v], want_vectors[v][sample])
        assert len(outputs) == len(want_outputs)
        for got, want in zip(outputs, want_outputs):
            assert abs(got - want) <= 1e-12 * max(abs(want), 1.0), (dtype, got, want)


def test_tuning_vectors_do_not_repeat_at_a_launch_stride():
    """No shift a launch could get wrong (powers of two, times compute units) maps a vector
    onto itself; each vector has its own tile and signs."""
    op = BlasTemplate.ops["axpy_zpbx"]
    host, _, _ = fused_data.tuning_data(op, np.dtype(np.float32), N, WINDOWS, {"a": 0.25, "b": 0.5})
    x, p, z = host["x"], host["p"], host["z"]
    for shift in (1, 4, 1 << 12, 1 << 16, 132 << 9, fused_data.TUNING_TILE):
        assert np.mean(x[shift:] == x[:-shift]) < 0.6, shift
    assert not np.any(x == p) or np.mean(x == p) < 1e-3
    assert np.mean(p == z) < 1e-3


@pytest.mark.parametrize("name", ["sum", "dot", "sumsq"])
def test_a_chunk_dropped_or_counted_twice_fails_the_check(name):
    """A reduction that skipped one chunk of 4096 elements, or counted one twice, would not pass."""
    op = ReduceTemplate.ops[name]
    for dtype in _dtypes(op):
        host, _, outputs = fused_data.tuning_data(op, dtype, N, WINDOWS, {})
        start = N // 2 - 1000
        dropped = {v: np.concatenate([a[:start], a[start + 4096:]]) for v, a in host.items()}
        twice = {v: np.concatenate([a, a[start:start + 4096]]) for v, a in host.items()}
        assert fused_data.outputs_close(_whole(op, host, {})[1], outputs, dtype, op.combine)
        for wrong in (dropped, twice):
            assert not fused_data.outputs_close(_whole(op, wrong, {})[1], outputs, dtype, op.combine)


def test_min_and_max_are_tuned_on_values_that_do_not_repeat():
    """A repeated extreme would hide a skipped chunk: min and max get independent values."""
    for name in ("min", "max"):
        op = ReduceTemplate.ops[name]
        host, _, (want,) = fused_data.tuning_data(op, np.dtype(np.float32), N, WINDOWS, {})
        x = host["x"]
        assert want == (x.min() if name == "min" else x.max())
        assert np.count_nonzero(x == want) == 1
