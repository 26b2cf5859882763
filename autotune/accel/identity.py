"""What identifies a device for tuning, and what limits it imposes on launches."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class DeviceIdentity:
    """The identity and properties of one compute device.

    ``name``, ``platform`` and ``driver_version`` form the device part of a tuning key; the
    other fields describe the hardware so that templates can size their parameter spaces.
    """

    backend: str  #: ``"cuda"`` or ``"opencl"``
    name: str  #: e.g. ``"NVIDIA H100 80GB HBM3"`` or ``"pthread-AMD EPYC 7B13"``
    platform: str  #: ``"CUDA"`` or the OpenCL platform name
    driver_version: str  #: CUDA: driver and pycuda's CUDA; OpenCL: the device driver version
    compute_capability: tuple[int, int] | None  #: CUDA only
    multiprocessors: int  #: streaming multiprocessors / compute units
    global_memory: int  #: bytes
    max_work_group_size: int
    local_memory: int  #: shared/local memory per work-group, bytes
    is_gpu: bool
    warp_size: int  #: SIMD width for scheduling: warp size on CUDA, 1 if unknown on OpenCL
    double_precision: bool

    @property
    def key(self) -> tuple[str, str, str]:
        """The device part of a tuning key: (name, platform, driver_version)."""
        return (self.name, self.platform, self.driver_version)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        cc = (
            f", compute capability {self.compute_capability[0]}.{self.compute_capability[1]}"
            if self.compute_capability
            else ""
        )
        return (
            f"{self.name} [{self.platform}, driver {self.driver_version}{cc}, "
            f"{self.multiprocessors} compute units, {self.global_memory / 2**30:.1f} GiB]"
        )
