"""``OnlineTuner``: the online scan's face. It checks its arguments, makes the tuning key, loads
and stores results, runs the build pool and serves every launch: ``measure`` returns one
preallocated object while locked, and hands launches to the :class:`~.scan.Scan` while
scanning."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import math
import time
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ... import accel
from ..decorator import tuner_of
from ..serving import serving
from ..verdicts import Fingerprint
from ..encoding import encode_key_arguments, encode_parameters
from ..records import TuningKey
from ..space import Space, SpaceError
from ..store import database_url
from . import stored as database  # (the tuner has a property named stored)
from .arguments import DEFAULT_PERIOD, DEFAULT_SAMPLES, OnlineTuningError, check_options, check_space
from .builds import BuildPool
from .scan import Candidate, Fixed, Scan, Scores, ScanResult
from .seeds import declared_seeds, scan_order, template_seeds
from .settings import template_budget_now

logger = logging.getLogger("autotune.tune")


class OnlineTuner:
    """Tunes one kernel configuration while it runs (see :mod:`autotune.tune.online`).

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
        device, workers = check_options(context, name, samples=samples, period=period,
                                        version=version, prepare=prepare, workers=workers,
                                        budget=budget, comm=comm)
        self.space, self.test, configurations, self._fingerprint = check_space(
            name, space, test, sources, _fingerprint)
        self._declared = declared_seeds(name, seeds, self.test, self.space)
        if not configurations:
            raise OnlineTuningError(f"OnlineTuner {name}: the restrictions exclude every "
                                    "configuration of the space")
        self.context = context
        self.name = name
        self.samples = samples
        self.period = float(period)
        self.key = _key or TuningKey(
            function=name, version=version, device_name=device.name,
            device_platform=device.platform, driver_version=device.driver_version,
            arguments=encode_key_arguments(arguments or {}))
        self.fingerprint = self._fingerprint.digest
        #: stored results must lie in this space (the template's, where the scan covers part of it)
        self._valid_space = self._fingerprint.space or self.space
        self._configurations = scan_order(configurations, self.test)  # test= first
        #: each configuration's place in the space's declared order: ties are broken by it,
        #: after the seeds (:meth:`_position`)
        self._declared_order = {encode_parameters(c): i for i, c in enumerate(configurations)}
        #: scanned first, in order: what this device chose for the same function under other
        #: arguments, then the ``seeds`` given
        self.seeds: list[dict[str, Any]] = []
        self._seed_order: dict[str, int] = {}  #: the seeds' places before the declared order
        self._url = database_url(db)
        self._comm = comm
        self._scan = Scan(name, samples, self._scan_done, budget=budget, refine=comm is None,
                          slowest=None if comm is None else _slowest_rank(comm, name))
        self._lock = self._scan.lock
        self._builds: BuildPool | None = None if prepare is None else BuildPool(
            context, name, self._scan, prepare, workers)
        self._locked: Fixed | None = None  #: the last scan's choice (kept while rescanning)
        self._steady: Fixed | None = None  #: the same while no scan runs: what measure returns
        self._rescan_at = math.inf
        self.best_seconds: float | None = None
        self.scans = 0
        self._stored = False
        self._store_done: concurrent.futures.Future | None = None  #: the last scan's write
        self.off_best_seconds = 0.0  #: device time of scan launches beyond the best's time
        self.scan_seconds: float | None = None  #: how long the last finished scan took
        self._begin()

    def _begin(self) -> None:
        """Lock on ``test=`` under pytest, else on the stored result; else start scanning."""
        test_mode = serving().test
        if test_mode.returns_test:
            self._lock_on(dict(self.test), math.inf)  # under pytest: test=, nothing tuned
        elif not (test_mode.active and test_mode.force):
            found = database.load(self._url, self.key, self._fingerprint, self.test,
                                  self._valid_space, self.name, self._comm)
            if found is not None:
                params, self.best_seconds = found
                self._lock_on(params, time.monotonic() + self.period)
        if self._locked is None:
            if self._comm is None or self._comm.rank == 0:
                database.prepare_store(self._url, self.name)
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
        this device are left out. ``budget`` defaults, where ``prepare`` is given, to the one
        :func:`~autotune.tune.online.template_budget` sets (None: every candidate)."""
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
        seeds = template_seeds(declared(context, **arguments) if declared is not None else (),
                               test, space)
        return cls(context, key.function, space, test, version=key.version, samples=samples,
                   period=period, db=db, prepare=prepare, workers=workers, seeds=seeds,
                   budget=budget if budget is not None or prepare is None else template_budget_now(),
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
        """Whether launches are being timed now."""
        return self._steady is None

    @property
    def scan(self) -> Scan:
        """The scan (read it, do not drive it): its candidates while one runs."""
        return self._scan

    @property
    def refined(self) -> int:
        """Candidates timed in the last scan's second round."""
        return self._scan.refined

    @property
    def left_out(self) -> int:
        """Candidates the last scan left out (not prepared within its budget)."""
        return self._scan.left_out

    @property
    def valid_space(self) -> Space:
        """The space a stored result must lie in: the template's, where the scan covers a part
        of it, else the scan's."""
        return self._valid_space

    def measure(self, queue: accel.CommandQueue, part: Hashable = None) -> Any:
        """A context manager around one launch on ``queue``: it enters to the parameters this
        launch must use. ``queue`` must be timed (``context.create_command_queue(timed=True)``).
        ``part`` names which of several kernels sharing these parameters is launched."""
        steady = self._steady
        if steady is not None:
            if time.monotonic() < self._rescan_at:
                return steady
            with self._lock:
                if self._steady is not None and time.monotonic() >= self._rescan_at:
                    self._start_scan()
        launch = self._scan.begin(queue, part)
        return launch if launch is not None else self.measure(queue, part)

    def finish_scan(self) -> None:
        """Wait for the launches timed so far and, if every candidate has its samples, lock (or
        start the second round for the closest candidates, :data:`~.scan.REFINE_MARGIN`)."""
        self._scan.finish()

    def rescan(self) -> None:
        """Start the next scan now rather than ``period`` seconds after locking; nothing while
        a scan runs, for a collective tuner or under pytest's test mode (they never rescan)."""
        with self._lock:
            if self._steady is not None and self._rescan_at < math.inf:
                self._start_scan()

    def wait_prepared(self, timeout: float | None = None) -> bool:
        """Wait until every candidate of the scan is prepared (or failed); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._scan.all_prepared():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            time.sleep(0.005)

    # -- scanning -----------------------------------------------------------------------------

    def _seed(self) -> None:
        """Put first in the scan (built first, so timed first and soon the untimed launches'
        choice) the parameters that stored results for the same function, version and
        fingerprint (kernel sources and space) on this device chose under other arguments
        (:func:`~.stored.stored_seeds`), then the ``seeds`` given. A lattice size not tuned yet
        on a GPU whose other sizes are (in the same precision, say) starts near their choices
        instead of at ``test=``. A collective tuner's ranks take no stored choices (they would
        not agree on them), only the seeds given."""
        self.seeds = [] if self._comm is not None else database.stored_seeds(
            self._url, self.key, self._fingerprint, self.test, self.space, self._valid_space)
        self.seeds += [p for p in self._declared if p not in self.seeds]
        self._seed_order = {encode_parameters(p): i - len(self.seeds)
                            for i, p in enumerate(self.seeds)}
        if self.seeds:
            self._configurations = scan_order(self._configurations, self.test, self.seeds)
            logger.info("online tuning %s: scanning these first: %s", self.name, self.seeds)

    def _start_scan(self) -> None:
        """Start a scan (the lock held, or while the tuner is made)."""
        self._steady = None
        builds = self._builds
        unready = self._scan.start(self._configurations,
                                   first=self.seeds[0] if self.seeds else self.test,
                                   default=self.test,
                                   waiting=builds.waiting if builds is not None else None,
                                   order=self._position)
        self.scans += 1
        logger.info("online tuning %s on %s: scanning %d configurations, %d launches each",
                    self.name, self.key.device_name, len(self._scan.candidates), self.samples)
        if builds is not None:
            builds.submit(unready)

    def _position(self, params: Mapping[str, Any]) -> float:
        """``params``' place in the tie rule's order, as an offline search's
        (:mod:`~autotune.tune.choice`): the seeds first (this device's choices for other
        arguments, then the given seeds), then the space's declared order (after all of them
        if not there)."""
        encoded = encode_parameters(dict(params))
        return self._seed_order.get(encoded, self._declared_order.get(encoded, math.inf))

    def _scan_done(self, result: ScanResult) -> None:
        """The scan ended (the lock held): lock on its best (``test=`` where every candidate
        failed) and have its result stored."""
        if self._builds is not None:
            self._builds.stop()
        if result.best is None:
            logger.warning("online tuning %s on %s: every candidate failed; using test= %s",
                           self.name, self.key.device_name, self.test)
            self._lock_on(dict(self.test), time.monotonic() + self.period)
            return
        best = result.best
        self.best_seconds = result.best_seconds
        self.scan_seconds = time.monotonic() - result.started
        self.off_best_seconds += result.off_best_seconds
        self._lock_on(dict(best.params), time.monotonic() + self.period)
        logger.info("online tuning %s on %s: locked on %s (%.3g s a launch) after %.3g s",
                    self.name, self.key.device_name, dict(best.params), self.best_seconds,
                    time.monotonic() - result.started)
        if self._comm is not None and self._comm.rank != 0:
            return  # rank 0 stores for all
        self._store_done = database.write_in_background(functools.partial(self._write, result),
                                                        self.name)

    def _write(self, result: ScanResult) -> None:
        """Store a finished scan's result (on the writer thread)."""
        self._stored = database.store(self._url, self.key, self._fingerprint, self.test, result,
                                      samples=self.samples, period=self.period)

    def _lock_on(self, params: dict[str, Any], rescan_at: float) -> None:
        self._rescan_at = rescan_at if self._comm is None else math.inf
        self._locked = self._steady = Fixed(MappingProxyType(params))


def _slowest_rank(comm: Any, label: str) -> Callable[[list[Candidate], Scores], Scores]:
    """A collective scan's hook: each candidate's score as the maximum over the ranks of
    ``comm`` (inf where any rank has none)."""

    def slowest(candidates: list[Candidate], scores: Scores) -> Scores:
        mine = np.array([scores.get(id(c), math.inf) for c in candidates])
        worst = np.empty_like(mine)
        from mpi4py import MPI

        from ...parallel import allreduce

        allreduce(comm, mine, worst, f"online tuning {label}: the ranks' times", op=MPI.MAX)
        return {id(c): float(v) for c, v in zip(candidates, worst)}

    return slowest
