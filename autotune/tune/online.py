"""Online tuning: tune a kernel's launch parameters while the real work runs.

Each launch of an iterative computation is wrapped in ``with tuner.measure(queue) as params``.
While *scanning*, every launch uses the next candidate and is timed with device events that are
read later, when they have finished (never stalling the host in the hot path); after ``samples``
launches of every valid candidate, the median of each decides (those within a few percent of the
best are first timed as often again, :data:`REFINE_MARGIN`), and the tuner *locks* on the best
for ``period`` seconds, then scans again to follow changes. A launch that fails skips its
candidate for the rest of the scan. The best of each scan is stored in the tuning database under
the same kind of key as an offline result, with its trials, so the next process starts locked.

Locked, ``measure`` returns one preallocated object: no device work, no allocation, no lock.

Kernels whose parameters are compile-time constants name a ``prepare`` callable: it builds a
candidate's kernels in background threads while the work goes on, and a candidate is launched
only once it is prepared (until then, launches use the fastest candidate timed so far, else
its first seed, else ``test=``). Several kernels sharing one set of parameters (the variants of
a template) name the ``part`` of each launch: each part scans the candidates on its own, and a candidate's score is
its parts' medians weighted by how often each part is launched (seconds per launch of the
mix), so a periodic sequence of different kernels biases no candidate; parts launched rarely
(under ``RARE_PART`` of the launches) do not hold up the scan.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import math
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

import autotune

from .. import accel
from .decorator import Fingerprint, _stale_reason, _TrialWriter, get_store, make_fingerprint, test_mode
from .encoding import (
    InvalidParametersError,
    decode_parameters,
    encode_key_arguments,
    encode_parameters,
    validate_parameters,
    validate_test_parameters,
)
from .records import ResultOrigin, TrialRecord, TrialStatus, TuningKey, TuningRecord
from .space import Space, SpaceError
from .store import StoreError, database_url
from .templates import tuner_of
from .validation import record_problem

logger = logging.getLogger("autotune.tune")

#: Timers (device event pairs) a tuner keeps per queue; more launches in flight wait for the oldest.
TIMERS_PER_QUEUE = 32
DEFAULT_SAMPLES = 5
DEFAULT_PERIOD = 600.0
#: A part launched less often than this share of a scan's launches neither holds up the scan
#: nor counts in the score (a solver's one-off kernel beside the ones its iterations launch).
RARE_PART = 0.05
#: a part with nothing to time skips the full look for this many launches while nothing changes
IDLE_RECHECK = 32
#: After every candidate has its samples, those whose score is within this share of the best's
#: (at most REFINE_AT_MOST of them, the closest) are timed ``samples`` times more before the
#: choice, the others retired: close candidates are told apart by twice the samples, at the
#: cost of launches of near-best candidates only.
REFINE_MARGIN = 0.05
REFINE_AT_MOST = 4
#: The ``budget`` of tuners made by :meth:`OnlineTuner.for_template` with ``prepare`` and no
#: budget of their own (None: scan every candidate); a benchmark sets it to measure one.
TEMPLATE_BUDGET: float | None = None


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
    fixed: _Locked  #: an untimed launch with these parameters
    samples: dict[Hashable, list[float]] = field(default_factory=dict)  #: per part
    medians: dict[Hashable, float] = field(default_factory=dict)  #: of the samples, per part
    launched: dict[Hashable, int] = field(default_factory=dict)  #: per part
    ready: bool = True  #: prepared (compiled) and so launchable in the scan
    failed: str = ""
    status: TrialStatus = TrialStatus.OK
    #: out of the rest of the scan: not among the closest after the first round, or not
    #: prepared within the budget (samples it has still count)
    retired: bool = False

    def short(self, part: Hashable, samples: int) -> bool:
        return self.launched.get(part, 0) < samples


class _ScanLaunch:
    """One timed launch of a candidate while scanning (reused: one per tuner)."""

    __slots__ = ("tuner", "queue", "candidate", "timer", "part")

    def __init__(self, tuner: OnlineTuner):
        self.tuner = tuner
        self.queue: accel.CommandQueue | None = None
        self.candidate: _Candidate | None = None
        self.timer: accel.IntervalTimer | None = None
        self.part: Hashable = None

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
    for offline results: a stored result for the key, online or offline, is used at once unless
    it is stale (tuned against other ``sources`` or another space). ``space`` is a dict of
    parameter lists or a :class:`~autotune.tune.Space` (its restrictions, where the device's
    limits belong, are honoured); ``test`` the parameters used under pytest and the schema every
    stored result must match. ``samples`` launches per candidate are timed (the median decides);
    ``period`` seconds after locking, the tuner scans again. ``db`` is a path or URL (default:
    the configured database). ``sources`` are the kernel template files, whose digests make
    results of an edited kernel stale. ``prepare(params)``, if given, builds a candidate's
    kernels; it runs in ``workers`` background threads and a candidate is scanned once its
    ``prepare`` returned (one that raises is skipped). ``seeds``: configurations of the space
    to build and time first, in order (a parameter left out takes the scan's value where the
    space fixes one, else its ``test=`` value), after what this device chose for the same
    function under other arguments; the first of :attr:`seeds` is what launches use while
    nothing is timed yet (else ``test=``). The scan still visits every candidate, unless
    ``budget`` (seconds, with ``prepare``) is given: the candidates not prepared that long after
    a scan started are left out of it once one is ready (they keep building, and the next scan,
    after ``period``, takes them); the result stored says how many were left out. Slow builds
    then bound the scan's length, at the risk of missing the best until the next scan: give
    seeds. :meth:`for_template` makes a tuner that shares a template's
    offline key (and takes the template's ``autotune_online_seeds`` where it declares them).

    ``comm`` (an mpi4py communicator) makes the tuner *collective*: every rank of an SPMD
    program launches the same sequence through its own tuner, which times its own device; at
    the end of the scan the ranks take, for each candidate, the slowest rank's time (a
    distributed kernel is as fast as its slowest rank) and so lock on the same parameters. Rank 0
    reads and writes the database and tells the others what it found. A collective tuner does
    not rescan (the ranks' clocks would not agree on when) and builds no candidates ahead.

    Thread-safe: launches of several threads may share one tuner; scanning serialises them.
    """

    def __init__(self, context: accel.Context, name: str, space: Mapping[str, Any] | Space,
                 test: dict[str, Any], *, arguments: dict[str, Any] | None = None,
                 version: int = 0, samples: int = DEFAULT_SAMPLES, period: float = DEFAULT_PERIOD,
                 db: str | None = None, sources: Iterable[str | Path] = (),
                 prepare: Callable[[dict[str, Any]], Any] | None = None,
                 workers: int | None = None, comm: Any = None,
                 seeds: Iterable[Mapping[str, Any]] = (), budget: float | None = None,
                 _key: TuningKey | None = None,
                 _fingerprint: Fingerprint | None = None):
        device = getattr(context, "device", None)
        if comm is not None and prepare is not None:
            raise OnlineTuningError(f"OnlineTuner {name}: a collective tuner (comm=) builds its "
                                    "candidates at their first launch, the same on every rank: "
                                    "drop prepare=")
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
        if prepare is not None and not callable(prepare):
            raise OnlineTuningError(f"prepare={prepare!r}: give a function of the parameters")
        if workers is None:
            workers = max(1, min(4, (os.cpu_count() or 2) - 1))
        if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
            raise OnlineTuningError(f"workers={workers!r}: give an int from 1 to 64")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, (int, float))
                                   or not (budget > 0 and math.isfinite(budget))):
            raise OnlineTuningError(f"budget={budget!r}: give a positive number of seconds, or None "
                                    "to scan every candidate")
        if budget is not None and prepare is None:
            raise OnlineTuningError(f"OnlineTuner {name}: budget= bounds the wait for candidates "
                                    "being prepared; without prepare= every candidate is ready at "
                                    "once: drop budget=")
        try:
            self.space = space if isinstance(space, Space) else Space(space)
            self.test = validate_test_parameters(test)
            configurations = self.space.configurations()
            if _fingerprint is None:
                files: dict[str, accel.SourceFile] = {}
                for template in sources:
                    files.update((f.name, f) for f in accel.template_sources(template))
                _fingerprint = make_fingerprint([files[n] for n in sorted(files)], self.space)
        except (SpaceError, TypeError, ValueError, FileNotFoundError) as exc:
            raise OnlineTuningError(f"OnlineTuner {name}: {exc}") from None
        if set(self.test) != set(self.space.names):
            raise OnlineTuningError(f"OnlineTuner {name}: test= names {sorted(self.test)} differ "
                                    f"from the space's {sorted(self.space.names)}")
        declared = self._declared_seeds(name, seeds)
        if not configurations:
            raise OnlineTuningError(f"OnlineTuner {name}: the restrictions exclude every "
                                    "configuration of the space")
        self.context = context
        self.name = name
        self.samples = samples
        self._target = samples  #: launches per part each candidate of this round needs
        self.refined = 0  #: candidates timed in the last scan's second round
        self.period = float(period)
        self.key = _key or TuningKey(
            function=name, version=version, device_name=device.name,
            device_platform=device.platform, driver_version=device.driver_version,
            arguments=encode_key_arguments(arguments or {}))
        self._fingerprint = _fingerprint
        self.fingerprint = _fingerprint.digest
        #: stored results must lie in this space (the template's, where the scan covers part of it)
        self._valid_space = _fingerprint.space or self.space
        self._configurations = sorted(configurations, key=lambda c: c != self.test)  # test= first
        #: scanned first, in order: what this device chose for the same function under other
        #: arguments, then the ``seeds`` given
        self.seeds: list[dict[str, Any]] = []
        self._declared = declared
        self._url = database_url(db)
        self._lock = threading.Lock()
        self._launch = _ScanLaunch(self)
        self._timers: dict[int, list[accel.IntervalTimer]] = {}
        #: timings in flight, per queue (id) in launch order
        self._pending: dict[int, deque[tuple[_Candidate, Hashable, accel.IntervalTimer]]] = {}
        self._candidates: list[_Candidate] = []
        #: part -> the candidates of its current round not launched in it yet (see _next_candidate)
        self._rounds: dict[Hashable, deque[_Candidate]] = {}
        self._part_launches: dict[Hashable, int] = {}  #: part -> launches this scan, any kind
        self._fallbacks: dict[Hashable, _Locked] = {}
        self._fastest: dict[Hashable, _Candidate] = {}  #: part -> the timed fallback's candidate
        #: part -> [epoch, launches left]: the part found nothing to time at that epoch
        self._idle: dict[Hashable, list[int]] = {}
        #: bumped whenever which candidate a scan launch can pick may have changed (a timing
        #: read changes only the part's fallback, which the read updates itself)
        self._epoch = 0
        self._prepare = prepare
        self._workers = workers
        self._comm = comm
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._prepared: set[str] = set()
        self._scan_started = 0.0
        self._budget = budget
        self._budget_at = math.inf  #: when this scan leaves out what is not prepared yet
        self.left_out = 0  #: candidates the last scan left out (not prepared within its budget)
        self._locked: _Locked | None = None
        self._rescan_at = math.inf
        self.best_seconds: float | None = None
        self.scans = 0
        self._stored = False
        self._store_done: concurrent.futures.Future | None = None  #: the last scan's write
        self.off_best_seconds = 0.0  #: device time of scan launches beyond the best's time
        self.scan_seconds: float | None = None  #: how long the last finished scan took
        if test_mode.active and not (test_mode.force or test_mode.cached):
            self._lock_on(dict(self.test), math.inf)  # under pytest: test=, nothing tuned
        elif not (test_mode.active and test_mode.force):
            self._load()
        if self._locked is None:
            if comm is None or comm.rank == 0:
                self._prepare_store()
            self._seed()
            self._start_scan()

    @classmethod
    def for_template(cls, template: type, context: accel.Context, *,
                     samples: int = DEFAULT_SAMPLES, period: float = DEFAULT_PERIOD,
                     db: str | None = None, prepare: Callable[[dict[str, Any]], Any] | None = None,
                     workers: int | None = None, budget: float | None = None,
                     **arguments: Any) -> OnlineTuner:
        """A tuner under the key, ``test=`` and fingerprint of ``template``'s offline tuning
        for these arguments: an offline result (``warm``) starts it locked, and what it stores
        serves offline calls. It scans ``template.autotune_online_space(context, **arguments)``
        where the template declares one (a part of its space worth scanning online), else the
        space it declares for offline tuning; ``template.autotune_online_seeds(context,
        **arguments)``, where declared, gives the ``seeds`` (where to start on a device that
        has stored nothing for the template): those that are not candidates of the scan on
        this device are left out. ``budget`` defaults to :data:`TEMPLATE_BUDGET` where
        ``prepare`` is given."""
        tuned = tuner_of(template)
        try:
            key, test, fingerprint = tuned.online_setup(template, context, arguments)
        except TypeError as exc:
            raise OnlineTuningError(f"OnlineTuner for {template.__name__}: {exc}") from None
        if fingerprint.space is None:
            raise OnlineTuningError(f"{template.__name__} declares no autotune_space to scan online")
        online = getattr(template, "autotune_online_space", None)
        space = fingerprint.space
        if online is not None:
            value = online(context, **arguments)
            try:
                space = value if isinstance(value, Space) else Space(value)
            except SpaceError as exc:
                raise OnlineTuningError(f"{template.__name__}.autotune_online_space: {exc}") from None
        declared = getattr(template, "autotune_online_seeds", None)
        seeds = []  # a template's guesses hold for a kind of device: keep those this one takes
        for seed in declared(context, **arguments) if declared is not None else ():
            if not (isinstance(seed, Mapping) and set(seed) <= set(test)) or \
                    space.why_not(_complete(seed, test, space)) is None:
                seeds.append(seed)  # (a malformed one is the constructor's clear error)
        return cls(context, key.function, space, test, version=key.version, samples=samples,
                   period=period, db=db, prepare=prepare, workers=workers, seeds=seeds,
                   budget=budget if budget is not None or prepare is None else TEMPLATE_BUDGET,
                   _key=key, _fingerprint=fingerprint)

    # -- public -------------------------------------------------------------------------------

    @property
    def best(self) -> dict[str, Any] | None:
        """The locked parameters once a scan has finished (or a stored result was found), else
        None."""
        locked = self._locked
        return dict(locked.params) if locked is not None else None

    @property
    def stored(self) -> bool:
        """Whether the last scan's result is in the database (waits for it to be written: the
        process's writer thread writes it, so that the launching thread never waits on the
        database)."""
        done = self._store_done
        if done is not None:
            concurrent.futures.wait([done])
        return self._stored

    @property
    def scanning(self) -> bool:
        return self._locked is None or bool(self._candidates)

    def measure(self, queue: accel.CommandQueue, part: Hashable = None) -> Any:
        """A context manager around one launch on ``queue``: it enters to the parameters this
        launch must use. ``queue`` must be timed (``context.create_command_queue(timed=True)``).
        ``part`` names which of several kernels sharing these parameters is launched."""
        locked = self._locked
        if locked is not None and not self._candidates:
            if time.monotonic() < self._rescan_at:
                return locked
            with self._lock:
                if not self._candidates and time.monotonic() >= self._rescan_at:
                    self._start_scan()
        return self._begin_launch(queue, part)

    def finish_scan(self) -> None:
        """Wait for the launches timed so far and, if every candidate has its samples, lock (or
        start the second round for the closest candidates, :data:`REFINE_MARGIN`)."""
        with self._lock:
            self._collect(wait=True)
            self._maybe_lock()

    def wait_prepared(self, timeout: float | None = None) -> bool:
        """Wait until every candidate of the scan is prepared (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if not any(not c.ready for c in self._candidates):
                    return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    # -- scanning -----------------------------------------------------------------------------

    def _start_scan(self) -> None:
        self._candidates = [_Candidate(MappingProxyType(dict(c)), _Locked(MappingProxyType(dict(c))))
                            for c in self._configurations]
        self._rounds = {}
        self._part_launches = {}
        self._fallbacks = {}
        self._fastest = {}
        self._idle = {}
        self._epoch += 1
        self._target = self.samples
        self.refined = 0
        self._scan_started = time.monotonic()
        self._budget_at = self._scan_started + self._budget if self._budget else math.inf
        self.left_out = 0
        self.scans += 1
        logger.info("online tuning %s on %s: scanning %d configurations, %d launches each",
                    self.name, self.key.device_name, len(self._candidates), self.samples)
        if self._prepare is not None:
            if self._pool is None:
                start = getattr(self.context, "start_build_helpers", None)
                if start is not None:  # ready before the first candidate needs them
                    start()
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self._workers, thread_name_prefix=f"online-{self.name}")
            for c in self._candidates:
                if encode_parameters(dict(c.params)) not in self._prepared:
                    c.ready = False
                    self._pool.submit(self._prepare_one, c)

    def _prepare_one(self, candidate: _Candidate) -> None:
        """Build one candidate's kernels (in a worker thread, the device's context current)."""
        scope = getattr(self.context, "thread_scope", None)
        failed = ""
        try:
            # builds render (and where they can, compile) in helper processes: rendering here
            # would hold the interpreter lock the launching thread needs
            with scope() if scope is not None else contextlib.nullcontext(), \
                    accel.builds_in_helpers():
                assert self._prepare is not None
                self._prepare(dict(candidate.params))
        except Exception as exc:  # noqa: BLE001 (the candidate is skipped, the error logged)
            failed = f"{type(exc).__name__}: {exc}"[:2000]
            logger.warning("online tuning %s: preparing %s failed (%s); it is skipped",
                           self.name, dict(candidate.params), failed)
        with self._lock:
            if failed:
                candidate.failed, candidate.status = failed, TrialStatus.COMPILE_ERROR
            else:
                self._prepared.add(encode_parameters(dict(candidate.params)))
            candidate.ready = True
            self._epoch += 1

    def _next_candidate(self, part: Hashable) -> _Candidate | None:
        """Round-robin over the prepared candidates still short of samples in ``part``, none
        more than one launch ahead of a candidate still being prepared: the samples of every
        candidate are then taken in the same stretch of the run, and a drift in the device's
        speed (clocks rising as a process starts) affects them alike. (Each prepared candidate
        is timed once at once, for the fallback's choice.)

        A round holds the candidates with the fewest launches in the part; each launch takes
        the first prepared one, so a launch costs O(1) while the candidates are ready."""
        waiting = self._rounds.get(part)
        if not waiting:
            active = [c for c in self._candidates if not (c.failed or c.retired)]
            fewest = min((c.launched.get(part, 0) for c in active), default=self._target)
            if fewest >= self._target:
                return None
            waiting = self._rounds[part] = deque(c for c in active if c.launched.get(part, 0) == fewest)
        for _ in range(len(waiting)):
            c = waiting[0]
            if c.failed or c.retired:
                waiting.popleft()
            elif c.ready:
                waiting.popleft()
                return c
            else:
                waiting.rotate(-1)
        if not waiting:  # the rest of the round failed or was retired: the next round
            return self._next_candidate(part)
        return None  # those left in the round are still being prepared

    def _spend_budget(self) -> None:
        """The scan's budget is spent: leave out the candidates not prepared yet, once one is
        (until then, keep waiting: a scan needs something to choose from)."""
        if not any(c.ready and not c.failed for c in self._candidates):
            return
        self._budget_at = math.inf
        for c in self._candidates:
            if not c.ready and not c.failed:
                c.retired = True
                self.left_out += 1
        if self.left_out:
            self._epoch += 1
            logger.info("online tuning %s: %d candidates not prepared within the budget of %.3g "
                        "s are left out of this scan", self.name, self.left_out, self._budget)

    def _frequent_parts(self) -> dict[Hashable, float]:
        """The parts that are not rare, with their shares of the scan's launches."""
        total = sum(self._part_launches.values())
        return {part: n / total for part, n in self._part_launches.items()
                if total and n >= RARE_PART * total}

    def _all_launched(self) -> bool:
        """Every candidate prepared (or failed) and launched ``samples`` times in every part
        that is not rare."""
        parts = self._frequent_parts()
        if not parts:
            return False
        for c in self._candidates:
            if c.failed or c.retired:
                continue
            if not c.ready or any(c.short(part, self._target) for part in parts):
                return False
        return True

    def _fallback(self, part: Hashable) -> _Locked:
        """An untimed launch while no candidate can be timed in ``part`` (the rest are being
        prepared, or their timings are in flight): the fastest so far there, else ``test=``."""
        found = self._fallbacks.get(part)
        if found is None:
            timed = [c for c in self._candidates if not c.failed and part in c.medians]
            if timed:
                fastest = self._fastest[part] = min(timed, key=lambda c: c.medians[part])
                found = fastest.fixed
            else:  # the first seed (first in the scan's order), else test=
                start = self.seeds[0] if self.seeds else self.test
                first = next((c for c in self._candidates if dict(c.params) == start), None)
                found = first.fixed if first is not None else _Locked(MappingProxyType(dict(self.test)))
            self._fallbacks[part] = found
        return found

    def _begin_launch(self, queue: accel.CommandQueue, part: Hashable) -> Any:
        self._lock.acquire()
        idle = self._idle.get(part)
        if idle is not None and idle[0] == self._epoch and idle[1] > 0 and self._candidates:
            # nothing to time in this part at the last look and nothing changed since (no
            # candidate prepared, no timing read, no failure): the same untimed fallback, without
            # going over every candidate; every IDLE_RECHECK launches a full look reads the
            # timings in flight
            fallback = self._fallbacks.get(part)
            if fallback is not None:
                idle[1] -= 1
                self._part_launches[part] += 1
                self._lock.release()
                return fallback
        try:
            self._collect(wait=False)
            if not self._candidates:  # another thread locked meanwhile
                self._lock.release()
                return self.measure(queue, part)
            if time.monotonic() >= self._budget_at:
                self._spend_budget()
            self._part_launches[part] = self._part_launches.get(part, 0) + 1
            candidate = self._next_candidate(part)
            if candidate is None:
                if self._all_launched():  # the last timings are still in flight
                    self._collect(wait=True)
                    self._maybe_lock()
                    self._lock.release()
                    return self.measure(queue, part)
                fallback = self._fallback(part)
                self._idle[part] = [self._epoch, IDLE_RECHECK]
                self._lock.release()
                return fallback
            timer = self._free_timer(queue)
            candidate.launched[part] = candidate.launched.get(part, 0) + 1
            launch = self._launch
            launch.queue, launch.candidate, launch.timer, launch.part = queue, candidate, timer, part
            return launch  # the lock is held until its __exit__
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
                self._fallbacks.clear()
                self._fastest.clear()
                self._epoch += 1
            else:
                waiting = self._pending.get(id(timer.queue))
                if waiting is None:
                    waiting = self._pending[id(timer.queue)] = deque()
                waiting.append((candidate, launch.part, timer))
            # the scan can only be complete once some candidate completes a part
            if (error is not None or candidate.launched[launch.part] >= self._target) \
                    and self._all_launched():
                self._collect(wait=True)
                self._maybe_lock()
        finally:
            launch.candidate = launch.timer = launch.queue = launch.part = None
            self._lock.release()

    def _free_timer(self, queue: accel.CommandQueue) -> accel.IntervalTimer:
        pool = self._timers.setdefault(id(queue), [])
        if pool:
            return pool.pop()
        if len(self._pending.get(id(queue), ())) >= TIMERS_PER_QUEUE:
            self._collect(wait=True, queue=queue, one=True)
            return pool.pop()
        return queue.interval_timer()

    def _release(self, timer: accel.IntervalTimer) -> None:
        self._timers.setdefault(id(timer.queue), []).append(timer)

    def _collect(self, *, wait: bool, queue: accel.CommandQueue | None = None,
                 one: bool = False) -> None:
        """Read finished timings (each queue's in launch order; a queue runs in order, so its
        first unfinished timing ends the look); ``wait``: also wait for unfinished ones."""
        for key in [id(queue)] if queue is not None else list(self._pending):
            waiting = self._pending.get(key)
            while waiting:
                candidate, part, timer = waiting[0]
                if not (wait or timer.ready()):
                    break
                waiting.popleft()
                self._record(candidate, part, timer.seconds())
                self._release(timer)
                if one:
                    break
            if not waiting:
                self._pending.pop(key, None)
            if one:
                return

    def _record(self, candidate: _Candidate, part: Hashable, seconds: float) -> None:
        """Add a sample; the part's fallback follows the fastest median."""
        samples = candidate.samples.setdefault(part, [])
        samples.append(seconds)
        median = candidate.medians[part] = statistics.median(samples)
        if candidate.failed or part not in self._fallbacks:
            return  # (a fallback not chosen yet is chosen from the medians when needed)
        fastest = self._fastest.get(part)
        if fastest is None or median < fastest.medians[part]:
            self._fastest[part], self._fallbacks[part] = candidate, candidate.fixed
        elif fastest is candidate:  # its median rose: choose again at the next look
            del self._fallbacks[part]

    def _maybe_lock(self) -> None:
        if not self._candidates or self._pending or not self._all_launched():
            return
        shares = self._frequent_parts()
        parts = list(shares)
        timed = [c for c in self._candidates
                 if not c.failed and parts and all(c.samples.get(p) for p in parts)]
        candidates, self._candidates = self._candidates, []
        if not timed:
            self._stop_pool()
            logger.warning("online tuning %s on %s: every candidate failed; using test= %s",
                           self.name, self.key.device_name, self.test)
            self._lock_on(dict(self.test), time.monotonic() + self.period)
            return
        scores = {id(c): sum(shares[p] * c.medians[p] for p in parts) for c in timed}
        if self._refine(candidates, timed, scores):
            self._candidates = candidates  # a second round for the closest: not locked yet
            return
        if self._comm is not None:  # the slowest rank's time decides, the same on every rank
            scores = self._slowest(candidates, scores)
            timed = [c for c in timed if math.isfinite(scores[id(c)])] or timed
        self._stop_pool()
        best = min(timed, key=lambda c: scores[id(c)])
        self.best_seconds = scores[id(best)]
        self.scan_seconds = time.monotonic() - self._scan_started
        for p in parts:
            reference = best.medians[p]
            self.off_best_seconds += sum(s - reference for c in timed if c is not best
                                         for s in c.samples[p] if s > reference)
        self._lock_on(dict(best.params), time.monotonic() + self.period)
        logger.info("online tuning %s on %s: locked on %s (%.3g s a launch) after %.3g s",
                    self.name, self.key.device_name, dict(best.params), self.best_seconds,
                    time.monotonic() - self._scan_started)
        if self._comm is not None and self._comm.rank != 0:
            return  # rank 0 stores for all
        try:
            self._store_done = _results_writer().submit(self._store, best, candidates, scores,
                                                        shares)
        except RuntimeError:  # the interpreter is shutting down: no new threads, write here
            self._store_done = None
            self._store(best, candidates, scores, shares)
        else:
            self._store_done.add_done_callback(self._report_store_failure)

    def _refine(self, candidates: list[_Candidate], timed: list[_Candidate],
                scores: dict[int, float]) -> bool:
        """After the first round, give the candidates within :data:`REFINE_MARGIN` of the best
        (at most :data:`REFINE_AT_MOST`) ``samples`` more launches each and retire the rest;
        False (lock now) after the second round, where no other candidate is that close, or
        for a collective tuner (its ranks' rounds would have to agree)."""
        if self._target > self.samples or self._comm is not None:
            return False
        best = min(scores[id(c)] for c in timed)
        close = sorted((c for c in timed if scores[id(c)] <= best * (1 + REFINE_MARGIN)),
                       key=lambda c: scores[id(c)])[:REFINE_AT_MOST]
        if len(close) < 2:
            return False
        kept = {id(c) for c in close}
        for c in candidates:
            c.retired = id(c) not in kept
        self.refined = len(close)
        self._target = 2 * self.samples
        self._epoch += 1
        logger.info("online tuning %s: timing %d close candidates again: %s", self.name,
                    len(close), [dict(c.params) for c in close])
        return True

    def _slowest(self, candidates: list[_Candidate], scores: dict[int, float]) -> dict[int, float]:
        """Each candidate's score as the maximum over the ranks (inf where any rank has none)."""
        mine = np.array([scores.get(id(c), math.inf) for c in candidates])
        worst = np.empty_like(mine)
        from mpi4py import MPI

        from ..parallel import allreduce

        allreduce(self._comm, mine, worst, f"online tuning {self.name}: the ranks' times",
                  op=MPI.MAX)
        return {id(c): float(v) for c, v in zip(candidates, worst)}

    def _stop_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def _lock_on(self, params: dict[str, Any], rescan_at: float) -> None:
        self._rescan_at = rescan_at if self._comm is None else math.inf
        self._locked = _Locked(MappingProxyType(params))

    # -- the database -------------------------------------------------------------------------

    def _load(self) -> None:
        """Lock on the stored result for this key, if one is usable and fresh (collective: what
        rank 0 found, on every rank)."""
        if self._comm is not None:
            found = self._read() if self._comm.rank == 0 else None
            from .. import parallel

            found = parallel.bcast(self._comm, found, f"the stored result of {self.name} from rank 0")
        else:
            found = self._read()
        if found is not None:
            params, score = found
            self.best_seconds = score
            self._lock_on(params, time.monotonic() + self.period)

    def _read(self) -> tuple[dict[str, Any], float | None] | None:
        """The stored result's parameters and score, if the row is usable and fresh."""
        try:
            record = get_store(self._url).get(self.key)
        except StoreError as exc:
            logger.info("online tuning %s: no stored result read (%s)", self.name, exc)
            return None
        if record is None:
            return None
        params, problem = self._parameters_of(record, self._valid_space)
        if problem is not None:
            logger.warning("ignoring stored result for online tuner %s on %s: %s; it will be "
                           "tuned again", self.name, self.key.device_name, problem)
            return None
        if record.fingerprint != self.fingerprint:
            logger.info("stored result for online tuner %s on %s is stale: %s; it will be "
                        "tuned again", self.name, self.key.device_name,
                        _stale_reason(record, self._fingerprint))
            return None
        return params, (record.score if math.isfinite(record.score) else None)

    def _parameters_of(self, record: TuningRecord, space: Space) -> tuple[dict[str, Any], str | None]:
        """A stored row's parameters and why they must not be used here (None if they may): a
        malformed row, parameters not of ``test=``'s names and kinds, or outside ``space``."""
        problem = record_problem(record, self.test)
        if problem is not None:
            return {}, problem
        try:
            params = validate_parameters(decode_parameters(record.parameters), self.test)
        except InvalidParametersError as exc:
            return {}, str(exc)
        return params, space.why_not(params, preferences=False)  # listed values that run

    def _declared_seeds(self, name: str, seeds: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The ``seeds`` argument as full configurations of the scan (a parameter a seed leaves
        out takes the scan's value where the scan fixes one, else its ``test=`` value), or a
        clear error."""
        if isinstance(seeds, Mapping) or isinstance(seeds, (str, bytes)):
            raise OnlineTuningError(f"OnlineTuner {name}: seeds= is a list of parameter dicts, "
                                    f"got {seeds!r}")
        found: list[dict[str, Any]] = []
        for seed in seeds:
            if not isinstance(seed, Mapping):
                raise OnlineTuningError(f"OnlineTuner {name}: each seed is a dict of parameters, "
                                        f"got {seed!r}")
            unknown = sorted(set(seed) - set(self.test))
            if unknown:
                raise OnlineTuningError(f"OnlineTuner {name}: seed {dict(seed)} names {unknown}, "
                                        f"not parameters of the space {sorted(self.test)}")
            params = _complete(seed, self.test, self.space)
            problem = self.space.why_not(params)
            if problem is not None:
                raise OnlineTuningError(f"OnlineTuner {name}: seed {params} is not a candidate "
                                        f"of the scan: {problem}")
            if params not in found:
                found.append(params)
        return found

    def _seed(self) -> None:
        """Put first in the scan (built first, so timed first and soon the untimed launches'
        choice) the parameters that stored results for the same function, version and
        fingerprint (kernel sources and space) on this device chose under other arguments:
        those of the rows sharing the most argument values with this key first, then the most
        often chosen, then the newest; then the ``seeds`` given. A lattice size not tuned yet on
        a GPU whose other sizes are (in the same precision, say) starts near their choices
        instead of at ``test=``. A stored choice is taken with the scan's value of each
        parameter the scan fixes (a link layout that cannot change while the work runs, say);
        rows that do not validate, or whose choice is then outside the scan, count for nothing.
        A collective tuner's ranks take no stored choices (they would not agree on them), only
        the seeds given."""
        self.seeds = self._stored_seeds() if self._comm is None else []
        self.seeds += [p for p in self._declared if p not in self.seeds]
        if self.seeds:
            first = {encode_parameters(p): i for i, p in enumerate(self.seeds)}
            self._configurations.sort(
                key=lambda c: first.get(encode_parameters(c), len(first) + (c != self.test)))
            logger.info("online tuning %s: scanning these first: %s", self.name, self.seeds)

    def _stored_seeds(self) -> list[dict[str, Any]]:
        try:
            records = get_store(self._url).records(function=self.key.function)
        except StoreError as exc:
            logger.info("online tuning %s: no seeds read (%s)", self.name, exc)
            return []
        votes: dict[str, list[Any]] = {}
        mine = (self.key.function, self.key.version, self.key.device_name, self.key.device_platform)
        arguments = _argument_values(self.key.arguments)
        fixed = _fixed(self.space)
        for record in records:
            key = record.key
            if (key.function, key.version, key.device_name, key.device_platform) != mine or \
                    key.arguments == self.key.arguments or record.fingerprint != self.fingerprint:
                continue
            params, problem = self._parameters_of(record, self._valid_space)
            if problem is not None:
                continue
            params = {**params, **fixed}  # as a candidate of this scan
            if self.space.why_not(params) is not None:
                continue
            theirs = _argument_values(key.arguments)
            shared = sum(1 for name, value in arguments.items() if name in theirs and theirs[name] == value)
            when = record.created_at.timestamp() if record.created_at is not None else 0.0
            entry = votes.setdefault(encode_parameters(params), [0, 0, when, params])
            entry[0] = max(entry[0], shared)
            entry[1] += 1
            entry[2] = max(entry[2], when)
        ranked = sorted(votes.values(), key=lambda e: (-e[0], -e[1], -e[2]))
        return [params for *_, params in ranked]

    def _prepare_store(self) -> None:
        """Ready the database for this scan's write now, while nothing runs yet: a first write
        loads the SQL layer and may create the tables, a few hundred milliseconds of work that
        would hold the interpreter lock the launching thread needs; and start the writer thread
        now, not when the scan ends (a thread's start makes the starting thread wait for it)."""
        try:
            get_store(self._url).prepare_writes()
        except StoreError as exc:  # the result is then kept in this process (see _store)
            logger.info("online tuning %s: the database cannot be written (%s)", self.name, exc)
        with contextlib.suppress(RuntimeError):  # (at interpreter shutdown: written in place)
            _results_writer().submit(_nothing)

    def _report_store_failure(self, done: concurrent.futures.Future) -> None:
        error = done.exception()
        if error is not None:  # (a database error is the writer's warning; this is a bug)
            logger.error("online tuning %s: writing the result failed (%s: %s); it is used in "
                         "this process only", self.name, type(error).__name__, error)

    def _store(self, best: _Candidate, candidates: list[_Candidate], scores: dict[int, float],
               shares: dict[Hashable, float]) -> None:
        """Write a finished scan's result and trials (on the writer thread; scans' results are
        written in the order they finished)."""
        store = get_store(self._url)
        writer = _TrialWriter(store, self.key, self.fingerprint)
        test = next((c for c in candidates if dict(c.params) == self.test), None)

        def total(c: _Candidate, pick: Callable[[list[float]], float]) -> float | None:
            if c.failed or not all(c.samples.get(p) for p in shares):
                return None
            return sum(share * pick(c.samples[p]) for p, share in shares.items())

        writer.buffer = [TrialRecord(
            key=self.key, parameters=encode_parameters(dict(c.params)), status=c.status.value,
            message=c.failed, min_seconds=total(c, min), median_seconds=scores.get(id(c)),
            max_seconds=total(c, max), fingerprint=self.fingerprint)
            for c in candidates if c.samples or c.failed]
        search = {"strategy": "online", "samples": self.samples, "period": self.period,
                  "refined": self.refined, "left_out": self.left_out,
                  "configurations": len(candidates), "measured": len(scores),
                  "parts": len(shares),
                  "test": self.test, "test_seconds": scores.get(id(test)) if test else None,
                  "seconds": round(time.monotonic() - self._scan_started, 3)}
        record = TuningRecord(
            key=self.key, parameters=encode_parameters(dict(best.params)), score=scores[id(best)],
            package_version=autotune.__version__, fingerprint=self.fingerprint,
            sources=self._fingerprint.sources_json,
            search=json.dumps(search, sort_keys=True, separators=(",", ":")),
            origin=ResultOrigin.ONLINE.value)
        self._stored = writer.finish(record, dict(best.params))


def _nothing() -> None:
    """A task that does nothing: handing it to the writer starts the writer's thread."""


_writer_lock = threading.Lock()
_writer: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def _results_writer() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread of this process that writes online tuners' results, in the order their
    scans finish; at exit, it finishes the writes handed to it. A forked child makes its own
    (the parent's thread is not in it)."""
    global _writer
    with _writer_lock:
        if _writer is None or _writer[0] != os.getpid():
            _writer = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="autotune-online-store"))
        return _writer[1]


def _fixed(space: Space) -> dict[str, Any]:
    """The parameters ``space`` does not vary, with their one value."""
    return {n: v[0] for n, v in space.parameters.items() if len(v) == 1}


def _complete(seed: Mapping[str, Any], test: Mapping[str, Any], space: Space) -> dict[str, Any]:
    """A seed as a full configuration: a parameter it leaves out takes the value ``space``
    fixes it at, else its ``test=`` value."""
    return {**test, **_fixed(space), **seed}


def _argument_values(arguments: str) -> dict[str, Any]:
    """An encoded argument set as a dict of JSON values (nothing in them is decoded into
    objects), {} if it is not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
