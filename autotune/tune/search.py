"""Searching a parameter space: ``autotune(generate, **space)`` and ``search``.

``generate(**params)`` builds one candidate and returns a :class:`~.measurement.Measurement`
(or a ``measure(iterations)`` callable, or ``None`` to skip it). A strategy
(:data:`~.strategies.STRATEGIES`) chooses which configurations to measure, within a budget
(``max_evals`` distinct configurations measured, ``max_seconds`` of wall time); without a
budget the default, ``brute_force``, measures every valid configuration. A strategy may also be
given as a callable ``strategy(context: StrategyContext)`` of one's own. On GPUs candidates are
generated in a thread pool a few steps ahead of the one being measured, so compilation overlaps
timing; but every command a candidate's ``generate`` puts on a tuning queue (uploads, fills,
launches) waits for that candidate's turn, so buffers shared between candidates are set up,
checked and timed in order.
"""

from __future__ import annotations

import contextlib
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .evaluation import (
    Budget,
    BudgetExhausted,
    DeviceEvaluator,
    FailingFast,
    InvalidConfiguration,
    StrategyContext,
    Trial,
    classify,
    default_workers,
)
from ..accel import CompileError
from . import choice as _choice
from .measurement import MIN_BATCHES, Measure, batch_iterations, check_batches
from .records import TrialStatus
from .space import Restriction, Space, SpaceError
from .strategies import Strategy, strategy_named
from .turns import clock

__all__ = ["AutotuneError", "InvalidConfiguration", "SearchResult", "SearchSettings", "Trial",
           "TuningRun", "autotune", "classify", "current_run", "observing", "search",
           "search_settings", "tuning_run"]

logger = logging.getLogger("autotune.tune")


class AutotuneError(RuntimeError):
    """No configuration of the space succeeded, or the space is empty."""


@dataclass
class SearchResult:
    """The winner (``best``, its median seconds per call ``score``), every trial, what the
    search did (``info``), and the statistics of the choice (None where nothing was timed
    again: ``search_settings(settle=0)``)."""

    best: dict[str, Any]
    score: float
    trials: list[Trial] = field(default_factory=list)
    #: what the search did: strategy, seed, budget, configurations in the space, measured
    info: dict[str, Any] = field(default_factory=dict)
    choice: _choice.Choice | None = None


@dataclass(frozen=True)
class SearchSettings:
    """Strategy and budget chosen from outside a tuning function (``warm --max-evals``...):
    a setting given here wins over the tuning function's own arguments."""

    strategy: str | Strategy | None = None
    max_evals: int | None = None
    max_seconds: float | None = None
    seed: int | None = None
    #: timed batches per candidate (default :data:`~.measurement.MIN_BATCHES`); fewer for a
    #: quick survey of a large space
    batches: int | None = None
    #: go on from the stored trials of an interrupted search of the key (see
    #: :func:`~.recording.seeds.interrupted_trials`) instead of measuring them again
    resume: bool | None = None
    #: interleaved rounds at most when the leaders and ``test=`` are timed again before the
    #: choice (default :data:`~.choice.MAX_ROUNDS`; 0: no re-timing, the best median wins)
    settle: int | None = None
    #: other databases (URLs) read, never written, for a tuned call's warm start, besides its
    #: own: e.g. ``tune.db.example``'s trials of other devices
    warm_from: tuple[str, ...] | None = None
    #: configurations every search in the block measures first (those its space allows), after
    #: the tuning function's own ``seeds=`` and before the database's warm start: a caller's
    #: knowledge the key cannot carry (a multi-field dslash seeded with its one-field row)
    seeds: tuple[dict[str, Any], ...] | None = None


_settings: ContextVar[SearchSettings] = ContextVar("autotune_search_settings", default=SearchSettings())


