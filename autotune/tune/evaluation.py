"""Measuring configurations for a search strategy, within a budget, never twice.

A strategy asks an :class:`Evaluator` for the scores of batches of configurations. The evaluator
remembers every configuration it has seen (a repeat costs nothing), stops the search when the
budget is spent (:class:`BudgetExhausted`), and measures either on a device
(:class:`DeviceEvaluator`, compiling ahead while it times) or from a recorded landscape
(:class:`ReplayEvaluator`, for comparing strategies over many seeds in seconds).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import math
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..accel import CompileError, LaunchError, builds_in_helpers, tuning_turn
from .measurement import MIN_BATCHES, WrongResult, rates, time_candidate
from .records import TrialStatus
from .space import Space
from .turns import clock

logger = logging.getLogger("autotune.tune")

Config = dict[str, Any]
Key = tuple


class BudgetExhausted(Exception):
    """The search's budget (evaluations or seconds) is spent."""


#: A search whose first this many candidates all fail with the same exception and message stops:
#: the template is broken, and measuring the rest of a large space would only repeat it.
FAIL_FAST = 32


#: A search whose first this many candidates fail to compile with the same error, once their
#: configuration values are taken out of it, stops: the kernel is broken whatever the values.
SAME_COMPILE_ERROR = 3


class FailingFast(Exception):
    """The first ``count`` candidates failed alike (``error`` is the last)."""

    def __init__(self, error: BaseException, count: int = FAIL_FAST):
        super().__init__(str(error))
        self.error = error
        self.count = count


@dataclass(frozen=True)
class FailureSignature:
    """What makes two failures the same: the exception type and its message, and for a compile
    error the candidate's configuration values (a kernel that fails the same way for every
    value is broken whatever the search tries)."""

    kind: type
    message: str
    values: tuple[tuple[str, str], ...] = ()  #: (name, value as text), compile errors only


def failure_signature(exc: BaseException, params: Mapping[str, Any]) -> FailureSignature:
    """The signature of a candidate's failure (see :class:`FailureSignature`)."""
    values = tuple((name, str(value)) for name, value in params.items()) \
        if isinstance(exc, CompileError) else ()
    return FailureSignature(type(exc), str(exc), values)


_WORD = re.compile(r"([\w.]+)")


def _alike(a: FailureSignature, b: FailureSignature) -> bool:
    """The same failure: one type, and the same message, or (compile errors) messages that
    differ only where each holds its own candidate's value of one parameter, word for word
    (a value that also stands for a line or error count elsewhere does not matter)."""
    if a.kind is not b.kind:
        return False
    if a.message == b.message:
        return True
    if not a.values or not b.values:
        return False
    words_a, words_b = _WORD.split(a.message), _WORD.split(b.message)
    if len(words_a) != len(words_b):
        return False
    theirs = dict(b.values)
    pairs = {(value.lower(), theirs.get(name, "").lower()) for name, value in a.values}
    return all(x == y or (x.lower(), y.lower()) in pairs for x, y in zip(words_a, words_b))


def all_alike(signatures: list[FailureSignature]) -> bool:
    """True if every failure is the same as the first (:func:`_alike`)."""
    return all(_alike(signatures[0], other) for other in signatures[1:])


class InvalidConfiguration(ValueError):
    """Raised by ``generate`` for a configuration that cannot work (recorded as ``invalid``)."""


def classify(exc: BaseException) -> TrialStatus:
    """The failure kind recorded for an exception from generating or measuring a candidate."""
    if isinstance(exc, WrongResult):
        return TrialStatus.WRONG_RESULT
    if isinstance(exc, CompileError):
        return TrialStatus.COMPILE_ERROR
    if isinstance(exc, LaunchError):
        return TrialStatus.LAUNCH_ERROR
    if isinstance(exc, InvalidConfiguration):
        return TrialStatus.INVALID
    module = type(exc).__module__ or ""
    if module.startswith(("pycuda", "pyopencl")):
        return TrialStatus.LAUNCH_ERROR  # raised by the driver while running the candidate
    return TrialStatus.ERROR


@dataclass(frozen=True)
class Trial:
    """The outcome of one configuration."""

    parameters: dict[str, Any]
    status: TrialStatus  #: ``ok`` or a failure kind
    message: str = ""
    min_seconds: float | None = None
    median_seconds: float | None = None
    max_seconds: float | None = None
    gbps: float | None = None
    gflops: float | None = None
    #: every timed batch's seconds per call, in the order taken (kept in memory, not stored)
    samples: tuple[float, ...] = field(default=(), repr=False, compare=False)


