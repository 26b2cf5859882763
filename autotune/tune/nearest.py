"""``AUTOTUNE_MATCH=nearest``: stored results of other devices, the most similar first.

For the same function, version and arguments, the rows of other devices are ranked:

1. the same device (name and platform) on another driver;
2. the same device name on another platform;
3. any other device, by likeness: the same platform first, then the same backend and device
   type (a GPU for a GPU, a CPU for a CPU), then the rest.

Within a rank the newest result comes first: recency only breaks ties, so a CPU is never served
a GPU's row ahead of another CPU's on its platform because the GPU's is newer.

A row's backend and device type are what its search summary records (``device``: ``backend``
and ``gpu``, written by this autotune); for older rows they are inferred from the identity: the
``CUDA`` platform is a CUDA GPU, an OpenCL device whose name marks it a CPU (PoCL's
``pthread-...``, ``cpu``) is a CPU. Where neither tells, the row ranks after the likes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass

from .devices import DeviceKey
from .records import TuningKey, TuningRecord

#: The search-summary key a result's device description is kept under.
DEVICE = "device"

_CPU_NAME = re.compile(r"pthread|\bcpu\b|basic-", re.IGNORECASE)


@dataclass(frozen=True)
class DeviceKind:
    """What kind of device a row was tuned on, as far as it can be told."""

    backend: str | None  #: ``cuda``, ``opencl`` or None
    gpu: bool | None  #: None where unknown


def summary(device: DeviceKey) -> dict[str, object]:
    """The device description stored in a result's search summary."""
    return {"backend": device.backend, "gpu": device.is_gpu}


def kind_of(record: TuningRecord) -> DeviceKind:
    """The backend and device type of the device ``record`` was tuned on (see the module)."""
    backend: str | None = None
    gpu: bool | None = None
    try:
        stored = json.loads(record.search).get(DEVICE) if record.search else None
    except (ValueError, AttributeError):
        stored = None
    if isinstance(stored, dict):
        if stored.get("backend") in ("cuda", "opencl"):
            backend = stored["backend"]
        if isinstance(stored.get("gpu"), bool):
            gpu = stored["gpu"]
    platform = record.key.device_platform
    if backend is None:
        backend = "cuda" if platform == "CUDA" else "opencl"
    if gpu is None:
        if backend == "cuda":
            gpu = True
        elif _CPU_NAME.search(record.key.device_name):
            gpu = False
    return DeviceKind(backend, gpu)


def _rank(record: TuningRecord, key: TuningKey, device: DeviceKey) -> tuple[int, str]:
    """(rank, what was relaxed) of a row of another device; lower ranks first."""
    other = record.key
    if other.device_name == key.device_name and other.device_platform == key.device_platform:
        return 0, "driver version"
    if other.device_name == key.device_name:
        return 1, "platform"
    if other.device_platform == key.device_platform:
        return 2, "device; same platform"
    kind = kind_of(record)
    backend = device.backend or ("cuda" if key.device_platform == "CUDA" else "opencl")
    if kind.backend == backend and device.is_gpu is not None and kind.gpu == device.is_gpu:
        return 3, "device; same backend and device type"
    return 4, "device"


def ranked(records: Iterable[TuningRecord], key: TuningKey, device: DeviceKey
           ) -> list[tuple[str, TuningRecord]]:
    """Other devices' rows (``records``, newest first) in nearest order, each with what was
    relaxed to reach it; the key's own row is left out."""
    found = [(_rank(r, key, device), i, r) for i, r in enumerate(records) if r.key != key]
    found.sort(key=lambda item: (item[0][0], item[1]))  # stable: newest first within a rank
    return [(rank[1], record) for rank, _, record in found]
