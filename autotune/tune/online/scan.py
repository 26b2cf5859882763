"""The online scan: candidates and timings in; the best candidate and its score out.

A :class:`Scan` times launches of its candidates round-robin, part by part, falls back to an
untimed launch where nothing can be timed, spends its budget on candidates still being
prepared, times the closest candidates again (the refine round), and when every candidate has
its samples hands a :class:`ScanResult` to its ``done`` callback. It knows nothing of tuning
keys, databases or test mode; a collective tuner's ranks agree through the ``slowest`` hook.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from ... import accel
from ..choice import median_interval, rank, spread, tie_break
from ..records import TrialStatus
from .timers import Timers

logger = logging.getLogger("autotune.tune")

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

#: id(candidate) -> its score: seconds a launch of the parts' mix
Scores = dict[int, float]


class Fixed:
    """An untimed launch with fixed parameters: enters to them, does nothing (what a locked
    tuner's ``measure`` returns, and a scan's fallback)."""

    __slots__ = ("params",)

    def __init__(self, params: Mapping[str, Any]):
        self.params = params

    def __enter__(self) -> Mapping[str, Any]:
        return self.params

    def __exit__(self, *exc: Any) -> None:
        return None


@dataclass
class Candidate:
    """One configuration of a scan, with its timings so far."""

    params: Mapping[str, Any]
    fixed: Fixed  #: an untimed launch with these parameters
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
        """Whether it has fewer than ``samples`` launches in ``part``."""
        return self.launched.get(part, 0) < samples


@dataclass
class ScanResult:
    """What a finished scan hands to its ``done`` callback."""

    candidates: list[Candidate]  #: every candidate of the scan, in its order
    best: Candidate | None  #: the fastest; None where every candidate failed
    scores: Scores  #: of the candidates timed in every part (the slowest rank's, collective)
    shares: dict[Hashable, float]  #: the parts counted, with their shares of the launches
    refined: int  #: candidates timed in the second round
    left_out: int  #: candidates not prepared within the budget
    started: float  #: ``time.monotonic()`` at the scan's start
    off_best_seconds: float = 0.0  #: device time of its launches beyond the best's time
    #: the statistics of the choice (:mod:`~autotune.tune.choice`), over the best's launches
    #: round by round (None for a collective scan, which takes the slowest rank's best):
    ties: int | None = None  #: candidates that could not be told apart from the fastest
    interval: tuple[float, float] | None = None  #: 95% interval of the best's median
    spread: float | None = None  #: of the best's launches

    @property
    def best_seconds(self) -> float:
        """The best's score."""
        assert self.best is not None
        return self.scores[id(self.best)]


class TimedLaunch:
    """One timed launch of a candidate while scanning (reused: one per scan)."""

    __slots__ = ("scan", "queue", "candidate", "timer", "part")

    def __init__(self, scan: Scan):
        self.scan = scan
        self.queue: accel.CommandQueue | None = None
        self.candidate: Candidate | None = None
        self.timer: accel.IntervalTimer | None = None
        self.part: Hashable = None

    def __enter__(self) -> Mapping[str, Any]:
        assert self.timer is not None and self.candidate is not None
        self.timer.start()
        return self.candidate.params

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        self.scan.end(self, error)


