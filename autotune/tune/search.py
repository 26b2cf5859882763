"""Searching a parameter space: ``autotune(generate, **space)`` and ``make_measure``.

``generate(**params)`` builds one candidate and returns ``measure(iterations) -> seconds per
iteration`` (or ``None`` to skip it). Candidates are generated (compiled) in a thread pool a few
steps ahead of the one being measured, and measured one at a time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import itertools
import logging
import math
import os
import statistics
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from ..accel import CompileError, LaunchError

logger = logging.getLogger("autotune.tune")

Measure = Callable[[int], float]

#: At least this many timed batches per candidate; the median ranks candidates.
MIN_BATCHES = 5
GPU_BATCH_SECONDS = 1e-3
CPU_BATCH_SECONDS = 1e-2


class AutotuneError(RuntimeError):
    """No configuration of the space succeeded, or the space is empty."""


class InvalidConfiguration(ValueError):
    """Raised by ``generate`` for a configuration that cannot work (recorded as ``invalid``)."""


class WrongResult(AssertionError):
    """A candidate computed a wrong answer; it is recorded as ``wrong_result`` and never wins."""


def classify(exc: BaseException) -> str:
    """The failure kind recorded for an exception from generating or measuring a candidate."""
    if isinstance(exc, WrongResult):
        return "wrong_result"
    if isinstance(exc, CompileError):
        return "compile_error"
    if isinstance(exc, LaunchError):
        return "launch_error"
    if isinstance(exc, InvalidConfiguration):
        return "invalid"
    module = type(exc).__module__ or ""
    if module.startswith(("pycuda", "pyopencl")):
        return "launch_error"  # raised by the driver while running the candidate
    return "error"


@dataclass(frozen=True)
class Trial:
    """The outcome of one configuration."""

    parameters: dict[str, Any]
    status: str  #: ``ok`` or a failure kind
    message: str = ""
    min_seconds: float | None = None
    median_seconds: float | None = None
    max_seconds: float | None = None


@dataclass
class SearchResult:
    best: dict[str, Any]
    score: float
    trials: list[Trial] = field(default_factory=list)


@dataclass
class Session:
    """Set by the decorator while a tuning function runs: where trials go, which device."""

    on_trial: Callable[[Trial], None] | None = None
    thread_scope: Callable[[], contextlib.AbstractContextManager] | None = None
    parallel: bool = True
    #: The template's ``test=`` parameters: timed too, if the space leaves them out, so that
    #: the speed-up of the tuned result over the default is always known.
    baseline: dict[str, Any] | None = None
    results: list[SearchResult] = field(default_factory=list)


_session: ContextVar[Session | None] = ContextVar("autotune_session", default=None)

#: Callables ``observer(event, data)`` told of progress: ``("start", {"configurations": n})``
#: when a search begins and ``("trial", {"trial": Trial, "done": k, "total": n})`` after each
#: configuration (skipped ones included). The command line's progress bar is one.
observers: list[Callable[[str, dict[str, Any]], None]] = []


def _notify(event: str, **data: Any) -> None:
    for observer in list(observers):
        observer(event, data)


@contextlib.contextmanager
def session(s: Session) -> Iterator[Session]:
    token = _session.set(s)
    try:
        yield s
    finally:
        _session.reset(token)


def make_measure(queue: Any, fn: Callable[[], Any], check: Callable[[], Any] | None = None) -> Measure:
    """A measure callable that times ``fn`` (which enqueues work on ``queue``) with device events.

    ``queue`` must be a tuning queue. ``check``, if given, runs once after a first call of
    ``fn``; it returns a false value or raises :class:`WrongResult` when the output is wrong.
    """
    state = {"checked": check is None}

    def measure(iterations: int) -> float:
        if not state["checked"]:
            fn()
            queue.finish()
            verdict = check()
            if verdict is not None and not verdict:
                raise WrongResult("the candidate's output does not match the reference")
            state["checked"] = True
        queue.start_tuning()
        try:
            for _ in range(iterations):
                fn()
        finally:
            elapsed = queue.stop_tuning()
        return elapsed / iterations

    device = getattr(getattr(queue, "context", None), "device", None)
    measure.batch_seconds = (  # type: ignore[attr-defined]
        GPU_BATCH_SECONDS if device is None or device.is_gpu else CPU_BATCH_SECONDS
    )
    return measure


def _time_candidate(measure: Measure) -> tuple[float, float, float]:
    """Warm up, size batches to the target duration, time at least MIN_BATCHES; (min, median, max)."""
    target = getattr(measure, "batch_seconds", GPU_BATCH_SECONDS)
    estimate = measure(1)  # warm-up (and the correctness check, for make_measure)
    estimate = min(estimate, measure(1))
    if not (estimate > 0 and math.isfinite(estimate)):
        raise AutotuneError(
            f"measure returned {estimate} seconds; a tuning queue must time the work it runs"
        )
    iterations = max(1, min(10_000, round(target / estimate)))
    samples = [measure(iterations) for _ in range(MIN_BATCHES)]
    return min(samples), statistics.median(samples), max(samples)


def _configurations(space: dict[str, Sequence[Any]]) -> list[dict[str, Any]]:
    if not space:
        raise AutotuneError("autotune() was given no parameters: name at least one list")
    for name, values in space.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise AutotuneError(f"parameter {name!r} must be a list of values, got {values!r}")
    names = list(space)
    combos = [dict(zip(names, combo)) for combo in itertools.product(*(list(space[n]) for n in names))]
    if not combos:
        empty = [n for n in names if not list(space[n])]
        raise AutotuneError(f"the parameter space is empty: {', '.join(empty)} has no values")
    return combos


def _summarise_failures(trials: list[Trial], total: int) -> str:
    failed = [t for t in trials if t.status != "ok"]
    counts = Counter(t.status for t in failed)
    skipped = total - len(trials)
    lines = [f"no configuration succeeded ({total} in the space, {skipped} skipped by generate)"]
    for kind, count in counts.most_common():
        first = next(t for t in failed if t.status == kind)
        lines.append(f"  {kind}: {count}, first {first.parameters}: {first.message}")
    return "\n".join(lines)


def _generate(generate: Callable[..., Measure | None], params: dict[str, Any],
              scope: Callable[[], contextlib.AbstractContextManager] | None) -> Any:
    with scope() if scope is not None else contextlib.nullcontext():
        try:
            return generate(**params)
        except Exception as exc:  # recorded as a failed configuration, search goes on
            return exc


def autotune(generate: Callable[..., Measure | None], **space: Sequence[Any]) -> dict[str, Any]:
    """Try every combination of the parameter lists and return the fastest one's parameters.

    Failures are recorded with their kind and the search goes on; if nothing succeeds,
    :class:`AutotuneError` counts the failures by kind and quotes the first of each.
    """
    return search(generate, space).best


def search(generate: Callable[..., Measure | None], space: dict[str, Sequence[Any]],
           workers: int | None = None) -> SearchResult:
    """:func:`autotune` with the full result (every trial, the best score)."""
    configs = _configurations(space)
    sess = _session.get() or Session()
    if sess.baseline is not None and set(sess.baseline) == set(space) and sess.baseline not in configs:
        configs.append(dict(sess.baseline))
    if workers is None:
        workers = min(4, os.cpu_count() or 1) if sess.parallel else 0
    trials: list[Trial] = []
    best: tuple[float, dict[str, Any]] | None = None

    def record(trial: Trial) -> None:
        trials.append(trial)
        if sess.on_trial is not None:
            sess.on_trial(trial)
        logger.debug("trial %s", trial)
        _notify("trial", trial=trial, done=done, total=len(configs))

    _notify("start", configurations=len(configs))
    done = 0
    pool = concurrent.futures.ThreadPoolExecutor(workers) if workers > 0 else None
    pending: deque[tuple[dict[str, Any], Any]] = deque()
    todo = iter(configs)
    window = max(1, workers + 1)  # compile ahead, but never hold every candidate at once
    try:
        while True:
            while len(pending) < window:
                params = next(todo, None)
                if params is None:
                    break
                if pool is not None:
                    pending.append((params, pool.submit(_generate, generate, params, sess.thread_scope)))
                else:
                    pending.append((params, None))
            if not pending:
                break
            params, future = pending.popleft()
            outcome = future.result() if future is not None else _generate(generate, params, None)
            done += 1
            if outcome is None:
                _notify("trial", trial=None, done=done, total=len(configs))
                continue  # skipped by generate
            if isinstance(outcome, Exception):
                record(Trial(params, classify(outcome), f"{type(outcome).__name__}: {outcome}"))
                continue
            try:
                low, median, high = _time_candidate(outcome)
            except Exception as exc:
                record(Trial(params, classify(exc), f"{type(exc).__name__}: {exc}"))
                continue
            finally:
                del outcome  # release the candidate's buffers before the next one
            record(Trial(params, "ok", "", low, median, high))
            if best is None or median < best[0]:
                best = (median, params)
    finally:
        if pool is not None:
            for _, future in pending:
                future.cancel()
            pool.shutdown(wait=True)
    if best is None:
        raise AutotuneError(_summarise_failures(trials, len(configs)))
    result = SearchResult(best=dict(best[1]), score=best[0], trials=trials)
    sess.results.append(result)
    return result