@dataclass(frozen=True)
class Budget:
    """How much a search may spend: distinct configurations measured, and wall seconds."""

    max_evals: int | None = None
    max_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.max_evals is not None and (isinstance(self.max_evals, bool) or
                                           not isinstance(self.max_evals, int) or self.max_evals < 1):
            raise ValueError(f"max_evals must be an int >= 1 or None, got {self.max_evals!r}")
        if self.max_seconds is not None and (isinstance(self.max_seconds, bool) or
                                             not isinstance(self.max_seconds, (int, float)) or
                                             not math.isfinite(self.max_seconds) or self.max_seconds <= 0):
            raise ValueError(f"max_seconds must be a finite number > 0 or None, got {self.max_seconds!r}")

    @property
    def unlimited(self) -> bool:
        return self.max_evals is None and self.max_seconds is None


class Evaluator:
    """What a strategy measures through. Scores are seconds per call (lower is better); None
    marks a configuration that was skipped or failed."""

    def __init__(self, space: Space, budget: Budget):
        self.space = space
        self.names = space.names
        self.budget = budget
        self.started = clock()  #: on the tuner's clock (see :mod:`.turns`)
        self.scores: dict[Key, float | None] = {}  #: every configuration seen, in order
        self.evals = 0  #: distinct configurations measured successfully
        self.history: list[tuple[Key, float | None]] = []
        self._best: tuple[float, Key] | None = None

    def key(self, config: Mapping[str, Any]) -> Key:
        return tuple(config[n] for n in self.names)

    def config(self, key: Key) -> Config:
        return dict(zip(self.names, key))

    def out_of_time(self) -> bool:
        """Whether the budget's wall seconds are spent (the search still ends only at its
        first success: :meth:`spent`)."""
        return (self.budget.max_seconds is not None
                and clock() - self.started >= self.budget.max_seconds)

    def spent(self) -> bool:
        if self.budget.max_evals is not None and self.evals >= self.budget.max_evals:
            return True
        # time never stops a search before its first success: a budget too short for one
        # candidate still gives a result (``warm --max-minutes`` stores one for every key)
        return self._best is not None and self.out_of_time()

    def best(self) -> tuple[Key, float] | None:
        """The fastest configuration measured so far and its score (the first of equals)."""
        return None if self._best is None else (self._best[1], self._best[0])

    def evaluate(self, batch: Iterable[Mapping[str, Any]]) -> list[float | None]:
        """The scores of ``batch``, measuring each new configuration once, in order.

        Raises :class:`BudgetExhausted` once the budget is spent (what was measured is kept).
        """
        keys = [self.key(c) for c in batch]
        for _ in self.iterate(keys):
            pass
        return [self.scores.get(key) for key in keys]

    def iterate(self, keys: Sequence[Key]) -> Iterator[tuple[Key, float | None]]:
        """``(key, score)`` for each key in turn, measured as it is reached: a caller that stops
        early (first improvement) spends nothing on the rest, though a device evaluator may
        have compiled some of them ahead. Raises :class:`BudgetExhausted` at a key that would
        need a measurement once the budget is spent."""
        fresh: list[Key] = []
        for key in keys:
            if key not in self.scores and key not in fresh:
                fresh.append(key)
        measured = self._iterate(fresh)
        try:
            for key in keys:
                while key not in self.scores:
                    next(measured)
                yield key, self.scores[key]
        except StopIteration:
            raise BudgetExhausted() from None
        finally:
            measured.close()

    def _record(self, key: Key, score: float | None) -> None:
        self.scores[key] = score
        self.history.append((key, score))
        if score is not None:
            self.evals += 1
            if self._best is None or score < self._best[0]:
                self._best = (score, key)

    def _iterate(self, keys: list[Key]) -> Iterator[None]:
        """Measure ``keys`` in order, yielding after each is recorded; stop when the budget is
        spent (the caller then finds a key unrecorded)."""
        raise NotImplementedError


class ReplayEvaluator(Evaluator):
    """Scores from a recorded landscape (every valid configuration's median time): a
    configuration missing from it counts as failed."""

    def __init__(self, space: Space, budget: Budget, landscape: Mapping[Key, float | None]):
        super().__init__(space, budget)
        self.landscape = landscape

    def _iterate(self, keys: list[Key]) -> Iterator[None]:
        for key in keys:
            if self.spent():
                return
            self._record(key, self.landscape.get(key))
            yield


class _Cancelled(Exception):
    """A candidate generated ahead was abandoned before its turn came."""


