"""Multi-vector passes (operations/multiblas.py) against numpy, and their launch parameters."""

from __future__ import annotations

import numpy as np
import pytest

from operations.multiblas import (MAX_VECTORS, POWER_WIDTHS, SCRATCH_BYTES, MultiBlasTemplate,
                                  blocks, parameters_from)


def _vectors(rng, count, n, dtype):
    return [(rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
            for _ in range(count)]


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
@pytest.mark.parametrize("k", [1, 3, MAX_VECTORS])
def test_k_dot_products_and_updates_in_one_pass_each(context, command_queue, dtype, k):
    if dtype == np.complex128 and not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    rng = np.random.default_rng(k)
    n = 1000 + 3  # not a multiple of any vector width
    y, r, *xs = _vectors(rng, 2 + k, n, dtype)
    vec = 16 // np.dtype(dtype).itemsize  # 16-byte loads
    tuned = {"wgs": 256, "ipt": 4, "groups_per_cu": 2, "vec": vec, "shuffle": False}

    def make(op, sums):
        return MultiBlasTemplate(context, dtype, f"{op}{k}", parameters_from(tuned, sums)
                                 ).instantiate(command_queue, n)

    dev = [context.to_device(command_queue, a) for a in (y, r, *xs)]
    dots = make("cdots", k)(dev[0], *dev[2:])
    dots = dots if isinstance(dots, tuple) else (dots,)
    tol = 1e-4 if dtype == np.complex64 else 1e-12
    y64, r64, xs64 = y.astype(np.complex128), r.astype(np.complex128), [x.astype(np.complex128) for x in xs]
    want = [np.vdot(x, y64) for x in xs64]
    assert np.allclose(dots, want, rtol=tol, atol=tol * n), (dots, want)
    # y -= sum b_i x_i, and <y, r>, |y|^2 of the updated y, in one pass
    b = {f"b{i}": complex(rng.standard_normal(), rng.standard_normal()) for i in range(k)}
    y_r, yy = make("csubs_dot_norm", 2)(*dev, **b)
    want_y = y64 - sum(b[f"b{i}"] * xs64[i] for i in range(k))
    assert np.allclose(dev[0].get(command_queue), want_y, rtol=tol, atol=tol)
    assert np.isclose(y_r, np.vdot(want_y, r64), rtol=tol, atol=tol * n)
    assert np.isclose(yy, np.vdot(want_y, want_y).real, rtol=tol)
    # y += sum a_i x_i
    a = {f"a{i}": complex(rng.standard_normal(), rng.standard_normal()) for i in range(k)}
    assert make("caxpy_sums", 0)(dev[0], *dev[2:], **a) is None  # enqueued, returns at once
    want_y = want_y + sum(a[f"a{i}"] * xs64[i] for i in range(k))
    assert np.allclose(dev[0].get(command_queue), want_y, rtol=tol, atol=tol)


def test_launch_parameters_keep_the_reduction_scratch_small():
    for k in range(1, MAX_VECTORS + 1):
        p = parameters_from({"wgs": 1024, "ipt": 8, "groups_per_cu": 4, "vec": 2,
                             "shuffle": True}, k)
        assert p["ipt"] == 1 and p["vec"] == 2 and p["groups_per_cu"] == 4
        assert p["wgs"] * 2 * k * 8 <= SCRATCH_BYTES or p["wgs"] == 32
        assert p["shuffle"] == (p["wgs"] >= 64)
    assert parameters_from(None, 2)["wgs"] == 64  # the fused passes' test= values


def test_blocks_cover_the_vectors_in_order_with_the_widths_the_device_builds():
    """Every k from 0 to 3 MAX_VECTORS + 5: consecutive blocks covering 0 ... k - 1 exactly.
    Every width (GPUs): as few blocks as MAX_VECTORS allows. Powers of two (CPU devices): the
    binary digits of k, largest first, so a basis of 16 needs 5 widths of each pass, not 16."""
    for k in range(3 * MAX_VECTORS + 6):
        for every in (True, False):
            got = blocks(k, every)
            assert [i for b in got for i in b] == list(range(k)), (k, every, got)
            assert all(b.step == 1 and len(b) >= 1 for b in got)
            if every:
                assert len(got) == -(-k // MAX_VECTORS) and all(len(b) <= MAX_VECTORS for b in got)
            else:
                widths = [len(b) for b in got]
                assert all(w in POWER_WIDTHS for w in widths), (k, widths)
                assert widths == sorted(widths, reverse=True)
                assert len(widths) == (k // MAX_VECTORS) + bin(k % MAX_VECTORS).count("1")
    assert [len(b) for b in blocks(13, False)] == [8, 4, 1]
    assert [len(b) for b in blocks(13, True)] == [13]
    used = {len(b) for k in range(1, MAX_VECTORS + 1) for b in blocks(k, False)}
    assert used == set(POWER_WIDTHS)
    with pytest.raises(ValueError, match="k must be at least 0"):
        blocks(-1, True)
