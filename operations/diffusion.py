"""2-D heat diffusion: one explicit stencil step, tuned for block shape, tiling and local memory.

One step of ``u' = u + dt (u[y+1,x] + u[y,x+1] - 4 u[y,x] + u[y,x-1] + u[y-1,x])`` on a float32
field of ``ny`` rows and ``nx`` columns; boundary values stay fixed. This is the kernel of
Kernel Tuner's diffusion tutorial, and ``benchmarks/diffusion_vs_kernel_tuner.py`` tunes the same
source (``diffusion.mako``) with both tuners.

>>> op = DiffusionTemplate(context, nx=4096, ny=4096).instantiate(queue)
>>> op(src, dst)                       # one step between two device arrays of shape (ny, nx)
>>> field = op.run(field, steps=100)   # numpy in, numpy out
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .scalars import finite_real_scalar

TEMPLATE = Path(__file__).with_name("diffusion.mako")
DTYPE = np.dtype(np.float32)
#: Parameters used inside test suites (and the schema every stored result must match).
TEST_PARAMETERS = {"block_x": 16, "block_y": 16, "tile_x": 1, "tile_y": 1, "local": False}
#: The GPU space: Kernel Tuner's tutorial space, with tiling and local memory as options.
GPU_SPACE: dict[str, Sequence[Any]] = {
    "block_x": (16, 32, 48, 64, 128), "block_y": (1, 2, 4, 8, 16, 32),
    "tile_x": (1, 2, 4), "tile_y": (1, 2, 4), "local": (False, True),
}
#: CPU devices (PoCL) compile slowly and gain little from large spaces.
CPU_SPACE: dict[str, Sequence[Any]] = {
    "block_x": (16, 64), "block_y": (1, 4, 16), "tile_x": (1, 4), "tile_y": (1,),
    "local": (False, True),
}
MAX_BLOCK = 1024
MAX_TILE = 16
#: Indices are C ``int``: a field must have fewer than 2^31 points.
MAX_POINTS = 2**31 - 1
#: Largest difference from the float32 numpy reference, relative to the field's largest value,
#: that a candidate may show in one step (rounding and fused multiply-adds; an indexing error
#: is orders of magnitude larger).
CHECK_TOLERANCE = 4e-6


def check_size(nx: Any, ny: Any) -> tuple[int, int]:
    """``(nx, ny)`` as ints, or a clear error: at least 3 x 3, fewer than 2^31 points."""
    for name, value in (("nx", nx), ("ny", ny)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int, not {type(value).__name__} {value!r}")
        if value < 3:
            raise ValueError(f"{name} must be at least 3 (a boundary on each side of an "
                             f"interior), got {value}")
    if int(nx) * int(ny) > MAX_POINTS:
        raise ValueError(f"a {ny} x {nx} field has more than 2^31 - 1 points, the most the "
                         "kernel's int indices reach")
    return int(nx), int(ny)


def work_group_size(params: dict[str, Any]) -> int:
    """Work-items per work-group."""
    return params["block_x"] * params["block_y"]


def local_memory_bytes(params: dict[str, Any]) -> int:
    """Local memory one work-group uses: its points plus a one-point halo, or none."""
    if not params["local"]:
        return 0
    rows = params["block_y"] * params["tile_y"] + 2
    cols = params["block_x"] * params["tile_x"] + 2
    return rows * cols * DTYPE.itemsize


def device_limit_exceeded(device: accel.DeviceIdentity, params: dict[str, Any]) -> str | None:
    """Why ``params`` cannot run on ``device`` (work-group size, local memory), or None."""
    wgs = work_group_size(params)
    if wgs > device.max_work_group_size:
        return (f"a work-group of {params['block_x']} x {params['block_y']} = {wgs} items exceeds "
                f"{device.name}'s limit of {device.max_work_group_size}")
    local = local_memory_bytes(params)
    if local > device.local_memory:
        return (f"{local} bytes of local memory per work-group exceed {device.name}'s "
                f"{device.local_memory}")
    return None


def restrictions(device: accel.DeviceIdentity) -> list:
    """What a launch must satisfy: blocks and tiles in range, and the device's work-group size
    and local memory."""
    return [
        tune.limit(f"blocks of 1 to {MAX_BLOCK} items a side",
                   lambda p: all(1 <= p[n] <= MAX_BLOCK for n in ("block_x", "block_y"))),
        tune.limit(f"tiles of 1 to {MAX_TILE} points a side",
                   lambda p: all(1 <= p[n] <= MAX_TILE for n in ("tile_x", "tile_y"))),
        tune.limit(f"a work-group and its local memory fit {device.name}",
                   lambda p: device_limit_exceeded(device, p) is None),
    ]


def render_kws(nx: int, ny: int, params: dict[str, Any] | None) -> dict[str, Any]:
    """Template variables: ``params`` compiled in, or ``None`` to leave the tunable parameters
    to the macros Kernel Tuner defines (``block_size_x``, ..., ``use_local``)."""
    kws: dict[str, Any] = {"nx": nx, "ny": ny, "kernel_tuner": params is None}
    for name in ("block_x", "block_y", "tile_x", "tile_y"):
        kws[name] = None if params is None else params[name]
    kws["use_local"] = None if params is None else params["local"]  # Mako reserves ``local``
    return kws


def reference_step(field: np.ndarray, dt: float) -> np.ndarray:
    """One step on the host in float32, the order of operations of the kernel."""
    u = field
    out = u.copy()
    dt32 = np.float32(dt)
    out[1:-1, 1:-1] = u[1:-1, 1:-1] + dt32 * (
        u[2:, 1:-1] + u[1:-1, 2:] - np.float32(4) * u[1:-1, 1:-1] + u[1:-1, :-2] + u[:-2, 1:-1])
    return out


class DiffusionTemplate:
    """One explicit diffusion step on an ``ny x nx`` float32 field; tunes the launch shape."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)
    #: Configurations worth pre-tuning with ``python -m autotune warm``.
    warm_configurations = [{"nx": 4096, "ny": 4096}, {"nx": 1024, "ny": 1024}]

    def __init__(self, context: accel.Context, nx: int, ny: int, dt: float = 0.225,
                 tuning: dict[str, Any] | None = None):
        self.context = context
        self.nx, self.ny = check_size(nx, ny)
        self.dt = finite_real_scalar("diffusion", "dt", dt, np.float32)  # a float32 kernel argument
        self.tuning = tune.tuning_for(DiffusionTemplate, context, tuning, nx=self.nx,
                                      ny=self.ny).parameters
        self.program = context.build(TEMPLATE, render_kws(self.nx, self.ny, self.tuning))

    @classmethod
    @tune.autotuner(test=TEST_PARAMETERS)
    def autotune(cls, context: accel.Context, nx: int, ny: int) -> dict[str, Any]:
        """Tune at ``ny x nx``: every candidate's step is checked against numpy, then timed."""
        nx, ny = check_size(nx, ny)
        space = cls.autotune_space(context, nx, ny).parameters
        queue = context.create_tuning_command_queue()
        field = np.random.default_rng(2024).random((ny, nx), dtype=np.float32)
        src = context.to_device(queue, field)
        dst = context.allocate((ny, nx), DTYPE)
        poison = context.to_device(queue, np.full((ny, nx), np.nan, DTYPE))
        # Reading back every point of every candidate would cost more than timing it: compare
        # bands of whole rows (every column, so every x tile and the right edge) at the top,
        # the middle and the bottom, each taller than any work-group's rows plus the halo.
        expected = reference_step(field, 0.225)
        height = max(by * ty for by in space["block_y"] for ty in space["tile_y"]) + 2
        bands = _row_bands(ny, height)
        tolerance = CHECK_TOLERANCE * max(float(np.max(np.abs(field))), 1.0)

        def generate(**params: Any) -> tune.Measurement:
            step = cls(context, nx, ny, 0.225, params).instantiate(queue)

            def setup() -> None:  # unwritten points then show up as NaN in the check
                dst.copy_from(queue, poison)

            def run() -> None:
                step(src, dst)

            def check() -> bool:
                for a, b in bands:
                    got = dst.read(queue, a * nx, b * nx).reshape(b - a, nx)
                    if not np.all(np.abs(got - expected[a:b]) <= tolerance):
                        return False
                return True

            # one read and one write of every point; 7 flops per interior point
            return tune.make_measure(queue, run, check, setup=setup, bytes=2 * nx * ny * DTYPE.itemsize,
                                     flops=7 * (nx - 2) * (ny - 2))

        return tune.autotune(generate)

    @classmethod
    def autotune_space(cls, context: accel.Context, nx: int, ny: int) -> tune.Space:
        """Kernel Tuner's tutorial space with tiling and local memory on GPUs (a smaller one on
        CPU devices), restricted to what the device can launch."""
        return tune.Space(GPU_SPACE if context.device.is_gpu else CPU_SPACE,
                          restrictions(context.device))

    def instantiate(self, queue: accel.CommandQueue) -> Diffusion:
        return Diffusion(self, queue)