class Scan:
    """Scans candidates while the work runs (see the module docstring); one per tuner, started
    again for each scan.

    ``label`` names it in the log; ``samples`` launches per part each candidate gets;
    ``budget`` seconds after a start the candidates not prepared yet are left out (None: never);
    ``refine``: whether the closest candidates get a second round; ``slowest(candidates,
    scores)``, where given, maps the scores before the choice (a collective tuner's slowest
    rank's time); ``done(result)`` is called, with :attr:`lock` held, when a scan ends.

    :attr:`lock` serialises launches: :meth:`begin` takes it and the launch's exit releases it.
    """

    def __init__(self, label: str, samples: int, done: Callable[[ScanResult], None], *,
                 budget: float | None = None, refine: bool = True,
                 slowest: Callable[[list[Candidate], Scores], Scores] | None = None):
        self.label = label
        self.samples = samples
        self.lock = threading.Lock()
        self.candidates: list[Candidate] = []  #: of the scan running; [] once it has ended
        self.refined = 0  #: candidates timed in the last scan's second round
        self.left_out = 0  #: candidates the last scan left out (not prepared within its budget)
        self.started = 0.0  #: ``time.monotonic()`` at the last start
        self._done = done
        self._budget = budget
        self._refines = refine
        self._slowest = slowest
        self._target = samples  #: launches per part each candidate of this round needs
        self._budget_at = math.inf  #: when this scan leaves out what is not prepared yet
        self._first: Mapping[str, Any] = {}  #: launched while nothing is timed, if a candidate
        self._default: Mapping[str, Any] = {}  #: else this (``test=``: it wins if tied)
        self._order: Callable[[Mapping[str, Any]], float] | None = None
        #: part -> the candidates of its current round not launched in it yet (see _next_candidate)
        self._rounds: dict[Hashable, deque[Candidate]] = {}
        self._part_launches: dict[Hashable, int] = {}  #: part -> launches this scan, any kind
        self._fallbacks: dict[Hashable, Fixed] = {}
        self._fastest: dict[Hashable, Candidate] = {}  #: part -> the timed fallback's candidate
        #: part -> [epoch, launches left]: the part found nothing to time at that epoch
        self._idle: dict[Hashable, list[int]] = {}
        #: bumped whenever which candidate a scan launch can pick may have changed (a timing
        #: read changes only the part's fallback, which the read updates itself)
        self._epoch = 0
        self._launch = TimedLaunch(self)
        self._timers = Timers(self._record)

    # -- what the tuner calls -----------------------------------------------------------------

    def start(self, configurations: Iterable[Mapping[str, Any]], *, first: Mapping[str, Any],
              default: Mapping[str, Any], waiting: Callable[[Mapping[str, Any]], bool] | None = None,
              order: Callable[[Mapping[str, Any]], float] | None = None) -> list[Candidate]:
        """Start scanning ``configurations``, in this order. While nothing is timed, untimed
        launches use ``first`` where it is a candidate, else ``default``. The candidates whose
        parameters ``waiting`` accepts are not ready (until :meth:`prepared`): returned, to be
        prepared. Ties are broken by :func:`choose` (``order``: the declared order)."""
        self.candidates = [Candidate(MappingProxyType(dict(c)), Fixed(MappingProxyType(dict(c))))
                           for c in configurations]
        self._first, self._default, self._order = first, default, order
        self._rounds, self._part_launches, self._fallbacks, self._fastest, self._idle = {}, {}, {}, {}, {}
        self._epoch += 1
        self._target = self.samples
        self.refined = 0
        self.started = time.monotonic()
        self._budget_at = self.started + self._budget if self._budget else math.inf
        self.left_out = 0
        unready = []
        if waiting is not None:
            for c in self.candidates:
                if waiting(c.params):
                    c.ready = False
                    unready.append(c)
        return unready

    def prepared(self, candidate: Candidate, failure: str = "") -> None:
        """``candidate`` is prepared (or, with ``failure``, could not be: skipped)."""
        with self.lock:
            if failure:
                candidate.failed, candidate.status = failure, TrialStatus.COMPILE_ERROR
            candidate.ready = True
            self._epoch += 1

    def all_prepared(self) -> bool:
        """Whether every candidate of the scan is prepared (or failed)."""
        with self.lock:
            return not any(not c.ready for c in self.candidates)

    def finish(self) -> None:
        """Wait for the launches timed so far and, if every candidate has its samples, end the
        scan (or start the second round)."""
        with self.lock:
            self._timers.collect(wait=True)
            self._maybe_finish()

    def begin(self, queue: accel.CommandQueue, part: Hashable) -> TimedLaunch | Fixed | None:
        """The next launch in ``part`` on ``queue``: a timed launch of a candidate (the lock
        held until its exit), an untimed fallback, or None where the scan ended meanwhile."""
        self.lock.acquire()
        idle = self._idle.get(part)
        if idle is not None and idle[0] == self._epoch and idle[1] > 0 and self.candidates:
            # nothing to time in this part at the last look and nothing changed since (no
            # candidate prepared, no timing read, no failure): the same untimed fallback, without
            # going over every candidate; every IDLE_RECHECK launches a full look reads the
            # timings in flight
            fallback = self._fallbacks.get(part)
            if fallback is not None:
                idle[1] -= 1
                self._part_launches[part] += 1
                self.lock.release()
                return fallback
        try:
            self._timers.collect(wait=False)
            if not self.candidates:  # another thread ended the scan meanwhile
                self.lock.release()
                return None
            if time.monotonic() >= self._budget_at:
                self._spend_budget()
            self._part_launches[part] = self._part_launches.get(part, 0) + 1
            candidate = self._next_candidate(part)
            if candidate is None:
                if self._all_launched():  # the last timings are still in flight
                    self._timers.collect(wait=True)
                    self._maybe_finish()
                    self.lock.release()
                    return None
                fallback = self._fallback(part)
                self._idle[part] = [self._epoch, IDLE_RECHECK]
                self.lock.release()
                return fallback
            timer = self._timers.free(queue)
            candidate.launched[part] = candidate.launched.get(part, 0) + 1
            launch = self._launch
            launch.queue, launch.candidate, launch.timer, launch.part = queue, candidate, timer, part
            return launch  # the lock is held until its __exit__
        except BaseException:
            self.lock.release()
            raise

    def end(self, launch: TimedLaunch, error: BaseException | None) -> None:
        """The exit of a timed launch (``error``: what it raised): its timing goes in flight,
        or its candidate is skipped for the rest of the scan; releases the lock."""
        try:
            candidate, timer = launch.candidate, launch.timer
            assert candidate is not None and timer is not None
            timer.stop()
            if error is not None:
                candidate.failed = f"{type(error).__name__}: {error}"[:2000]
                candidate.status = (TrialStatus.LAUNCH_ERROR if isinstance(error, accel.AccelError)
                                    else TrialStatus.ERROR)
                logger.warning("online tuning %s: %s failed (%s); it is skipped for this scan",
                               self.label, dict(candidate.params), candidate.failed)
                self._timers.release(timer)
                self._fallbacks.clear()
                self._fastest.clear()
                self._epoch += 1
            else:
                self._timers.add(candidate, launch.part, timer)
            # the scan can only be complete once some candidate completes a part
            if (error is not None or candidate.launched[launch.part] >= self._target) \
                    and self._all_launched():
                self._timers.collect(wait=True)
                self._maybe_finish()
        finally:
            launch.candidate = launch.timer = launch.queue = launch.part = None
            self.lock.release()

    # -- choosing the next launch -------------------------------------------------------------

    def _next_candidate(self, part: Hashable) -> Candidate | None:
        """Round-robin over the prepared candidates still short of samples in ``part``, none
        more than one launch ahead of a candidate still being prepared: the samples of every
        candidate are then taken in the same stretch of the run, and a drift in the device's
        speed (clocks rising as a process starts) affects them alike. (Each prepared candidate
        is timed once at once, for the fallback's choice.)

        A round holds the candidates with the fewest launches in the part; each launch takes
        the first prepared one, so a launch costs O(1) while the candidates are ready."""
        waiting = self._rounds.get(part)
        if not waiting:
            active = [c for c in self.candidates if not (c.failed or c.retired)]
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
        if not any(c.ready and not c.failed for c in self.candidates):
            return
        self._budget_at = math.inf
        for c in self.candidates:
            if not c.ready and not c.failed:
                c.retired = True
                self.left_out += 1
        if self.left_out:
            self._epoch += 1
            logger.info("online tuning %s: %d candidates not prepared within the budget of %.3g "
                        "s are left out of this scan", self.label, self.left_out, self._budget)

    def _all_launched(self) -> bool:
        """Every candidate prepared (or failed) and launched ``samples`` times in every part
        that is not rare."""
        parts = frequent_parts(self._part_launches)
        if not parts:
            return False
        for c in self.candidates:
            if c.failed or c.retired:
                continue
            if not c.ready or any(c.short(part, self._target) for part in parts):
                return False
        return True

    def _fallback(self, part: Hashable) -> Fixed:
        """An untimed launch while no candidate can be timed in ``part`` (the rest are being
        prepared, or their timings are in flight): the fastest so far there, else ``first``,
        else ``default``."""
        found = self._fallbacks.get(part)
        if found is None:
            timed = [c for c in self.candidates if not c.failed and part in c.medians]
            if timed:
                fastest = self._fastest[part] = min(timed, key=lambda c: c.medians[part])
                found = fastest.fixed
            else:  # the first seed (first in the scan's order), else test=
                first = next((c for c in self.candidates if dict(c.params) == self._first), None)
                found = first.fixed if first is not None else Fixed(MappingProxyType(dict(self._default)))
            self._fallbacks[part] = found
        return found

    # -- timings and the choice ---------------------------------------------------------------

    def _record(self, candidate: Candidate, part: Hashable, seconds: float) -> None:
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

    def _maybe_finish(self) -> None:
        """End the scan if every candidate has its samples and none is in flight: start the
        second round for the closest, or choose the best and hand the result to ``done``."""
        if not self.candidates or self._timers.in_flight or not self._all_launched():
            return
        shares = frequent_parts(self._part_launches)
        parts = list(shares)
        timed = [c for c in self.candidates
                 if not c.failed and parts and all(c.samples.get(p) for p in parts)]
        candidates, self.candidates = self.candidates, []
        if not timed:
            self._done(ScanResult(candidates, None, {}, shares, self.refined, self.left_out,
                                  self.started))
            return
        scores = {id(c): sum(shares[p] * c.medians[p] for p in parts) for c in timed}
        if self._refine(candidates, timed, scores):
            self.candidates = candidates  # a second round for the closest: not ended yet
            return
        if self._slowest is not None:  # the slowest rank's time decides, the same on every rank
            scores = self._slowest(candidates, scores)
            timed = [c for c in timed if math.isfinite(scores[id(c)])] or timed
            best, stats = min(timed, key=lambda c: scores[id(c)]), ()
        else:  # the rule of a choice: ties, then test=, then the declared order
            best, stats = choose(timed, shares, self._default, self._order)
        self._done(ScanResult(candidates, best, scores, shares, self.refined, self.left_out,
                              self.started, _off_best_seconds(best, timed, parts), *stats))

    def _refine(self, candidates: list[Candidate], timed: list[Candidate], scores: Scores) -> bool:
        """After the first round, give the candidates within :data:`REFINE_MARGIN` of the best
        (at most :data:`REFINE_AT_MOST`) ``samples`` more launches each and retire the rest;
        False (end now) after the second round, where no other candidate is that close, or
        without ``refine`` (a collective tuner's ranks would have to agree on the round)."""
        if self._target > self.samples or not self._refines:
            return False
        close = closest(timed, scores)
        if len(close) < 2:
            return False
        kept = {id(c) for c in close}
        for c in candidates:
            c.retired = id(c) not in kept
        self.refined = len(close)
        self._target = 2 * self.samples
        self._epoch += 1
        logger.info("online tuning %s: timing %d close candidates again: %s", self.label,
                    len(close), [dict(c.params) for c in close])
        return True