class _Turns:
    """Which candidate's device work may run now (candidates are numbered in search order)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._current = -1
        self._closed = False
        self._cancelled: set[int] = set()

    def advance(self, index: int) -> None:
        with self._cond:
            self._current = index
            self._cond.notify_all()

    def cancel(self, index: int) -> None:
        """Candidate ``index`` will not be measured: its device work must never run."""
        with self._cond:
            self._cancelled.add(index)
            self._cond.notify_all()

    def wait_for(self, index: int) -> None:
        with self._cond:
            while self._current < index and not self._closed and index not in self._cancelled:
                self._cond.wait()
            if index in self._cancelled or self._current < index:
                raise _Cancelled()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _generate(generate: Callable[..., Any], params: Config,
              scope: Callable[[], contextlib.AbstractContextManager] | None,
              turns: _Turns | None, index: int, helped: bool = False) -> Any:
    # Threads compiling ahead render (and compile with NVRTC) in helper processes: rendering
    # holds the interpreter lock, so in threads alone the builds would run one at a time.
    with scope() if scope is not None else contextlib.nullcontext(), \
            builds_in_helpers() if helped else contextlib.nullcontext():
        ordered = tuning_turn(lambda: turns.wait_for(index)) if turns is not None \
            else contextlib.nullcontext()
        try:
            with ordered:
                return generate(**params)
        except Exception as exc:  # recorded as a failed configuration, search goes on
            return exc


class DeviceEvaluator(Evaluator):
    """Measures on the device: ``generate(**config)`` builds a candidate, which is timed.

    With ``workers`` threads, the candidates of a batch are generated (compiled, in helper
    processes) ahead of the one being timed; every command they put on a tuning queue still
    waits for its turn, so shared buffers are set up, checked and timed in order. ``batches``
    is the number of timed batches per candidate (their median is its score).

    The ``keep`` fastest candidates so far, and ``baseline`` (``test=``), stay built after
    their timing (the others are released at once), so that the choice can time them again
    (:mod:`~autotune.tune.choice`); :meth:`candidate` hands them out.
    """

    def __init__(self, space: Space, budget: Budget, generate: Callable[..., Any], *,
                 workers: int = 0, thread_scope: Any = None,
                 on_trial: Callable[[Trial | None], None] | None = None,
                 reference: Config | None = None, batches: int = MIN_BATCHES,
                 keep: int = 0, baseline: Config | None = None):
        super().__init__(space, budget)
        self.generate = generate
        self.workers = workers
        self.batches = batches
        self.thread_scope = thread_scope
        self.on_trial = on_trial
        self.reference = None if reference is None else self.key(reference)
        self.keep = keep
        self.baseline = None if baseline is None else self.key(baseline)
        #: the candidates kept built: the ``keep`` fastest so far, and the baseline
        self.built: dict[Key, Any] = {}
        self.trials: list[Trial] = []
        self.last_error: BaseException | None = None
        self._pool = concurrent.futures.ThreadPoolExecutor(workers) if workers > 0 else None
        self._turns = _Turns() if self._pool is not None else None
        self._index = 0
        self._same_failures: list[FailureSignature] = []

    def close(self) -> None:
        if self._pool is not None:
            self._turns.close()
            self._pool.shutdown(wait=True)

    def candidate(self, key: Key) -> Any:
        """The built candidate of a measured ``key``: the one kept, else built again (a
        resumed trial's); None where ``generate`` skips it or fails now."""
        found = self.built.get(key)
        if found is None:
            found = _generate(self.generate, self.config(key), None, None, 0)
        return None if isinstance(found, Exception) else found

    def release(self) -> None:
        """Let go of the candidates kept built."""
        self.built.clear()

    def _keep(self, key: Key, outcome: Any) -> None:
        """Keep ``outcome`` built if it is among the ``keep`` fastest (or the baseline);
        release the one it pushes out."""
        if self.keep <= 0:
            return
        self.built[key] = outcome
        ranked = sorted((k for k in self.built if k not in (self.baseline, self.reference)),
                        key=lambda k: self.scores[k])
        for k in ranked[self.keep:]:
            del self.built[k]

    def resume(self, trial: Trial) -> bool:
        """Take a successful trial of an interrupted search of this key as measured: it is
        not measured again, and counts as an evaluation. False if it does not apply."""
        key = self.key(trial.parameters)
        if trial.status is not TrialStatus.OK or trial.median_seconds is None or \
                key in self.scores or key == self.reference:
            return False
        self.trials.append(trial)
        self._record(key, trial.median_seconds)
        return True

    def _trial(self, trial: Trial) -> None:
        self.trials.append(trial)
        logger.debug("trial %s", trial)
        if self.on_trial is not None:
            self.on_trial(trial)

    def _record(self, key: Key, score: float | None) -> None:
        if key == self.reference:  # timed for the speed-up, never a candidate
            self.scores[key] = None
            return
        super()._record(key, score)

    def _iterate(self, keys: list[Key]) -> Iterator[None]:
        pending: deque[tuple[int, Key, Any]] = deque()
        todo = iter(keys)
        ahead = max(1, self.workers + 1)  # compile ahead, but never hold every candidate at once
        try:
            while True:
                # out of time, the search ends at its next success: builds started ahead then
                # are abandoned, their compiling wasted (on a GPU up to 8 a key under ``warm
                # --max-minutes`` late in a run, where most keys' limits are spent)
                window = 1 if self.out_of_time() else ahead
                while len(pending) < window and not self.spent():
                    key = next(todo, None)
                    if key is None:
                        break
                    index, self._index = self._index, self._index + 1
                    future = None
                    if self._pool is not None:
                        # A copy of this context: the worker sees the run and any source recording.
                        future = self._pool.submit(contextvars.copy_context().run, _generate,
                                                   self.generate, self.config(key),
                                                   self.thread_scope, self._turns, index, True)
                    pending.append((index, key, future))
                if not pending or self.spent():
                    return  # with the budget spent, what was generated ahead is abandoned
                index, key, future = pending.popleft()
                if self._turns is not None:
                    self._turns.advance(index)
                outcome = (future.result() if future is not None
                           else _generate(self.generate, self.config(key), None, None, index))
                self._outcome(key, outcome)
                del outcome  # release the candidate's buffers before the next one
                yield
        finally:
            for index, _, future in pending:  # abandoned: their device work must never run
                if self._turns is not None:
                    self._turns.cancel(index)
                if future is not None:
                    future.cancel()

    def _failed(self, key: Key, params: Config, exc: BaseException) -> None:
        self.last_error = exc
        self._trial(Trial(params, classify(exc), f"{type(exc).__name__}: {exc}"))
        self._record(key, None)
        if self.evals == 0:
            self._same_failures.append(failure_signature(exc, params))
            limit = SAME_COMPILE_ERROR if isinstance(exc, CompileError) else FAIL_FAST
            if len(self._same_failures) >= limit and all_alike(self._same_failures):
                raise FailingFast(exc, len(self._same_failures))

    def _outcome(self, key: Key, outcome: Any) -> None:
        params = self.config(key)
        if outcome is None:  # skipped by generate
            self.scores[key] = None
            if self.on_trial is not None:
                self.on_trial(None)
            return
        if isinstance(outcome, Exception):
            self._failed(key, params, outcome)
            return
        try:
            best = self.best()
            timing = time_candidate(outcome, best[1] if best is not None else None, self.batches)
        except Exception as exc:  # MeasurementError too: that candidate's time is not usable
            self._failed(key, params, exc)
            return
        gbps, gflops = rates(outcome, timing.median_seconds)
        self._trial(Trial(params, TrialStatus.OK, "", timing.min_seconds, timing.median_seconds,
                          timing.max_seconds, gbps, gflops, timing.samples))
        self._record(key, timing.median_seconds)
        self._keep(key, outcome)


@dataclass
class StrategyContext:
    """What a strategy sees: the valid configurations, an evaluator, a seeded random generator,
    configurations to measure first (a warm start) and scores from other devices (a prior)."""

    space: Space
    configs: list[Config]
    evaluator: Evaluator
    rng: Any  #: numpy.random.Generator
    seeds: list[Config] = field(default_factory=list)
    prior: list[tuple[Config, float]] = field(default_factory=list)  #: (config, relative time)
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.names = self.space.names
        self.values = [list(self.space.parameters[n]) for n in self.names]
        self.valid: set[Key] = {self.key(c) for c in self.configs}
        self._neighbours: dict[Key, list[Key]] = {}

    def key(self, config: Mapping[str, Any]) -> Key:
        return tuple(config[n] for n in self.names)

    def config(self, key: Key) -> Config:
        return dict(zip(self.names, key))

    def evaluate(self, batch: Sequence[Mapping[str, Any]]) -> list[float | None]:
        return self.evaluator.evaluate(batch)

    def score(self, key: Key) -> float:
        """A measured key's score, +inf where it failed; measures it if needed."""
        value = self.evaluate([self.config(key)])[0]
        return math.inf if value is None else value

    def neighbours(self, key: Key) -> list[Key]:
        """Valid configurations one step away: one parameter moved to an adjacent value."""
        found = self._neighbours.get(key)
        if found is None:
            found = []
            for i, values in enumerate(self.values):
                at = values.index(key[i])
                for j in (at - 1, at + 1):
                    if 0 <= j < len(values):
                        other = key[:i] + (values[j],) + key[i + 1:]
                        if other in self.valid:
                            found.append(other)
            self._neighbours[key] = found
        return found

    def random_key(self) -> Key:
        return self.key(self.configs[int(self.rng.integers(len(self.configs)))])

    def unmeasured(self, keys: Iterable[Key]) -> list[Key]:
        return [k for k in keys if k not in self.evaluator.scores]


def default_workers(parallel: bool) -> int:
    """Threads that compile ahead on GPUs (compiling a large kernel takes longer than timing it)."""
    return min(8, os.cpu_count() or 1) if parallel else 0