@contextlib.contextmanager
def search_settings(**settings: Any) -> Iterator[SearchSettings]:
    """Within the block, searches use these settings (:class:`SearchSettings`: strategy,
    budget, seed, ``seeds`` to measure first...; None leaves one as the tuning function
    says)."""
    outer = _settings.get()  # a setting left None here keeps the enclosing block's
    chosen = SearchSettings(**{name: settings.get(name) if settings.get(name) is not None
                               else getattr(outer, name) for name in SearchSettings.__dataclass_fields__})
    if chosen.strategy is not None:
        strategy_named(chosen.strategy)  # checks it (ValueError)
    Budget(chosen.max_evals, chosen.max_seconds)  # checks the values
    if chosen.batches is not None:
        check_batches(chosen.batches)
    if chosen.settle is not None and (isinstance(chosen.settle, bool) or
                                      not isinstance(chosen.settle, int) or chosen.settle < 0):
        raise ValueError(f"settle must be an int >= 0 (rounds; 0: no re-timing), got {chosen.settle!r}")
    if chosen.seeds is not None and (not isinstance(chosen.seeds, tuple) or not all(
            isinstance(c, dict) and all(isinstance(k, str) for k in c) for c in chosen.seeds)):
        raise ValueError(f"seeds must be a tuple of parameter dicts, got {chosen.seeds!r}")
    if chosen.warm_from is not None and (not isinstance(chosen.warm_from, tuple) or not all(
            isinstance(u, str) and u for u in chosen.warm_from)):
        raise ValueError(f"warm_from must be a tuple of database URLs, got {chosen.warm_from!r}")
    token = _settings.set(chosen)
    try:
        yield chosen
    finally:
        _settings.reset(token)


def search_settings_now() -> SearchSettings:
    """The settings :func:`search_settings` chose for this context."""
    return _settings.get()


@dataclass
class TuningRun:
    """What the decorator sets up while a tuning function runs: where trials go, which device,
    which space the template declares, where to start. Every trial of the run is kept."""

    on_trial: Callable[[Trial], None] | None = None
    thread_scope: Callable[[], contextlib.AbstractContextManager] | None = None
    parallel: bool = True
    #: The template's ``test=`` parameters: timed too, if the space leaves them out, so that
    #: the speed-up of the tuned result over the default is always known.
    baseline: dict[str, Any] | None = None
    #: The space the template declares; ``autotune(generate)`` without lists searches it.
    space: Space | None = None
    #: A warm start: configurations to measure first (the best of the nearest devices'), and
    #: other devices' (configuration, time relative to their best) for model-based strategies.
    seeds: list[dict[str, Any]] = field(default_factory=list)
    prior: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    #: Successful trials of an interrupted search of this key (this device, these sources):
    #: taken as measured, so that the search goes on where it stopped.
    resumed: list[Trial] = field(default_factory=list)
    trials: list[Trial] = field(default_factory=list)
    searched: list[Space] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  #: the last search's SearchResult.info
    #: the spaces templates declared while the run searched (each candidate checks its
    #: parameters against its template's space: made once per run, not once per candidate)
    spaces: dict[tuple, Any] = field(default_factory=dict)
    #: the last search's choice (its winner's interval, ties, spread), if it timed again
    choice: _choice.Choice | None = None
    #: when the run began: ``search_settings(max_seconds=)`` bounds the whole run (every search
    #: a tuning function makes), not each search
    started: float = field(default_factory=clock)

    def timed(self, parameters: dict[str, Any]) -> Trial | None:
        """The last successful trial of ``parameters`` in this run, if they were timed."""
        for trial in reversed(self.trials):
            if trial.status is TrialStatus.OK and trial.parameters == parameters:
                return trial
        return None


_run: ContextVar[TuningRun | None] = ContextVar("autotune_run", default=None)

#: Told of a search's progress: ``observer(event, data)``.
Observer = Callable[[str, dict[str, Any]], None]
_observers: ContextVar[tuple[Observer, ...]] = ContextVar("autotune_observers", default=())


@contextlib.contextmanager
def observing(observer: Observer) -> Iterator[Observer]:
    """Within the block, searches started in this context tell ``observer(event, data)`` of
    their progress: ``("start", {"configurations": n})`` when a search begins and ``("trial",
    {"trial": Trial, "done": k, "total": n})`` after each configuration (skipped ones
    included). Blocks nest; the command line's progress bar is one observer."""
    if not callable(observer):
        raise TypeError(f"observing() takes a callable observer(event, data), got {observer!r}")
    token = _observers.set((*_observers.get(), observer))
    try:
        yield observer
    finally:
        _observers.reset(token)


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


