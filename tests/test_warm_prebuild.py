"""``warm``'s compiling ahead (:mod:`autotune.cli.warm_prebuild`): what its strategy builds
and launches, and that its helper processes fill the compiler's disk cache with the keys'
kernels while writing nothing to the user's database (PoCL's cache in CI; NVRTC's kernel cache
on CUDA, in the GPU suite)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import toy_templates

from autotune import tune
from autotune.cli import warm_prebuild
from autotune.tune.registry import check_protocol
from autotune.tune.search import TuningRun, tuning_run
from autotune.tune.store import ResultStore
from operations.scale import ScaleTemplate

from test_cli import _selector


@pytest.fixture
def pocl_cache(context, tmp_path, monkeypatch):
    """A PoCL disk cache of the test's own (the helper's PoCL uses it), on CPU devices only."""
    if context.device.is_gpu:
        pytest.skip("the helper is for CPU devices (PoCL's disk cache)")
    cache = tmp_path / "pocl"
    cache.mkdir()
    monkeypatch.setenv("POCL_CACHE_DIR", str(cache))
    return cache


def test_prebuild_where_the_compiler_keeps_a_disk_cache_for_many_keys(context, monkeypatch):
    from autotune.accel import kernel_cache

    monkeypatch.delenv(kernel_cache.ENV, raising=False)
    cached = context.backend == "opencl" or getattr(context, "compiler", "") == "nvrtc"
    assert warm_prebuild.wanted(context, warm_prebuild.MIN_KEYS, True) is cached
    assert warm_prebuild.wanted(context, warm_prebuild.MIN_KEYS - 1, True) is False
    # by default on an OpenCL CPU device and on CUDA, not on an OpenCL GPU
    default = cached and (context.backend == "cuda" or not context.device.is_gpu)
    assert warm_prebuild.wanted(context, 1000, None) is default
    assert warm_prebuild.wanted(context, warm_prebuild.MIN_KEYS - 1, None) is False
    assert warm_prebuild.wanted(context, 1000, False) is False
    monkeypatch.setenv(kernel_cache.ENV, "off")  # NVRTC's builds are then not kept
    assert warm_prebuild.wanted(context, 1000, None) is (context.backend == "opencl" and default)
    # one helper beside a CPU device's timed kernels; on a GPU, one for four host cores and
    # for each 12 GiB of the device's memory
    helpers = warm_prebuild.helpers_for(context)
    if not context.device.is_gpu:
        assert helpers == 1
    else:
        assert 1 <= helpers <= min(warm_prebuild.MAX_HELPERS, max(1, (os.cpu_count() or 1) // 4),
                                   max(1, context.device.global_memory // (12 << 30)))
        # workers warming at once share the host's cores
        assert warm_prebuild.helpers_for(context, workers=os.cpu_count() or 1) == 1


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
        context, tmp_path, pocl_cache):
    cache = pocl_cache
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
def test_a_key_warm_has_reached_is_not_prebuilt(context, pocl_cache):
    cache = pocl_cache
    template = check_protocol("scale", ScaleTemplate)
    jobs = [(template, {"dtype": np.dtype(np.float64)}, {"strategy": "brute_force"})]
    with warm_prebuild.prebuilding(_selector(context), jobs, True) as helper:
        helper.reached(0)  # warm starts the only key at once: nothing is left to build ahead
        deadline = time.monotonic() + 60
        while helper.process is not None and helper.process.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not any(cache.rglob("*.so"))


@pytest.mark.cuda_only
def test_cuda_helpers_fill_the_kernel_cache_with_what_warm_then_builds(context, tmp_path,
                                                                       monkeypatch):
    """Two helpers, each its part of the keys, build their first candidates with NVRTC into
    the kernel cache: the ``test=`` configuration of each key (what warm measures first) is
    then built here without a new compile."""
    from autotune.accel import kernel_cache

    folder = tmp_path / "kernels"
    monkeypatch.setenv(kernel_cache.ENV, str(folder))
    template = check_protocol("scale", ScaleTemplate)
    jobs = [(template, {"dtype": np.dtype(d)}, {"strategy": "brute_force", "max_evals": 2})
            for d in ("float32", "float64")]
    with warm_prebuild.prebuilding(_selector(context), jobs, True, helpers=2) as helper:
        assert len(helper.processes) == 2
        deadline = time.monotonic() + 120  # their one key each done, the helpers end
        while any(p.poll() is None for p in helper.processes) and time.monotonic() < deadline:
            time.sleep(0.2)
    made = {p.name for p in folder.glob("*.kernel")}
    assert len(made) >= 2  # a kernel of each key at least
    for _, config, _ in jobs:
        ScaleTemplate(context, config["dtype"], {"wgs": 64})  # scale.py's test=
    assert {p.name for p in folder.glob("*.kernel")} == made, "a helper left out a key's test="


def test_without_a_helper_nothing_runs_and_telling_it_is_harmless():
    with warm_prebuild.prebuilding("opencl:0:0", [], True) as helper:
        assert helper.process is None
        helper.reached(3)
    with warm_prebuild.prebuilding("opencl:0:0", [("x", {}, {})], False) as helper:
        assert helper.process is None


def _state(pid: int) -> str:
    """A process's state letter from /proc (R, S, T stopped, Z a zombie; "" once gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def _wait_state(pid: int, wanted: set[str], seconds: float = 10) -> str:
    deadline = time.monotonic() + seconds
    while (state := _state(pid)) not in wanted and time.monotonic() < deadline:
        time.sleep(0.02)
    return state


