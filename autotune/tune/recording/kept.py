"""Results a database could not take (a full disk, a server outage, a busy lock), kept in the
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
from ..store import ReadOnlyStoreError, ResultStore, StoreError, display
from ..store import settings

logger = logging.getLogger("autotune.tune")

#: How long the last try at exit waits for another process's write lock.
AT_EXIT_WAIT_SECONDS = 5.0

_Write = tuple[TuningRecord, list[TrialRecord]]


class KeptResults:
    """The results kept for each database, oldest first, and the thread that retries them."""

    def __init__(self) -> None:
        self._queue: dict[str, list[_Write]] = {}
        self._stores: dict[str, ResultStore] = {}
        self._lock = threading.Lock()
        #: held while kept results are written and by :meth:`in_order`, so that a kept result
        #: is never written after a newer one for its key
        self._order = threading.RLock()
        self._retrier: tuple[int, threading.Thread] | None = None
        self._exit_registered = False

    def keep(self, store: ResultStore, record: TuningRecord, trials: Sequence[TrialRecord]) -> None:
        """Keep a result (and its run's trials) that ``store`` could not take, to write it later."""
        with self._lock:
            self._queue.setdefault(store.url, []).append((record, list(trials)))
            self._stores[store.url] = store
            if not self._exit_registered:
                self._exit_registered = True
                atexit.register(self._at_exit)
        self._start_retrier()

    def waiting(self, url: str | None = None) -> list[TuningKey]:
        """The keys of the results kept for ``url`` (every database if None), oldest first."""
        with self._lock:
            return [record.key for u, writes in self._queue.items() if url in (None, u)
                    for record, _ in writes]

    def in_order(self) -> threading.RLock:
        """A lock to hold around :meth:`write_pending` and the write of a new result: kept
        results are then written before it, never after (by the retry thread)."""
        return self._order

    def write_pending(self, store: ResultStore) -> int:
        """Write the results kept for ``store``'s database, oldest first, stopping at the first
        that fails (it and the later ones stay kept). Returns how many are still kept."""
        with self._order:
            return self._write_pending(store)

    def _write_pending(self, store: ResultStore) -> int:
        # A kept result stays in the queue (and in waiting()) until it is written: only the
        # writer holding _order takes the head off, and keep() adds at the end.
        written = 0
        try:
            while True:
                with self._lock:
                    writes = self._queue.get(store.url)
                    if not writes:
                        break
                    head = writes[0]
                store.save(*head)
                with self._lock:
                    if self._queue[store.url] and self._queue[store.url][0] is head:
                        self._queue[store.url].pop(0)
                written += 1
        except ReadOnlyStoreError as exc:  # it will never take them: say so once, drop them
            with self._lock:
                dropped = self._queue.pop(store.url, [])
            logger.warning("%d tuned result(s) kept for %s cannot be stored: %s", len(dropped),
                           display(store.url), exc)
        except StoreError:
            pass
        with self._lock:
            left = len(self._queue.get(store.url, ()))
        if written:
            logger.info("wrote %d tuning result(s) kept in this process to %s", written,
                        display(store.url))
        return left

    def _write_all(self) -> int:
        with self._lock:
            stores = [self._stores[url] for url in self._queue if self._queue[url]]
        return sum(self.write_pending(store) for store in stores)

    def _retry_loop(self) -> None:
        while True:
            time.sleep(settings.retry_seconds())
            if self._write_all() == 0:
                with self._lock:  # stop only while nothing is kept (keep() starts a new thread)
                    if not any(self._queue.values()):
                        self._retrier = None
                        return

    def _start_retrier(self) -> None:
        with self._lock:
            if self._retrier is not None and self._retrier[0] == os.getpid() and \
                    self._retrier[1].is_alive():
                return
            thread = threading.Thread(target=self._retry_loop, name="autotune-store-retry",
                                      daemon=True)
            self._retrier = (os.getpid(), thread)
        thread.start()

    def _at_exit(self) -> None:
        """Try once more to write what was kept, waiting at most :data:`AT_EXIT_WAIT_SECONDS`
        for a lock; what still cannot be written is lost with the process: say how much, and
        how to get it back."""
        with self._lock:
            kept = [self._stores[url] for url in self._queue if self._queue[url]]
        if not kept:
            return
        settings.BUSY_TIMEOUT_SECONDS = min(settings.BUSY_TIMEOUT_SECONDS, AT_EXIT_WAIT_SECONDS)
        for store in kept:
            store.dispose()  # new connections take the shorter busy timeout
        self._write_all()
        with self._lock:
            left = {url: len(writes) for url, writes in self._queue.items() if writes}
        for url, count in left.items():
            logger.warning("%d tuned result(s) could not be stored in %s before the process "
                           "ended; they were used in this process only (tune them again, e.g. "
                           "python -m autotune warm)", count, display(url))
