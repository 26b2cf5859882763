"""Tuning a key ahead of its turn: :class:`KeyTurn`, and the tuner's :func:`clock`.

``warm`` runs the next key's tuning function in a second thread while the key before it is
tuned (``--lookahead``). Inside :meth:`KeyTurn.scope` that thread prepares its data, allocates
and compiles at once, while its device work waits for the turn
(:func:`autotune.accel.tuning_turn`): its copies to the device are kept and enqueued once the
turn has come, and its launches, downloads and timers wait for it, so that nothing of it runs
on the device beside the key being measured. Its clock stands still until then: a search's
``max_seconds``, the re-timing's share and the ``seconds`` stored with the result count from
the turn on, what the thread did ahead of it being free.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from ..accel import tuning_turn

_clock: ContextVar[Callable[[], float]] = ContextVar("autotune_clock", default=time.perf_counter)
_key_turn: ContextVar[KeyTurn | None] = ContextVar("autotune_key_turn", default=None)


def clock() -> float:
    """Seconds on the tuner's clock (``time.perf_counter``, except inside
    :meth:`KeyTurn.scope`, where it stands still until the turn comes): budgets and the time a
    tuning took are read from it."""
    return _clock.get()()


def wait_for_turn() -> None:
    """Inside :meth:`KeyTurn.scope`, wait for the key's turn; elsewhere return at once.

    A tuned call made inside a tuning function tuned ahead calls it before it takes its key's
    lock: a key tuned ahead must not hold a lock that the key being tuned may need while it
    waits for that key to finish."""
    turn = _key_turn.get()
    if turn is not None:
        turn.wait()


class TurnCancelled(BaseException):
    """The key's turn was cancelled (``warm`` interrupted): raised by its next device command.

    A ``BaseException``, as ``KeyboardInterrupt`` is: the tuner records an ``Exception`` from a
    candidate as that candidate's failure and goes on, but this must end the whole key."""


class KeyTurn:
    """The turn of one key tuned ahead: closed until :meth:`open`; :meth:`cancel` makes every
    later device command of its threads raise :class:`TurnCancelled`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._opened: float | None = None
        self._cancelled = False
        self.created = time.perf_counter()

    def open(self) -> None:
        """The key's device work may run now (the key before it is done)."""
        with self._cond:
            if self._opened is None:
                self._opened = time.perf_counter()
            self._cond.notify_all()

    def cancel(self) -> None:
        """Stop the key: its threads' next device command raises :class:`TurnCancelled`."""
        with self._cond:
            self._cancelled = True
            self._cond.notify_all()

    def ready(self) -> bool:
        """Whether the turn has come (never waits)."""
        return self._opened is not None or self._cancelled

    def wait(self) -> None:
        """Return once the turn has come; raise :class:`TurnCancelled` once cancelled."""
        if self._opened is not None and not self._cancelled:  # open: no lock on each command
            return
        with self._cond:
            while self._opened is None and not self._cancelled:
                self._cond.wait()
            if self._cancelled:
                raise TurnCancelled("the key's tuning was cancelled")

    def now(self) -> float:
        """This key's clock: stands at :attr:`created` until the turn comes, then runs."""
        now = time.perf_counter()
        opened = self._opened
        return self.created if opened is None else self.created + max(0.0, now - opened)

    @contextlib.contextmanager
    def scope(self) -> Iterator[KeyTurn]:
        """Within the block, this thread's device work waits for the turn (its copies to the
        device are kept until then) and the tuner's :func:`clock` is this key's."""
        token, mine = _clock.set(self.now), _key_turn.set(self)
        try:
            with tuning_turn(self.wait, ready=self.ready):
                yield self
        finally:
            _key_turn.reset(mine)
            _clock.reset(token)
