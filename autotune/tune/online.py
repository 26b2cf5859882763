"""Online tuning: tune a kernel's launch parameters while the real work runs.

Each launch of an iterative computation is wrapped in ``with tuner.measure(queue) as params``.
While *scanning*, every launch uses the next candidate and is timed with device events that are
read later, when they have finished (never stalling the host in the hot path); after ``samples``
launches of every valid candidate, the median of each decides, and the tuner *locks* on the best
for ``period`` seconds, then scans again to follow changes. A launch that fails skips its
candidate for the rest of the scan. The best of each scan is stored in the tuning database under
the same kind of key as an offline result, with its trials, so the next process starts locked.

Locked, ``measure`` returns one preallocated object: no device work, no allocation, no lock.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

import autotune

from .. import accel
from .decorator import _TrialWriter, get_store, test_mode
from .encoding import (
    InvalidParametersError,
    decode_parameters,
    encode_arguments,
    encode_parameters,
    validate_parameters,
    validate_test_parameters,
)
from .records import ResultOrigin, TrialRecord, TrialStatus, TuningKey, TuningRecord
from .space import Space, SpaceError
from .store import StoreError, database_url
from .validation import record_problem

logger = logging.getLogger("autotune.tune")

#: Timers (device event pairs) a tuner keeps per queue; more launches in flight wait for the oldest.
TIMERS_PER_QUEUE = 32
DEFAULT_SAMPLES = 5
DEFAULT_PERIOD = 600.0


class OnlineTuningError(ValueError):
    """An online tuner was set up with values it cannot use."""


class _Locked:
    """What ``measure`` returns while locked: enters to the locked parameters, does nothing."""

    __slots__ = ("params",)

    def __init__(self, params: Mapping[str, Any]):
        self.params = params

    def __enter__(self) -> Mapping[str, Any]:
        return self.params

    def __exit__(self, *exc: Any) -> None:
        return None


@dataclass
class _Candidate:
    params: Mapping[str, Any]
    samples: list[float] = field(default_factory=list)
    launched: int = 0
    failed: str = ""
    status: TrialStatus = TrialStatus.OK


class _ScanLaunch:
    """One timed launch of a candidate while scanning (reused: one per tuner)."""

    __slots__ = ("tuner", "queue", "candidate", "timer")

    def __init__(self, tuner: OnlineTuner):
        self.tuner = tuner
        self.queue: accel.CommandQueue | None = None
        self.candidate: _Candidate | None = None
        self.timer: accel.IntervalTimer | None = None

    def __enter__(self) -> Mapping[str, Any]:
        assert self.timer is not None and self.candidate is not None
        self.timer.start()
        return self.candidate.params

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.tuner._end_launch(self, error)


class OnlineTuner:
    """Tunes one kernel configuration while it runs (see the module docstring).

    ``name`` (a qualified name such as ``"mylib.Stencil.step"``), ``arguments`` (what the kernel
    is tuned for: sizes, dtypes), ``version`` and the context's device make the tuning key, as
    for offline results: a stored result for the key, online or offline, is used at once.
    ``space`` is a dict of parameter lists or a :class:`~autotune.tune.Space` (its restrictions,
    where the device's limits belong, are honoured); ``test`` the parameters used under pytest
    and the schema every stored result must match. ``samples`` launches per candidate are timed
    (the median decides); ``period`` seconds after locking, the tuner scans again. ``db`` is a
    path or URL (default: the configured database).

    Thread-safe: launches of several threads may share one tuner; scanning serialises them.
    """

    def __init__(self, context: accel.Context, name: str, space: Mapping[str, Any] | Space,
                 test: dict[str, Any], *, arguments: dict[str, Any] | None = None,
                 version: int = 0, samples: int = DEFAULT_SAMPLES, period: float = DEFAULT_PERIOD,
                 db: str | None = None):
        device = getattr(context, "device", None)
        if not isinstance(device, accel.DeviceIdentity):
            raise OnlineTuningError(f"OnlineTuner needs an autotune.accel context, got "
                                    f"{type(context).__name__}")
        if not isinstance(name, str) or not name.strip():
            raise OnlineTuningError(f"OnlineTuner name must be a non-empty string, got {name!r}")
        if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 1000:
            raise OnlineTuningError(f"samples={samples!r}: give an int from 1 to 1000")
        if isinstance(period, bool) or not isinstance(period, (int, float)) or \
                not (period > 0 and math.isfinite(period)):
            raise OnlineTuningError(f"period={period!r}: give a positive number of seconds")
        if isinstance(version, bool) or not isinstance(version, int):
            raise OnlineTuningError(f"version={version!r}: give an int")
        try:
            self.space = space if isinstance(space, Space) else Space(space)
            self.test = validate_test_parameters(test)
            configurations = self.space.configurations()
        except (SpaceError, TypeError, ValueError) as exc:
            raise OnlineTuningError(f"OnlineTuner {name}: {exc}") from None
        if set(self.test) != set(self.space.names):
            raise OnlineTuningError(f"OnlineTuner {name}: test= names {sorted(self.test)} differ "
                                    f"from the space's {sorted(self.space.names)}")
        if not configurations:
            raise OnlineTuningError(f"OnlineTuner {name}: the restrictions exclude every "
                                    "configuration of the space")
        self.name = name
        self.samples = samples
        self.period = float(period)
        self.key = TuningKey(function=name, version=version, device_name=device.name,
                             device_platform=device.platform, driver_version=device.driver_version,
                             arguments=encode_arguments(arguments or {}))
        self.fingerprint = hashlib.sha256(json.dumps(
            {"online": name, "space": {n: list(v) for n, v in self.space.parameters.items()}},
            sort_keys=True).encode()).hexdigest()
        self._configurations = sorted(configurations, key=lambda c: c != self.test)  # test= first
        self._url = database_url(db)
        self._lock = threading.Lock()
        self._launch = _ScanLaunch(self)
        self._timers: dict[int, list[accel.IntervalTimer]] = {}
        self._pending: deque[tuple[_Candidate, accel.IntervalTimer]] = deque()
        self._candidates: list[_Candidate] = []
        self._next = 0
        self._scan_started = 0.0
        self._locked: _Locked | None = None
        self._rescan_at = math.inf
        self.best_seconds: float | None = None
        self.scans = 0
        self.stored = False
        self.off_best_seconds = 0.0  #: device time of scan launches beyond the best's time
        if test_mode.active and not (test_mode.force or test_mode.cached):
            self._lock_on(dict(self.test), math.inf)  # under pytest: test=, nothing tuned
        elif not (test_mode.active and test_mode.force):
            self._load()
        if self._locked is None:
            self._start_scan()

    # -- public -------------------------------------------------------------------------------

    @property
    def best(self) -> dict[str, Any] | None:
        """The locked parameters once a scan has finished (or a stored result was found), else
        None."""
        locked = self._locked
        return dict(locked.params) if locked is not None else None

    @property
    def scanning(self) -> bool:
        return self._locked is None or bool(self._candidates)

    def measure(self, queue: accel.CommandQueue) -> Any:
        """A context manager around one launch on ``queue``: it enters to the parameters this
        launch must use. ``queue`` must be timed (``context.create_command_queue(timed=True)``)."""
        locked = self._locked
        if locked is not None and not self._candidates:
            if time.monotonic() < self._rescan_at:
                return locked
            with self._lock:
                if not self._candidates and time.monotonic() >= self._rescan_at:
                    self._start_scan()
        return self._begin_launch(queue)

    def finish_scan(self) -> None:
        """Wait for the launches timed so far and, if every candidate has its samples, lock."""
        with self._lock:
            self._collect(wait=True)
            self._maybe_lock()

    # -- scanning -----------------------------------------------------------------------------

    def _start_scan(self) -> None:
        self._candidates = [_Candidate(MappingProxyType(dict(c))) for c in self._configurations]
        self._next = 0
        self._scan_started = time.monotonic()
        self.scans += 1
        logger.info("online tuning %s on %s: scanning %d configurations, %d launches each",
                    self.name, self.key.device_name, len(self._candidates), self.samples)

    def _next_candidate(self) -> _Candidate | None:
        """Round-robin over the candidates still short of samples (a drift in the device's speed
        then affects every candidate alike)."""
        alive = [c for c in self._candidates if not c.failed and c.launched < self.samples]
        if not alive:
            return None
        fewest = min(c.launched for c in alive)
        for offset in range(len(self._candidates)):
            c = self._candidates[(self._next + offset) % len(self._candidates)]
            if not c.failed and c.launched == fewest:
                self._next = (self._next + offset + 1) % len(self._candidates)
                return c
        return None  # not reached

    def _begin_launch(self, queue: accel.CommandQueue) -> Any:
        self._lock.acquire()
        try:
            self._collect(wait=False)
            candidate = self._next_candidate()
            if candidate is None:  # all launched; the last timings are still in flight
                self._collect(wait=True)
                self._maybe_lock()
                self._lock.release()
                return self.measure(queue)
            timer = self._free_timer(queue)
            candidate.launched += 1
            self._launch.queue, self._launch.candidate, self._launch.timer = queue, candidate, timer
            return self._launch  # the lock is held until its __exit__
        except BaseException:
            self._lock.release()
            raise

    def _end_launch(self, launch: _ScanLaunch, error: BaseException | None) -> None:
        try:
            candidate, timer = launch.candidate, launch.timer
            assert candidate is not None and timer is not None
            timer.stop()
            if error is not None:
                candidate.failed = f"{type(error).__name__}: {error}"[:2000]
                candidate.status = (TrialStatus.LAUNCH_ERROR if isinstance(error, accel.AccelError)
                                    else TrialStatus.ERROR)
                logger.warning("online tuning %s: %s failed (%s); it is skipped for this scan",
                               self.name, dict(candidate.params), candidate.failed)
                self._release(timer)
            else:
                self._pending.append((candidate, timer))
            if self._next_candidate() is None:
                self._collect(wait=True)
                self._maybe_lock()
        finally:
            launch.candidate = launch.timer = launch.queue = None
            self._lock.release()

    def _free_timer(self, queue: accel.CommandQueue) -> accel.IntervalTimer:
        pool = self._timers.setdefault(id(queue), [])
        if pool:
            return pool.pop()
        in_flight = sum(1 for _, t in self._pending if t.queue is queue)
        if in_flight >= TIMERS_PER_QUEUE:
            self._collect(wait=True, queue=queue, one=True)
            return pool.pop()
        return queue.interval_timer()

    def _release(self, timer: accel.IntervalTimer) -> None:
        self._timers.setdefault(id(timer.queue), []).append(timer)

    def _collect(self, *, wait: bool, queue: accel.CommandQueue | None = None,
                 one: bool = False) -> None:
        """Read finished timings (in launch order); ``wait``: also wait for unfinished ones."""
        kept: deque[tuple[_Candidate, accel.IntervalTimer]] = deque()
        while self._pending:
            candidate, timer = self._pending.popleft()
            if (queue is not None and timer.queue is not queue) or not (wait or timer.ready()):
                kept.append((candidate, timer))
                continue
            candidate.samples.append(timer.seconds())
            self._release(timer)
            if one:
                break
        kept.extend(self._pending)
        self._pending = kept

    def _maybe_lock(self) -> None:
        if not self._candidates or self._pending or self._next_candidate() is not None:
            return
        timed = [c for c in self._candidates if not c.failed and c.samples]
        candidates, self._candidates = self._candidates, []
        if not timed:
            logger.warning("online tuning %s on %s: every candidate failed; using test= %s",
                           self.name, self.key.device_name, self.test)
            self._lock_on(dict(self.test), time.monotonic() + self.period)
            return
        medians = {id(c): statistics.median(c.samples) for c in timed}
        best = min(timed, key=lambda c: medians[id(c)])
        self.best_seconds = medians[id(best)]
        self.off_best_seconds += sum(s - self.best_seconds for c in timed for s in c.samples
                                     if c is not best and s > self.best_seconds)
        self._lock_on(dict(best.params), time.monotonic() + self.period)
        logger.info("online tuning %s on %s: locked on %s (%.3g s a launch) after %.3g s",
                    self.name, self.key.device_name, dict(best.params), self.best_seconds,
                    time.monotonic() - self._scan_started)
        self._store(best, candidates, medians)

    def _lock_on(self, params: dict[str, Any], rescan_at: float) -> None:
        self._rescan_at = rescan_at
        self._locked = _Locked(MappingProxyType(params))

    # -- the database -------------------------------------------------------------------------

    def _load(self) -> None:
        """Lock on the stored result for this key, if one is usable."""
        try:
            record = get_store(self._url).get(self.key)
        except StoreError as exc:
            logger.info("online tuning %s: no stored result read (%s)", self.name, exc)
            return
        if record is None:
            return
        problem = record_problem(record, self.test)
        if problem is None:
            try:
                params = validate_parameters(decode_parameters(record.parameters), self.test)
                problem = self.space.why_not(params)
            except InvalidParametersError as exc:
                problem = str(exc)
        if problem is not None:
            logger.warning("ignoring stored result for online tuner %s on %s: %s; it will be "
                           "tuned again", self.name, self.key.device_name, problem)
            return
        self.best_seconds = record.score if math.isfinite(record.score) else None
        self._lock_on(params, time.monotonic() + self.period)

    def _store(self, best: _Candidate, candidates: list[_Candidate],
               medians: dict[int, float]) -> None:
        store = get_store(self._url)
        writer = _TrialWriter(store, self.key, self.fingerprint)
        test = next((c for c in candidates if dict(c.params) == self.test), None)
        writer.buffer = [TrialRecord(
            key=self.key, parameters=encode_parameters(dict(c.params)), status=c.status.value,
            message=c.failed, min_seconds=min(c.samples) if c.samples and not c.failed else None,
            median_seconds=medians.get(id(c)), max_seconds=max(c.samples) if c.samples and not c.failed else None,
            fingerprint=self.fingerprint) for c in candidates if c.samples or c.failed]
        search = {"strategy": "online", "samples": self.samples, "period": self.period,
                  "configurations": len(candidates), "measured": len(medians),
                  "test": self.test, "test_seconds": medians.get(id(test)) if test else None,
                  "seconds": round(time.monotonic() - self._scan_started, 3)}
        record = TuningRecord(
            key=self.key, parameters=encode_parameters(dict(best.params)), score=medians[id(best)],
            package_version=autotune.__version__, fingerprint=self.fingerprint,
            search=json.dumps(search, sort_keys=True, separators=(",", ":")),
            origin=ResultOrigin.ONLINE.value)
        self.stored = writer.finish(record, dict(best.params))
