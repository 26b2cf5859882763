"""``y = alpha * x``: the smallest complete tuned template, used as the example in the docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

_TEMPLATE = Path(__file__).with_name("scale.mako")
_CTYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


class ScaleTemplate:
    """Scales a vector by a constant; tunes the work-group size."""

    autotune_version = 1
    #: Configurations worth pre-tuning with ``python -m autotune warm``.
    warm_configurations = [{"dtype": np.float32}, {"dtype": np.float64}]

    def __init__(self, context: accel.Context, dtype: Any, tuning: dict[str, Any] | None = None):
        self.context = context
        self.dtype = np.dtype(dtype)
        if self.dtype not in _CTYPES:
            raise TypeError(f"ScaleTemplate supports float32 and float64, not {self.dtype}")
        if tuning is None:
            tuning = self.autotune(context, self.dtype)
        self.wgs = int(tuning["wgs"])
        self.program = context.build(_TEMPLATE, {"wgs": self.wgs, "ctype": _CTYPES[self.dtype]})

    @classmethod
    @tune.autotuner(test={"wgs": 64})
    def autotune(cls, context: accel.Context, dtype: Any) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        n = 1 << 20 if context.device.is_gpu else 1 << 16

        def generate(wgs: int):
            if wgs > context.device.max_work_group_size:
                return None
            fn = cls(context, dtype, {"wgs": wgs}).instantiate(queue, n)
            x = np.arange(n, dtype=dtype) % 97
            fn.x.set(queue, x)
            return tune.make_measure(queue, fn, check=lambda: np.array_equal(fn.y.get(queue), 2 * x))

        return tune.autotune(generate, wgs=[32, 64, 128, 256, 512, 1024])

    def instantiate(self, queue: accel.CommandQueue, n: int, alpha: float = 2.0) -> Scale:
        return Scale(self, queue, n, alpha)


class Scale:
    """One instance: owns its buffers ``x`` and ``y``; calling it enqueues ``y = alpha * x``."""

    def __init__(self, template: ScaleTemplate, queue: accel.CommandQueue, n: int, alpha: float):
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        self.template = template
        self.queue = queue
        self.n = n
        self.alpha = template.dtype.type(alpha)
        self.kernel = template.program.get_kernel("scale")
        self.x = template.context.allocate(n, template.dtype)
        self.y = template.context.allocate(n, template.dtype)
        self.global_size = -(-n // template.wgs) * template.wgs
        self._launch = queue.launcher(self.kernel, self.global_size, template.wgs)
        self._args = [self.y, self.x, self.alpha, np.uint32(self.n)]

    def __call__(self) -> None:
        self._launch(self._args)
