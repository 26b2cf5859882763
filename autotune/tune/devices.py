"""What the tuner needs of a context: its device's identity, read by duck typing.

katsdpsigproc's tuner accepts any context whose ``.device`` has a name, a platform and a driver
version (its users and its tests tune with stand-in contexts); so does ours. An
:class:`accel.Context` qualifies, and so does any object with a ``device`` attribute carrying
those three strings (katsdpsigproc spells the platform ``platform_name``; both are read). The
rest of a device's description (``is_gpu``, ``backend``) is optional: a stand-in without it is
tuned as :func:`~.search.autotune` tunes outside a decorated method.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The longest device name, platform or driver version accepted in a key.
MAX_IDENTITY = 256

#: The fields of a key, and the attribute names a device may spell each with (first wins).
_FIELDS = (("name", ("name",)), ("platform", ("platform", "platform_name")),
           ("driver_version", ("driver_version",)))


class ContextError(TypeError):
    """A tuned function's context argument has no device the tuning key can be made from."""


@dataclass(frozen=True)
class DeviceKey:
    """The device part of a tuning key, and what the tuner may read of the device besides."""

    name: str
    platform: str
    driver_version: str
    is_gpu: bool | None  #: None where the device does not say
    backend: str | None  #: ``cuda``, ``opencl``, or None where the context does not say


def _field(device: Any, names: tuple[str, ...]) -> tuple[str, Any]:
    """The first spelling of a field that holds a string (else the first one present): a
    stand-in built on a mock answers every attribute, but only the ones set are strings."""
    found: tuple[str, Any] | None = None
    for name in names:
        try:
            value = getattr(device, name)
        except Exception:  # noqa: BLE001 - a missing or failing attribute is no spelling of it
            continue
        if isinstance(value, str):
            return name, value
        if found is None:
            found = (name, value)
    return found if found is not None else (names[0], None)


def device_problem(context: Any) -> str | None:
    """Why ``context`` cannot key a tuning result (None if it can)."""
    try:
        device = getattr(context, "device")
    except AttributeError:
        return f"{type(context).__name__} has no .device"
    except Exception as exc:  # a property that raises: not a usable context
        return f"reading its .device raised {type(exc).__name__}: {exc}"
    for _, names in _FIELDS:
        attribute, value = _field(device, names)
        if value is None:
            return f"its .device ({type(device).__name__}) has no {attribute}"
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_IDENTITY:
            return (f"its .device.{attribute} is {type(value).__name__} {str(value)[:40]!r}, not a "
                    f"non-empty string of at most {MAX_IDENTITY} characters")
    return None


def device_key(context: Any, where: str, argument: str) -> DeviceKey:
    """The device part of the key for ``context``, the argument named ``argument`` of the
    tuned function ``where``; :class:`ContextError` saying what to pass otherwise."""
    problem = device_problem(context)
    if problem is not None:
        raise ContextError(
            f"{where}: the argument after the class must be an accel.Context or a stand-in whose "
            f".device has name, platform and driver_version strings (its device is part of the "
            f"tuning key), got {type(context).__name__} for {argument!r} ({problem}); write def "
            "autotune(cls, context, ...) with @classmethod above @tune.autotuner, or def "
            "autotune(context, ...) for a function")
    device = context.device
    values = [_field(device, names)[1] for _, names in _FIELDS]
    is_gpu = getattr(device, "is_gpu", None)
    backend = getattr(context, "backend", None) or getattr(device, "backend", None)
    return DeviceKey(*values, is_gpu=is_gpu if isinstance(is_gpu, bool) else None,
                     backend=backend if backend in ("cuda", "opencl") else None)
