"""Queues of high priority (``create_command_queue(priority="high")``): the multi-GPU dslash
packs its faces and updates its boundary on one, beside the interior update."""

from __future__ import annotations

import time

import numpy as np
import pytest

from autotune import accel
from busy_kernel import BUSY, busy_reference as _expected



def test_a_high_priority_queue_runs_kernels_copies_and_markers_with_the_others(context):
    """Every queue operation on a high-priority queue, ordered against a normal queue by
    markers both ways, gives numpy's results; the queue says which priority it got (high on
    CUDA, normal where the device has no priorities)."""
    urgent = context.create_command_queue(priority="high")
    normal = context.create_command_queue()
    assert urgent.priority == ("high" if context.device.backend == "cuda" else "normal")
    assert normal.priority == "normal"
    kernel = context.build(BUSY).get_kernel("busy")
    n = 5000
    rng = np.random.default_rng(3)
    host = rng.standard_normal(n).astype(np.float32)
    x = context.to_device(urgent, host)
    y, z = context.zeros(urgent, n, np.float32), context.allocate(n, np.float32)
    z.zero(urgent)
    urgent.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(30)], 5120, 64)
    normal.wait_for(urgent.mark())  # the normal queue continues from y
    normal.enqueue_kernel(kernel, [z, y, np.uint32(n), np.uint32(20)], 5120, 64)
    urgent.wait_for(normal.mark())  # and the urgent one from z
    x.copy_from(urgent, z)
    got = x.get(urgent)
    np.testing.assert_allclose(got, _expected(_expected(host, 30), 20), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(x.read(urgent, 10, 20), got[10:20])
    part = np.empty(n, np.float32)
    x.get(urgent, part, wait=False)
    marker = urgent.mark()
    marker.wait()
    assert marker.ready()
    np.testing.assert_array_equal(part, got)
    x.zero(urgent)
    urgent.finish()
    assert not np.any(x.get(normal))


def test_a_queue_waits_for_the_work_another_queue_has_so_far(context):
    """``wait_for_queue``: a copy on one queue reads what a long kernel on another wrote, and
    a kernel enqueued on the other queue after the wait is not waited for (the high-priority
    queue of the multi-GPU dslash hands over work so every step)."""
    kernel = context.build(BUSY).get_kernel("busy")
    first, second = context.create_command_queue(), context.create_command_queue(priority="high")
    n = 1 << 16
    reps = 20000 if context.device.is_gpu else 200
    host = np.linspace(-1, 1, n, dtype=np.float32)
    x = context.to_device(first, host)
    y, z = context.allocate(n, np.float32), context.allocate(n, np.float32)
    first.finish()
    first.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(reps)], n, 64)
    second.wait_for_queue(first)
    first.enqueue_kernel(kernel, [x, x, np.uint32(n), np.uint32(reps)], n, 64)  # after the wait
    second.wait_for_queue(second)  # its own work: nothing to wait for
    z.copy_from(second, y)
    np.testing.assert_allclose(z.get(second), _expected(host, reps), rtol=1e-3, atol=1e-3)
    first.finish()


def test_queue_priorities_are_checked(context):
    with pytest.raises(ValueError, match="must be one of normal, high, got 'urgent'"):
        context.create_command_queue(priority="urgent")
    with pytest.raises(ValueError, match="without timed=True"):
        context.create_command_queue(timed=True, priority="high")
    assert accel.PRIORITIES == ("normal", "high")


@pytest.mark.gpu_alone  # times kernels: other workers' work on the GPU would be in it
def test_a_high_priority_kernel_starts_ahead_of_a_normal_kernels_waiting_blocks(context):
    """A long kernel of many blocks on a normal queue, then a one-block kernel on a
    high-priority queue: the short one finishes while the long one is still far from done
    (its blocks start as soon as a slot frees, not after the long kernel's last block has
    started)."""
    if context.device.backend != "cuda":
        pytest.skip("stream priorities are CUDA's; GPU only")
    urgent = context.create_command_queue(priority="high")
    normal = context.create_command_queue()
    kernel = context.build(BUSY).get_kernel("busy")
    n = 1 << 24  # 65536 blocks of 256
    x = context.to_device(normal, np.ones(n, np.float32))
    y, y1 = context.allocate(n, np.float32), context.allocate(256, np.float32)
    for queue, out, items, reps in ((normal, y, n, 2), (urgent, y1, 256, 2)):  # load, warm
        queue.enqueue_kernel(kernel, [out, x, np.uint32(items), np.uint32(reps)], items, 256)
        queue.finish()
    reps = 400000  # some 250 ms on an H200
    start = time.perf_counter()
    normal.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(reps)], n, 256)
    long_done = normal.mark()
    time.sleep(0.002)  # the long kernel's blocks fill the GPU
    urgent.enqueue_kernel(kernel, [y1, x, np.uint32(256), np.uint32(reps)], 256, 256)
    short_done = urgent.mark()
    short_done.wait()
    short = time.perf_counter() - start
    long_ready_then = long_done.ready()
    long_done.wait()
    whole = time.perf_counter() - start
    assert whole > 0.05, f"the long kernel took {whole * 1e3:.1f} ms: too short to tell"
    assert not long_ready_then and short < 0.3 * whole, (short, whole)
    np.testing.assert_allclose(y1.get(urgent), np.ones(256), rtol=1e-5)  # 1 is its fixed point
