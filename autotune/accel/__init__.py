"""The device layer: one API over CUDA (pycuda) and OpenCL (pyopencl).

Operations use only this module; they never import pycuda or pyopencl themselves.

>>> from autotune import accel
>>> ctx = accel.create_some_context()             # or AUTOTUNE_DEVICE=opencl:0:0
>>> queue = ctx.create_command_queue()
>>> program = ctx.build("scale.mako", {"wgs": 64, "ctype": "float"})
>>> kernel = program.get_kernel("scale")
"""

from .arrays import DeviceArray
from .context import Context
from .ctype import C_TYPES, c_type, real_dtype
from .errors import (
    AccelError,
    BackendUnavailableError,
    CompileError,
    DeviceNotFoundError,
    LaunchError,
)
from .helpers import builds_in_helpers
from .identity import DeviceIdentity
from .interop import LastViews
from .kernels import Kernel, KernelLimits, Program
from .queues import PRIORITIES, CapturedWork, CommandQueue, IntervalTimer, Marker, timing_listener, tuning_turn
from .render import RenderedSource, render
from .sources import SourceFile, recording, template_sources
from .selection import (ENV_DEVICE, DeviceSpec, all_devices, create_some_context,
                        device_for_local_rank, list_devices, select_devices)

__all__ = [
    "C_TYPES",
    "AccelError",
    "CapturedWork",
    "BackendUnavailableError",
    "CommandQueue",
    "CompileError",
    "Context",
    "DeviceArray",
    "DeviceIdentity",
    "DeviceNotFoundError",
    "IntervalTimer",
    "DeviceSpec",
    "ENV_DEVICE",
    "Kernel",
    "KernelLimits",
    "LaunchError",
    "LastViews",
    "Marker",
    "PRIORITIES",
    "Program",
    "RenderedSource",
    "SourceFile",
    "all_devices",
    "builds_in_helpers",
    "c_type",
    "create_some_context",
    "device_for_local_rank",
    "list_devices",
    "real_dtype",
    "recording",
    "render",
    "select_devices",
    "template_sources",
    "timing_listener",
    "tuning_turn",
]
