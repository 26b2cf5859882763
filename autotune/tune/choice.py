"""Statistics of a choice: the leading candidates and ``test=`` timed again side by side, their
95% intervals, the ties, and the one rule that breaks them.

A search ranks candidates by the median of a few batches each, taken one candidate after
another; on a busy machine that ranking changes from run to run. Before a winner is stored,
:func:`settle` times the leading candidates and ``test=`` again, interleaved (one batch of each
in turn, round after round: A B C A B C ...), so that each round sees the machine in one state,
until the ranking is settled at 95% confidence or the sample budget is spent. Then:

- **Intervals.** A time's 95% interval is the distribution-free interval of the median of its
  batches: two of its order statistics, chosen with the binomial distribution (no assumption on
  the shape of the noise; a batch slowed by other work moves it by one rank, not by its size).
  Six batches are the fewest that give 95%; :data:`MIN_ROUNDS` are always timed.
- **Ties.** Each candidate is compared with the fastest (the lowest median) round by round: the
  log of its batch's time over the fastest's batch of the same round, so that the machine's slow
  stretches cancel. It is a *tie* when the 95% interval of the median of those log-ratios reaches
  down to the resolution: the larger of :data:`RESOLUTION` and the noise of the medians compared
  (the noise of one batch, the larger of what those ratios show and the batches' spread, at
  :data:`MIN_ROUNDS` rounds, and less by the square root of the rounds beyond: a difference
  smaller than that does not reproduce from one tuning to the next on that machine). It is *settled* once that interval lies wholly above the resolution (slower) or
  wholly below it (surely a tie).
- **The rule.** Among the ties whose median ratio to the fastest is itself within the
  resolution (:attr:`Ranking.close`) the winner is ``test=`` if it is one, else the earliest
  of the search's seeds (the configurations it measured first: those given, then the warm
  start, the stored best of this device or the nearest), else the earliest in the space's
  declared order (:func:`tie_break`): the same inputs give the same answer on a noisy machine,
  and where the search could not tell them apart the longer searches behind the stored
  results decide. A tie only by its interval (a few rounds' extremes reaching down, the median
  ratio beyond the resolution) is not broken toward: the fastest keeps it. The online tuner
  locks by the same rule.
- **Spread.** How much one batch varies: the interquartile range of the batches over 1.349 times
  their median (a robust relative standard deviation: 0.02 for Gaussian noise of 2%). Above
  :data:`NOISY` the machine is too noisy to rank, and the tuner warns once.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .measurement import Measurement

logger = logging.getLogger("autotune.tune")

#: The confidence of every interval and of the ties.
CONFIDENCE = 0.95
#: The smallest relative difference told apart (the batches' noise where it is larger). On an
#: idle H200 the batches of a memory-bound kernel spread 0.1-0.2%, and the declared-order rule
#: applied to differences of 0.3-0.5% (ties at a floor of 0.5%) stored winners up to 1.2% off
#: the fastest, compounded over two parameters: the floor is below that.
RESOLUTION = 0.002
#: What a time measured in another process may differ by, at least (the speed-up's interval is
#: widened by the larger of this and the resolution): the same configurations of the dslash on
#: an H200 re-measured side by side in a fresh process ranked up to 1% differently.
REPRODUCIBILITY = 0.01
#: Candidates timed again besides ``test=``: the fastest ones of the search (on a noisy machine
#: the search's medians are rough: no margin keeps out a candidate that could be tied).
LEADERS = 4
#: A leader is timed again if its fastest batch in the search was within this of the fastest
#: candidate's slowest batch (:func:`could_tie`).
OVERLAP = 0.05
#: The fastest this many of the search are always timed again, whatever their batches: the
#: search times one candidate after another, and on a shared CPU two windows of time differ by
#: more than :data:`OVERLAP` (two candidates 0.3% apart had their batches set apart, and the
#: winner changed from process to process).
ALWAYS = 2
#: Rounds always timed: six batches are the fewest that give a 95% interval of a median (their
#: extremes, 96.9%); eight hold it with 99.2%, so that two candidates within noise are not
#: told apart by a chance run of six.
MIN_ROUNDS = 8
#: Rounds at most, unless ``search_settings(settle=...)`` says otherwise (0: no re-timing).
MAX_ROUNDS = 64
#: The re-timing stops once it has taken this share of the search's time (after MIN_ROUNDS).
SHARE = 0.1
#: ... unless the rule would choose a candidate whose median is slower than the fastest's by
#: more than the resolution: then it goes on up to this share (:func:`doubtful`). On a shared
#: 2-core CPU, eight rounds' interval of the median is their extremes, so one disturbed batch
#: of the fastest tied candidates 1.3-2.5x slower, and the rule stored them (BLAS keys, warm).
DOUBT_SHARE = 0.5
#: ... and likewise while the rule would choose a tied candidate whose median is slower than
#: the fastest's by more than this, where the resolution is coarser: a gap larger than the
#: quality `warm` is held to (issue 44: within 2% of the best known) is not left to the tie
#: rule while more rounds may tell it apart. On the 2-core CPU a resolution of 8.9% after the
#: eight rounds tied the dslash's ``test=`` (half, 18 parameters, 8^4) to a configuration
#: 6.5% faster in every side-by-side round, and the rule stored ``test=`` (2026-12-01).
DOUBT_GAP = 0.02
#: A winner's spread above this says the machine is too noisy to rank candidates: one warning.
NOISY = 0.05


def order_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The 1-based rank ``k`` for which the ``k``-th smallest and ``k``-th largest of ``n``
    samples hold their median with at least ``confidence`` (1 where ``n`` is too small for it:
    fewer than 6 samples at 95%)."""
    alpha, found, below = 1 - confidence, 1, 0
    for k in range(1, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1)  # outcomes with at most k - 1 samples under the median
        if 2 * below / 2 ** n > alpha:
            break
        found = k
    return found


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The distribution-free ``confidence`` interval of the median of ``samples``."""
    ordered = sorted(samples)
    k = order_rank(len(ordered), confidence)
    return ordered[k - 1], ordered[-k]


def spread(samples: Sequence[float]) -> float:
    """The interquartile range of ``samples`` over 1.349 times their median (0 for fewer than
    two samples)."""
    if len(samples) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    middle = statistics.median(samples)
    return (q3 - q1) / (1.349 * middle) if middle > 0 else 0.0


def _paired_noise(ratios: Sequence[float]) -> float:
    """The noise of one batch that round-by-round log-ratios show: their interquartile range
    over 1.349, over the square root of 2 (two batches make a ratio); what the machine does to
    both batches of a round alike (another job's burst) cancels out of it."""
    if len(ratios) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return (q3 - q1) / (1.349 * math.sqrt(2))


@dataclass(frozen=True)
class Ranking:
    """Which of several series of batch times (one per candidate, round by round) cannot be told
    apart from the fastest (:func:`rank`)."""

    fastest: int  #: the index of the series with the lowest median
    tied: tuple[int, ...]  #: the fastest and its ties, in index order
    #: the ties whose median ratio to the fastest is within the resolution too (the fastest
    #: first among them by index order): those the rule chooses among
    close: tuple[int, ...]
    slower: tuple[int, ...]  #: told apart from the fastest: slower
    settled: bool  #: every comparison is sure at the confidence, with enough rounds
    resolution: float  #: the relative difference told apart
    #: of one batch: the larger of what the round-by-round ratios show and the series' spread
    #: (medians over them; with a few rounds either estimate alone can come out small)
    noise: float


def rank(series: Sequence[Sequence[float]], *, floor: float = RESOLUTION,
         confidence: float = CONFIDENCE, least: int = MIN_ROUNDS) -> Ranking:
    """Compare each series with the fastest, round by round over the rounds both have (see
    the module docstring). ``least``: rounds a comparison needs for its interval; with fewer
    (an online scan's few launches), the median of the ratios alone is held against the
    resolution, and nothing is settled."""
    medians = [statistics.median(s) for s in series]
    fastest = min(range(len(series)), key=lambda i: (medians[i], i))
    best = series[fastest]
    ratios = {i: [math.log(s[r] / best[r]) for r in range(min(len(s), len(best)))]
              for i, s in enumerate(series) if i != fastest}
    paired = statistics.median(_paired_noise(d) for d in ratios.values()) if ratios else 0.0
    noise = max(paired, statistics.median(spread(s) for s in series))
    # the noise of the medians compared: one batch's at the rounds always timed, less as more
    # rounds make the medians steadier (a GEMM key tuned 10 times on an H200 with the noise of
    # one batch as the margin tied candidates up to 1.2% apart, and the rule took the slower)
    resolution = max(floor, noise * math.sqrt(least / max(len(best), least)))
    limit = math.log1p(resolution)
    tied, close, slower, settled = [fastest], [fastest], [], True
    for i, d in ratios.items():
        n = len(d)
        # too few rounds for an interval (an online scan's few launches): the median decides
        low, high = median_interval(d, confidence) if n >= least else (statistics.median(d),) * 2
        if low > limit:
            slower.append(i)
        else:
            tied.append(i)
            if statistics.median(d) <= limit:
                close.append(i)
        settled = settled and n >= least and (low > limit or high <= limit)
    return Ranking(fastest, tuple(sorted(tied)), tuple(sorted(close)), tuple(slower), settled,
                   resolution, noise)


def could_tie(leaders: Sequence[Any], trials: Mapping[Any, Any]) -> list[Any]:
    """Those of ``leaders`` (keys, fastest first; ``trials[key]`` has the ``min_seconds``,
    ``median_seconds`` and ``max_seconds`` of the search's batches) that could be tied with the
    first: the first :data:`ALWAYS` (the search's ranking of its two fastest is the one that
    drifting time windows overturn), and those whose fastest batch is within :data:`OVERLAP` of
    the first's slowest. A later leader the search already saw clearly slower (on a quiet
    machine, most) is not timed again; on a noisy machine the batches' ranges are wide and every
    leader stays."""
    if not leaders:
        return []
    first = trials[leaders[0]]
    reach = (first.max_seconds or first.median_seconds) * (1 + OVERLAP)
    return [k for i, k in enumerate(leaders)
            if i < ALWAYS or (trials[k].min_seconds or trials[k].median_seconds) <= reach]


def tie_break(tied: Sequence[int], test: int | None, position: Callable[[int], float]) -> int:
    """The winner among ``tied`` (indices): ``test`` if it is one of them, else the one with
    the lowest ``position`` (the search's seeds, then the space's declared order; ties of that
    by index)."""
    if test is not None and test in tied:
        return test
    return min(tied, key=lambda i: (position(i), i))


@dataclass
class Contender:
    """One candidate timed again: its ``measure(iterations)`` and its batches."""

    config: dict[str, Any]
    measure: Callable[[int], float]
    iterations: int = 1  #: calls a batch
    #: in the rule's order (the search's seeds, then the space's declared order); None
    #: outside the space
    position: int | None = None
    test: bool = False  #: the ``test=`` configuration
    eligible: bool = True  #: may win (``test=`` outside the space is timed, never chosen)
    samples: list[float] = field(default_factory=list)  #: seconds a call, one per round
    failed: str = ""
    retired: bool = False  #: surely slower: not timed in later rounds


@dataclass(frozen=True)
class Choice:
    """What :func:`settle` chose, with its statistics (times in seconds per call)."""

    winner: dict[str, Any]
    seconds: float  #: the winner's median
    ci_low: float  #: the 95% interval of the winner's median
    ci_high: float
    ties: int  #: candidates that cannot be told apart from the fastest (besides it)
    spread: float  #: of the winner's batches (see :func:`spread`)
    rounds: int  #: interleaved rounds timed
    settled: bool  #: the ranking was settled before the budget was spent
    resolution: float  #: the relative difference told apart
    contenders: int  #: candidates timed again, ``test=`` included
    retime_seconds: float  #: wall time of the re-timing
    tied: tuple[dict[str, Any], ...] = ()  #: the fastest and its ties
    #: those of ``tied`` whose median is within the resolution of the fastest's too: the rule
    #: chooses among them
    close: tuple[dict[str, Any], ...] = ()
    test_seconds: float | None = None  #: ``test=``'s median, where it was timed again
    test_low: float | None = None
    test_high: float | None = None

    @property
    def speedup(self) -> tuple[float, float, float] | None:
        """How many times faster than ``test=`` the winner is, with its interval: from the two
        medians' 95% intervals (``test=``'s low over the winner's high, and the reverse),
        widened on each side by what a measurement in another process may differ by on this
        machine (the resolution, at least :data:`REPRODUCIBILITY`)."""
        if self.test_seconds is None or self.test_low is None or self.test_high is None:
            return None
        slack = 1 + max(self.resolution, REPRODUCIBILITY)
        return (self.test_seconds / self.seconds, self.test_low / (self.ci_high * slack),
                self.test_high * slack / self.ci_low)

    @property
    def noisy(self) -> bool:
        """Too noisy to rank: the winner's batches spread more than :data:`NOISY`. (A coarse
        resolution with steady batches is not the machine's noise: it comes from candidates
        whose times differ from round to round in their own way, such as launch-bound kernels
        of different shapes; they are tied, and the rule chooses among them.)"""
        return self.spread > NOISY

    def summary(self) -> dict[str, Any]:
        """The choice as plain JSON values (for a result's ``search`` text)."""
        speedup = self.speedup
        return {"rounds": self.rounds, "settled": self.settled, "contenders": self.contenders,
                "ties": self.ties, "close": max(len(self.close) - 1, 0),
                "resolution": round(self.resolution, 6),
                "seconds": round(self.retime_seconds, 3),
                "speedup": None if speedup is None else [round(v, 4) for v in speedup],
                "test_interval": None if self.test_low is None else [self.test_low, self.test_high]}


def _batch(c: Contender, iterations: int) -> float | None:
    """One batch of ``c`` (its setup first, untimed), or None with ``c.failed`` set."""
    try:
        if isinstance(c.measure, Measurement) and c.measure.setup is not None:
            c.measure.setup()
        seconds = c.measure(iterations)
        if not (seconds > 0 and math.isfinite(seconds)):
            raise ValueError(f"measure returned {seconds} seconds")
        return seconds
    except Exception as exc:  # the candidate is left out of the choice; the rest go on
        c.failed = f"{type(exc).__name__}: {exc}"
        logger.info("timing %s again failed (%s); it is left out of the choice", c.config, c.failed)
        return None


def _finish(contenders: Sequence[Contender]) -> None:
    for c in contenders:
        if isinstance(c.measure, Measurement):
            try:
                c.measure.finish()
            except Exception as exc:  # restoring one candidate's buffers must not lose the choice
                logger.info("restoring after %s failed: %s", c.config, exc)


def settle(contenders: Sequence[Contender], *, seconds: float | None = None,
           doubt_seconds: float | None = None, rounds: int = MAX_ROUNDS,
           clock: Callable[[], float] = time.perf_counter) -> Choice | None:
    """Time ``contenders`` interleaved, round after round, until their ranking is settled, or
    ``rounds`` rounds are timed, or (after :data:`MIN_ROUNDS`) another round would take the
    time past ``seconds`` (past ``doubt_seconds`` while the ranking is :func:`doubtful`; None:
    no limit then but ``rounds``); then choose among the ties by :func:`tie_break`. None where
    every contender failed or none may win."""
    started = clock()
    # a warm-up batch each, not kept: a device that idled while the search compiled may run its
    # first milliseconds at lower clocks (the first round would be slower for all but the last)
    live = [c for c in contenders if _batch(c, c.iterations) is not None]
    done, ranking = 0, None
    try:
        while live:
            begun = clock()
            # every other round in reverse: a bias of the place in a round (the first batch
            # after the host's pause, say) falls on each contender alike, and ties stay ties
            for c in (live if done % 2 == 0 else live[::-1]):
                if not c.retired:
                    value = _batch(c, c.iterations)
                    if value is not None:
                        c.samples.append(value)
            live = [c for c in live if not c.failed]
            done += 1
            if not live or done < min(MIN_ROUNDS, rounds):
                continue
            ranking = rank([c.samples for c in live])
            for i in ranking.slower:  # surely slower, with an interval of its own: no more batches
                live[i].retired = live[i].retired or len(live[i].samples) >= MIN_ROUNDS
            now = clock()  # (the next round costs at most what this one did)
            limit = doubt_seconds if doubtful(live, ranking) else seconds
            if ranking.settled or done >= rounds or (limit is not None
                                                     and now + (now - begun) - started > limit):
                break
    finally:
        _finish(contenders)
    if not live or ranking is None or not any(c.eligible for c in live):
        return None
    return _choice(live, ranking, done, clock() - started)


def _pick(live: Sequence[Contender], ranking: Ranking,
          among: Sequence[int] | None = None) -> int:
    """The index of the contender the rule chooses now, among ``among`` (default the
    ranking's close ties; :func:`doubtful` asks about all its ties)."""
    tied = [i for i in (ranking.close if among is None else among) if live[i].eligible]
    if tied:
        test = next((i for i, c in enumerate(live) if c.test), None)
        return tie_break(tied, test, lambda i: math.inf if live[i].position is None
                         else live[i].position)
    # the fastest may not win (test= outside the space) and nothing eligible is tied
    return min((i for i, c in enumerate(live) if c.eligible),
               key=lambda i: statistics.median(live[i].samples))


def doubtful(live: Sequence[Contender], ranking: Ranking) -> bool:
    """Whether the rule, over every tie, would now choose a tied candidate whose median is
    slower than the fastest's by more than the resolution (tied only because the interval of
    a few rounds still reaches down to it: more rounds tell them apart, or show the tie; if
    none are left, the fastest keeps it), or by more than :data:`DOUBT_GAP` where the
    resolution is coarser (more rounds narrow it)."""
    if ranking.settled or not any(c.eligible for c in live):
        return False
    index = _pick(live, ranking, ranking.tied)
    if index == ranking.fastest:
        return False
    ratio = statistics.median(live[index].samples) / statistics.median(
        live[ranking.fastest].samples)
    return ratio - 1 > min(ranking.resolution, DOUBT_GAP)


def _choice(live: list[Contender], ranking: Ranking, rounds: int, spent: float) -> Choice:
    test = next((i for i, c in enumerate(live) if c.test), None)
    index = _pick(live, ranking)
    w = live[index]
    low, high = median_interval(w.samples)
    timed = live[test] if test is not None else None
    test_low, test_high = median_interval(timed.samples) if timed is not None else (None, None)
    return Choice(
        winner=dict(w.config), seconds=statistics.median(w.samples), ci_low=low, ci_high=high,
        ties=len(ranking.tied) - 1, spread=spread(w.samples), rounds=rounds,
        settled=ranking.settled, resolution=ranking.resolution, contenders=len(live),
        retime_seconds=spent, tied=tuple(dict(live[i].config) for i in ranking.tied),
        close=tuple(dict(live[i].config) for i in ranking.close),
        test_seconds=statistics.median(timed.samples) if timed is not None else None,
        test_low=test_low, test_high=test_high)
