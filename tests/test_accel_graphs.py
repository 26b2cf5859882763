"""Work recorded once and enqueued again with one call (``queue.capture()``: CUDA graphs), the
way the multi-GPU dslash launches its overlapped steps: kernels on two queues, a copy, and
value writes and waits whose counts each launch sets."""

from __future__ import annotations

import time

import numpy as np
import pytest

from autotune import accel
from busy_kernel import BUSY, busy_reference as _busy



def test_recorded_work_runs_only_when_launched_and_each_launch_takes_new_counts(context):
    """Recorded: a kernel on one queue, a kernel and a copy on a second queue that joined it,
    a count written and a count waited for. Nothing runs while recording; each launch runs it
    all (numpy's results), writes its count, and waits on the device for the count it is
    given; the host is not held. Devices without graphs refuse with the way out."""
    queue = context.create_command_queue()
    side = context.create_command_queue(priority="high")
    if not queue.can_capture:
        assert context.device.backend != "cuda"
        with pytest.raises(accel.AccelError, match="enqueue it each time instead"):
            with queue.capture():
                pass
        return
    kernel = context.build(BUSY).get_kernel("busy")
    n = 4096
    host = np.random.default_rng(5).standard_normal(n).astype(np.float32)
    x = context.to_device(queue, host)
    y, z, w = (context.zeros(queue, n, np.float32) for _ in range(3))
    flags = context.zeros(queue, 2, np.uint32)
    queue.finish()
    write, wait = side.value_writer(flags, 0), queue.value_waiter(flags, 1)
    with queue.capture() as captured:
        queue.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(10)], n, 64)
        side.wait_for_queue(queue)  # the side queue joins the recording
        side.enqueue_kernel(kernel, [z, y, np.uint32(n), np.uint32(5)], n, 64)
        w.copy_from(side, z)
        write(1)
        wait(1)  # the queue's later work waits for the count its launch is given
        queue.wait_for_queue(side)  # joined back
    graph = captured.work
    assert isinstance(graph, accel.CapturedWork) and graph.value_operations == 2
    queue.finish()
    assert not np.any(w.get(queue)) and list(flags.get(queue)) == [0, 0]  # nothing ran yet
    expected = _busy(_busy(host, 10), 5)
    for count in (1, 2, 3):
        w.zero(queue)
        graph.launch(count)
        after = queue.mark()
        time.sleep(0.05)
        # the launch wrote its count, then waits for the same count in word 1
        assert not after.ready()
        assert flags.get(side)[0] == count
        side.write_value(flags, 1, count)
        after.wait()
        np.testing.assert_allclose(w.get(queue), expected, rtol=1e-5, atol=1e-5)
    # a count that wrapped past 2^32 compares cyclically, as enqueued waits do
    side.write_value(flags, 1, 2**32 - 1)
    graph.launch(2**32 + 1)
    marker = queue.mark()
    time.sleep(0.05)
    assert not marker.ready()
    side.write_value(flags, 1, 1)
    marker.wait()
    assert list(flags.get(queue)) == [1, 1]


def test_a_failed_recording_leaves_the_queue_usable(context):
    """An error inside the block ends the recording without a graph; the queue then runs
    work as before."""
    queue = context.create_command_queue()
    if not queue.can_capture:
        pytest.skip("recording a queue's work needs CUDA graphs")
    kernel = context.build(BUSY).get_kernel("busy")
    x = context.to_device(queue, np.ones(256, np.float32))
    y = context.zeros(queue, 256, np.float32)
    queue.finish()
    with pytest.raises(RuntimeError, match="stop"):
        with queue.capture() as captured:
            queue.enqueue_kernel(kernel, [y, x, np.uint32(256), np.uint32(1)], 256, 64)
            raise RuntimeError("stop")
    assert captured.work is None
    queue.enqueue_kernel(kernel, [y, x, np.uint32(256), np.uint32(1)], 256, 64)
    np.testing.assert_allclose(y.get(queue), _busy(np.ones(256), 1), rtol=1e-6)
