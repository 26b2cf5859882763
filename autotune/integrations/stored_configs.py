"""The best of a fixed list of launch configurations, chosen once and kept in the tuning
database, per configuration.

This is the storage half of :mod:`autotune.integrations.triton`, written without Triton: a
configuration is a dict of plain values (``{"BLOCK": 128, "num_warps": 4}``), and a benchmark
is a callable that times the configuration at an index (seconds, or a :class:`Timing`) or
raises :class:`ConfigFailed` for one that cannot run (out of resources, a compile error).

What is stored, per tuning key (function, version, device, arguments):

- a *trial* per configuration timed, whose fingerprint is the kernel's source digest: a
  timing stays valid as long as the kernel source (and the key) does, whatever else is in the
  configuration list;
- the *result*: the fastest configuration of the list, whose fingerprint is a digest of the
  source digest and the whole list.

A lookup serves the result when its fingerprint matches (nothing is timed). Otherwise it takes
every stored trial of the current source, times only the configurations without one, stores
their trials and the new result in one transaction, and serves the fastest. So a changed
list re-times only its new configurations; a changed kernel source re-times them all.
Everything read from the database is checked as data (:func:`~autotune.tune.trial_problem`);
a row that fails the check is ignored, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..tune.serving import get_store, serving
from ..tune.encoding import encode_key_arguments, encode_parameters
from ..tune.records import TrialRecord, TrialStatus, TuningKey, TuningRecord
from ..tune.store import StoreError, database_url
from ..tune.validation import parameters_problem, record_problem, trial_problem

logger = logging.getLogger("autotune.integrations")


class ConfigFailed(Exception):
    """A configuration that cannot run here (its benchmark raises this): it is recorded with
    ``status`` and never chosen, and not timed again for the same source."""

    def __init__(self, message: str, status: TrialStatus = TrialStatus.LAUNCH_ERROR):
        super().__init__(message)
        self.status = TrialStatus(status)


class NoConfigurationError(RuntimeError):
    """Every configuration of the list failed for a key."""


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one configuration: the median ranks; ``low`` and ``high`` are
    what the benchmark reports around it (Triton's do_bench: the 20 % and 80 % quantiles)."""

    median: float
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Choice:
    """The configuration served for a key, and how it was found."""

    index: int  #: position in the configuration list given
    parameters: dict[str, Any]
    seconds: float  #: its median seconds per call (as stored, or timed now)
    #: ``memory`` (this process), ``database`` (a stored result), ``benchmark``, ``single``
    #: (a list of one: launched untimed) or ``test`` (under pytest: the first, untimed)
    how: str
    timed: tuple[int, ...] = ()  #: the indices timed by this lookup
    reused: int = 0  #: configurations whose stored trial was used instead of timing them


def digest(text: str) -> str:
    """SHA-256 (hex) of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


def check_configs(configs: Sequence[dict[str, Any]], what: str = "configs") -> list[str]:
    """The stored text of each configuration; ValueError naming the first bad one or a
    repeated one."""
    if not configs:
        raise ValueError(f"{what}: give at least one configuration")
    texts = []
    for i, params in enumerate(configs):
        text = encode_parameters(params) if isinstance(params, dict) else repr(params)
        problem = parameters_problem(text) if isinstance(params, dict) else "not a dict"
        if problem:
            raise ValueError(f"{what}[{i}] {params!r}: {problem}")
        if text in texts:
            raise ValueError(f"{what}[{i}] repeats {what}[{texts.index(text)}] ({text})")
        texts.append(text)
    return texts


def list_fingerprint(source_digest: str, texts: Sequence[str]) -> str:
    """The result's fingerprint: the source digest and the configurations, in any order."""
    return digest(json.dumps({"source": source_digest, "configs": sorted(texts)},
                             sort_keys=True, separators=(",", ":")))