def autotune(generate: Callable[..., Measure | None], space: Space | None = None, /, *,
             strategy: str | Strategy = "brute_force", max_evals: int | None = None,
             max_seconds: float | None = None, seed: int | None = None,
             seeds: Sequence[dict[str, Any]] = (), restrictions: Sequence[Restriction] = (),
             **parameters: Sequence[Any]) -> dict[str, Any]:
    """Search the space with ``strategy`` within the budget; return the fastest parameters.

    The space is given as keyword lists (``wgs=[64, 128]``) with optional ``restrictions``
    (predicates on a configuration dict), or as a :class:`Space`. Inside a tuning function whose
    template declares ``autotune_space``, ``autotune(generate)`` searches that space.
    ``max_evals`` counts distinct configurations measured (skipped and failed ones do not
    count); ``max_seconds`` bounds the wall time, compiling included; ``seed`` makes the random
    choices of a strategy reproducible. ``seeds``: configurations the strategy measures first
    and starts from (a template's own good guesses, e.g. the best of an earlier, narrower
    search), ahead of the warm start from the database; those outside the space are dropped.
    No configuration is measured twice.

    Failures are recorded with their kind and the search goes on; if nothing succeeds,
    :class:`AutotuneError` counts the failures by kind, quotes the first of each, and chains the
    last exception.
    """
    return search(generate, _space(space, restrictions, parameters), strategy=strategy,
                  max_evals=max_evals, max_seconds=max_seconds, seed=seed, seeds=seeds).best


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


def names_differ(test: dict[str, Any], space: Space) -> str:
    """The error for a ``test=`` whose names are not the space's (found before any candidate:
    every result must have ``test=``'s names, so no search of that space could be stored)."""
    missing = sorted(set(space.names) - set(test))
    extra = sorted(set(test) - set(space.names))
    parts = ([f"the space's {', '.join(missing)} missing from test="] if missing else []) + \
            ([f"test='s {', '.join(extra)} not in the space"] if extra else [])
    return (f"test= names {sorted(test)} differ from the space's parameters {list(space.names)} "
            f"({'; '.join(parts)}); give test= one value for each parameter of the space")


def _summarise_failures(trials: list[Trial], total: int, seen: int) -> str:
    failed = [t for t in trials if t.status is not TrialStatus.OK]
    counts = Counter(t.status for t in failed)
    skipped = max(0, seen - len(trials))
    lines = [f"no configuration succeeded ({total} in the space, {seen} tried, {skipped} skipped "
             "by generate)"]
    for kind, count in counts.most_common():
        first = next(t for t in failed if t.status == kind)
        lines.append(f"  {kind.value}: {count}, first {first.parameters}: {first.message}")
    return "\n".join(lines)


