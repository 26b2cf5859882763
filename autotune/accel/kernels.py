"""Compiled code: a :class:`Program` (one compiled kernel source) and its :class:`Kernel`
functions with their :class:`KernelLimits`.

The backends subclass these and fill in the ``_``-prefixed hooks; the launch checks live here.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import LaunchError
from .render import RenderedSource
from .roles import ContextRole
from .shapes import as_sizes


@dataclass(frozen=True)
class KernelLimits:
    """Per-kernel limits known after compilation."""

    max_work_group_size: int  #: given this kernel's registers and local memory
    registers: int | None  #: per work-item, CUDA only
    local_memory: int  #: static local/shared memory per work-group, bytes
    private_memory: int  #: per work-item spill/private memory, bytes
    preferred_multiple: int  #: warp size / preferred work-group size multiple


class Kernel(ABC):
    """One kernel function of a :class:`Program`."""

    def __init__(self, program: Program, name: str):
        self.program = program
        self.name = name

    @property
    @abstractmethod
    def limits(self) -> KernelLimits:
        """This kernel's limits on the device, as compiled."""

    def set_carveout(self, percent: int) -> None:
        """Prefer ``percent`` (0 to 100) of the multiprocessor's combined L1 cache and local
        (shared) memory as local memory for this kernel's launches, or -1 for the driver's own
        choice (CUDA's preferred shared memory carve-out; a hint the driver may round). A
        backend without the setting (OpenCL) accepts only -1."""
        if isinstance(percent, bool) or not isinstance(percent, int) or not -1 <= percent <= 100:
            raise ValueError(f"carve-out must be an int from 0 to 100 (percent of the L1/shared "
                             f"storage as shared memory) or -1 (the driver's choice), got {percent!r}")
        self._set_carveout(percent)

    def _set_carveout(self, percent: int) -> None:
        if percent != -1:
            raise LaunchError(f"kernel {self.name}: this backend has no L1/shared carve-out "
                              "setting; leave it at -1 (the driver's choice)")

    def check_launch(self, global_size: Sequence[int], local_size: Sequence[int]) -> None:
        """Raise :class:`LaunchError` if this launch configuration cannot run on the device."""
        g = as_sizes(global_size, "global_size")
        loc = as_sizes(local_size, "local_size")
        if len(g) != len(loc):
            raise LaunchError(f"global_size {g} and local_size {loc} have different dimensions")
        for gs, ls in zip(g, loc):
            if gs % ls:
                raise LaunchError(
                    f"global_size {g} is not a multiple of local_size {loc}; round the global "
                    "size up and guard the tail in the kernel"
                )
        wgs = math.prod(loc)
        limit = self.limits.max_work_group_size
        if wgs > limit:
            raise LaunchError(
                f"kernel {self.name}: work-group of {wgs} items exceeds its limit of {limit} "
                f"(registers {self.limits.registers}, local memory {self.limits.local_memory} B)"
            )


class Program(ABC):
    """A compiled kernel source. ``compile_seconds`` is how long the compiler took."""

    def __init__(self, context: ContextRole, source: RenderedSource, compile_seconds: float,
                 log: str, compiler: str):
        self.context = context
        self.source = source
        self.compile_seconds = compile_seconds
        self.log = log
        self.compiler = compiler
        self._kernels: dict[str, Kernel] = {}
        self._lock = threading.Lock()

    def get_kernel(self, name: str) -> Kernel:
        """The kernel function ``name`` of this program (made once, then cached);
        :class:`CompileError` if the program has none of that name."""
        with self._lock:
            kernel = self._kernels.get(name)
            if kernel is None:
                kernel = self._kernels[name] = self._get_kernel(name)
            return kernel

    @abstractmethod
    def _get_kernel(self, name: str) -> Kernel: ...

