"""Results a database could not take (a full disk, a server outage, a busy lock), kept in this
process and written later: before the next result written to the same database, every
:data:`~autotune.tune.store.settings.RETRY_SECONDS` by a background thread while any are
waiting, and once more when the process ends."""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Sequence

from ..records import TrialRecord, TuningKey, TuningRecord
from . import settings
from .location import ReadOnlyStoreError, StoreError, display
from .result_store import ResultStore

logger = logging.getLogger("autotune.tune")

#: How long the last try at exit waits for another process's write lock.
AT_EXIT_WAIT_SECONDS = 5.0

_Write = tuple[TuningRecord, list[TrialRecord]]
_queue: dict[str, list[_Write]] = {}
_stores: dict[str, ResultStore] = {}
_lock = threading.Lock()
#: Held while kept results are written and by :func:`in_order`, so that a kept result is never
#: written after a newer one for its key.
_order = threading.RLock()
_retrier: tuple[int, threading.Thread] | None = None


def keep(store: ResultStore, record: TuningRecord, trials: Sequence[TrialRecord]) -> None:
    """Keep a result (and its run's trials) that ``store`` could not take, to write it later."""
    with _lock:
        _queue.setdefault(store.url, []).append((record, list(trials)))
        _stores[store.url] = store
    _start_retrier()


def waiting(url: str | None = None) -> list[TuningKey]:
    """The keys of the results kept for ``url`` (every database if None), oldest first."""
    with _lock:
        return [record.key for u, writes in _queue.items() if url in (None, u)
                for record, _ in writes]


def in_order() -> threading.RLock:
    """A lock to hold around :func:`write_pending` and the write of a new result: kept results
    are then written before it, never after (by the retry thread)."""
    return _order


def write_pending(store: ResultStore) -> int:
    """Write the results kept for ``store``'s database, oldest first, stopping at the first
    that fails (it and the later ones stay kept). Returns how many are still kept."""
    with _order:
        return _write_pending(store)


def _write_pending(store: ResultStore) -> int:
    # A kept result stays in the queue (and in waiting()) until it is written: only the writer
    # holding _order takes the head off, and keep() adds at the end.
    written = 0
    try:
        while True:
            with _lock:
                writes = _queue.get(store.url)
                if not writes:
                    break
                head = writes[0]
            store.save(*head)
            with _lock:
                if _queue[store.url] and _queue[store.url][0] is head:
                    _queue[store.url].pop(0)
            written += 1
    except ReadOnlyStoreError as exc:  # it will never take them: say so once, drop them
        with _lock:
            dropped = _queue.pop(store.url, [])
        logger.warning("%d tuned result(s) kept for %s cannot be stored: %s", len(dropped),
                       display(store.url), exc)
    except StoreError:
        pass
    with _lock:
        left = len(_queue.get(store.url, ()))
    if written:
        logger.info("wrote %d tuning result(s) kept in this process to %s", written,
                    display(store.url))
    return left


def _write_all() -> int:
    with _lock:
        stores = [_stores[url] for url in _queue if _queue[url]]
    return sum(write_pending(store) for store in stores)


def _retry_loop() -> None:
    global _retrier
    while True:
        time.sleep(settings.retry_seconds())
        if _write_all() == 0:
            with _lock:  # stop only while nothing is kept (keep() starts a new thread after)
                if not any(_queue.values()):
                    _retrier = None
                    return


def _start_retrier() -> None:
    global _retrier
    with _lock:
        if _retrier is not None and _retrier[0] == os.getpid() and _retrier[1].is_alive():
            return
        thread = threading.Thread(target=_retry_loop, name="autotune-store-retry", daemon=True)
        _retrier = (os.getpid(), thread)
    thread.start()


@atexit.register
def _at_exit() -> None:
    """Try once more to write what was kept, waiting at most :data:`AT_EXIT_WAIT_SECONDS` for a
    lock; what still cannot be written is lost with the process: say how much, and how to get
    it back."""
    with _lock:
        kept = [_stores[url] for url in _queue if _queue[url]]
    if not kept:
        return
    settings.BUSY_TIMEOUT_SECONDS = min(settings.BUSY_TIMEOUT_SECONDS, AT_EXIT_WAIT_SECONDS)
    for store in kept:
        store.dispose()  # new connections take the shorter busy timeout
    _write_all()
    with _lock:
        left = {url: len(writes) for url, writes in _queue.items() if writes}
    for url, count in left.items():
        logger.warning("%d tuned result(s) could not be stored in %s before the process ended; "
                       "they were used in this process only (tune them again, e.g. python -m "
                       "autotune warm)", count, display(url))
