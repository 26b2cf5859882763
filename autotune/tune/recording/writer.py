"""The background threads that write to the store: the one that writes online tuners'
results, in the order their scans finish (the launching thread never waits on a database),
and the short-lived ones that write notes (a similar serve's row)."""

from __future__ import annotations

import _thread
import atexit
import concurrent.futures
import os
import threading
import time
from collections.abc import Callable
from typing import Any


class ResultsWriter:
    """One writer thread per process (a forked child makes its own: the parent's thread is not
    in it); at exit, it finishes the writes handed to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._executor: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None

    def _thread(self) -> concurrent.futures.ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._executor[0] != os.getpid():
                self._executor = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="autotune-online-store"))
            return self._executor[1]

    def submit(self, write: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Hand ``write(*args)`` to the writer thread; RuntimeError at interpreter shutdown
        (no new threads: the caller writes in place)."""
        return self._thread().submit(write, *args)

    def start(self) -> None:
        """Start the thread now, before the work it must not slow down (a thread's start makes
        the starting thread wait for it); nothing happens at interpreter shutdown."""
        try:
            self._thread().submit(_nothing)
        except RuntimeError:
            pass


def _nothing() -> None:
    """A task that does nothing: handing it to the writer starts the writer's thread."""


class NoteThreads:
    """Notes written in the background, each on a thread of its own that is started without
    waiting for its first turn (``threading.Thread.start`` makes the starting thread wait for
    it: 0.2-0.4 ms on a busy host, on the serving call's path). :meth:`wait` waits for those
    still writing, and so does the interpreter's exit, as it would for ``threading.Thread``
    (at most ``exit_seconds``). A forked child does not wait for its parent's."""

    def __init__(self, exit_seconds: float = 10.0) -> None:
        self.exit_seconds = exit_seconds
        self._lock = threading.Lock()
        self._pending: list[threading.Event] = []
        self._pid = os.getpid()
        self._exit_registered = False

    def start(self, write: Callable[[], None]) -> None:
        """Run ``write`` on a new thread; nothing happens at interpreter shutdown."""
        done = threading.Event()

        def run() -> None:
            try:
                write()
            finally:
                self._finished(done)

        with self._lock:
            self._forget_parent()
            self._pending.append(done)
            register, self._exit_registered = not self._exit_registered, True
        if register:
            atexit.register(self.wait, self.exit_seconds)
        try:
            _thread.start_new_thread(run, ())
        except RuntimeError:  # interpreter shutdown: no note
            self._finished(done)

    def wait(self, timeout: float | None = 30.0) -> None:
        """Wait until the notes started in this process are written, at most ``timeout``
        seconds (None: as long as they take)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                self._forget_parent()
                pending = self._pending[0] if self._pending else None
            if pending is None:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            pending.wait(left)

    def _finished(self, done: threading.Event) -> None:
        with self._lock:
            if done in self._pending:
                self._pending.remove(done)
        done.set()

    def _forget_parent(self) -> None:
        if self._pid != os.getpid():  # a forked child: its parent's threads are not here
            self._pid, self._pending = os.getpid(), []
