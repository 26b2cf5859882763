"""``warm``'s compiling ahead on OpenCL CPU devices (:mod:`autotune.cli.warm_prebuild`): what
its strategy builds and launches, and that its helper process fills PoCL's disk cache with the
keys' kernels while writing nothing to the user's database (PoCL in CI)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import toy_templates

from autotune import accel, tune
from autotune.cli import warm_prebuild
from autotune.tune.registry import check_protocol
from autotune.tune.search import TuningRun, tuning_run
from autotune.tune.store import ResultStore
from operations.scale import ScaleTemplate

from test_cli import _selector


def test_prebuild_only_where_asked_on_opencl_for_many_keys(context):
    opencl = context.backend == "opencl"
    assert warm_prebuild.wanted(context, warm_prebuild.MIN_KEYS, True) is opencl
    assert warm_prebuild.wanted(context, warm_prebuild.MIN_KEYS - 1, True) is False
    assert warm_prebuild.wanted(context, 1000, None) is False  # off by default
    assert warm_prebuild.wanted(context, 1000, False) is False


def test_the_strategy_builds_and_launches_the_seeds_and_test_once_and_times_one(context):
    queue = context.create_tuning_command_queue()
    kernel = context.build(toy_templates.KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    n = 4096
    x = context.to_device(queue, np.arange(n, dtype=np.float32))
    y = context.zeros(queue, n, np.float32)
    built: list[int] = []
    launched: list[int] = []
    checked: list[int] = []

    def generate(wgs):
        built.append(wgs)

        def run():
            launched.append(wgs)
            queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], n, wgs)

        return tune.make_measure(queue, run, lambda: checked.append(wgs) or True)

    space = tune.Space({"wgs": [16, 32, 64, 128, 256]})
    with tuning_run(TuningRun(baseline={"wgs": 16}, seeds=[{"wgs": 128}, {"wgs": 64}])), \
            tune.search_settings(settle=0):
        result = tune.search(generate, space, strategy=warm_prebuild.prebuild_strategy,
                             max_evals=6, workers=0)
    # test= measured by the search first (built, checked, timed); then the strategy: the seeds
    # and test= built and launched once each, unchecked and untimed; then the first seed
    # measured (built again, checked, timed) so that the search has its result
    assert built == [16, 128, 64, 16, 128] and checked == [16, 128]
    assert launched.count(64) == 1  # a seed not measured: launched once, to be compiled
    assert result.best in ({"wgs": 16}, {"wgs": 128})
    assert 32 not in built and 256 not in built  # no seeds' neighbours where seeds are given


@pytest.mark.opencl_only
def test_the_helper_fills_the_compiler_cache_and_writes_nothing_to_the_database(
        context, tmp_path, monkeypatch):
    if context.device.is_gpu:
        pytest.skip("the helper is for CPU devices (PoCL's disk cache)")
    cache = tmp_path / "pocl"
    cache.mkdir()
    monkeypatch.setenv("POCL_CACHE_DIR", str(cache))  # the helper's PoCL: a cache of its own
    db = tmp_path / "user.db"
    template = check_protocol("scale", ScaleTemplate)
    jobs = [(template, {"dtype": np.dtype(np.float32)}, {"strategy": "brute_force"})]
    with tune.use_database(db):
        with warm_prebuild.prebuilding(_selector(context), jobs, True) as helper:
            assert helper.process is not None
            deadline = time.monotonic() + 120  # its one key done, the helper ends
            while helper.process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
        assert any(cache.rglob("*.so")), "no kernel was compiled into the cache"
    assert not db.exists() or not ResultStore(f"sqlite:///{db}", read_only=True).records()
    assert helper.process is None or helper.process.poll() is not None  # stopped at the end


@pytest.mark.opencl_only
def test_a_key_warm_has_reached_is_not_prebuilt(context, tmp_path, monkeypatch):
    if context.device.is_gpu:
        pytest.skip("the helper is for CPU devices (PoCL's disk cache)")
    cache = tmp_path / "pocl"
    cache.mkdir()
    monkeypatch.setenv("POCL_CACHE_DIR", str(cache))
    template = check_protocol("scale", ScaleTemplate)
    jobs = [(template, {"dtype": np.dtype(np.float64)}, {"strategy": "brute_force"})]
    with warm_prebuild.prebuilding(_selector(context), jobs, True) as helper:
        helper.reached(0)  # warm starts the only key at once: nothing is left to build ahead
        deadline = time.monotonic() + 60
        while helper.process is not None and helper.process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not any(cache.rglob("*.so"))


def test_without_a_helper_nothing_runs_and_telling_it_is_harmless():
    with warm_prebuild.prebuilding("opencl:0:0", [], True) as helper:
        assert helper.process is None
        helper.reached(3)
    with warm_prebuild.prebuilding("opencl:0:0", [("x", {}, {})], False) as helper:
        assert helper.process is None
