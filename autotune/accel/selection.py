"""Finding devices and choosing one: ``create_some_context`` and ``AUTOTUNE_DEVICE``."""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass

from .context import Context
from .errors import DeviceNotFoundError
from .identity import DeviceIdentity

ENV_DEVICE = "AUTOTUNE_DEVICE"

logger = logging.getLogger("autotune.accel")
#: the selectors of the unusable devices this process has warned about (once each)
_warned: set[str] = set()


@dataclass(frozen=True)
class DeviceSpec:
    """A device that can be opened: its selector string and its identity."""

    selector: str  #: ``cuda:N`` or ``opencl:P:D``, accepted by ``AUTOTUNE_DEVICE``
    identity: DeviceIdentity
    #: why the device cannot be used and what to do (one line); "" for a usable device. An
    #: OpenCL device is unusable when its platform cannot build a trivial kernel.
    unusable: str = ""

    @property
    def backend(self) -> str:
        return self.identity.backend

    @property
    def usable(self) -> bool:
        return not self.unusable

    def create_context(self) -> Context:
        parts = self.selector.split(":")
        if parts[0] == "cuda":
            from . import cuda

            return cuda.CudaContext(int(parts[1]))
        from . import opencl

        return opencl.create_context(int(parts[1]), int(parts[2]))

    def __str__(self) -> str:
        mark = f"  UNUSABLE: {self.unusable}" if self.unusable else ""
        return f"{self.selector}  {self.identity.describe()}{mark}"


def all_devices(backends: tuple[str, ...] = ("cuda", "opencl")) -> list[DeviceSpec]:
    """Every device found, usable or not (:attr:`DeviceSpec.unusable` says why not): CUDA
    devices first, then OpenCL devices by platform. Each OpenCL platform's health check (a
    build of a trivial kernel) runs once a process. ``backends``: only these are looked at.

    The backends (pycuda, pyopencl) are imported here, not when autotune is imported: serving
    a stored result does not need them.
    """
    specs = []
    if "cuda" in backends:
        from . import cuda

        specs += [DeviceSpec(f"cuda:{i}", ident) for i, ident in cuda.list_devices()]
    if "opencl" in backends:
        from . import opencl

        specs += [DeviceSpec(f"opencl:{p}:{d}", ident, problem)
                  for p, d, ident, problem in opencl.list_devices()]
    return specs


def _warn_unusable(specs: list[DeviceSpec]) -> None:
    """One warning a process for each unusable device among ``specs``: that it is skipped,
    why, and what to do."""
    for spec in specs:
        if spec.unusable and spec.selector not in _warned:
            _warned.add(spec.selector)
            logger.warning("skipping device %s (%s): %s", spec.selector, spec.identity.name,
                           spec.unusable)


def list_devices() -> list[DeviceSpec]:
    """Every usable device: CUDA devices first, then OpenCL devices by platform. A device that
    is not usable (:func:`all_devices`) is left out with one warning a process."""
    specs = all_devices()
    _warn_unusable(specs)
    return [s for s in specs if s.usable]


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


def _unusable_error(selector: str | None, specs: list[DeviceSpec]) -> DeviceNotFoundError:
    """The error for a selector that matches only unusable devices: each one's reason."""
    what = f"matches {selector!r}" if selector else "was found"
    reasons = "; ".join(f"{s.selector} ({s.identity.name}) is unusable: {s.unusable}"
                        for s in specs)
    return DeviceNotFoundError(f"no usable device {what}: {reasons}")


def select_devices(selector: str | None = None) -> list[DeviceSpec]:
    """Devices matching a selector, best first.

    Selectors: ``cuda``, ``cuda:N``, ``opencl``, ``opencl:P`` , ``opencl:P:D``, ``cpu``, ``gpu``,
    or ``None``/empty for all. Unusable devices are skipped (one warning a process each).
    Raises :class:`DeviceNotFoundError` listing what exists, or each matching device's reason
    when none of them is usable.
    """
    value = (selector or "").strip().lower()
    # a CUDA selector needs no OpenCL platform listed (nor each one's health build: a second
    # or more on a fresh machine, paid by every process warm starts on a GPU)
    cuda_only = value == "cuda" or re.fullmatch(r"cuda:\d+", value) is not None
    specs = sorted(all_devices(("cuda",) if cuda_only else ("cuda", "opencl")), key=_preference)
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
        everything = sorted(all_devices(), key=_preference) if cuda_only else specs
        raise DeviceNotFoundError(f"no device matches {selector!r}; {_describe_all(everything)}")
    usable = [s for s in chosen if s.usable]
    if not usable:
        raise _unusable_error(selector, chosen)
    _warn_unusable(chosen)
    return usable


def device_for_local_rank(local_rank: int, selector: str | None = None) -> DeviceSpec:
    """The device for the ``local_rank``-th process of a host, among the usable devices
    ``selector`` (else ``AUTOTUNE_DEVICE``) matches. Where the best of them is a GPU, one GPU
    a process: local rank i takes the i-th matching GPU, cycling where processes outnumber
    GPUs. Where it is a CPU device, every rank shares it: the device a single process would
    choose (a device that fails the health check is never chosen)."""
    if local_rank < 0:
        raise ValueError(f"local_rank must be >= 0, got {local_rank}")
    specs = select_devices(selector or os.environ.get(ENV_DEVICE))
    if not specs[0].identity.is_gpu:
        return specs[0]
    gpus = [s for s in specs if s.identity.is_gpu]
    return gpus[local_rank % len(gpus)]


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
