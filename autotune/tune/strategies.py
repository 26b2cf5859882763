"""Search strategies: how the next configurations to measure are chosen.

A strategy is a function ``strategy(ctx)`` over a :class:`~.evaluation.StrategyContext`: it asks
``ctx.evaluate(batch)`` for scores (seconds; None for a failure) until it has nothing left to try
or the evaluator raises :class:`~.evaluation.BudgetExhausted`. It measures ``ctx.seeds`` first
(a warm start from other devices' results) and draws every random choice from ``ctx.rng``, so a
seed reproduces a search. Batches let the device evaluator compile ahead.

Registered in :data:`STRATEGIES`:

- ``brute_force``: every valid configuration, in declared order (the default);
- ``random``: every valid configuration in a random order;
- ``local``: iterated local search: variable-neighbourhood descent by first improvement (one
  parameter moved to an adjacent value; where none improves, two such moves), perturbation of
  one of the best few configurations, restarts;
- ``annealing``: simulated annealing on relative time differences, with reheats;
- ``genetic``: a genetic algorithm (tournament selection, uniform crossover, mutation, elitism,
  repair into the valid space);
- ``bayes``: Optuna's TPE sampler through its ask-and-tell interface (the ``bayes`` extra);
  other devices' results inform its model.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterator

import numpy as np

from .evaluation import Key, StrategyContext

Strategy = Callable[[StrategyContext], None]


def _chunks(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _exhausted(ctx: StrategyContext) -> bool:
    """Every valid configuration has been seen."""
    return all(ctx.key(c) in ctx.evaluator.scores for c in ctx.configs) \
        if len(ctx.evaluator.scores) >= len(ctx.configs) else False


def _batch(ctx: StrategyContext) -> int:
    return int(ctx.options.get("batch", 4))


def brute_force(ctx: StrategyContext) -> None:
    """Every valid configuration in declared order (seeds first)."""
    for chunk in _chunks([*ctx.seeds, *ctx.configs], 64):
        ctx.evaluate(chunk)


def random_sample(ctx: StrategyContext) -> None:
    """Every valid configuration in a random order (seeds first)."""
    order = [ctx.configs[int(i)] for i in ctx.rng.permutation(len(ctx.configs))]
    for chunk in _chunks([*ctx.seeds, *order], 16):
        ctx.evaluate(chunk)


def _start(ctx: StrategyContext) -> tuple[Key, float]:
    """Measure the seeds and ``initial`` random configurations (default 4, fewer with seeds);
    start from the best of them."""
    keys = [ctx.key(c) for c in ctx.seeds]
    for _ in range(max(0, int(ctx.options.get("initial", 4)) - len(keys))):
        key = _random_unmeasured(ctx)
        if key is not None and key not in keys:
            keys.append(key)
    if not keys:
        keys = [ctx.random_key()]
    scores = _scores(ctx, keys)
    score, key = min(zip(scores, keys))
    return key, score


def _random_unmeasured(ctx: StrategyContext, tries: int = 64) -> Key | None:
    for _ in range(tries):
        key = ctx.random_key()
        if key not in ctx.evaluator.scores:
            return key
    rest = ctx.unmeasured(ctx.key(c) for c in ctx.configs)
    return rest[int(ctx.rng.integers(len(rest)))] if rest else None


def _walk(ctx: StrategyContext, key: Key, steps: int) -> Key:
    """A random walk of ``steps`` moves through valid neighbours."""
    for _ in range(steps):
        neighbours = ctx.neighbours(key)
        if not neighbours:
            break
        key = neighbours[int(ctx.rng.integers(len(neighbours)))]
    return key


def _perturbed(ctx: StrategyContext, key: Key, steps: int) -> Key | None:
    """An unmeasured configuration a few random moves from ``key``, or a random one."""
    for attempt in range(16):
        candidate = _walk(ctx, key, steps + attempt // 4)
        if candidate not in ctx.evaluator.scores:
            return candidate
    return _random_unmeasured(ctx)


def _farther(ctx: StrategyContext, key: Key) -> list[Key]:
    """The valid configurations two moves from ``key`` and not one (two parameters moved a step
    each, or one moved two steps)."""
    near = ctx.neighbours(key)
    seen, found = {key, *near}, []
    for middle in near:
        for other in ctx.neighbours(middle):
            if other not in seen:
                seen.add(other)
                found.append(other)
    return found


def _shuffled(ctx: StrategyContext, keys: list[Key]) -> list[Key]:
    return [keys[int(i)] for i in ctx.rng.permutation(len(keys))]


def _first_better(ctx: StrategyContext, keys: list[Key], score: float) -> tuple[Key, float] | None:
    """The first of ``keys`` faster than ``score``, measuring them in turn until it is found (a
    device evaluator compiles the next ones meanwhile)."""
    for key, value in ctx.evaluator.iterate(keys):
        if value is not None and value < score:
            return key, value
    return None


def _wide(ctx: StrategyContext, ring: list[Key], farther: float) -> bool:
    """Whether a search may look over ``ring`` (the configurations two moves from one): its
    budget of evaluations is at least ``farther`` times their number, so that one look costs
    at most that share of it (always without a limit on evaluations)."""
    limit = ctx.evaluator.budget.max_evals
    return limit is None or limit >= farther * len(ring)


def _descend(ctx: StrategyContext, key: Key, score: float, farther: float) -> tuple[Key, float]:
    """Variable-neighbourhood descent: first improvement among the neighbours (random order);
    at a configuration none of them beats, first improvement among the configurations two moves
    away (random order) where the budget allows it (:func:`_wide`); until neither improves."""
    while True:
        near = ctx.neighbours(key)
        better = _first_better(ctx, _shuffled(ctx, near), score)
        if better is None:
            ring = _farther(ctx, key)
            better = _first_better(ctx, _shuffled(ctx, ring), score) \
                if _wide(ctx, ring, farther) else None
            if better is None:
                return key, score
        key, score = better


def _elite(ctx: StrategyContext, count: int) -> Key:
    """One of the ``count`` fastest configurations measured so far, at random."""
    measured = [(v, k) for k, v in ctx.evaluator.scores.items() if v is not None and k in ctx.valid]
    leaders = [k for _, k in heapq.nsmallest(count, measured)]
    return leaders[int(ctx.rng.integers(len(leaders)))]


def local_search(ctx: StrategyContext) -> None:
    """Iterated local search: descend to a configuration that no neighbour and no configuration
    two moves away beats (:func:`_descend`), perturb one of the ``elites`` (default 4) fastest
    configurations found by a short random walk and descend again; after ``restart_after``
    descents without a new best, restart from a random configuration.

    Looking two moves away before giving up, and perturbing several elites rather than the one
    best, make where the search ends depend little on measurement noise: one-move local optima
    are many (89 in the H200 GEMM's 15 658 configurations), two-move ones few (5), so noisy
    searches of a fixed seed end in the same few places (issue 41).

    Both only where the budget is large for the space: a look two moves away is taken only
    where the budget of evaluations is at least ``farther`` (default 3) times the
    configurations there (about 5 times the neighbours: 48 against 9.6 in the GEMM's space, 22
    against 6.8 in the diffusion stencil's), so that one look costs at most a third of the
    search; and the elites only where the fastest's look would be (else the fastest is
    perturbed). With a small budget (the dslash's own 24, most of ``warm``'s plans) ``local``
    is then, step for step, the one-move climb with perturbation of the best that it was: a
    look at every budget spent much of a 46-evaluation budget around one place (diffusion
    stencil: median / p90 of the best found over the true best 1.017 / 1.048, against 1.000 /
    1.028). Without a limit on evaluations, both always."""
    steps = int(ctx.options.get("perturbation", 3))
    restart_after = int(ctx.options.get("restart_after", 4))
    elites = int(ctx.options.get("elites", 4))
    farther = float(ctx.options.get("farther", 3))
    current, score = _start(ctx)
    best_score = score
    stall = 0
    while not _exhausted(ctx):
        current, score = _descend(ctx, current, score, farther)
        if score < best_score:
            best_score, stall = score, 0
        else:
            stall += 1
        if stall >= restart_after:
            start, stall = _random_unmeasured(ctx), 0
        else:
            best = _elite(ctx, 1)
            start = _perturbed(ctx, _elite(ctx, elites) if _wide(ctx, _farther(ctx, best), farther)
                               else best, steps)
        if start is None:
            return
        current, score = start, ctx.score(start)


def annealing(ctx: StrategyContext) -> None:
    """Simulated annealing: a random neighbour is accepted if faster, or with probability
    ``exp(-relative slowdown / T)``; T cools geometrically and is reheated when it is cold."""
    t_start = float(ctx.options.get("t_start", 0.25))
    t_end = float(ctx.options.get("t_end", 0.005))
    cooling = float(ctx.options.get("cooling", 0.93))
    current, score = _start(ctx)
    best_score = score
    temperature = t_start
    idle = 0  # moves onto configurations already measured, which cost nothing
    while not _exhausted(ctx):
        neighbours = ctx.neighbours(current)
        fresh = ctx.unmeasured(neighbours)
        if fresh:
            candidate = fresh[int(ctx.rng.integers(len(fresh)))]
            idle = 0
        elif neighbours and idle < 32:
            candidate = neighbours[int(ctx.rng.integers(len(neighbours)))]
            idle += 1
        else:
            candidate, idle = _random_unmeasured(ctx), 0
            if candidate is None:
                return
        value = ctx.score(candidate)
        if value < score or (math.isfinite(value) and ctx.rng.random() <
                             math.exp(-(value / score - 1.0) / temperature)):
            current, score = candidate, value
        best_score = min(best_score, score)
        temperature *= cooling
        if temperature < t_end:
            temperature = t_start  # reheat from the current point


def genetic(ctx: StrategyContext) -> None:
    """A genetic algorithm: tournament selection, uniform crossover, mutation of each gene with
    probability 1/genes, two elites kept; children outside the valid space are repaired by
    further mutation (or replaced by a random configuration). The population is smaller for small
    budgets, so that several generations run."""
    budget = ctx.evaluator.budget.max_evals
    default = 20 if budget is None else max(6, min(20, budget // 6))  # several generations
    size = min(int(ctx.options.get("population", default)), len(ctx.configs))
    genes = len(ctx.names)
    mutation = float(ctx.options.get("mutation", 1.0 / max(genes, 1)))
    population = [ctx.key(c) for c in ctx.seeds][:size]
    while len(population) < size:
        key = _random_unmeasured(ctx) or ctx.random_key()
        if key not in population:
            population.append(key)
        elif len(ctx.configs) <= len(population):
            break
    fitness = _scores(ctx, population)

    def tournament() -> Key:
        picks = [int(ctx.rng.integers(len(population))) for _ in range(3)]
        return population[min(picks, key=lambda i: fitness[i])]

    def mutate(key: Key, rate: float) -> Key:
        """Each gene mutates with probability ``rate``: mostly to a neighbouring value of its
        list (the values are ordered), sometimes to any value."""
        values = list(key)
        for i in range(genes):
            if ctx.rng.random() < rate:
                options = ctx.values[i]
                at = options.index(values[i])
                if ctx.rng.random() < 0.7 and len(options) > 1:
                    at = min(len(options) - 1, max(0, at + (1 if ctx.rng.random() < 0.5 else -1)))
                else:
                    at = int(ctx.rng.integers(len(options)))
                values[i] = options[at]
        return tuple(values)

    while not _exhausted(ctx):
        ranked = sorted(range(len(population)), key=lambda i: fitness[i])
        children = [population[i] for i in ranked[:2]]
        while len(children) < size:
            a, b = tournament(), tournament()
            child = tuple(a[i] if ctx.rng.random() < 0.5 else b[i] for i in range(genes))
            child = mutate(child, mutation)
            for _ in range(20):  # repair: into the valid space, and preferably unmeasured
                if child in ctx.valid and child not in ctx.evaluator.scores and child not in children:
                    break
                child = mutate(child, max(mutation, 1.0 / genes))
            else:
                child = _random_unmeasured(ctx) or child
            if child not in ctx.valid:
                child = ctx.random_key()
            children.append(child)
        population, fitness = children, _scores(ctx, children)


def _scores(ctx: StrategyContext, keys: list[Key]) -> list[float]:
    values = ctx.evaluate([ctx.config(k) for k in keys])
    return [math.inf if v is None else v for v in values]


def bayes(ctx: StrategyContext) -> None:
    """Optuna's TPE sampler over the parameters' value indices (so their order means something),
    asked and told a few configurations at a time. Other devices' results (``ctx.prior``) enter
    the model as completed trials; ``ctx.seeds`` are measured first."""
    try:
        import optuna
    except ImportError:
        raise ImportError("strategy 'bayes' needs Optuna: pip install 'autotune[bayes]'") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {name: optuna.distributions.IntDistribution(0, len(values) - 1)
                     for name, values in zip(ctx.names, ctx.values)}
    grid = _OpenGrid(ctx)
    budget = ctx.evaluator.budget.max_evals
    startup = 10 if budget is None else max(4, min(10, budget // 5))
    sampler = optuna.samplers.TPESampler(
        seed=int(ctx.rng.integers(2**31)), multivariate=True, constant_liar=True,
        n_startup_trials=int(ctx.options.get("startup", startup)))
    study = optuna.create_study(sampler=sampler)
    # The model sees log(time / reference): the reference is this device's time of its first
    # measured configuration (a seed, when there are seeds: the other devices' best), so that
    # the prior's times, relative to their own device's best, sit on about the same scale.
    reference: list[float] = []

    def told(seconds: float | None) -> float | None:
        if seconds is None or not math.isfinite(seconds):
            return None
        if not reference:
            reference.append(seconds)
        return math.log(seconds / reference[0])

    def add(key: Key, value: float | None) -> None:
        study.add_trial(optuna.trial.create_trial(
            params=grid.indices(key), distributions=distributions, value=value,
            state=optuna.trial.TrialState.COMPLETE if value is not None else optuna.trial.TrialState.FAIL))

    seeds = [ctx.key(c) for c in ctx.seeds]
    if not seeds and ctx.prior:  # measure the prior's best first: it sets the common scale
        best = min(ctx.prior, key=lambda item: item[1])[0]
        seeds = [ctx.key(best)] if ctx.key(best) in ctx.valid else []
    for key, seconds in zip(seeds, ctx.evaluate([ctx.config(k) for k in seeds])):
        add(key, told(seconds))
    for config, relative in ctx.prior:
        key = ctx.key(config)
        if key in ctx.valid and key not in seeds and math.isfinite(relative) and relative > 0:
            add(key, math.log(relative))
    grid.close_measured()
    batch = _batch(ctx)
    while grid.any_open():
        trials, chosen = [], []
        for _ in range(batch):
            trial = study.ask(distributions)
            key = grid.nearest(trial.params)
            if key is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                break
            trials.append(trial)
            chosen.append(key)
        for trial, seconds in zip(trials, ctx.evaluate([ctx.config(k) for k in chosen])):
            value = told(seconds)
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(trial, value)


class _OpenGrid:
    """The valid configurations as points of value indices, and which are not measured yet.

    Most points of the product of the parameter lists can be invalid (restrictions), and a
    model may propose what is measured already: each proposal is moved to the nearest valid
    configuration not measured yet (in value-index steps). Asking until a proposal happens to
    be new and valid would cost many asks per measurement."""

    def __init__(self, ctx: StrategyContext):
        self.ctx = ctx
        self.keys = [ctx.key(c) for c in ctx.configs]
        self.grid = np.array([self.positions(k) for k in self.keys])
        self.open = np.ones(len(self.keys), dtype=bool)
        self.row = {k: i for i, k in enumerate(self.keys)}

    def positions(self, key: Key) -> list[int]:
        return [self.ctx.values[i].index(v) for i, v in enumerate(key)]

    def indices(self, key: Key) -> dict[str, int]:
        return dict(zip(self.ctx.names, self.positions(key)))

    def close_measured(self) -> None:
        """Close the configurations measured so far (seeds, resumed trials)."""
        self.open = np.array([k not in self.ctx.evaluator.scores for k in self.keys])

    def any_open(self) -> bool:
        return bool(self.open.any())

    def nearest(self, params: dict[str, int]) -> Key | None:
        """The open configuration nearest to the proposal ``params`` (closed from now on)."""
        if not self.open.any():
            return None
        ctx = self.ctx
        at = self.row.get(tuple(ctx.values[i][params[n]] for i, n in enumerate(ctx.names)))
        if at is not None and self.open[at]:
            chosen = at
        else:
            point = np.array([params[n] for n in ctx.names])
            distance = np.abs(self.grid - point).sum(axis=1)
            distance[~self.open] = np.iinfo(distance.dtype).max
            chosen = int(np.argmin(distance))
        self.open[chosen] = False
        return self.keys[chosen]


#: The strategies by name.
STRATEGIES: dict[str, Strategy] = {
    "brute_force": brute_force,
    "random": random_sample,
    "local": local_search,
    "annealing": annealing,
    "genetic": genetic,
    "bayes": bayes,
}


def strategy_named(strategy: str | Strategy) -> tuple[str, Strategy]:
    """(name, function) of a strategy given by name (:data:`~.strategies.STRATEGIES`) or as a
    callable ``strategy(context)``; ValueError naming the choices otherwise."""
    if isinstance(strategy, str):
        if strategy in STRATEGIES:
            return strategy, STRATEGIES[strategy]
    elif callable(strategy):
        return getattr(strategy, "__qualname__", type(strategy).__qualname__), strategy
    raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)}, or "
                     "pass a callable strategy(context)")
