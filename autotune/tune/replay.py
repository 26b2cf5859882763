"""Running a strategy against a recorded landscape instead of a device.

A landscape is every valid configuration's measured time for one key (complete trials, as a
brute-force search stores them). Replaying a strategy over it costs no device time, so
strategies can be compared over hundreds of seeds in seconds, reproducibly, on real data.

>>> from autotune.tune.replay import landscape
>>> land = landscape(store.trials(key), space)
>>> run = tune.replay(land, "local", max_evals=50, seed=3)
>>> run.best_score / land.best_score
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .evaluation import Budget, BudgetExhausted, Key, ReplayEvaluator, StrategyContext
from .records import TrialRecord, TrialStatus
from .space import Space
from .strategies import Strategy, strategy_named
from .validation import trial_problem


@dataclass(frozen=True)
class Landscape:
    """Every valid configuration's time (seconds; None where it failed) for one key."""

    space: Space
    times: dict[Key, float | None]

    @property
    def best_score(self) -> float:
        return min(t for t in self.times.values() if t is not None)

    @property
    def best(self) -> dict[str, Any]:
        key = min((k for k, t in self.times.items() if t is not None), key=lambda k: self.times[k])
        return dict(zip(self.space.names, key))

    def complete(self) -> bool:
        """True if every valid configuration of the space has a recorded outcome."""
        return all(tuple(c[n] for n in self.space.names) in self.times
                   for c in self.space.configurations())

    def noisy(self, bias: float, noise: float, seed: Any = None) -> Landscape:
        """This landscape as one process on a GPU would measure it: each time multiplied by a
        bias of that process for that configuration and by the noise of its measurement, both
        log-normal with standard deviations ``bias`` and ``noise`` (about 0.7% and 0.3% on an
        H200: two processes' times of the same GEMM configurations differ by about 1%). A
        search measures a configuration once, so one draw of each per configuration models a
        whole process. The draws depend only on ``seed`` (e.g. ``[run, process]``)."""
        keys = sorted(self.times, key=repr)
        rng = np.random.default_rng(seed)
        factors = np.exp(rng.normal(0.0, bias, len(keys)) + rng.normal(0.0, noise, len(keys)))
        return Landscape(self.space, {k: None if self.times[k] is None else self.times[k] * float(f)
                                      for k, f in zip(keys, factors)})


def landscape(trials: Iterable[TrialRecord], space: Space) -> Landscape:
    """The landscape of ``trials`` (of one key) over ``space``: the median time of each valid
    configuration (the last trial of a configuration tried more than once); malformed trials
    and configurations outside the space are left out."""
    times: dict[Key, float | None] = {}
    for trial in trials:
        if trial_problem(trial):
            continue
        params = json.loads(trial.parameters)
        if space.why_not(params) is not None:
            continue
        key = tuple(params[n] for n in space.names)
        ok = trial.status == TrialStatus.OK.value and trial.median_seconds is not None
        times[key] = trial.median_seconds if ok else None
    return Landscape(space, times)


@dataclass
class ReplayRun:
    """What a replayed search found: its best, and the best-so-far after each measurement."""

    best: dict[str, Any] | None
    best_score: float
    evaluations: int
    history: list[float] = field(default_factory=list)  #: best time after each measurement


def replay(landscape: Landscape, strategy: str | Strategy, *, max_evals: int | None = None, seed: int | None = None,
           seeds: Iterable[Mapping[str, Any]] = (), prior: Iterable[tuple[Mapping[str, Any], float]] = (),
           options: Mapping[str, Any] | None = None) -> ReplayRun:
    """Run ``strategy`` (a name or a callable ``strategy(context)``) against ``landscape``
    within ``max_evals`` measurements."""
    _, run_strategy = strategy_named(strategy)
    space = landscape.space
    evaluator = ReplayEvaluator(space, Budget(max_evals), landscape.times)
    configs = [c for c in space.configurations() if tuple(c[n] for n in space.names) in landscape.times]
    context = StrategyContext(space, configs, evaluator, np.random.default_rng(seed),
                              [dict(s) for s in seeds], [(dict(c), r) for c, r in prior],
                              dict(options or {}))
    try:
        run_strategy(context)
    except BudgetExhausted:
        pass
    history, best = [], math.inf
    for _, score in evaluator.history:
        if score is not None:
            best = min(best, score)
            history.append(best)
    found = evaluator.best()
    return ReplayRun(None if found is None else evaluator.config(found[0]),
                     math.inf if found is None else found[1], evaluator.evals, history)
