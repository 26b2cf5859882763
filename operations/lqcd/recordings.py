"""A distributed dslash recorded once and launched again with one call (a CUDA graph): the
host's calls of an overlapped dslash (a dozen launches, copies, markers and value operations)
cost more than the GPU's work at 32^4 a GPU, so the host set the pace (docs/performance.md).

A recording is made per (dslash variant, policy, exchange phase, the arrays and scalar of the
call): everything a dslash's work differs in, except the count its value writes and waits
carry, which each launch sets (``CapturedWork.launch(value)``). The first call of a key is
enqueued as usual, so that kernels are built, tuned and mapped outside the recording; the
second is recorded and launched, and later ones are only launched.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Hashable

from autotune import accel, parallel

from .transport import Transport

logger = logging.getLogger("autotune.lqcd")

#: recordings an operator keeps (the least recently launched goes first)
CAPACITY = 64


class DslashRecordings:
    """The recorded dslashes of one operator whose exchanges go through ``transport`` and
    whose work is enqueued on ``queue``."""

    def __init__(self, queue: accel.CommandQueue, transport: Transport,
                 capacity: int = CAPACITY):
        self.queue, self.transport, self.capacity = queue, transport, capacity
        self._graphs: OrderedDict[Hashable, accel.CapturedWork] = OrderedDict()
        self._seen: set[Hashable] = set()
        #: why recording stopped (the driver refused one), else None
        self.failed: str | None = None
        self.recorded = 0  #: recordings made
        self.launched = 0  #: recorded dslashes launched
        self._enqueued = False  #: a dslash was enqueued call by call since the last launch

    def enqueued_directly(self) -> None:
        """Say that an exchange was enqueued call by call outside :meth:`run` (another policy,
        or the exchange alone): the next recording launched waits for what it left on the
        copies' queue first."""
        self._enqueued = True

    def _after_enqueued(self) -> None:
        """Before a recording runs after work enqueued call by call: the queue waits for what
        that work left on the copies' queue, so that a count it writes there cannot land
        after the recording's later one (a recording writes its counts on a branch of its
        own, not on the copies' queue)."""
        if self._enqueued:
            self.queue.wait_for_queue(self.transport.copies)
            self._enqueued = False

    @staticmethod
    def usable(queue: accel.CommandQueue, transport: Transport) -> str | None:
        """Why dslashes through ``transport`` on ``queue`` cannot be recorded, or None."""
        if not queue.can_capture:
            return "the device cannot record a queue's work (CUDA graphs)"
        if not transport.replayable:
            return (f"the {transport.name} transport's host waits within an exchange (only the "
                    "peer transport with stream-ordered flags never waits)")
        return None

    def run(self, key: Hashable, enqueue: Callable[[], None]) -> None:
        """The dslash ``enqueue()`` enqueues: launched from its recording where ``key`` has one,
        else recorded (the second time ``key`` comes) or enqueued."""
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            self._after_enqueued()
            graph.launch(self.transport.advance())
            self.launched += 1
            return
        if self.failed is not None or key not in self._seen:
            self._seen.add(key)
            enqueue()
            self._enqueued = True
            return
        self._after_enqueued()
        position = self.transport.position()
        try:
            with self.queue.capture() as captured:
                enqueue()
                self.queue.wait_for_queue(self.transport.copies)  # every branch joined back
        except parallel.MPITimeoutError:
            raise
        except accel.AccelError as exc:
            # nothing of it ran: back to where the exchanges stood, and enqueued as usual
            self.transport.rewind(position)
            self.failed = str(exc)
            logger.warning("the dslash is enqueued call by call from now on: recording it "
                           "failed (%s)", exc)
            enqueue()
            return
        self._graphs[key] = captured.work
        self._seen.discard(key)  # the recordings hold it now (seen again if dropped)
        self.recorded += 1
        if len(self._graphs) > self.capacity:
            self._graphs.popitem(last=False)
        captured.work.launch(self.transport.count)
        self.launched += 1
