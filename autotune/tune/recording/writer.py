"""The one background thread that writes online tuners' results, in the order their scans
finish: the launching thread never waits on a database."""

from __future__ import annotations

import concurrent.futures
import os
import threading
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
