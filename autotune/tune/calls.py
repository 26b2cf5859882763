"""One call of a tuned function, read: the owner class, the context and its device's part of
the key, and the arguments that make the rest of the key."""

from __future__ import annotations

import inspect
from typing import Any, Protocol

from .devices import device_key
from .encoding import encode_key_arguments
from .records import TuningKey


class Tuned(Protocol):
    """What reading a call needs of a tuned function (:class:`~.decorator.TunedFunction`)."""

    __qualname__: str
    signature: inspect.Signature

    def name(self, owner: Any = None) -> str: ...

    def version(self, owner: Any = None) -> int: ...


class Call:
    """What one call tells: the owner class, the context, the key's arguments and the key."""

    def __init__(self, tuned: Tuned, args: tuple, kwargs: dict):
        try:
            bound = tuned.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{tuned.__qualname__}: {exc}") from None
        bound.apply_defaults()
        items = list(bound.arguments.items())
        first = items[0][1] if items else None
        has_owner = isinstance(first, type)  # called through @classmethod: the class comes first
        self.owner = first if has_owner else None
        position = 1 if has_owner else 0
        if len(items) <= position:
            raise TypeError(f"{tuned.__qualname__} needs a context argument")
        self.context = items[position][1]
        self.device = device_key(self.context, tuned.__qualname__, items[position][0])
        rest = dict(items[position + 1:])
        for name, param in tuned.signature.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD and name in rest:
                rest.update(rest.pop(name))
        self.arguments = rest
        self.args, self.kwargs = args, kwargs
        self.key = TuningKey(
            function=tuned.name(self.owner),
            version=tuned.version(self.owner),
            device_name=self.device.name,
            device_platform=self.device.platform,
            driver_version=self.device.driver_version,
            arguments=encode_key_arguments(rest),
        )
