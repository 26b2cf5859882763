"""The tuned GEMM against numpy: sizes that are and are not multiples of the tiles, both
precisions, alpha and beta, many configurations of the space; its space and its tuning."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autotune import accel, tune
from autotune.accel import nvrtc
from autotune.tune.store import ResultStore
from operations import gemm as G
from operations.gemm import GemmTemplate
from toy_templates import H200

SIZES = [(1, 1, 1), (64, 64, 64), (37, 50, 19), (129, 33, 70), (33, 130, 1)]


def _operands(rng, m, n, k, dtype):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    return a, b, c


def _tolerance(dtype, k):
    return (1e-5 if np.dtype(dtype) == np.float32 else 1e-13) * max(1, k) ** 0.5 * 10


def _dtypes(context):
    return [np.float32] + ([np.float64] if context.device.double_precision else [])


def test_every_size_matches_numpy(context, command_queue):
    rng = np.random.default_rng(1)
    for dtype in _dtypes(context):
        for m, n, k in SIZES:
            a, b, c = _operands(rng, m, n, k, dtype)
            gemm = GemmTemplate(context, dtype, m, n, k).instantiate(command_queue)
            dc = context.to_device(command_queue, c)
            gemm(dc, context.to_device(command_queue, np.ascontiguousarray(a.T)),
                 context.to_device(command_queue, b), alpha=1.5, beta=-0.5)
            expected = 1.5 * a.astype(np.float64) @ b.astype(np.float64) - 0.5 * c
            scale = np.abs(expected).max() + 1
            assert np.abs(dc.get(command_queue) - expected).max() <= _tolerance(dtype, k) * scale, \
                (dtype, m, n, k)


def test_many_configurations_of_the_space_are_right(context, command_queue):
    """A sample of the GPU space that this device can run, on sizes that need padding."""
    configs = tune.Space(G.GPU_SPACE, G.restrictions(context.device, np.float32)).configurations()
    sample = random.Random(3).sample(configs, 12)
    rng = np.random.default_rng(2)
    m, n, k = 136, 72, 40
    a, b, c = _operands(rng, m, n, k, np.float32)
    at, db = (context.to_device(command_queue, x) for x in (np.ascontiguousarray(a.T), b))
    expected = 2.0 * a.astype(np.float64) @ b + 1.0 * c
    for params in sample:
        dc = context.to_device(command_queue, c)
        GemmTemplate(context, np.float32, m, n, k, params).instantiate(command_queue)(dc, at, db, 2.0, 1.0)
        assert np.abs(dc.get(command_queue) - expected).max() <= 1e-3, params


def test_the_host_entry_point(context):
    rng = np.random.default_rng(4)
    a, b, c = _operands(rng, 20, 30, 40, np.float32)
    assert np.allclose(G.gemm(a, b, context=context), a @ b, atol=1e-4)
    assert np.allclose(G.gemm(a, b, c, alpha=0.5, beta=2.0, context=context), 0.5 * a @ b + 2 * c,
                       atol=1e-4)
    with pytest.raises(ValueError, match="inner sizes differ"):
        G.gemm(a, a, context=context)
    with pytest.raises(TypeError, match="different dtypes"):
        G.gemm(a, b.astype(np.float64), context=context)


def test_bad_arguments_are_clear_errors(context, command_queue):
    with pytest.raises(TypeError, match="float32 and float64"):
        GemmTemplate(context, np.int32, 4, 4, 4)
    with pytest.raises(ValueError, match="k must be at least 1"):
        GemmTemplate(context, np.float32, 4, 4, 0)
    with pytest.raises(ValueError, match="cannot run on"):
        GemmTemplate(context, np.float32, 4, 4, 4, dict(G.TEST_PARAMETERS, KWI=3))
    gemm = GemmTemplate(context, np.float32, 8, 8, 8).instantiate(command_queue)
    x = context.allocate((8, 8), np.float32)
    with pytest.raises(ValueError, match="c has shape"):
        gemm(context.allocate((8, 9), np.float32), x, x)
    with pytest.raises(ValueError, match="^gemm: alpha is nan; pass a finite number$"):
        gemm(x, x, x, alpha=float("nan"))
    with pytest.raises(ValueError, match="32-bit indices"):
        GemmTemplate(context, np.float32, 70000, 70000, 8)


def test_the_gpu_space_has_over_ten_thousand_configurations():
    for dtype, least in ((np.float32, 15000), (np.float64, 13000)):
        assert len(tune.Space(G.GPU_SPACE, G.restrictions(H200, dtype)).configurations()) >= least


@pytest.mark.force_autotune
def test_tuning_checks_every_candidate(context):
    with tune.search_settings(strategy="random", max_evals=4, seed=1):
        params = GemmTemplate.autotune(context, np.float32, 96, 64, 48)
    trials = ResultStore.open().trials(function="operations.gemm.GemmTemplate.autotune")
    assert len(trials) >= 4 and all(t.status == "ok" for t in trials), \
        [(t.parameters, t.status, t.message) for t in trials if t.status != "ok"]
    assert all(t.gflops and t.gbps for t in trials)
    assert tune.checked_tuning(GemmTemplate, context, params, dtype=np.float32, m=96, n=64, k=48) == params


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (cuda-python) not installed")
def test_configurations_of_the_h200_space_compile_for_sm90():
    for dtype, real in ((np.float32, "float"), (np.float64, "double")):
        configs = tune.Space(G.GPU_SPACE, G.restrictions(H200, dtype)).configurations()
        for params in random.Random(5).sample(configs, 6):
            source = accel.render(G.TEMPLATE, "cuda", {"real": real, "M": 4096, "N": 4096, "K": 4096,
                                                       **params})
            nvrtc.compile_source(source.text, "gemm.cu", (9, 0))