def search(generate: Callable[..., Measure | None], space: Space | dict[str, Sequence[Any]],
           workers: int | None = None, *, strategy: str | Strategy = "brute_force",
           max_evals: int | None = None, max_seconds: float | None = None,
           seed: int | None = None, options: dict[str, Any] | None = None,
           seeds: Sequence[dict[str, Any]] = ()) -> SearchResult:
    """:func:`autotune` with the full result (every trial, the best score, what was done).

    ``workers`` threads generate candidates ahead (default: 8, at most the CPU count, on GPUs;
    none on CPU devices). Settings from :func:`search_settings` win over these arguments.
    """
    if not isinstance(space, Space):
        space = _space(None, (), dict(space))
    chosen = _settings.get()
    run = _run.get() or TuningRun()
    max_evals = chosen.max_evals if chosen.max_evals is not None else max_evals
    left = None if chosen.max_seconds is None else chosen.max_seconds - (clock() - run.started)
    if left is not None:  # the run's: what earlier searches of the key left
        max_seconds = max(left, 1e-3)
    seed = chosen.seed if chosen.seed is not None else seed
    try:
        name, strategy_fn = strategy_named(chosen.strategy or strategy)
        budget = Budget(max_evals, max_seconds)
        configs = space.configurations()
    except (ValueError, SpaceError) as exc:
        raise AutotuneError(str(exc)) from exc.__cause__
    if not configs:
        raise AutotuneError(f"the restrictions exclude every one of the {space.size} "
                            "configurations of the space")
    run.searched.append(space)
    spent = _spent_on(run, space, seeds) if left is not None and left <= 0 else None
    if spent is not None:
        return spent
    baseline, reference = _baseline(run, space)
    planned = len(configs) if budget.max_evals is None else min(budget.max_evals, len(configs))
    notify = _notifier()

    def on_trial(trial: Trial | None) -> None:
        if trial is not None:
            run.trials.append(trial)
            if run.on_trial is not None:
                run.on_trial(trial)
        notify("trial", trial=trial, done=len(evaluator.scores), total=planned)

    batches = chosen.batches if chosen.batches is not None else MIN_BATCHES
    rounds = chosen.settle if chosen.settle is not None else _choice.MAX_ROUNDS
    evaluator = DeviceEvaluator(space, budget, generate,
                                workers=default_workers(run.parallel) if workers is None else workers,
                                thread_scope=run.thread_scope, on_trial=on_trial,
                                reference=reference, batches=batches,
                                keep=_choice.LEADERS if rounds else 0, baseline=baseline)
    resumed = _resume(run, space, evaluator)
    warm = [c for c in run.seeds if space.why_not(c) is None]
    first: list[dict[str, Any]] = []  # the caller's seeds, the block's, the database's warm start
    given = [*seeds, *(chosen.seeds or ())]
    for c in [*(dict(c) for c in given if space.why_not(c) is None), *warm]:
        if c not in first:
            first.append(c)
    context = StrategyContext(space, configs, evaluator, np.random.default_rng(seed), first,
                              list(run.prior), dict(options or {}))
    notify("start", configurations=planned)
    stopped = _run_strategy(strategy_fn, context, evaluator, baseline)
    best = evaluator.best()
    run.info = info = {
        "strategy": name, "seed": seed, "max_evals": max_evals, "max_seconds": max_seconds,
        "configurations": len(configs), "measured": evaluator.evals, "warm_start": len(warm),
        "prior": len(run.prior), "resumed": resumed, "batches": batches}
    if best is None:
        evaluator.release()
        tried = sum(1 for key in evaluator.scores if key != evaluator.reference)
        trials = [t for t in evaluator.trials if t.parameters != reference]
        raise AutotuneError(_summarise_failures(trials, len(configs), tried)
                            + stopped) from evaluator.last_error
    key, score = best
    run.choice = chosen_now = _settle(evaluator, configs, baseline or reference, rounds, first)
    if chosen_now is not None:
        info["choice"] = chosen_now.summary()
        return SearchResult(best=chosen_now.winner, score=chosen_now.seconds,
                            trials=evaluator.trials, info=info, choice=chosen_now)
    return SearchResult(best=evaluator.config(key), score=score, trials=evaluator.trials, info=info)


def _settle(evaluator: DeviceEvaluator, configs: list[dict[str, Any]],
            test: dict[str, Any] | None, rounds: int,
            seeds: Sequence[dict[str, Any]] = ()) -> _choice.Choice | None:
    """Time the leaders (the :data:`~.choice.LEADERS` fastest) and ``test=`` again,
    interleaved, within :data:`~.choice.SHARE` of the search's time (:data:`~.choice.DOUBT_SHARE`
    while the rule would take a candidate that looks slower), and choose
    (:func:`~.choice.settle`). The rule's order among close ties: the search's ``seeds`` first
    (given ones, then the warm start: the stored best of this or the nearest device), then the
    space's declared order."""
    if not rounds:
        return None
    searched = clock() - evaluator.started
    try:
        timed = {evaluator.key(t.parameters): t for t in evaluator.trials
                 if t.status is TrialStatus.OK and t.median_seconds}
        position = {evaluator.key(c): i for i, c in enumerate(configs)}
        ranked = sorted((k for k in timed if k != evaluator.reference),
                        key=lambda k: (timed[k].median_seconds, position.get(k, len(position))))
        preferred: dict[Any, int] = {}
        for c in seeds:
            preferred.setdefault(evaluator.key(c), len(preferred))

        def order(k: Any) -> int | None:  # the rule's: the seeds, then the declared order
            return preferred[k] if k in preferred else \
                None if k not in position else len(preferred) + position[k]

        keys = _choice.could_tie(ranked[:_choice.LEADERS], timed)
        test_key = None if test is None else evaluator.key(test)
        if test_key in timed and test_key not in keys:
            keys.append(test_key)
        contenders = []
        for k in keys:
            built = evaluator.candidate(k)
            if built is not None:
                contenders.append(_choice.Contender(
                    evaluator.config(k), built, batch_iterations(built, timed[k].median_seconds),
                    order(k), k == test_key, k != evaluator.reference))
        return _choice.settle(contenders, seconds=_choice.SHARE * searched,
                              doubt_seconds=_choice.DOUBT_SHARE * searched, rounds=rounds)
    finally:
        evaluator.release()


