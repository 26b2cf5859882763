"""Device discovery, identity and AUTOTUNE_DEVICE selection."""

from __future__ import annotations

import gc
import time

import numpy as np
import pytest

from autotune import accel


def test_at_least_one_device_is_found():
    assert accel.list_devices(), "PoCL (autotune[opencl]) should give a CPU device anywhere"


def test_identity_fields_are_filled_and_stable(context):
    ident = context.device
    for field in ("name", "platform", "driver_version"):
        assert getattr(ident, field).strip(), field
    assert ident.multiprocessors > 0
    assert ident.global_memory > 0
    assert ident.max_work_group_size > 0
    assert ident.local_memory > 0
    if ident.backend == "cuda":
        assert ident.platform == "CUDA"
        assert ident.compute_capability and ident.compute_capability[0] >= 3
        assert "pycuda CUDA" in ident.driver_version
    spec = next(s for s in accel.list_devices() if s.identity == ident)
    assert spec.create_context().device == ident


def test_environment_selects_the_backend(monkeypatch):
    for spec in accel.list_devices():
        monkeypatch.setenv(accel.ENV_DEVICE, spec.selector)
        assert accel.create_some_context().device == spec.identity
    monkeypatch.setenv(accel.ENV_DEVICE, "opencl")
    if any(s.backend == "opencl" for s in accel.list_devices()):
        assert accel.create_some_context().backend == "opencl"


def test_cpu_selector_picks_a_cpu_device(monkeypatch):
    if not any(not s.identity.is_gpu for s in accel.list_devices()):
        pytest.skip("no CPU OpenCL device here")
    monkeypatch.setenv(accel.ENV_DEVICE, "cpu")
    assert not accel.create_some_context().device.is_gpu


def test_default_prefers_cuda_then_gpus(monkeypatch):
    monkeypatch.delenv(accel.ENV_DEVICE, raising=False)
    specs = accel.list_devices()
    ctx = accel.create_some_context()
    if any(s.backend == "cuda" for s in specs):
        assert ctx.backend == "cuda"
    elif any(s.identity.is_gpu for s in specs):
        assert ctx.device.is_gpu


@pytest.mark.parametrize("value", ["bogus", "cuda:99", "opencl:7:0", "metal"])
def test_bad_selector_lists_the_devices_that_exist(monkeypatch, value):
    monkeypatch.setenv(accel.ENV_DEVICE, value)
    with pytest.raises(accel.DeviceNotFoundError) as info:
        accel.create_some_context()
    message = str(info.value)
    assert f"AUTOTUNE_DEVICE={value}" in message
    for spec in accel.list_devices():
        assert spec.selector in message


