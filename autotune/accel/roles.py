"""What the lower modules of the device layer know of a context and a queue: their roles, as
protocols. Arrays, kernels and queues belong to a :class:`~.context.Context`, and an array's
copies go to a :class:`~.queues.CommandQueue`; naming those classes in annotations would tie the
modules in a circle (the context makes arrays, kernels and queues). These protocols name only
what is used, and the concrete classes satisfy them."""

from __future__ import annotations

from typing import Any, Protocol

from .identity import DeviceIdentity


class ContextRole(Protocol):
    """A context, as the objects it makes see it: its backend and device."""

    backend: str
    device: DeviceIdentity


class QueueRole(Protocol):
    """A command queue, as a copy of a device array uses it: wait for a tuning queue's turn,
    keep a copy until the turn comes, mind a running interval timer, record the copy's event, and wait for the work."""

    context: ContextRole

    def _wait_turn(self) -> None: ...

    def _may_keep(self) -> bool: ...

    def _keep(self, command: Any) -> bool: ...

    def _finish(self) -> None: ...

    def _before_waiting(self) -> None: ...

    def _record(self, event: Any) -> None: ...

    def finish(self) -> None: ...
