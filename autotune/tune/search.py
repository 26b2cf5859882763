"""Searching a parameter space: ``autotune(generate, **space)`` and ``search``.

``generate(**params)`` builds one candidate and returns a :class:`~.measurement.Measurement`
(or a ``measure(iterations)`` callable, or ``None`` to skip it). On GPUs candidates are generated
in a thread pool a few steps ahead of the one being measured, so compilation overlaps timing;
but every command a candidate's ``generate`` puts on a tuning queue (uploads, fills, launches)
waits for that candidate's turn, so buffers shared between candidates are set up, checked and
timed in order.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import os
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..accel import CompileError, LaunchError, tuning_turn
from .measurement import Measure, WrongResult, rates, time_candidate
from .records import TrialStatus
from .space import Restriction, Space, SpaceError

logger = logging.getLogger("autotune.tune")


class AutotuneError(RuntimeError):
    """No configuration of the space succeeded, or the space is empty."""


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


@dataclass
class SearchResult:
    best: dict[str, Any]
    score: float
    trials: list[Trial] = field(default_factory=list)


@dataclass
class TuningRun:
    """What the decorator sets up while a tuning function runs: where trials go, which device,
    which space the template declared. Every trial of the run is kept in :attr:`trials`."""

    on_trial: Callable[[Trial], None] | None = None
    thread_scope: Callable[[], contextlib.AbstractContextManager] | None = None
    parallel: bool = True
    #: The template's ``test=`` parameters: timed too, if the space leaves them out, so that
    #: the speed-up of the tuned result over the default is always known.
    baseline: dict[str, Any] | None = None
    #: The space the template declares; ``autotune(generate)`` without lists searches it.
    space: Space | None = None
    trials: list[Trial] = field(default_factory=list)
    searched: list[Space] = field(default_factory=list)

    def timed(self, parameters: dict[str, Any]) -> Trial | None:
        """The last successful trial of ``parameters`` in this run, if they were timed."""
        for trial in reversed(self.trials):
            if trial.status is TrialStatus.OK and trial.parameters == parameters:
                return trial
        return None


_run: ContextVar[TuningRun | None] = ContextVar("autotune_run", default=None)

#: Callables ``observer(event, data)`` told of progress: ``("start", {"configurations": n})``
#: when a search begins and ``("trial", {"trial": Trial, "done": k, "total": n})`` after each
#: configuration (skipped ones included). The command line's progress bar is one.
observers: list[Callable[[str, dict[str, Any]], None]] = []


def _notify(event: str, **data: Any) -> None:
    for observer in list(observers):
        observer(event, data)


@contextlib.contextmanager
def tuning_run(run: TuningRun) -> Iterator[TuningRun]:
    token = _run.set(run)
    try:
        yield run
    finally:
        _run.reset(token)


def current_run() -> TuningRun | None:
    """The tuning run in progress in this context, if any."""
    return _run.get()


class _Cancelled(Exception):
    """A candidate generated ahead was abandoned before its turn came."""


class _Turns:
    """Which candidate's device work may run now (candidates are numbered in search order)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._current = -1
        self._closed = False

    def advance(self, index: int) -> None:
        with self._cond:
            self._current = index
            self._cond.notify_all()

    def wait_for(self, index: int) -> None:
        with self._cond:
            while self._current < index and not self._closed:
                self._cond.wait()
            if self._current < index:
                raise _Cancelled()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _generate(generate: Callable[..., Any], params: dict[str, Any],
              scope: Callable[[], contextlib.AbstractContextManager] | None,
              turns: _Turns | None, index: int) -> Any:
    with scope() if scope is not None else contextlib.nullcontext():
        ordered = tuning_turn(lambda: turns.wait_for(index)) if turns is not None \
            else contextlib.nullcontext()
        try:
            with ordered:
                return generate(**params)
        except Exception as exc:  # recorded as a failed configuration, search goes on
            return exc


def autotune(generate: Callable[..., Measure | None], space: Space | None = None, /, *,
             restrictions: Sequence[Restriction] = (), **parameters: Sequence[Any]) -> dict[str, Any]:
    """Try every valid configuration and return the fastest one's parameters.

    The space is given as keyword lists (``wgs=[64, 128]``) with optional ``restrictions``
    (predicates on a configuration dict), or as a :class:`Space`. Inside a tuning function whose
    template declares ``autotune_space``, ``autotune(generate)`` searches that space.

    Failures are recorded with their kind and the search goes on; if nothing succeeds,
    :class:`AutotuneError` counts the failures by kind, quotes the first of each, and chains the
    last exception.
    """
    return search(generate, _space(space, restrictions, parameters)).best