@dataclass
class StoredChoices:
    """The choices of one kernel: its key's function, version, device and source digest are
    fixed; the arguments part and the configuration list come with each lookup.

    ``database`` is a path or SQLAlchemy URL (None: ``AUTOTUNE_DB``, or the default file, read
    at each lookup that misses this process's memory). A database that cannot be read or
    written costs a warning, not the launch: the choice is then timed and kept in memory.
    """

    function: str
    source_digest: str
    device: tuple[str, str, str]  #: device name, platform, driver (and compiler) version
    version: int = 0
    database: str | None = None
    sources_name: str = "kernel"  #: the name the source digest is stored under
    _memo: dict[tuple[str, str], Choice] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def key(self, arguments: dict[str, Any]) -> TuningKey:
        """The tuning key of ``arguments`` (canonical JSON; ValueError for values that cannot
        be part of a key)."""
        try:
            text = encode_key_arguments(arguments)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self.function}: {exc}") from None
        return TuningKey(self.function, self.version, *self.device, text)

    def choose(self, arguments: dict[str, Any], configs: Sequence[dict[str, Any]],
               benchmark: Callable[[int], Timing | float]) -> Choice:
        """The configuration to launch for ``arguments``: remembered, stored, or timed now
        (only those without a stored timing for this source)."""
        texts = check_configs(configs)
        key = self.key(arguments)
        if self.database is None and serving().test.returns_test:
            return Choice(0, dict(configs[0]), math.inf, "test")
        if len(texts) == 1:  # nothing to choose (as Triton's autotuner, which times nothing)
            return Choice(0, dict(configs[0]), math.inf, "single")
        fingerprint = list_fingerprint(self.source_digest, texts)
        memo_key = (key.arguments, fingerprint)
        with self._lock:
            known = self._memo.get(memo_key)
            if known is not None:
                return Choice(known.index, dict(known.parameters), known.seconds, "memory")
            choice = self._stored(key, fingerprint, texts, configs)
            if choice is None:
                choice = self._tune(key, fingerprint, texts, configs, benchmark)
            self._memo[memo_key] = choice
            return choice

    def forget(self) -> None:
        """Forget this process's choices (the database keeps them)."""
        with self._lock:
            self._memo.clear()

    # -- the database ------------------------------------------------------------------------

    def _url(self) -> str:
        return database_url(self.database)

    def _stored(self, key: TuningKey, fingerprint: str, texts: list[str],
                configs: Sequence[dict[str, Any]]) -> Choice | None:
        try:
            record = get_store(self._url()).get(key)
        except StoreError as exc:
            logger.warning("%s: the tuning database could not be read (%s); timing the "
                           "configurations in this process", self.function, exc)
            return None
        if record is None or record.fingerprint != fingerprint or record_problem(record):
            return None
        if record.parameters not in texts or not math.isfinite(record.score):
            return None
        index = texts.index(record.parameters)
        return Choice(index, dict(configs[index]), record.score, "database")

    def _known_trials(self, key: TuningKey, texts: list[str]) -> dict[str, TrialRecord]:
        """The latest well-formed stored trial of each listed configuration, for this source."""
        try:
            trials = get_store(self._url()).trials(key)
        except StoreError as exc:
            logger.warning("%s: stored trials could not be read (%s)", self.function, exc)
            return {}
        known: dict[str, TrialRecord] = {}
        for trial in trials:  # oldest first: a later trial of a configuration replaces it
            if trial.fingerprint != self.source_digest or trial.parameters not in texts:
                continue
            if trial_problem(trial):
                continue
            if trial.status == TrialStatus.OK.value and trial.median_seconds is None:
                continue
            known[trial.parameters] = trial
        return known

    def _tune(self, key: TuningKey, fingerprint: str, texts: list[str],
              configs: Sequence[dict[str, Any]],
              benchmark: Callable[[int], Timing | float]) -> Choice:
        started = time.perf_counter()
        known = self._known_trials(key, texts)
        reused = len(known)
        new: list[TrialRecord] = []
        try:
            for i, text in enumerate(texts):
                if text not in known:
                    trial = self._time(key, text, i, benchmark)
                    new.append(trial)
                    known[text] = trial
        except BaseException:
            self._save(None, new)  # what was timed before the error is kept
            raise
        seconds = {t: known[t].median_seconds for t in texts
                   if known[t].status == TrialStatus.OK.value}
        if not seconds:
            first = known[texts[0]]
            raise NoConfigurationError(
                f"{self.function}: every one of the {len(texts)} configurations failed for "
                f"{key.arguments} (the first: {first.status}: {first.message[:200]})")
        best = min(seconds, key=lambda t: (seconds[t], texts.index(t)))
        index = texts.index(best)
        search = {"strategy": "brute_force", "configurations": len(texts), "measured": len(new),
                  "reused": reused, "trials": len(new),
                  "seconds": round(time.perf_counter() - started, 3)}
        record = TuningRecord(key, best, float(seconds[best]), _package_version(),
                              fingerprint=fingerprint,
                              sources=json.dumps({self.sources_name: self.source_digest},
                                                 sort_keys=True, separators=(",", ":")),
                              search=json.dumps(search, sort_keys=True, separators=(",", ":")))
        self._save(record, new)
        return Choice(index, dict(configs[index]), float(seconds[best]), "benchmark",
                      tuple(texts.index(t.parameters) for t in new), reused)

    def _time(self, key: TuningKey, text: str, index: int,
              benchmark: Callable[[int], Timing | float]) -> TrialRecord:
        try:
            timing = benchmark(index)
        except ConfigFailed as exc:
            return TrialRecord(key, text, exc.status.value, f"{type(exc).__name__}: {exc}"[:2000],
                               fingerprint=self.source_digest)
        if not isinstance(timing, Timing):
            timing = Timing(float(timing))
        median = float(timing.median)
        if not (math.isfinite(median) and median > 0):
            raise ValueError(f"{self.function}: the benchmark of configuration {index} returned "
                             f"{timing.median!r}; it must return positive seconds")
        return TrialRecord(key, text, TrialStatus.OK.value, "", _seconds(timing.low), median,
                           _seconds(timing.high), fingerprint=self.source_digest)

    def _save(self, record: TuningRecord | None, trials: list[TrialRecord]) -> None:
        if record is None and not trials:
            return
        try:
            get_store(self._url()).save(record, trials)
        except StoreError as exc:
            logger.warning("%s: the result could not be stored (%s); it is kept in this "
                           "process only", self.function, exc)


def _seconds(value: float | None) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def _package_version() -> str:
    import autotune

    return autotune.__version__


__all__ = ["Choice", "ConfigFailed", "NoConfigurationError", "StoredChoices", "Timing",
           "check_configs", "digest", "list_fingerprint"]