def frequent_parts(launches: Mapping[Hashable, int]) -> dict[Hashable, float]:
    """The parts that are not rare (:data:`RARE_PART`) among a scan's ``launches`` per part,
    with their shares of them."""
    total = sum(launches.values())
    return {part: n / total for part, n in launches.items() if total and n >= RARE_PART * total}


def closest(timed: list[Candidate], scores: Scores) -> list[Candidate]:
    """The candidates whose score is within :data:`REFINE_MARGIN` of the best's, the closest
    first, at most :data:`REFINE_AT_MOST` (the best among them)."""
    best = min(scores[id(c)] for c in timed)
    return sorted((c for c in timed if scores[id(c)] <= best * (1 + REFINE_MARGIN)),
                  key=lambda c: scores[id(c)])[:REFINE_AT_MOST]


def choose(timed: list[Candidate], shares: Mapping[Hashable, float], test: Mapping[str, Any],
           order: Callable[[Mapping[str, Any]], float] | None
           ) -> tuple[Candidate, tuple[int, tuple[float, float], float]]:
    """The best by the rule of :mod:`~autotune.tune.choice`: the candidates that cannot be told
    apart from the fastest, launch round by launch round (each round's time the parts' mix),
    are ties; among those whose median ratio is within the resolution too (``close``) ``test``
    wins, else the lowest ``order`` (the tuner's: its seeds, then the space's declared order;
    else the first timed). The best, and its (ties, 95% interval, spread)."""
    series = [_mix(c, shares) for c in timed]
    ranking = rank(series)
    wanted = dict(test)
    tested = next((i for i, c in enumerate(timed) if dict(c.params) == wanted), None)
    index = tie_break(ranking.close, tested,
                      lambda i: order(timed[i].params) if order is not None else i)
    return timed[index], (len(ranking.tied) - 1, median_interval(series[index]),
                          spread(series[index]))


def _mix(candidate: Candidate, shares: Mapping[Hashable, float]) -> list[float]:
    """A candidate's time round by round: its ``r``-th launch of each part, mixed by the parts'
    shares, over the rounds every part has."""
    rounds = min(len(candidate.samples[p]) for p in shares)
    return [sum(share * candidate.samples[p][r] for p, share in shares.items())
            for r in range(rounds)]


def _off_best_seconds(best: Candidate, timed: list[Candidate], parts: list[Hashable]) -> float:
    """Device time the other candidates' samples took beyond the best's median, part by part."""
    off_best = 0.0
    for p in parts:
        reference = best.medians[p]
        off_best += sum(s - reference for c in timed if c is not best
                        for s in c.samples[p] if s > reference)
    return off_best
