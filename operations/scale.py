"""``y = alpha * x``: the smallest complete tuned template, used as the example in the docs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .scalars import finite_real_scalar

TEMPLATE = Path(__file__).with_name("scale.mako")
DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


class ScaleTemplate:
    """Scales a vector by a constant; tunes the work-group size."""

    autotune_version = 1
    #: The kernel templates it renders: editing one expires its stored results.
    autotune_sources = (TEMPLATE,)
    #: Configurations worth pre-tuning with ``python -m autotune warm``.
    warm_configurations = [{"dtype": np.float32}, {"dtype": np.float64}]

    def __init__(self, context: accel.Context, dtype: Any, tuning: dict[str, Any] | None = None):
        self.context = context
        self.dtype = np.dtype(dtype)
        if self.dtype not in DTYPES:
            raise TypeError(f"ScaleTemplate supports float32 and float64, not {self.dtype}")
        tuning = tune.tuning_for(ScaleTemplate, context, tuning, dtype=self.dtype).parameters
        self.wgs = tuning["wgs"]
        self.program = context.build(TEMPLATE, {"wgs": self.wgs, "ctype": accel.c_type(self.dtype)})

    @classmethod
    def autotune_space(cls, context: accel.Context, dtype: Any) -> tune.Space:
        """Work-group sizes from 32 to 1024 that the device allows."""
        limit = context.device.max_work_group_size
        return tune.Space({"wgs": [32, 64, 128, 256, 512, 1024]},
                          [tune.limit(f"wgs from 1 to {limit} (the device's limit)",
                                      lambda p: 1 <= p["wgs"] <= limit)])

    @staticmethod
    def tuning_length(context: accel.Context) -> int:
        """Elements of the vectors tuned on: on a GPU 1 << 24 (64 or 128 MiB a vector,
        bandwidth-bound as real uses are; 1 << 20 took about 10 us on an H200, launch and timer
        jitter as large as the differences between work-group sizes: two warm runs ranked them
        1.34x and 1.02x apart), on a CPU 1 << 16."""
        return 1 << 24 if context.device.is_gpu else 1 << 16

    @classmethod
    @tune.autotuner(test={"wgs": 64})
    def autotune(cls, context: accel.Context, dtype: Any) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        n = cls.tuning_length(context)
        dtype = np.dtype(dtype)
        x = np.arange(n, dtype=dtype) % 97

        def generate(wgs: int) -> tune.Measurement:
            fn = cls(context, dtype, {"wgs": wgs}).instantiate(queue, n)
            fn.x.set(queue, x)
            return tune.make_measure(queue, fn, check=lambda: np.array_equal(fn.y.get(queue), 2 * x),
                                     bytes=2 * n * dtype.itemsize, flops=n)

        return tune.autotune(generate)

    def instantiate(self, queue: accel.CommandQueue, n: int, alpha: float = 2.0) -> Scale:
        return Scale(self, queue, n, alpha)


class Scale:
    """One instance: owns its buffers ``x`` and ``y``; calling it enqueues ``y = alpha * x``."""

    #: The kernel takes n as an ``unsigned int`` (scale.mako; it indexes with size_t).
    MAX_N = 2**32 - 1

    def __init__(self, template: ScaleTemplate, queue: accel.CommandQueue, n: int, alpha: float):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise TypeError(f"n must be an int, not {type(n).__name__} {n!r}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if n > self.MAX_N:  # before allocating 2 n elements
            raise ValueError(f"n = {n} is more than the scale kernel's 32-bit unsigned length "
                             f"holds (at most 2^32 - 1 = {self.MAX_N}); scale shorter pieces")
        n = int(n)
        self.template = template
        self.queue = queue
        self.n = n
        self.alpha = template.dtype.type(finite_real_scalar("scale", "alpha", alpha,
                                                              template.dtype.type, template.dtype))
        self.kernel = template.program.get_kernel("scale")
        self.x = template.context.allocate(n, template.dtype)
        self.y = template.context.allocate(n, template.dtype)
        self.global_size = -(-n // template.wgs) * template.wgs
        self._launch = queue.launcher(self.kernel, self.global_size, template.wgs)
        self._args = [self.y, self.x, self.alpha, np.uint32(self.n)]

    def __call__(self, x: Any = None, y: Any = None) -> None:
        """Enqueue ``y = alpha * x`` on the instance's own ``x`` and ``y``, or on the arrays
        given: device arrays of ``n`` elements of the template's dtype, ours or another
        library's (``Context.as_array``: CuPy, PyTorch, pyopencl, ...) viewed in place, the
        queue ordered after their producers' work."""
        if x is None and y is None:
            self._launch(self._args)
            return
        if x is None or y is None:
            raise TypeError("pass both x and y (or neither, for the instance's own arrays)")
        self._launch([self._vector(y, "y"), self._vector(x, "x"), self.alpha, np.uint32(self.n)])

    def _vector(self, obj: Any, name: str) -> accel.DeviceArray:
        t = self.template
        arr = t.context.as_array(obj, name, numpy_hint=(
            f"copy it with fn.{name}.set(queue, a) and call fn()"), queue=self.queue,
            dtype=t.dtype)
        if arr.size != self.n or arr.dtype != t.dtype:
            raise ValueError(f"{name} has {arr.size} elements of {arr.dtype}; this instance "
                             f"scales {self.n} elements of {t.dtype}")
        return arr
