"""Finding devices and choosing one: ``create_some_context`` and ``AUTOTUNE_DEVICE``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from .base import Context
from .errors import DeviceNotFoundError
from .identity import DeviceIdentity

ENV_DEVICE = "AUTOTUNE_DEVICE"


@dataclass(frozen=True)
class DeviceSpec:
    """A device that can be opened: its selector string and its identity."""

    selector: str  #: ``cuda:N`` or ``opencl:P:D``, accepted by ``AUTOTUNE_DEVICE``
    identity: DeviceIdentity

    @property
    def backend(self) -> str:
        return self.identity.backend

    def create_context(self) -> Context:
        parts = self.selector.split(":")
        if parts[0] == "cuda":
            from . import cuda

            return cuda.CudaContext(int(parts[1]))
        from . import opencl

        return opencl.create_context(int(parts[1]), int(parts[2]))

    def __str__(self) -> str:
        return f"{self.selector}  {self.identity.describe()}"


def list_devices() -> list[DeviceSpec]:
    """Every usable device: CUDA devices first, then OpenCL devices by platform.

    The backends (pycuda, pyopencl) are imported here, not when autotune is imported: serving
    a stored result does not need them.
    """
    from . import cuda, opencl

    specs = [DeviceSpec(f"cuda:{i}", ident) for i, ident in cuda.list_devices()]
    specs += [DeviceSpec(f"opencl:{p}:{d}", ident) for p, d, ident in opencl.list_devices()]
    return specs


def _preference(spec: DeviceSpec) -> int:
    if spec.backend == "cuda":
        return 0
    return 1 if spec.identity.is_gpu else 2


def _describe_all(specs: list[DeviceSpec]) -> str:
    if not specs:
        return (
            "no devices at all were found: install a backend, e.g. pip install "
            "'autotune[opencl]' (PoCL gives a CPU device anywhere) or 'autotune[cuda]'"
        )
    return "devices found:\n" + "\n".join(f"  {s}" for s in specs)


def select_devices(selector: str | None = None) -> list[DeviceSpec]:
    """Devices matching a selector, best first.

    Selectors: ``cuda``, ``cuda:N``, ``opencl``, ``opencl:P`` , ``opencl:P:D``, ``cpu``, ``gpu``,
    or ``None``/empty for all. Raises :class:`DeviceNotFoundError` listing what exists.
    """
    specs = sorted(list_devices(), key=_preference)
    value = (selector or "").strip().lower()
    if not value:
        chosen = specs
    elif value == "cpu":
        chosen = [s for s in specs if not s.identity.is_gpu]
    elif value == "gpu":
        chosen = [s for s in specs if s.identity.is_gpu]
    elif value in ("cuda", "opencl"):
        chosen = [s for s in specs if s.backend == value]
    elif re.fullmatch(r"cuda:\d+|opencl:\d+(:\d+)?", value):
        chosen = [s for s in specs if s.selector == value or s.selector.startswith(value + ":")]
    else:
        raise DeviceNotFoundError(
            f"device selector {selector!r} is not understood; use cuda, cuda:N, opencl, "
            f"opencl:P, opencl:P:D, cpu or gpu. {_describe_all(specs)}"
        )
    if not chosen:
        raise DeviceNotFoundError(f"no device matches {selector!r}; {_describe_all(specs)}")
    return chosen


def device_for_local_rank(local_rank: int, selector: str | None = None) -> DeviceSpec:
    """The device for the ``local_rank``-th process of a host (one GPU per process): the
    ``local_rank``-th device ``selector`` (else ``AUTOTUNE_DEVICE``) matches, cycling where
    processes outnumber devices (a CPU device shared by test ranks)."""
    specs = select_devices(selector or os.environ.get(ENV_DEVICE))
    return specs[local_rank % len(specs)]


def create_some_context(selector: str | None = None) -> Context:
    """A context on the best device: a CUDA GPU, else an OpenCL GPU, else an OpenCL CPU.

    ``selector`` (else the ``AUTOTUNE_DEVICE`` environment variable, read now) narrows the
    choice; a value that matches nothing raises :class:`DeviceNotFoundError`.
    """
    if selector is None:
        selector = os.environ.get(ENV_DEVICE)
    where = f"{ENV_DEVICE}={selector}" if selector else None
    try:
        spec = select_devices(selector)[0]
    except DeviceNotFoundError as exc:
        if where:
            raise DeviceNotFoundError(f"{where}: {exc}") from None
        raise
    return spec.create_context()