@pytest.mark.opencl_only
@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads process states from /proc")
def test_the_helper_is_held_while_warm_times_a_batch(context, pocl_cache):
    template = check_protocol("scale", ScaleTemplate)
    jobs = [(template, {"dtype": np.dtype(d)}, {"strategy": "brute_force"})
            for d in (np.float32, np.float64, np.complex64, np.complex128)]
    queue = context.create_tuning_command_queue()
    x = context.to_device(queue, np.ones(1 << 16, np.float32))
    y = context.zeros(queue, 1 << 16, np.float32)
    with warm_prebuild.prebuilding(_selector(context), jobs, True) as helper:
        pid = helper.process.pid
        assert os.getpgid(pid) == pid  # it leads its group: what it starts is held with it
        for batch in range(3):
            queue.start_tuning()  # warm times a batch: the helper is stopped
            # (or its work is done; not at the first batch: it is still starting then)
            ended = ("Z", "") if batch else ()
            held = _wait_state(pid, {"T", "t", *ended})
            assert held in ("T", "t", *ended), held
            y.copy_from(queue, x)
            assert queue.stop_tuning() > 0
            # and continued after it (or its work is done)
            assert _wait_state(pid, {"R", "S", "D", "Z", ""}) not in ("T", "t")
        queue.start_tuning()  # warm ends while a batch is timed: continued, told, stopped
    queue.stop_tuning()
    assert helper.process is None or helper.process.poll() is not None


GROUP = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.01)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(600)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat") or not hasattr(os, "killpg"),
                    reason="reads process states from /proc; process groups are POSIX's")
def test_what_the_helper_starts_is_held_and_ended_with_it(tmp_path):
    """PoCL links each kernel it builds with ``ld``, a child of the helper: it is stopped while
    warm times a batch, as the helper is, continued after, and ended with the helper."""
    written = tmp_path / "child"
    process = warm_prebuild._spawn([sys.executable, "-c", GROUP, str(written)], dict(os.environ))
    helper = warm_prebuild.Prebuilder(process)
    try:
        deadline = time.monotonic() + 20
        while not written.exists() or not written.read_text():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.02)
        child = int(written.read_text())
        helper.timing(True)
        assert _wait_state(child, {"T", "t"}) in ("T", "t")
        assert _wait_state(process.pid, {"T", "t"}) in ("T", "t")
        helper.timing(False)
        assert _wait_state(child, {"R", "S", "D"}) in ("R", "S", "D")
    finally:
        warm_prebuild._kill(process)
    assert _wait_state(child, {"Z", ""}) in ("Z", "")


PARENT = """
import sys, time
import numpy as np
from autotune.cli import warm_prebuild
from autotune.tune.registry import check_protocol
from operations.scale import ScaleTemplate
jobs = [(check_protocol("scale", ScaleTemplate), {"dtype": np.dtype(d)},
         {"strategy": "brute_force"}) for d in ("float32", "float64", "complex64", "complex128")]
with warm_prebuild.prebuilding(sys.argv[1], jobs, True) as helper:
    time.sleep(1.5)  # (the helper has set itself to end with this process)
    helper.timing(True)  # held, as while a batch is timed
    print(helper.process.pid, flush=True)
    time.sleep(600)
"""


@pytest.mark.opencl_only
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_held_helper_ends_when_warm_is_killed(context, pocl_cache):
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    parent = subprocess.Popen([sys.executable, "-c", PARENT, _selector(context)],
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        pid = int(parent.stdout.readline())
        assert _wait_state(pid, {"T", "t"}) in ("T", "t")  # stopped
        parent.kill()  # warm killed: nothing will continue its helper
        parent.wait()
        # killed with it (a zombie where no init reaps it), not stopped forever
        assert _wait_state(pid, {"Z", ""}) in ("Z", "")
    finally:
        parent.kill()
        parent.wait()
