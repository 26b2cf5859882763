"""Serving: the process state both doors of the tuner share, in one object.

A tuned call (:class:`~autotune.tune.decorator.TunedFunction`) and an online tuner
(:class:`~autotune.tune.online.OnlineTuner`) read results from the same stores, remember them in
the same memo, and write through the same recording machinery. All of that state lives in one
:class:`Serving` object: the process has a default one, and :func:`using_serving` swaps in
another for a block (a test, an application that wants a private memo and its own match mode),
as katsdpsigproc swaps its ``autotuner_impl``.

Nothing else in :mod:`autotune.tune` keeps module-level mutable state.
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .records import TuningKey
from .recording.kept import KeptResults
from .recording.writer import NoteThreads, ResultsWriter
from .store import ResultStore

ENV_MATCH = "AUTOTUNE_MATCH"


class MatchMode(str, enum.Enum):
    """How a stored result is matched to this device (``AUTOTUNE_MATCH``)."""

    EXACT = "exact"  #: this device, platform and driver only
    NEAREST = "nearest"  #: else the same device on another driver, platform, then any device
    #: else the nearest tuned size of the same function and device whose parameters fit this
    #: call (the arguments its template declares in ``autotune_similar``), then as ``nearest``
    SIMILAR = "similar"

    def __str__(self) -> str:
        return self.value


MATCH_MODES = tuple(m.value for m in MatchMode)


class ConfigurationError(ValueError):
    """An environment variable or setting has a value autotune does not accept."""


def match_mode(value: str | None = None) -> str:
    """``value``, else ``AUTOTUNE_MATCH`` (read now), checked: ``exact`` (default),
    ``nearest`` or ``similar``."""
    if value is None:
        value = os.environ.get(ENV_MATCH, "")
    mode = value.strip().lower() or MatchMode.EXACT.value
    if mode not in MATCH_MODES:
        raise ConfigurationError(
            f"{ENV_MATCH}={value!r} is not understood; use 'exact' (the default), 'nearest' "
            "or 'similar'")
    return mode


@dataclass
class TestMode:
    """Set by the pytest plugin. Active: return ``test=`` instead of tuning, unless ``force``
    (always run the tuning function, no caching) or ``cached`` (tune on a miss and serve
    hits, as outside tests)."""

    __test__ = False  # (not a test class for pytest)

    active: bool = False
    force: bool = False
    cached: bool = False

    @property
    def returns_test(self) -> bool:
        """Calls return ``test=`` without looking at any database."""
        return self.active and not (self.force or self.cached)


MemoKey = tuple[str, str, TuningKey]  #: (database URL, match mode, key)


class Serving:
    """What serving tuned calls needs for a process: the memo of results already served, the
    stores opened (one per URL), a lock per key (two threads asking for one key tune it once),
    the test mode the pytest plugin sets, the match mode, which warnings were given, results
    kept until a database takes them, the one thread that writes online results, and the
    threads that write notes of similar serves.

    ``match``: ``"exact"``, ``"nearest"`` or ``"similar"`` for every call served through this
    object; None (default) reads ``AUTOTUNE_MATCH`` at each call.
    """

    def __init__(self, *, match: str | None = None):
        self.test = TestMode()
        self.match = None if match is None else match_mode(match)
        self.kept = KeptResults()
        self.writer = ResultsWriter()
        self.notes = NoteThreads()
        self._memo: dict[MemoKey, dict[str, Any]] = {}
        self._stores: dict[str, ResultStore] = {}
        self._key_locks: dict[tuple[str, TuningKey], threading.Lock] = {}
        self._warned: set[tuple[str, str]] = set()
        self._contexts: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._announced = threading.Event()

    def __repr__(self) -> str:
        return (f"<Serving match={self.match or 'from ' + ENV_MATCH} test={self.test} "
                f"memo={len(self._memo)} stores={sorted(self._stores)}>")

    def match_mode(self) -> str:
        """This object's match mode, else ``AUTOTUNE_MATCH`` (read now)."""
        return self.match if self.match is not None else match_mode()

    def store(self, url: str) -> ResultStore:
        """The store for ``url``, opened once (a server is not connected to yet: one that is
        down fails the first read, which the tuner survives, not the opening)."""
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = self._stores[url] = ResultStore(url, connect=False)
            return store

    # -- the memo ---------------------------------------------------------------------------

    def remembered(self, key: MemoKey) -> dict[str, Any] | None:
        """The parameters served for ``key`` earlier in this process (a copy), if any."""
        with self._lock:
            found = self._memo.get(key)
        return None if found is None else dict(found)

    def remember(self, key: MemoKey, parameters: dict[str, Any]) -> None:
        with self._lock:
            self._memo[key] = dict(parameters)

    def clear_memo(self) -> None:
        """Forget the results served so far (the databases are untouched)."""
        with self._lock:
            self._memo.clear()

    def key_lock(self, url: str, key: TuningKey) -> threading.Lock:
        """The lock of one key in one database."""
        with self._lock:
            return self._key_locks.setdefault((url, key), threading.Lock())

    # -- once per process --------------------------------------------------------------------

    def first(self, kind: str, what: str) -> bool:
        """True the first time ``(kind, what)`` is asked for (a warning given once)."""
        with self._lock:
            if (kind, what) in self._warned:
                return False
            self._warned.add((kind, what))
            return True

    def first_tuning(self) -> bool:
        """True for the first tuning this object serves (it is announced louder)."""
        if self._announced.is_set():
            return False
        self._announced.set()
        return True

    def context(self, selector: str, make: Any) -> Any:
        """The device context for ``selector``, made by ``make(selector)`` once."""
        with self._lock:
            context = self._contexts.get(selector)
            if context is None:
                context = self._contexts[selector] = make(selector)
            return context


_process = [Serving()]  #: the process's serving object (swapped by using_serving)
_swap = threading.Lock()


def serving() -> Serving:
    """The serving object tuned calls use now."""
    return _process[0]


@contextlib.contextmanager
def using_serving(state: Serving | None = None) -> Iterator[Serving]:
    """Within the block, every tuned call and online tuner of the process (all threads) uses
    ``state`` (a new :class:`Serving` if None): its own memo, stores, test and match modes.
    The previous object is restored after."""
    state = Serving() if state is None else state
    with _swap:
        previous, _process[0] = _process[0], state
    try:
        yield state
    finally:
        with _swap:
            _process[0] = previous


def get_store(url: str) -> ResultStore:
    """The store for ``url``, opened once per serving object."""
    return serving().store(url)


def clear_memo() -> None:
    """Forget results cached in this process (the database is untouched)."""
    serving().clear_memo()