def _space(space: Space | None, restrictions: Sequence[Restriction],
           parameters: dict[str, Sequence[Any]]) -> Space:
    try:
        if space is not None:
            if parameters:
                raise SpaceError("give the space as a Space or as keyword lists, not both")
            return Space(space, restrictions)
        if not parameters:
            run = _run.get()
            if run is not None and run.space is not None:
                return Space(run.space, restrictions)
        return Space(parameters, restrictions)
    except SpaceError as exc:
        raise AutotuneError(str(exc)) from None


def _summarise_failures(trials: list[Trial], total: int) -> str:
    failed = [t for t in trials if t.status is not TrialStatus.OK]
    counts = Counter(t.status for t in failed)
    skipped = total - len(trials)
    lines = [f"no configuration succeeded ({total} in the space, {skipped} skipped by generate)"]
    for kind, count in counts.most_common():
        first = next(t for t in failed if t.status == kind)
        lines.append(f"  {kind.value}: {count}, first {first.parameters}: {first.message}")
    return "\n".join(lines)


def search(generate: Callable[..., Measure | None], space: Space | dict[str, Sequence[Any]],
           workers: int | None = None) -> SearchResult:
    """:func:`autotune` with the full result (every trial, the best score).

    ``workers`` threads generate candidates ahead (default: 4 on GPUs, none on CPU devices).
    """
    if not isinstance(space, Space):
        space = _space(None, (), dict(space))
    run = _run.get() or TuningRun()
    run.searched.append(space)
    try:
        configs = space.configurations()
    except SpaceError as exc:
        raise AutotuneError(str(exc)) from exc.__cause__
    reference = None  # the baseline, timed for the speed-up but outside the space: never wins
    baseline = run.baseline
    if (configs and baseline is not None and set(baseline) == set(space.names)
            and baseline not in configs and all(_allows(r, baseline) for r in space.restrictions)):
        reference = len(configs)
        configs.append(dict(baseline))
    if not configs:
        raise AutotuneError(f"the restrictions exclude every one of the {space.size} "
                            "configurations of the space")
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if run.parallel else 0
    trials: list[Trial] = []
    best: tuple[float, dict[str, Any]] | None = None
    last_error: BaseException | None = None
    done = 0

    def record(trial: Trial) -> None:
        trials.append(trial)
        run.trials.append(trial)
        if run.on_trial is not None:
            run.on_trial(trial)
        logger.debug("trial %s", trial)
        _notify("trial", trial=trial, done=done, total=len(configs))

    _notify("start", configurations=len(configs))
    pool = concurrent.futures.ThreadPoolExecutor(workers) if workers > 0 else None
    turns = _Turns() if pool is not None else None
    pending: deque[tuple[int, dict[str, Any], Any]] = deque()
    todo = iter(enumerate(configs))
    window = max(1, workers + 1)  # compile ahead, but never hold every candidate at once
    try:
        while True:
            while len(pending) < window:
                index, params = next(todo, (None, None))
                if params is None:
                    break
                future = None
                if pool is not None:
                    # A copy of this context: the worker sees the run and any source recording.
                    future = pool.submit(contextvars.copy_context().run, _generate, generate,
                                         params, run.thread_scope, turns, index)
                pending.append((index, params, future))
            if not pending:
                break
            index, params, future = pending.popleft()
            if turns is not None:
                turns.advance(index)
            outcome = future.result() if future is not None else _generate(generate, params, None,
                                                                           None, index)
            done += 1
            if outcome is None:
                _notify("trial", trial=None, done=done, total=len(configs))
                continue  # skipped by generate
            if isinstance(outcome, Exception):
                last_error = outcome
                record(Trial(params, classify(outcome), f"{type(outcome).__name__}: {outcome}"))
                continue
            try:
                timing = time_candidate(outcome)
            except Exception as exc:  # MeasurementError too: that candidate's time is not usable
                last_error = exc
                record(Trial(params, classify(exc), f"{type(exc).__name__}: {exc}"))
                continue
            gbps, gflops = rates(outcome, timing.median_seconds)
            del outcome  # release the candidate's buffers before the next one
            record(Trial(params, TrialStatus.OK, "", timing.min_seconds, timing.median_seconds,
                         timing.max_seconds, gbps, gflops))
            if index != reference and (best is None or timing.median_seconds < best[0]):
                best = (timing.median_seconds, params)
    finally:
        if pool is not None:
            turns.close()
            for _, _, future in pending:
                future.cancel()
            pool.shutdown(wait=True)
    if best is None:
        raise AutotuneError(_summarise_failures(trials, len(configs))) from last_error
    return SearchResult(best=dict(best[1]), score=best[0], trials=trials)


def _allows(restriction: Restriction, config: dict[str, Any]) -> bool:
    try:
        return bool(restriction(config))
    except Exception:  # noqa: BLE001 - a restriction that cannot judge it excludes it
        return False
