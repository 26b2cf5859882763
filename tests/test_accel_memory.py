"""Device arrays and the tuning queue."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from autotune import accel

try:  # torch first: torch 2.11 fails its own import (schema parse error) once CuPy is loaded
    import torch
except ImportError:
    torch = None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.int32, np.uint8])
def test_array_round_trip_zero_and_copy(context, command_queue, dtype):
    rng = np.random.default_rng(0)
    host = (rng.standard_normal((3, 5, 7)) * 100).astype(dtype)
    a = context.to_device(command_queue, host)
    assert a.shape == (3, 5, 7) and a.dtype == np.dtype(dtype) and a.nbytes == host.nbytes
    np.testing.assert_array_equal(a.get(command_queue), host)
    b = context.allocate(host.shape, dtype)
    b.copy_from(command_queue, a)
    np.testing.assert_array_equal(b.get(command_queue), host)
    a.zero(command_queue)
    np.testing.assert_array_equal(a.get(command_queue), np.zeros_like(host))
    np.testing.assert_array_equal(b.get(command_queue), host)
    out = np.empty_like(host)
    assert b.get(command_queue, out=out) is out


def test_empty_arrays_work(context, command_queue):
    a = context.allocate(0, np.float32)
    a.set(command_queue, np.empty(0, np.float32))
    assert a.get(command_queue).shape == (0,)


def test_a_copy_to_the_device_on_an_ordinary_queue_makes_no_host_copy(context, command_queue):
    """Only a copy kept for a tuning turn needs a snapshot of the host array (test_lookahead);
    an ordinary queue's copy reads the caller's array itself. A snapshot cost a whole solve's
    field (200 MB at 32^4) a host copy: 57 ms of a 0.19 s solve on the H200."""
    import tracemalloc

    host = np.ones(4 << 20, np.float64)  # 32 MiB
    a = context.allocate(host.shape, host.dtype)
    tracemalloc.start()
    try:
        a.set(command_queue, host)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < host.nbytes // 4, f"{peak} bytes allocated on the host for a {host.nbytes}-byte copy"
    np.testing.assert_array_equal(a.read(command_queue, 0, 8), host[:8])


def test_shape_and_dtype_mismatches_are_clear_errors(context, command_queue):
    a = context.allocate((4, 4), np.float32)
    with pytest.raises(ValueError, match="shape"):
        a.set(command_queue, np.zeros((4, 5), np.float32))
    with pytest.raises(TypeError, match="astype"):
        a.set(command_queue, np.zeros((4, 4), np.float64))
    with pytest.raises(TypeError, match="numpy array"):
        a.set(command_queue, [[0.0] * 4] * 4)
    with pytest.raises(ValueError, match="mismatch"):
        a.copy_from(command_queue, context.allocate(16, np.float32))
    with pytest.raises(ValueError, match="negative"):
        context.allocate(-1, np.float32)
    with pytest.raises(TypeError, match="objects"):
        context.allocate(3, object)


def _copy_seconds(context, queue, nbytes, repeats=5):
    src = context.to_device(queue, np.ones(nbytes // 4, np.float32))
    dst = context.allocate(nbytes // 4, np.float32)
    times = []
    for _ in range(repeats):
        queue.start_tuning()
        dst.copy_from(queue, src)
        dst.copy_from(queue, src)
        times.append(queue.stop_tuning())
    np.testing.assert_array_equal(dst.get(queue)[:10], 1)
    return statistics.median(times)


@pytest.mark.gpu_alone  # times copies: other workers' work on the GPU would be in them
def test_tuning_queue_times_copies_and_grows_with_size(context):
    queue = context.create_tuning_command_queue()
    small = _copy_seconds(context, queue, 1 << 20)
    # on a GPU a 1 MiB copy is mostly launch latency: compare with one far past it
    large = _copy_seconds(context, queue, 1 << 28 if context.device.is_gpu else 1 << 26)
    assert small > 0
    assert large > 4 * small, (small, large)


def test_tuning_needs_a_tuning_queue(context, command_queue):
    with pytest.raises(accel.AccelError, match="create_tuning_command_queue"):
        command_queue.start_tuning()
    queue = context.create_tuning_command_queue()
    with pytest.raises(accel.AccelError, match="without start_tuning"):
        queue.stop_tuning()


def test_a_timing_listener_hears_each_timed_batch_start_and_end(context):
    queue = context.create_tuning_command_queue()
    a = context.to_device(queue, np.arange(1 << 16, dtype=np.float32))
    b = context.zeros(queue, 1 << 16, np.float32)
    heard: list[tuple[bool, bool]] = []  # (started, a batch was being timed when heard)

    def listener(started):
        heard.append((started, queue._timing))

    def broken(started):
        raise RuntimeError("a listener that fails")

    with accel.timing_listener(listener), accel.timing_listener(broken):
        queue.start_tuning()
        b.copy_from(queue, a)
        seconds = queue.stop_tuning()
        queue.start_tuning()
        queue.stop_tuning()
    # heard before the timing starts and after it has ended; a failing listener changes nothing
    assert heard == [(True, False), (False, False)] * 2
    assert seconds > 0
    queue.start_tuning()
    queue.stop_tuning()
    assert len(heard) == 4  # not heard outside the block
    np.testing.assert_array_equal(b.get(queue), a.get(queue))


def test_wrapping_host_arrays_is_refused(context):
    with pytest.raises(TypeError, match=r"numpy array; copy it with "
                                        r"context.to_device"):
        context.wrap(np.zeros(3))


@pytest.mark.cuda_only
def test_cuda_array_interface_both_ways(context, command_queue):
    cupy = pytest.importorskip("cupy")
    host = np.arange(1000, dtype=np.float32)
    with cupy.cuda.Device(context.device_index):  # CuPy works on the context's GPU
        theirs = cupy.asarray(host)
        ours = context.wrap(theirs)
        np.testing.assert_array_equal(ours.get(command_queue), host)
        ours.zero(command_queue)
        command_queue.finish()
        assert float(theirs.sum()) == 0.0
        mine = context.to_device(command_queue, host)
        view = cupy.asarray(mine)  # through our __cuda_array_interface__
        assert float(view.sum()) == float(host.sum())
        with pytest.raises(ValueError, match="C-contiguous"):
            context.wrap(cupy.zeros((4, 4), cupy.float32)[:, ::2])


@pytest.mark.cuda_only
def test_torch_tensors_wrap_without_copy(context, command_queue):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    t = torch.arange(64, dtype=torch.float64, device=f"cuda:{context.device_index}")
    arr = context.wrap(t)
    assert arr.shape == (64,) and arr.dtype == np.float64
    arr.zero(command_queue)
    command_queue.finish()
    assert float(t.sum()) == 0.0


def test_read_copies_a_range(context, command_queue):
    host = np.arange(1000, dtype=np.float64)
    a = context.to_device(command_queue, host)
    np.testing.assert_array_equal(a.read(command_queue, 10, 20), host[10:20])
    np.testing.assert_array_equal(a.read(command_queue, 990, 1000), host[990:])
    assert a.read(command_queue, 5, 5).size == 0
    with pytest.raises(IndexError):
        a.read(command_queue, 990, 1001)


def test_asynchronous_get_into_a_host_buffer(context, command_queue):
    data = np.arange(1000, dtype=np.float64) - 0.5
    arr = context.to_device(command_queue, data)
    out = context.empty_host(1000, np.float64)
    assert out.shape == (1000,) and out.dtype == np.float64
    out[:] = np.nan
    assert arr.get(command_queue, out, wait=False) is out
    command_queue.finish()
    np.testing.assert_array_equal(out, data)


def test_views_share_memory(context, command_queue):
    host = np.arange(4096, dtype=np.float32)
    a = context.to_device(command_queue, host)
    first = a.view(0, 2048, (2, 1024))
    second = a.view(2048, 4096)
    np.testing.assert_array_equal(first.get(command_queue), host[:2048].reshape(2, 1024))
    second.zero(command_queue)
    command_queue.finish()
    np.testing.assert_array_equal(a.get(command_queue)[2048:], 0)
    np.testing.assert_array_equal(a.get(command_queue)[:2048], host[:2048])
    with pytest.raises(IndexError):
        a.view(4000, 5000)
    with pytest.raises(ValueError, match="does not hold"):
        a.view(0, 10, (3, 3))
    # a view of a view: elements 3072:3584 of the whole array
    inner = a.view(2048, 4096).view(1024, 1536)
    a.set(command_queue, host)
    np.testing.assert_array_equal(inner.get(command_queue), host[3072:3584])
    inner.zero(command_queue)
    command_queue.finish()
    np.testing.assert_array_equal(np.nonzero(a.get(command_queue) == 0)[0][1:],
                                  np.arange(3072, 3584))


def test_as_array_accepts_device_arrays_and_refuses_host_data(context, command_queue):
    a = context.allocate(8, np.float32)
    assert context.as_array(a) is a
    with pytest.raises(TypeError, match="x is a numpy array; use run"):
        context.as_array(np.zeros(8), "x", numpy_hint="use run")
    with pytest.raises(TypeError, match="to_device"):
        context.as_array(np.zeros(8))
    with pytest.raises(TypeError, match="must be a device array, not list"):
        context.as_array([1, 2], "y")


@pytest.mark.cuda_only
def test_as_array_views_cupy_memory(context, command_queue):
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(context.device_index):
        theirs = cupy.arange(16, dtype=cupy.float32)
    ours = context.as_array(theirs)
    np.testing.assert_array_equal(ours.get(command_queue), np.arange(16, dtype=np.float32))
    # memory of another GPU is refused by name, not read by a kernel of this one
    for other in range(cupy.cuda.runtime.getDeviceCount()):
        if other != context.device_index:
            with cupy.cuda.Device(other):
                elsewhere = cupy.arange(16, dtype=cupy.float32)
            with pytest.raises(ValueError, match=f"lives on GPU {other}"):
                context.as_array(elsewhere)


def test_shared_memory_handles_are_checked_and_refused_where_unsupported(context, command_queue):
    """Sharing device memory with other processes (the multi-GPU exchange's device-to-device
    path) is CUDA IPC; OpenCL says it cannot. A handle is data from another process: a wrong
    one is refused before it reaches the driver. (Two processes mapping each other's memory:
    tests/test_distributed.py's peer-transport test.)"""
    from autotune.accel import AccelError

    a = context.allocate(64, np.float32)
    handle = context.share(a)
    if context.device.backend == "cuda":
        assert isinstance(handle, bytes) and len(handle) == context.SHARE_HANDLE_BYTES
        with pytest.raises(ValueError, match="whole allocation"):
            context.share(a.view(16, 32))
        with pytest.raises(ValueError, match="64 bytes"):
            context.open_shared(handle[:10], 64, np.float32)
        with pytest.raises(TypeError, match="Python objects"):
            context.open_shared(handle, 64, object)
    else:
        assert handle is None
        with pytest.raises(AccelError, match="host memory"):
            context.open_shared(b"\0" * 64, 64, np.float32)


def test_queues_signal_each_other_through_values_in_device_memory(context):
    """``write_value`` / ``wait_value`` (CUDA stream memory operations: the multi-GPU
    exchange's arrival flags): a queue waiting for a count runs nothing after the wait until
    another queue's write reaches it, and then sees the writer's earlier copy; counters
    compare cyclically, so a count that wrapped past 2^32 still releases the wait. Elsewhere
    the queues say they cannot, and the calls are refused with the way out."""
    from autotune.accel import AccelError

    waiter, writer = context.create_command_queue(), context.create_command_queue()
    flags = context.zeros(waiter, 4, np.uint32)
    if not waiter.stream_values:
        assert context.device.backend != "cuda"
        with pytest.raises(AccelError, match="signal through the host instead"):
            waiter.wait_value(flags, 0, 1)
        with pytest.raises(AccelError, match="signal through the host instead"):
            writer.value_writer(flags, 0)
        return
    waiter.finish()
    data = context.to_device(writer, np.arange(1000, dtype=np.float64))
    out = context.zeros(waiter, 1000, np.float64)
    waiter.finish()
    waiter.wait_value(flags, 1, 7)
    out.copy_from(waiter, data)  # must not run before the count reaches 7
    time.sleep(0.05)
    assert not waiter.mark().ready()  # held on the device: nothing was written
    writer.write_value(flags, 1, 6)
    writer.finish()
    time.sleep(0.05)
    assert not waiter.mark().ready()  # 6 has not reached 7
    doubled = np.arange(1000, dtype=np.float64) * 2
    data.set(writer, doubled, wait=False)
    writer.write_value(flags, 1, 7)
    waiter.finish()
    np.testing.assert_array_equal(out.get(waiter), np.arange(1000) * 2.0)
    # cyclic: 2^32 - 1 then 3 (wrapped) releases a wait for 2^32 + 1 (written as 1); the
    # hot-loop forms, checked once, do the same as the calls
    write, wait = writer.value_writer(flags, 2), waiter.value_waiter(flags, 2)
    write(2**32 - 1)
    writer.finish()
    wait(2**32 + 1)
    marker = waiter.mark()
    time.sleep(0.05)
    assert not marker.ready()
    write(3)
    marker.wait()
    assert list(flags.get(waiter)) == [0, 7, 3, 0]
    with pytest.raises(ValueError, match="uint32"):
        waiter.wait_value(out, 0, 1)
    with pytest.raises(ValueError, match="index 4"):
        writer.write_value(flags, 4, 1)
    with pytest.raises(ValueError, match="index 4"):
        writer.value_writer(flags, 4)