def _notifier() -> Callable[..., None]:
    """Tells the observers of the context the search started in (its evaluator may call back
    from other threads)."""
    watching = _observers.get()

    def notify(event: str, **data: Any) -> None:
        for observer in watching:
            observer(event, data)

    return notify


def _spent_on(run: TuningRun, space: Space,
              seeds: Sequence[dict[str, Any]]) -> SearchResult | None:
    """For a later search of a run whose time (``search_settings(max_seconds=)``) an earlier
    one spent (the caller's test), seeded with a configuration the run timed already (a staged
    search: the dslash's structure after its launch shape): that configuration and its time,
    measured no more. Given only the time left's millisecond, the search would measure its
    first seed alone, again; late in ``warm --max-minutes`` every such key did."""
    for seed in seeds:
        if space.why_not(seed) is None:
            trial = run.timed(dict(seed))
            if trial is None:
                return None
            return SearchResult(best=dict(seed), score=trial.median_seconds, trials=[],
                                info=run.info, choice=run.choice)
    return None


def _baseline(run: TuningRun, space: Space) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The run's ``test=`` parameters if they can be timed in this space (else None), and the
    same again if they lie outside it: a reference timed for the speed-up that never wins."""
    baseline = run.baseline
    if baseline is None or set(baseline) != set(space.names) or space.runs(baseline) is not None:
        return None, None
    return baseline, (dict(baseline) if space.why_not(baseline) is not None else None)


def _resume(run: TuningRun, space: Space, evaluator: DeviceEvaluator) -> int:
    """Take the run's trials of an interrupted search as measured; how many were taken."""
    resumed = 0
    for trial in run.resumed:
        if space.why_not(trial.parameters) is None and evaluator.resume(trial):
            run.trials.append(trial)  # already stored: not passed to on_trial
            resumed += 1
    return resumed


def _run_strategy(strategy: Strategy, context: StrategyContext, evaluator: DeviceEvaluator,
                  baseline: dict[str, Any] | None) -> str:
    """Time the baseline, then let the strategy measure until done or out of budget; what
    stopped it early, if anything, for the error message.

    Where candidates are built ahead in threads (GPUs), the first seed (the caller's, else the
    warm start's: this device's stored best, else the nearest device's) is built beside
    ``test=`` and timed before it: a search is never stopped before its first success, so a
    time limit that allows one measurement (``warm --max-minutes``) keeps the stored best
    rather than ``test=``. On CPU devices, which build one candidate at a time, ``test=`` is
    timed first (docs/performance.md, issue 44, says why)."""
    stopped = ""
    try:
        if baseline is not None:
            ahead = context.seeds[:1] if evaluator.workers else []
            evaluator.evaluate([*ahead, baseline])
        strategy(context)
    except BudgetExhausted:
        pass
    except FailingFast as fast:
        alike = " (configuration values aside)" if isinstance(fast.error, CompileError) else ""
        stopped = (f"; stopped after the first {fast.count} candidates all failed with the same "
                   f"{type(fast.error).__name__}{alike}")
    finally:
        evaluator.close()
    return stopped
