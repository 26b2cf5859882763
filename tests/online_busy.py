"""The busy kernel the online tuner's tests time (tests/test_online.py,
tests/test_online_store.py): its cost grows with a runtime argument, so candidates differ on
purpose; the work that launches it, numpy's answer and a tuner of its space (the fixture
``one_round`` is in conftest.py)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import numpy as np

from autotune import accel, tune

KERNEL = Path(__file__).with_name("kernels") / "busy.mako"
N = 1 << 14
#: GPUs get more elements and more iterations each, so that the kernels' times differ by more
#: than the cost of scheduling their work-groups
GPU_SCALE = 64
GPU_REPS = 20
SPACE = {"reps": [300, 3, 600], "wgs": [16, 32, 64]}
TEST = {"reps": 300, "wgs": 64}


class Work:
    """A device buffer pair and the busy kernel, on a timed queue."""

    def __init__(self, context: accel.Context):
        self.queue = context.create_command_queue(timed=True)
        self.kernel = context.build(KERNEL).get_kernel("busy")
        self.n = N * GPU_SCALE if context.device.is_gpu else N
        self.reps = GPU_REPS if context.device.is_gpu else 1  #: iterations per unit of ``reps``
        self.x = context.to_device(self.queue, np.linspace(0, 1, self.n, dtype=np.float32))
        self.y = context.allocate(self.n, np.float32)

    def step(self, tuner: tune.OnlineTuner, device: threading.Lock | None = None) -> dict:
        """One launch with the tuner's parameters; with ``device``, the launch and its timing
        run alone on the device (threads share one device: another thread's kernel running
        between a launch's timer events would count as this launch's time)."""
        with device if device is not None else contextlib.nullcontext():
            with tuner.measure(self.queue) as params:
                self._launch(params)
            if device is not None:
                self.queue.finish()
        return dict(params)

    def _launch(self, params) -> None:
        self.queue.enqueue_kernel(self.kernel, [self.y, self.x, np.uint32(self.n),
                                                np.uint32(params["reps"] * self.reps)],
                                  self.n, params["wgs"])


def busy_reference(reps: int, n: int, count: int = 4096) -> np.ndarray:
    """The first ``count`` elements of y after ``reps`` iterations on n elements."""
    v = np.linspace(0, 1, n, dtype=np.float32)[:count]
    for _ in range(reps):
        v = v * np.float32(0.999) + np.float32(0.001)
    return v


def busy_tuner(context, db, **kwargs) -> tune.OnlineTuner:
    space = kwargs.pop("space", tune.Space(SPACE, [lambda c: (c["reps"], c["wgs"]) != (600, 32)]))
    return tune.OnlineTuner(context, kwargs.pop("name", "tests.Busy.step"), space, TEST,
                            arguments=kwargs.pop("arguments", {"n": N}), db=str(db), **kwargs)


def device_selector(context) -> str:
    return "cuda" if context.device.backend == "cuda" else "opencl"

