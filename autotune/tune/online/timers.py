"""The timers of a scan's launches, per queue: device event pairs free for the next launch, and
those in flight, read later (in launch order) without stalling the host."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from ... import accel

#: Timers (device event pairs) a tuner keeps per queue; more launches in flight wait for the oldest.
TIMERS_PER_QUEUE = 32


class Timers:
    """The interval timers of one scan's launches, kept per queue (by id) and reused.

    Each timed launch takes a free timer of its queue (:meth:`free`) and, once stopped, is put
    in flight with what it timed (:meth:`add`); :meth:`collect` reads the finished ones and
    hands each reading to ``record(what, part, seconds)``. A launch that failed gives its timer
    back unread (:meth:`release`). Not thread-safe: the scan's lock serialises the calls."""

    def __init__(self, record: Callable[[Any, Hashable, float], None]):
        self._record = record
        self._free: dict[int, list[accel.IntervalTimer]] = {}
        #: timings in flight, per queue (id) in launch order
        self._pending: dict[int, deque[tuple[Any, Hashable, accel.IntervalTimer]]] = {}

    @property
    def in_flight(self) -> bool:
        """Whether some timing has not been read yet."""
        return bool(self._pending)

    def free(self, queue: accel.CommandQueue) -> accel.IntervalTimer:
        """A timer of ``queue`` for the next launch: a free one, else a new one, unless
        :data:`TIMERS_PER_QUEUE` are in flight there: then the oldest is waited for and read."""
        pool = self._free.setdefault(id(queue), [])
        if pool:
            return pool.pop()
        if len(self._pending.get(id(queue), ())) >= TIMERS_PER_QUEUE:
            self.collect(wait=True, queue=queue, one=True)
            return pool.pop()
        return queue.interval_timer()

    def release(self, timer: accel.IntervalTimer) -> None:
        """Give ``timer`` back for the next launch on its queue."""
        self._free.setdefault(id(timer.queue), []).append(timer)

    def add(self, what: Any, part: Hashable, timer: accel.IntervalTimer) -> None:
        """Put a stopped ``timer`` in flight: ``what`` it timed, in ``part``."""
        waiting = self._pending.get(id(timer.queue))
        if waiting is None:
            waiting = self._pending[id(timer.queue)] = deque()
        waiting.append((what, part, timer))

    def collect(self, *, wait: bool, queue: accel.CommandQueue | None = None,
                one: bool = False) -> None:
        """Read finished timings (each queue's in launch order; a queue runs in order, so its
        first unfinished timing ends the look); ``wait``: also wait for unfinished ones;
        ``queue``: that queue's only; ``one``: the first only."""
        for key in [id(queue)] if queue is not None else list(self._pending):
            waiting = self._pending.get(key)
            while waiting:
                what, part, timer = waiting[0]
                if not (wait or timer.ready()):
                    break
                waiting.popleft()
                self._record(what, part, timer.seconds())
                self.release(timer)
                if one:
                    break
            if not waiting:
                self._pending.pop(key, None)
            if one:
                return
