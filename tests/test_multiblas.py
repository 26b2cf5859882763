"""Multi-vector passes (operations/multiblas.py) against numpy, and their launch parameters."""

from __future__ import annotations

import numpy as np
import pytest

from operations.multiblas import MAX_VECTORS, SCRATCH_BYTES, MultiBlasTemplate, parameters_from


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
    y, w, *rest = _vectors(rng, 2 + 2 * k, n, dtype)
    xs, vs = rest[:k], rest[k:]
    vec = 16 // np.dtype(dtype).itemsize  # 16-byte loads
    params = parameters_from({"wgs": 256, "ipt": 4, "groups_per_cu": 2, "vec": vec,
                              "shuffle": False}, k)
    dev = [context.to_device(command_queue, a) for a in (y, w, *xs, *vs)]
    dots = MultiBlasTemplate(context, dtype, f"cdots{k}", params).instantiate(command_queue, n)(
        dev[0], *dev[2:2 + k])
    dots = dots if isinstance(dots, tuple) else (dots,)
    tol = 1e-4 if dtype == np.complex64 else 1e-12
    want = [np.vdot(x.astype(np.complex128), y.astype(np.complex128)) for x in xs]
    assert np.allclose(dots, want, rtol=tol, atol=tol * n), (dots, want)
    b = {f"b{i}": complex(rng.standard_normal(), rng.standard_normal()) for i in range(k)}
    update = MultiBlasTemplate(context, dtype, f"caxpys{k}", params).instantiate(command_queue, n)
    assert update(*dev, **b) is None  # enqueued, returns at once
    want_y = y.astype(np.complex128) - sum(b[f"b{i}"] * xs[i] for i in range(k))
    want_w = w.astype(np.complex128) - sum(b[f"b{i}"] * vs[i] for i in range(k))
    assert np.allclose(dev[0].get(command_queue), want_y, rtol=tol, atol=tol)
    assert np.allclose(dev[1].get(command_queue), want_w, rtol=tol, atol=tol)


def test_launch_parameters_keep_the_reduction_scratch_small():
    for k in range(1, MAX_VECTORS + 1):
        p = parameters_from({"wgs": 1024, "ipt": 8, "groups_per_cu": 4, "vec": 2,
                             "shuffle": True}, k)
        assert p["ipt"] == 1 and p["vec"] == 2 and p["groups_per_cu"] == 4
        assert p["wgs"] * 2 * k * 8 <= SCRATCH_BYTES or p["wgs"] == 32
        assert p["shuffle"] == (p["wgs"] >= 64)
    assert parameters_from(None, 2)["wgs"] == 64  # the fused passes' test= values