def test_the_test_fixtures_take_device_selectors():
    """``pytest --devices=SELECTOR[,...]`` parametrizes the fixtures over exactly the devices
    named (one GPU of several), and a selector that names nothing is a usage error that lists
    the selectors there are."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).parent.parent
    first = accel.list_devices()[0].selector
    test = str(root / "tests" / "test_accel_devices.py") + "::test_identity_fields_are_filled_and_stable"

    def collect(devices: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                               "-o", "addopts=", "--collect-only", "-q", "--devices", devices, test],
                              capture_output=True, text=True, timeout=120, cwd=root,
                              env=dict(os.environ, PYTHONPATH=str(root)))

    out = collect(first)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line for line in out.stdout.splitlines() if "::test_identity" in line]
    assert len(ids) == 1 and f"[{first}-" in ids[0], out.stdout
    out = collect("cuda:97")
    assert out.returncode != 0
    said = out.stderr + out.stdout
    assert "--devices=cuda:97: no device cuda:97 here" in said and first in said


@pytest.mark.gpu_alone  # times kernels: other workers' work on the GPU would be in it
def test_interval_timers_time_work_without_waiting_for_it(context):
    from pathlib import Path

    import numpy as np

    queue = context.create_command_queue(timed=True)
    kernel = context.build(Path(__file__).with_name("kernels") / "busy.mako").get_kernel("busy")
    n = 1 << 14
    x = context.to_device(queue, np.ones(n, np.float32))
    y = context.allocate(n, np.float32)
    light, heavy = queue.interval_timer(), queue.interval_timer()
    for timer, reps in ((heavy, 200000 if context.device.is_gpu else 20000), (light, 2)):
        timer.start()
        queue.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(reps)], n, 32)
        timer.stop()
    assert heavy.seconds() > 20 * light.seconds() > 0  # 1000x the work
    assert light.ready() and heavy.ready()
    light.start()
    light.stop()
    assert light.seconds() == 0.0 or context.device.backend == "cuda"  # nothing enqueued
    with pytest.raises(accel.AccelError, match="another interval timer"):
        light.start()
        heavy.start()
    light.stop()
    with pytest.raises(accel.AccelError, match="without start"):
        light.stop()
    with pytest.raises(accel.AccelError, match="timed=True"):
        context.create_command_queue().interval_timer()


def _busy(context, queue=None):
    from pathlib import Path

    kernel = context.build(Path(__file__).with_name("kernels") / "busy.mako").get_kernel("busy")
    n = 1 << 14
    queue = queue or context.create_command_queue(timed=True)
    x = context.to_device(queue, np.ones(n, np.float32))
    y = context.allocate(n, np.float32)
    return queue, lambda reps: queue.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(reps)],
                                                    n, 32), y


def test_interval_timers_leave_out_the_hosts_time_enqueuing(context, monkeypatch):
    """An interval holds the device's work, not the time the device waits for the host (a
    host-bound solver's Python between its launches, while online tuning times them): host
    pauses inside an interval, before and after its launch, are not counted (on CUDA, pauses
    shorter than the gate's timeout: a long one here)."""
    if context.backend == "cuda":
        from autotune.accel import cuda_gate

        monkeypatch.setattr(cuda_gate, "GATE_TIMEOUT", 1.0)
    queue, launch, _ = _busy(context)
    timer = queue.interval_timer()
    queue.finish()  # the device idles while the host pauses
    for _ in range(2):
        timer.start()
        time.sleep(0.01)
        launch(2)
        time.sleep(0.01)
        timer.stop()
        assert 0 < timer.seconds() < 0.005


def test_a_wait_for_the_queue_inside_an_interval_lets_its_work_run(context, monkeypatch):
    """Waiting for the queue inside an interval (a blocking copy, finish) returns once the work
    has run: on CUDA the interval's gate opens for it instead of holding the queue until its
    timeout (a long one here)."""
    if context.backend == "cuda":
        from autotune.accel import cuda_gate

        monkeypatch.setattr(cuda_gate, "GATE_TIMEOUT", 1.0)
    queue, launch, y = _busy(context)
    timer = queue.interval_timer()
    for wait in (queue.finish, lambda: y.get(queue), lambda: queue.mark().wait()):
        timer.start()
        launch(2)
        began = time.perf_counter()
        wait()
        waited = time.perf_counter() - began
        timer.stop()
        assert timer.seconds() > 0
        if context.backend == "cuda":
            assert waited < 0.5 and queue._gate.timeouts == 0


def test_a_tuning_batch_leaves_out_the_hosts_time_enqueuing(context):
    """A batch between start_tuning and stop_tuning holds the device's work, not the host's
    pauses before, between and after its launches: a kernel shorter than Python's launch
    (a small lattice's dslash) is ranked by its own time, not by the host's. OpenCL profiles
    from the first command's start to the last's end, so only there a pause between two
    launches counts."""
    queue, launch, _ = _busy(context, context.create_tuning_command_queue())
    launch(2)
    queue.finish()
    for _ in range(2):
        queue.start_tuning()
        time.sleep(0.004)
        launch(2)
        if context.backend == "cuda":
            time.sleep(0.004)
            launch(2)
        time.sleep(0.004)
        assert 0 < queue.stop_tuning() < 0.003


def test_a_gate_opens_before_the_drivers_queue_fills(context, monkeypatch):
    """A batch of more launches than the driver queues on a stream (about a thousand): the
    gate opens once :data:`cuda_gate.GATE_MAX_HELD` wait behind it, instead of the host
    waiting for work held until the gate's timeout (a long one here)."""
    if context.backend != "cuda":
        pytest.skip("the gate is CUDA's (OpenCL profiles the commands themselves); GPU only")
    from autotune.accel import cuda_gate

    monkeypatch.setattr(cuda_gate, "TUNING_GATE_TIMEOUT", 2.0)
    queue, launch, _ = _busy(context, context.create_tuning_command_queue())
    launch(0)
    queue.finish()
    # no cycle collection in the batch: pycuda freeing an earlier test's memory there waits for
    # the device, which the gate holds until its timeout (the hazard cuda_gate names; a GPU
    # suite run of 2026-12-01 took 2.05 s here once), and this test is about the queue's depth
    gc.collect()
    gc.disable()
    try:
        began = time.perf_counter()
        queue.start_tuning()
        for _ in range(3 * cuda_gate.GATE_MAX_HELD):
            launch(0)
        seconds = queue.stop_tuning()
    finally:
        gc.enable()
    assert time.perf_counter() - began < 1.0 and queue._gate.timeouts == 0
    assert 0 < seconds < 1.0


@pytest.mark.gpu_alone
def test_a_cuda_gate_that_times_out_is_given_up(context):
    """A wait for the device that bypasses the queue (a driver call of another library) inside
    an interval holds it until the gate's short timeout; when most intervals wait so, the
    queue's timers run without a gate (and count the host's time again) instead of stalling
    every interval."""
    if context.backend != "cuda":
        pytest.skip("the gate is CUDA's (OpenCL profiles the commands themselves); GPU only")
    import pycuda.driver as drv

    from autotune.accel import cuda_gate

    queue, launch, _ = _busy(context)
    launch(2)  # the kernel's first launch loads it (CUDA loads modules lazily): not in the test
    queue.finish()
    timer = queue.interval_timer()
    intervals = []
    for i in range(cuda_gate.GATE_TIMEOUTS_ALLOWED):
        assert queue._gate.enabled
        began = time.perf_counter()  # the gate's timeout runs from the interval's start
        timer.start()
        launch(2)
        with context.thread_scope():
            drv.Context.synchronize()
        assert time.perf_counter() - began >= cuda_gate.GATE_TIMEOUT * 0.9
        timer.stop()
        intervals.append(timer.seconds())
    # the gate's wait is not counted: were it, every interval would hold it (another process's
    # work on a shared GPU, such as the suite's other workers, may lengthen a few of them)
    assert min(intervals) < cuda_gate.GATE_TIMEOUT / 2, intervals
    assert not queue._gate.enabled and queue._gate.timeouts == cuda_gate.GATE_TIMEOUTS_ALLOWED
    timer.start()
    time.sleep(0.02)
    launch(2)
    timer.stop()
    assert timer.seconds() >= 0.015  # ungated: the host's pause counts


def test_a_marker_says_when_the_work_before_it_is_done(context):
    queue = context.create_command_queue()
    data = np.arange(1 << 16, dtype=np.float32)
    device = context.to_device(queue, data)
    host = context.empty_host(data.shape, data.dtype)
    host[:] = -1
    device.get(queue, host, wait=False)  # only enqueued
    marker = queue.mark()
    marker.wait()
    assert marker.ready()
    np.testing.assert_array_equal(host, data)  # the copy before the marker has landed


def test_a_queue_waits_for_a_marker_of_another_queue(context):
    """Work on a second queue ordered behind the first queue's work on the device (the
    multi-GPU exchange copies faces beside the interior kernel this way): a chain of
    asynchronous copies alternating between the queues ends with every value in place."""
    first, second = context.create_command_queue(), context.create_command_queue()
    data = np.arange(1 << 18, dtype=np.float32)
    host = context.empty_host(data.shape, data.dtype)
    host[:] = data
    a, b, c = (context.allocate(data.shape, data.dtype) for _ in range(3))
    a.set(first, host, wait=False)
    b.copy_from(first, a)
    second.wait_for(first.mark())
    c.copy_from(second, b)
    result = context.empty_host(data.shape, data.dtype)
    result[:] = -1
    c.get(second, result, wait=False)
    second.finish()
    np.testing.assert_array_equal(result, data)
    with pytest.raises(TypeError, match="Marker"):
        second.wait_for(object())
    with pytest.raises(ValueError, match="C-contiguous"):
        a.set(first, np.arange(2 * data.size, dtype=np.float32)[::2], wait=False)
