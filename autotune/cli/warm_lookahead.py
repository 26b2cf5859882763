"""``warm``'s lookahead: the next key's tuning function starts while the key before it is tuned.

Each key tuned runs in a thread of its own (its builds in helper processes), inside its
:class:`~autotune.tune.turns.KeyTurn`:
while the key before it is tuned, it prepares its data, allocates and compiles its first
candidates; its device work (uploads kept until then, launches, downloads, timers) waits until
that key is completely done, so that no measurement of it is disturbed. Results come back in
key order; at most one key runs ahead.

On by default where the device is a GPU (compiling there takes longer than measuring); off on
CPU devices, whose kernels use every core while they are timed (a build beside them disturbs
the timing). ``warm --lookahead`` / ``--no-lookahead`` override.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ..accel import builds_in_helpers
from ..tune.turns import KeyTurn

T = TypeVar("T")

#: What a key's tuning is, before it starts: called in the main thread when the key starts
#: (``ahead``: while the key before it is tuned), it returns the work to run in the key's thread.
KeyStart = Callable[[bool], Callable[[], T]]


def lookahead_default(context: Any) -> bool:
    """Lookahead on by default on GPUs, off on CPU devices (and where the device does not say)."""
    return context.device.is_gpu is True


@dataclass
class _Running(Generic[T]):
    """A key started in its thread: its turn, and its result or error once done."""

    start: KeyStart
    turn: KeyTurn = field(default_factory=KeyTurn)
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    thread: threading.Thread | None = None


class KeyPipeline(Generic[T]):
    """Tunes keys one after the other, in the order :meth:`tune` is called; with ``enabled``,
    each call also starts the following key ahead. Without it every key runs in the calling
    thread, as before. :meth:`close` (always: ``with``) stops a key still running."""

    def __init__(self, context: Any, enabled: bool):
        self.context = context
        self.enabled = enabled
        self._ahead: _Running | None = None
        self._current: _Running | None = None

    def __enter__(self) -> KeyPipeline[T]:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def tune(self, start: KeyStart, following: KeyStart | None = None) -> T:
        """Tune the key of ``start`` now (the one started ahead, if it is), starting
        ``following`` ahead; its result (an error of its work is raised here)."""
        if not self.enabled:
            return start(False)()
        running = self._ahead if self._ahead is not None and self._ahead.start is start \
            else self._begin(start, False)
        self._ahead = None
        self._current = running
        running.turn.open()
        if following is not None:
            self._ahead = self._begin(following, True)
        while not running.done.wait(0.5):  # (a timeout: Ctrl-C is seen at once)
            pass
        self._current = None
        if running.error is not None:
            raise running.error
        return running.result

    def _begin(self, start: KeyStart, ahead: bool) -> _Running:
        running = _Running(start)
        work = start(ahead)
        context = contextvars.copy_context()  # the database, settings and observers in use

        def body() -> None:
            try:
                # builds render (and compile) in helper processes, as the search's
                # compile-ahead threads do: a key's thread must not hold the interpreter lock
                # for long while the other key enqueues its timed work
                with self.context.thread_scope(), running.turn.scope(), builds_in_helpers():
                    running.result = work()
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                running.error = exc
            finally:
                running.done.set()

        running.thread = threading.Thread(target=context.run, args=(body,), daemon=True,
                                          name="autotune-warm-key")
        running.thread.start()
        return running

    def close(self) -> None:
        """Cancel the keys still running (their next device command raises
        :class:`TurnCancelled`) and wait for their threads."""
        for running in (self._current, self._ahead):
            if running is not None:
                running.turn.cancel()
        for running in (self._current, self._ahead):
            if running is not None and running.thread is not None:
                running.thread.join()
        self._current = self._ahead = None