class Diffusion:
    """One instance: ``op(src, dst)`` enqueues a step; ``op.run(field, steps)`` runs on numpy."""

    def __init__(self, template: DiffusionTemplate, queue: accel.CommandQueue):
        self.template = template
        self.queue = queue
        self.shape = (template.ny, template.nx)
        t = template.tuning
        self.kernel = template.program.get_kernel("diffuse")
        self.local_size = (t["block_x"], t["block_y"])
        self.global_size = (-(-template.nx // (t["block_x"] * t["tile_x"])) * t["block_x"],
                            -(-template.ny // (t["block_y"] * t["tile_y"])) * t["block_y"])
        # After compiling: a kernel whose registers do not allow this work-group raises here.
        self._launch = queue.launcher(self.kernel, self.global_size, self.local_size)
        self._dt = np.float32(template.dt)

    def __call__(self, src: Any, dst: Any) -> None:
        """Enqueue one step from ``src`` to ``dst`` (device arrays of shape (ny, nx), float32).

        Every point of ``dst`` is written: interior points with the step, boundary points with
        ``src``'s values. ``src`` and ``dst`` must be different arrays.
        """
        src = self._device_array(src, "src")
        dst = self._device_array(dst, "dst")
        if src is dst or _same_memory(src, dst):
            raise ValueError("src and dst are the same array; a step cannot run in place "
                             "(use two arrays and swap them, as run() does)")
        self._launch([dst, src, self._dt])

    def run(self, field: np.ndarray, steps: int) -> np.ndarray:
        """``steps`` steps from the numpy array ``field`` (ny, nx) float32; returns a new array."""
        if not isinstance(field, np.ndarray):
            raise TypeError(f"field must be a numpy array, not {type(field).__name__}")
        if field.shape != self.shape:
            raise ValueError(f"field has shape {field.shape}, this instance steps fields of "
                             f"shape (ny, nx) = {self.shape}")
        if field.dtype != DTYPE:
            raise TypeError(f"field has dtype {field.dtype}; diffusion runs on float32: "
                            "convert with field.astype(np.float32)")
        if isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer)):
            raise TypeError(f"steps must be an int, not {type(steps).__name__}")
        if steps < 0:
            raise ValueError(f"steps must be at least 0, got {steps}")
        ctx = self.template.context
        a = ctx.to_device(self.queue, np.ascontiguousarray(field))
        if steps == 0:
            return a.get(self.queue)
        b = ctx.allocate(self.shape, DTYPE)
        for _ in range(int(steps)):  # our own two arrays: nothing to check per step
            self._launch([b, a, self._dt])
            a, b = b, a
        return a.get(self.queue)

    def _device_array(self, obj: Any, name: str) -> accel.DeviceArray:
        obj = self.template.context.as_array(obj, name, numpy_hint=(
            "pass device arrays (context.to_device(queue, a)), or use run(field, steps)"),
            queue=self.queue, dtype=DTYPE)
        if obj.shape != self.shape:
            raise ValueError(f"{name} has shape {obj.shape}, expected (ny, nx) = {self.shape}")
        if obj.dtype != DTYPE:
            raise TypeError(f"{name} has dtype {obj.dtype}, expected float32")
        return obj


def _same_memory(a: accel.DeviceArray, b: accel.DeviceArray) -> bool:
    """True if two arrays are views of one allocation (CUDA pointers; OpenCL buffers)."""
    pa, pb = getattr(a, "pointer", None), getattr(b, "pointer", None)
    if pa is not None and pb is not None:
        return pa == pb
    return a.kernel_arg is b.kernel_arg


def _row_bands(ny: int, height: int) -> list[tuple[int, int]]:
    """Disjoint row ranges ``[a, b)`` at the top, middle and bottom (all rows if few)."""
    if 3 * height >= ny:
        return [(0, ny)]
    middle = (ny - height) // 2
    return [(0, height), (middle, middle + height), (ny - height, ny)]
