"""A run's trials, buffered and written in batches, and its result written with them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..encoding import encode_parameters
from ..evaluation import Trial
from ..records import TrialRecord, TuningKey, TuningRecord
from ..store import ReadOnlyStoreError, ResultStore, StoreError, display
from ..store import settings as store_settings
from ..text import guard_logger

if TYPE_CHECKING:
    from ..serving import Serving

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped


class TrialWriter:
    """Buffers a run's trials and writes them in batches; a database that cannot take them
    (read-only, busy) costs a warning, never the tuning. ``serving`` keeps what could not be
    written and remembers which warnings were given."""

    FLUSH_SECONDS = 5.0

    def __init__(self, serving: Serving, store: ResultStore, key: TuningKey, fingerprint: str):
        self.serving = serving
        self.store = store
        self.key = key
        self.fingerprint = fingerprint
        self.buffer: list[TrialRecord] = []
        self.last_flush = time.monotonic()
        self.failed: StoreError | None = None
        self.error: StoreError | None = None  #: why the result was not stored

    def add(self, trial: Trial) -> None:
        """Buffer one trial of the run (written every :attr:`FLUSH_SECONDS`)."""
        self.buffer.append(TrialRecord(
            key=self.key, parameters=encode_parameters(trial.parameters), status=trial.status.value,
            message=trial.message[:2000], min_seconds=trial.min_seconds,
            median_seconds=trial.median_seconds, max_seconds=trial.max_seconds,
            fingerprint=self.fingerprint, gbps=trial.gbps, gflops=trial.gflops))
        if time.monotonic() - self.last_flush > self.FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Write the buffered trials now (kept for the final write if the database refuses)."""
        self.last_flush = time.monotonic()
        if not self.buffer or self.failed is not None or self.store.read_only:
            return
        try:
            self.store.add_trials(self.buffer)
            self.buffer = []
        except StoreError as exc:  # keep them for the final write
            self.failed = exc

    def finish(self, record: TuningRecord, params: dict[str, Any]) -> bool:
        """Write the result with the remaining trials; False (and one warning) if it could not
        be stored. Results that earlier calls could not store are written first; one that
        cannot be written now (a full disk, a server outage, a busy lock) is kept and written
        later (:class:`~.kept.KeptResults`), unless the database is read-only."""
        kept = self.serving.kept
        try:
            with kept.in_order():  # earlier results first, and never after this one
                kept.write_pending(self.store)
                self.store.save(record, self.buffer)
            self.buffer = []
            return True
        except ReadOnlyStoreError as exc:
            self.error = exc
            if self.serving.first("read-only", self.store.url):
                logger.warning("tuning database %s is read-only: results tuned in this process "
                               "(here %s for %s on %s) are used but not stored",
                               display(self.store.url), params, self.key.function,
                               self.key.device_name)
        except StoreError as exc:
            self.error = exc
            kept.keep(self.store, record, self.buffer)
            logger.warning("could not store the tuning result %s for %s on %s: %s; it is used in "
                           "this process and written when the database takes writes again (with "
                           "the next result tuned into it, or retried every %g s, and at exit)",
                           params, self.key.function, self.key.device_name, exc,
                           store_settings.retry_seconds())
        return False
