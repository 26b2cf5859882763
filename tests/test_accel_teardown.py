"""CUDA objects freed in threads that do not own their context (a daemon thread or the garbage
collector may drop the last reference anywhere)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent

CHILD = """
import sys, threading
import numpy as np
from autotune import accel
context = accel.create_some_context(sys.argv[1])
queue, urgent = context.create_command_queue(), context.create_command_queue(priority="high")
timed = context.create_command_queue(timed=True)
timer = timed.interval_timer()
array = context.to_device(queue, np.arange(1000.0))
pinned = context.empty_host(1000, np.float64)
program = context.build(sys.argv[2])
kernel = program.get_kernel("busy")
x = context.to_device(urgent, np.ones(256, np.float32))
urgent.enqueue_kernel(kernel, [x, x, np.uint32(256), np.uint32(3)], 256, 64)
marker = urgent.mark()
timer.start(); timed.enqueue_kernel(kernel, [x, x, np.uint32(256), np.uint32(3)], 256, 64); timer.stop()
array.get(queue, pinned)
marker.wait(); timed.finish()
box = [queue, urgent, timed, timer, array, pinned, program, kernel, x, marker]
del queue, urgent, timed, timer, array, pinned, program, kernel, x, marker
worker = threading.Thread(target=box.clear)  # the last references go in another thread
worker.start()
worker.join()
print("freed")
"""


def test_cuda_objects_dropped_in_another_thread_are_freed_cleanly(context):
    """Queues (of both priorities, timed too), markers, arrays, page-locked host memory,
    programs and kernels whose last references go in a thread that does not hold their
    context: freed there with the context made current, so the process neither warns that
    something "could not be cleaned up" nor ends in pycuda's terminate at exit."""
    if context.device.backend != "cuda":
        pytest.skip("pycuda's objects need their context current where they are freed; GPU only")
    out = subprocess.run([sys.executable, "-c", CHILD, f"cuda:{context.device_index}",
                          str(HERE / "kernels" / "busy.mako")],
                         capture_output=True, text=True, timeout=300,
                         cwd=HERE.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "freed" in out.stdout
    assert "cleaned up" not in out.stderr and "terminate" not in out.stderr, out.stderr[-3000:]


TWO_CONTEXTS = """
import gc, sys, threading
import numpy as np
from autotune import accel
first = accel.create_some_context(sys.argv[1])
second = accel.create_some_context(sys.argv[1])  # another of the same device (a second warm run)
made = []

def make():
    queue = first.create_command_queue(timed=True)
    made.extend([queue, first.to_device(queue, np.arange(1000.0)), first.build(sys.argv[2])])
    first.gate_function()  # the timing gate's module, held by the context

def drop():
    with second.thread_scope():
        made.clear()

for target in (make, drop):  # made in one thread, dropped in another under the other context
    worker = threading.Thread(target=target)
    worker.start()
    worker.join()
box = [first]  # and the first context itself, in a thread of its own
del first
worker = threading.Thread(target=box.clear)
worker.start()
worker.join()
gc.collect()
print("freed")
"""


def test_objects_of_one_context_dropped_under_another_of_the_same_device_are_freed(context):
    """Two contexts of one device in a process (``warm`` run twice in one, each with its own
    context): a queue, an array and a program made under the first in one thread, their last
    references dropped in another thread while the second is current there, and the first
    context itself (with its timing gate's module) dropped in a third. Each is freed, with no
    "could not be cleaned up" (pycuda binds an object to the context wrapper current where it
    was made, and two wrappers of one primary context compare equal: the contexts share one)."""
    if context.device.backend != "cuda":
        pytest.skip("pycuda's objects need their context current where they are freed; GPU only")
    out = subprocess.run([sys.executable, "-W", "always", "-c", TWO_CONTEXTS,
                          f"cuda:{context.device_index}", str(HERE / "kernels" / "busy.mako")],
                         capture_output=True, text=True, timeout=300, cwd=HERE.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "freed" in out.stdout
    assert "cleaned up" not in out.stderr and "terminate" not in out.stderr, out.stderr[-3000:]
