"""How one candidate is timed: :class:`Measurement` and :func:`make_measure`.

``generate(**params)`` returns a :class:`Measurement` (or any ``measure(iterations) -> seconds
per iteration`` callable, or None to skip the configuration). The tuner then, in order and
right before timing this candidate: runs ``setup`` (restore the buffers the candidate writes,
QUDA's preTune), one call of ``run`` and ``check`` (a false value or :class:`WrongResult` marks
it wrong), times batches of ``run`` with device events, and finally runs ``restore``
(QUDA's postTune).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

#: Timed batches per candidate unless a search says otherwise; their median ranks candidates.
MIN_BATCHES = 5
GPU_BATCH_SECONDS = 1e-3
CPU_BATCH_SECONDS = 1e-2
#: Most calls in one timed batch on a GPU: a CUDA tuning queue holds a batch's work until the
#: host has enqueued all of it (so that Python's launch time is not counted), and the driver
#: queues about a thousand launches a stream. Kernels shorter than 4 us get batches under
#: :data:`GPU_BATCH_SECONDS`.
GPU_MAX_ITERATIONS = 256
MAX_ITERATIONS = 10_000

Measure = Callable[[int], float]


class WrongResult(AssertionError):
    """A candidate computed a wrong answer; it is recorded as ``wrong_result`` and never wins."""


class MeasurementError(RuntimeError):
    """A measure callable returned a time that cannot be right (zero, negative, not finite)."""


@dataclass
class Measurement:
    """One candidate, ready to time.

    ``run`` enqueues one call on ``queue`` (a tuning queue); ``bytes`` and ``flops`` are what one
    call moves and computes, so that trials record GB/s and GFLOP/s.
    """

    queue: Any
    run: Callable[[], Any]
    check: Callable[[], Any] | None = None
    setup: Callable[[], Any] | None = None
    restore: Callable[[], Any] | None = None
    bytes: float | None = None
    flops: float | None = None
    batch_seconds: float = GPU_BATCH_SECONDS
    max_iterations: int = GPU_MAX_ITERATIONS
    #: placements ``run`` alternates between (:func:`make_measure`): a timed batch is a whole
    #: number of turns through them (:func:`batch_iterations`)
    placements: int = 1

    def __post_init__(self) -> None:
        for name in ("bytes", "flops"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)
                                          and value >= 0):
                raise ValueError(f"Measurement {name}= must be a finite number >= 0, got {value!r}")

    def prepare(self) -> None:
        """Set up, run once and check (raises :class:`WrongResult`)."""
        if self.setup is not None:
            self.setup()
        if self.check is None:
            return
        self.run()
        self.queue.finish()
        verdict = self.check()
        if verdict is not None and not verdict:
            raise WrongResult("the candidate's output does not match the reference")

    def __call__(self, iterations: int) -> float:
        """Seconds per call, averaged over ``iterations`` calls timed with device events."""
        queue = self.queue
        queue.start_tuning()
        try:
            for _ in range(iterations):
                self.run()
        finally:
            elapsed = queue.stop_tuning()
        return elapsed / iterations

    def finish(self) -> None:
        if self.restore is not None:
            self.restore()


def make_measure(queue: Any, fn: Callable[[], Any] | Sequence[Callable[[], Any]],
                 check: Callable[[], Any] | None = None, *,
                 setup: Callable[[], Any] | None = None, restore: Callable[[], Any] | None = None,
                 bytes: float | None = None, flops: float | None = None) -> Measurement:
    """A :class:`Measurement` that times ``fn`` (which enqueues work on the tuning ``queue``).

    ``check``, if given, runs once after a first call of ``fn``; it returns a false value or
    raises :class:`WrongResult` when the output is wrong. ``setup`` runs before that first call
    (put back the inputs a previous candidate overwrote), ``restore`` after timing.

    ``fn`` may also be a sequence of callables, one per placement of the candidate's operands
    (the same work on sets of buffers allocated apart): the calls then alternate between them,
    from the first again at each ``setup`` (so ``check`` reads the first's output), and the
    time is that of every placement alike. On a CPU device where a set lands can change a
    configuration's speed by half, and one set for a whole search ranks that placement.
    """
    if not callable(fn):
        runs = tuple(fn)
        if len(runs) == 1:
            fn = runs[0]
        else:
            fn = alternating = _Alternating(runs)
            given = setup

            def setup() -> None:
                alternating.turn = 0
                if given is not None:
                    given()
    device = getattr(getattr(queue, "context", None), "device", None)
    gpu = device is None or device.is_gpu
    return Measurement(queue, fn, check, setup, restore, bytes, flops,
                       GPU_BATCH_SECONDS if gpu else CPU_BATCH_SECONDS,
                       GPU_MAX_ITERATIONS if gpu else MAX_ITERATIONS,
                       len(fn.runs) if isinstance(fn, _Alternating) else 1)


class _Alternating:
    """One candidate's calls, alternating between ``runs`` (:func:`make_measure`)."""

    def __init__(self, runs: tuple[Callable[[], Any], ...]):
        if not runs or not all(callable(r) for r in runs):
            raise TypeError(f"make_measure: fn must be a callable or a sequence of callables, "
                            f"got {runs!r}")
        self.runs, self.turn = runs, 0

    def __call__(self) -> Any:
        run = self.runs[self.turn % len(self.runs)]
        self.turn += 1
        return run()


@dataclass(frozen=True)
class Timing:
    min_seconds: float
    median_seconds: float
    max_seconds: float
    #: every timed batch's seconds per call, in the order taken (the warm-up's alone for a
    #: candidate cut off by :data:`CUTOFF`)
    samples: tuple[float, ...] = ()


#: A candidate whose warm-up runs are this many times slower than the best so far is not timed
#: further: it cannot win, and refining its time would cost most of a large search.
CUTOFF = 4.0


def check_batches(batches: Any) -> int:
    """``batches`` if it is a usable number of timed batches (an int >= 1), else ValueError."""
    if isinstance(batches, bool) or not isinstance(batches, int) or batches < 1:
        raise ValueError(f"batches must be an int >= 1, got {batches!r}")
    return batches


def batch_iterations(measure: Any, seconds: float) -> int:
    """Calls in one timed batch of ``measure`` taking ``seconds`` a call: enough to fill its
    target batch duration (``batch_seconds``), between 1 and its ``max_iterations``
    (:data:`MAX_ITERATIONS` for a plain callable), rounded up to whole turns through its
    ``placements`` (down where that would pass ``max_iterations``), so that every batch times
    each placement alike. (A choice's batch starts from the first placement again: with one
    call a batch, a candidate was timed on the first placement alone, and another of two
    calls on both. On the 2-core CPU the choice took such
    one-call candidates of complex128 ``cdot_norm`` and ``bicgstab_p`` over configurations the
    search had timed 1.26x and 1.44x faster, 1.13x slower side by side, 2026-12-01.)"""
    target = getattr(measure, "batch_seconds", GPU_BATCH_SECONDS)
    most = getattr(measure, "max_iterations", MAX_ITERATIONS)
    every = max(1, int(getattr(measure, "placements", 1)))
    turns = -(-max(1, min(most, round(target / seconds))) // every)
    if turns > 1 and turns * every > most:
        turns -= 1  # whole turns within max_iterations where one turn fits
    return turns * every


def time_candidate(measure: Measure, best: float | None = None, batches: int = MIN_BATCHES) -> Timing:
    """Prepare (setup, check), warm up, size batches to the target duration, time ``batches``
    batches (default :data:`MIN_BATCHES`); then restore. A candidate whose warm-up already takes
    more than :data:`CUTOFF` times ``best`` (the best median so far) keeps its warm-up time."""
    check_batches(batches)
    try:
        if isinstance(measure, Measurement):
            measure.prepare()
        estimate = measure(1)  # warm-up
        estimate = min(estimate, measure(1))
        if not (estimate > 0 and math.isfinite(estimate)):
            raise MeasurementError(
                f"measure returned {estimate} seconds; a tuning queue must time the work it runs")
        if best is not None and estimate > CUTOFF * best:
            return Timing(estimate, estimate, estimate, (estimate,))
        iterations = batch_iterations(measure, estimate)
        samples = [measure(iterations) for _ in range(batches)]
        for s in samples:
            if not (s > 0 and math.isfinite(s)):
                raise MeasurementError(f"measure returned {s} seconds")
    finally:
        if isinstance(measure, Measurement):
            measure.finish()
    return Timing(min(samples), statistics.median(samples), max(samples), tuple(samples))


def rates(measure: Any, seconds: float | None) -> tuple[float | None, float | None]:
    """(GB/s, GFLOP/s) of a call taking ``seconds``, where the measurement declares them."""
    if seconds is None or not (seconds > 0 and math.isfinite(seconds)):
        return None, None
    moved = getattr(measure, "bytes", None)
    flops = getattr(measure, "flops", None)
    return (moved / seconds / 1e9 if moved else None, flops / seconds / 1e9 if flops else None)
