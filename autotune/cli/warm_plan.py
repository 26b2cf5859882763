"""``warm``'s plan: which search each key gets, how long the run should take, and how the time
of ``--max-minutes`` is shared between the keys.

Each key gets a search suited to its space (:class:`PlanRules`): every configuration of a small
space; a budgeted strategy, measuring first the best configurations of the nearest devices'
stored trials (the tuning database's, then those of ``--warm-from`` databases such as
``tune.db.example``), for a large one, or for any space where this device's own earlier trials
are known. ``--strategy`` and ``--max-evals`` override the choice for every template, or for
one (``--strategy gemm=bayes``), and a template may state its own (``autotune_warm``).

The cost model gives each key an expected time: its planned evaluations times the seconds a
trial of the key (else of its template) took on the nearest device (stored results' ``search``
JSON), or a default per backend. :class:`Estimator` corrects those figures with what the run
measures, per template (the ratio of actual to expected, with the plan as a prior), for the
time left; :func:`time_shares` shares the time of ``--max-minutes`` in proportion to the
expected costs, never below a floor.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..tune.offline import SECONDS_PER_CONFIGURATION
from ..tune.recording.seeds import WARM_START_SEEDS, best_of, device_trials, nearest_devices
from ..tune.store import ResultStore, StoreError
from ..tune.strategies import STRATEGIES

#: The example database shipped in a source checkout: its trials (an H200, an H100, a PoCL
#: CPU device) warm-start the searches of ``warm`` by default.
EXAMPLE_DB = Path(__file__).resolve().parents[2] / "tune.db.example"

#: ``--max-minutes``: the share of the time kept back for what is not searching (loading
#: templates, writing results), and the least a key is given (seconds).
RESERVE = 0.1
FLOOR_SECONDS = 1.0

#: The value of ``--strategy`` that keeps the plan's choice.
AUTO = "auto"

logger = logging.getLogger("autotune")


@dataclass(frozen=True)
class PlanRules:
    """How the plan chooses a key's search from its space and its warm start."""

    #: spaces of at most this many configurations are searched whole (unless this device's
    #: own trials are known: then ``near_evals`` suffice)
    exhaustive_up_to: int = 64
    #: configurations measured where this device (same name) has stored trials of the key:
    #: its best few (the warm start) and their neighbours
    near_evals: int = 6
    #: configurations measured in a large space without this device's trials: a twentieth of
    #: the space, within these bounds
    far_evals: tuple[int, int] = (32, 200)
    #: the budgeted strategy
    strategy: str = "local"


@dataclass(frozen=True)
class Overrides:
    """``--strategy`` and ``--max-evals``, for every template (``None``) or by template name."""

    strategy: dict[str | None, str] = field(default_factory=dict)
    max_evals: dict[str | None, int] = field(default_factory=dict)

    def of(self, template: str) -> tuple[str | None, int | None]:
        strategy = self.strategy.get(template, self.strategy.get(None))
        evals = self.max_evals.get(template, self.max_evals.get(None))
        return (None if strategy == AUTO else strategy), evals


def parse_overrides(strategies: Sequence[str], evals: Sequence[str],
                    known: Sequence[str]) -> Overrides:
    """``--strategy [TEMPLATE=]NAME`` and ``--max-evals [TEMPLATE=]N`` (repeatable) as
    :class:`Overrides`; ValueError naming the bad one and the choices."""
    found: dict[str, dict[str | None, Any]] = {"strategy": {}, "max_evals": {}}
    for option, values in (("strategy", strategies), ("max_evals", evals)):
        for text in values or ():
            name, _, value = text.rpartition("=")
            template = name or None
            if template is not None and template not in known:
                raise ValueError(f"--{option.replace('_', '-')} {text}: no template {name!r} "
                                 f"is warmed; choose from {', '.join(sorted(known))}")
            if option == "strategy":
                if value not in STRATEGIES and value != AUTO:
                    raise ValueError(f"--strategy {text}: unknown strategy {value!r}; choose "
                                     f"from {AUTO}, {', '.join(STRATEGIES)}")
                found[option][template] = value
            else:
                try:
                    number = int(value)
                except ValueError:
                    number = 0
                if number < 1:
                    raise ValueError(f"--max-evals {text}: max_evals must be an int >= 1 "
                                     "(give N, or TEMPLATE=N for one template)")
                found[option][template] = number
    return Overrides(found["strategy"], found["max_evals"])


@dataclass(frozen=True)
class WarmStart:
    """What the stored trials of a key offer its search."""

    seeds: int = 0  #: configurations the search measures first
    device: str = ""  #: the nearest device with trials of the key
    near: bool = False  #: that device has this device's name and a result of the key
    source: str = ""  #: where its trials are (``tune.db.example``, ``the database``)


@dataclass(frozen=True)
class KeyPlan:
    """The search one key gets, and what it is expected to cost."""

    template: str
    configurations: int | None  #: valid configurations of the key's space (None: unknown)
    strategy: str | None  #: None: the template's own (its tuning function's arguments)
    max_evals: int | None  #: None: every configuration the strategy reaches
    reason: str  #: why (``small space``, ``this device's trials``, ``--strategy``...)
    warm: WarmStart = WarmStart()
    seconds_per_trial: float = 0.1  #: the cost model's figure for the key's template
    searches: int = 1  #: searches the template's tuning function makes (templates may say)

    @property
    def evaluations(self) -> int:
        """Configurations the plan expects to measure (the ``test=`` baseline aside)."""
        size = self.configurations if self.configurations is not None else 100
        if self.max_evals is not None:
            size = min(size, self.max_evals)
        return max(1, size)

    @property
    def seconds(self) -> float:
        """The expected time of the key: its evaluations and the baseline, every search."""
        return self.seconds_per_trial * (self.evaluations + 1) * self.searches

    def text(self) -> str:
        """The plan in a few words: ``brute_force, 12 of 12 (small space)``."""
        space = "?" if self.configurations is None else str(self.configurations)
        strategy = self.strategy or "template's own"
        what = f"{strategy}, {self.evaluations} of {space}"
        if self.searches > 1:
            what = f"{self.searches} searches, each {what}"
        if self.warm.seeds:
            what += f", {self.warm.seeds} seeds from {self.warm.device}"
            if self.warm.source:
                what += f" ({self.warm.source})"
        return f"{what} [{self.reason}]"

    def settings(self) -> dict[str, Any]:
        """The ``search_settings`` of the key."""
        return {"strategy": self.strategy, "max_evals": self.max_evals}


def choose(template: str, configurations: int | None, warm: WarmStart, rules: PlanRules,
           overrides: Overrides, own: dict[str, Any] | None = None) -> tuple[str | None, int | None, str]:
    """(strategy, max_evals, reason) of a key: the command line's overrides, else the template's
    ``autotune_warm`` (``own``), else :class:`PlanRules` applied to the space and warm start."""
    strategy, evals = overrides.of(template)
    own = own or {}
    if strategy is not None or evals is not None:
        if strategy is None:
            strategy = own.get("strategy") or (None if configurations is None else rules.strategy)
        return strategy, evals, "command line"
    if own.get("strategy") is not None or own.get("max_evals") is not None:
        return own.get("strategy"), own.get("max_evals"), "template's autotune_warm"
    if configurations is None:
        return None, None, "space unknown: template's own search"
    if warm.near and configurations > rules.near_evals:
        return rules.strategy, rules.near_evals, "this device's trials"
    if configurations <= rules.exhaustive_up_to:
        return "brute_force", None, "small space"
    low, high = rules.far_evals
    return rules.strategy, min(configurations, max(low, min(high, configurations // 20))), \
        "large space"


def own_plan(cls: type) -> dict[str, Any]:
    """A template's ``autotune_warm`` (``{"strategy": ..., "max_evals": ..., "searches": ...}``),
    checked: a bad one is a ValueError naming the template."""
    value = getattr(cls, "autotune_warm", None)
    if value is None:
        return {}
    problem = not isinstance(value, dict) or set(value) - {"strategy", "max_evals", "searches"}
    if not problem:
        strategy, evals, searches = (value.get("strategy"), value.get("max_evals"),
                                     value.get("searches", 1))
        problem = (strategy is not None and strategy not in STRATEGIES) or \
            (evals is not None and (not isinstance(evals, int) or isinstance(evals, bool) or evals < 1)) or \
            (not isinstance(searches, int) or isinstance(searches, bool) or searches < 1)
    if problem:
        raise ValueError(f"{cls.__qualname__}.autotune_warm must be a dict with strategy (one of "
                         f"{', '.join(STRATEGIES)}), max_evals and searches (ints >= 1), got "
                         f"{value!r}")
    return dict(value)


def nearest(stores: Sequence[tuple[ResultStore, str]], key: Any, space: Any) -> WarmStart:
    """What the stored trials of ``key`` offer a search of ``space`` (as
    :func:`autotune.tune.recording.seeds.warm_start` will find them): how many seeds, from
    which device, in which of ``stores`` ((store, label) pairs, nearest first)."""
    found: dict[tuple[str, str, str], dict] = {}
    chosen: dict[tuple[str, str, str], dict] = {}
    labels: dict[tuple[str, str, str], tuple[ResultStore, str]] = {}
    for store, name in stores:  # a device's trials in an earlier store win
        configs_by_device, results = device_trials([store], key, space)
        for device, configs in configs_by_device.items():
            if device not in found:
                found[device], labels[device] = configs, (store, name)
                if device in results:
                    chosen[device] = results[device]
    if not found:
        return WarmStart()
    devices = nearest_devices(found, key)
    seeds = best_of(found, devices, chosen)  # as warm_start takes them
    store, label = labels[devices[0]]
    # near: a finished search of the key on this device (its result stored), not the trials
    # of an interrupted one, which --resume goes on with
    near = devices[0][0] == key.device_name and _finished(store, key, devices[0])
    return WarmStart(min(len(seeds), WARM_START_SEEDS), devices[0][0], near, label)


def _finished(store: ResultStore, key: Any, device: tuple[str, str, str]) -> bool:
    """Whether ``store`` holds a result of ``key``'s function, version and arguments on
    ``device``."""
    name, platform, driver = device
    try:
        return bool(store.find(key.function, key.version, key.arguments, device_name=name,
                               device_platform=platform, driver_version=driver))
    except StoreError:
        return False


@dataclass(frozen=True)
class TrialCosts:
    """Seconds a trial of one function takes: on average, and per key (its arguments, as
    stored), from the stored results of one device."""

    average: float
    by_arguments: dict[str, float] = field(default_factory=dict)

    def of(self, arguments: str) -> float:
        """A trial of the key with these ``arguments``: its own stored figure where there is
        one (the costs of one template's keys differ: on a CPU a fused norm pass takes twice
        an axpy's time), else the function's average."""
        return self.by_arguments.get(arguments, self.average)


def _search_cost(search: str) -> tuple[float, int] | None:
    """(seconds, trials) of a stored ``search`` JSON, or None where it has no sound pair."""
    try:
        info = json.loads(search) if search else {}
        s, n = info.get("seconds"), info.get("trials")
    except (ValueError, AttributeError):
        return None
    if isinstance(s, (int, float)) and not isinstance(s, bool) and isinstance(n, int) \
            and not isinstance(n, bool) and math.isfinite(s) and s > 0 and n > 0:
        return float(s), n
    return None


def trial_costs(stores: Sequence[ResultStore], function: str, device: str,
                gpu: bool) -> TrialCosts:
    """Seconds a trial of ``function`` takes: from the stored results of ``device`` (their
    ``search`` JSON: seconds and trials), in the first store that has any, else
    :data:`~autotune.tune.offline.SECONDS_PER_CONFIGURATION` (the tuner's own first-use
    guess). What is stored is data: anything malformed is ignored."""
    for store in stores:
        try:
            records = store.records(function=function)
        except StoreError:
            continue
        seconds = trials = 0.0
        by_arguments: dict[str, float] = {}
        for record in records:
            if record.key.device_name != device:
                continue
            cost = _search_cost(record.search)
            if cost is not None:
                seconds, trials = seconds + cost[0], trials + cost[1]
                by_arguments[record.key.arguments] = cost[0] / cost[1]
        if trials:
            return TrialCosts(seconds / trials, by_arguments)
    return TrialCosts(SECONDS_PER_CONFIGURATION[gpu])


def time_shares(total: float, costs: Sequence[float], floor: float = FLOOR_SECONDS) -> list[float]:
    """``total`` seconds shared between keys in proportion to their expected ``costs``, none
    below ``floor`` (or an equal share, where ``total`` cannot give every key the floor): the
    keys whose proportional share is below the floor get the floor, the others share the rest
    in proportion. The shares add up to ``total``."""
    n = len(costs)
    if n == 0:
        return []
    total = max(0.0, total)
    floor = min(floor, total / n)
    weights = [c if c > 0 and math.isfinite(c) else 0.0 for c in costs]
    if not any(weights):
        weights = [1.0] * n
    fixed = [False] * n
    while True:
        free = total - floor * sum(fixed)
        weight = sum(w for w, f in zip(weights, fixed) if not f)
        shares = [floor if f else (free * w / weight if weight else floor)
                  for w, f in zip(weights, fixed)]
        low = [i for i in range(n) if not fixed[i] and shares[i] < floor]
        if not low:
            return shares
        for i in low:
            fixed[i] = True


def wall_estimate(device_seconds: Sequence[float], workers: int) -> float:
    """The expected wall time of a run whose devices expect ``device_seconds`` each (their
    keys' plans added up) when ``workers`` of them tune at once (``--jobs``, or the ranks of
    an MPI run): each device's keys in turn on the least loaded worker, the longest first
    (one worker: the sum; as many as the devices: the longest)."""
    loads = [0.0] * max(1, workers)
    for seconds in sorted(device_seconds, reverse=True):
        loads[loads.index(min(loads))] += seconds
    return max(loads)


def interleaved(templates: Sequence[str], costs: Sequence[float] | None = None) -> list[int]:
    """The order to tune keys in (positions in ``templates``, each key's template name): the
    templates' keys spread in proportion to their expected ``costs`` (1 each where not given),
    each template's keys in their order. The next key is always of the template whose next key
    lies earliest in its own expected time (the keys done and half of the next one, over the
    template's total; ties: the template expected to take longest first), so that any share of
    the run holds about that share of every template's time, and the estimate of the time left
    learns early what every template costs. Replayed on the fourteen runs recorded by then
    (``benchmarks/data/warm_estimate_*.json``), the estimate after a tenth of the run's time
    was within 20% on each (one key of each template in turn: 27%; on the 2-core Xeon of
    2026-12-02, whose 54 BLAS keys ran 1.18x their plan and the others 0.5-0.8x, -22% then,
    +3% so: in turn, one BLAS key had been tuned by then)."""
    queues: dict[str, list[int]] = {}
    totals: dict[str, float] = {}
    weights = [1.0] * len(templates) if costs is None else [max(0.0, c) for c in costs]
    for position, name in enumerate(templates):
        queues.setdefault(name, []).append(position)
        totals[name] = totals.get(name, 0.0) + weights[position]
    ranked = sorted(queues, key=lambda name: -totals[name])  # stable: ties as they come
    done = dict.fromkeys(ranked, 0.0)

    def place(name: str) -> float:  # where the template's next key lies in its own time
        total = totals[name] or 1.0
        return (done[name] + weights[queues[name][0]] / 2) / total

    order: list[int] = []
    while len(order) < len(templates):
        name = min((n for n in ranked if queues[n]), key=place)  # min: the first of ties
        position = queues[name].pop(0)
        done[name] += weights[position]
        order.append(position)
    return order


#: how much a template's first key counts in the correction, against 1 for each later key,
#: where it took longer than its plan: it carries one-off costs (its module's first compiles,
#: data made once, on GPUs no key prepared ahead of it) that its later keys do not pay. A first
#: key quicker than its plan counts in full: one-off costs never make a key quicker, so it says
#: what the machine is (a 2-core Xeon of 2026-12-01 ran every template at 0.24-0.70 of its
#: plan, its first keys included: with them discounted, the estimate after a tenth of the run
#: was 56% too long, 35% with them counted)
FIRST_KEY_WEIGHT = 0.25
#: the plan's figures as evidence, in keys of mean expected cost: a template's ratio is pulled
#: toward the run's ratio as by this many of its keys, the run's ratio toward 1 (the plan) by
#: ``RUN_PRIOR_KEYS`` keys. Replayed after a tenth of the run's time on the ten runs of
#: benchmarks/data/warm_estimate_*.json of 2026-11-29/30 (H200, Xeon, AMD EPYC;
#: ``warm_estimate.py --replay``), 1 and 2 let the first two or three dslash keys on the H200
#: (slower than their plan by one-off costs) scale the whole run: worst error 66%; 4 and 16:
#: 19%, and no worse than 27% at 5-30% of the keys. (With quick first keys counted in full:
#: 24% on the eleven runs of 2026-11-29/30, 35% on the Xeon run of 2026-12-01.)
TEMPLATE_PRIOR_KEYS = 4.0
RUN_PRIOR_KEYS = 16.0
#: the run's prior where its keys so far were quicker than their plan: lighter, since one-off
#: costs only ever slow keys, so quick keys say what the machine is. Replayed after a tenth of
#: the run's time on the thirteen recorded runs (``warm_estimate.py --replay``): the two idle
#: 2-core Xeon runs of 2026-12-01 from +35% and +30% to +14% and +11%, the H200's unchanged
#: (their keys were slower than the plan), worst 27% (a Xeon of 2026-11-29 that other jobs
#: shared, 24% before), the AMD EPYC's at most 24%.
RUN_PRIOR_KEYS_QUICKER = 4.0


class Estimator:
    """The time left of a run from each key's expected seconds, corrected with what the run
    has measured: a template's pending keys by the ratio of its finished keys' actual to
    expected time, taken with the run's ratio as a prior (as if :data:`TEMPLATE_PRIOR_KEYS`
    keys had shown it), the run's ratio with the plan's 1 as its prior
    (:data:`RUN_PRIOR_KEYS`; :data:`RUN_PRIOR_KEYS_QUICKER` where the run's keys were quicker
    than planned). A template's first key, where slower than its plan, counts
    :data:`FIRST_KEY_WEIGHT` as much as a later one. So one slow first key (on an H200, the
    first Wilson dslash key took 7 s where its later keys took 3) does not scale every key of
    its template by itself.

    ``deadline`` (by ``clock``; ``warm --max-minutes``): when the run's time limit ends. Keys
    under a limit take their share of what is left, not their plan, so the time left is at
    most what is left of the limit; past it, each key left still measures its first
    configuration and the ``test=`` baseline (:meth:`least`). Without it, the H200's ``warm
    --max-minutes 1`` of 2026-12-02 said "1 min 20 s" at the start and ended in 1 min 04 s."""

    def __init__(self, plans: Sequence[KeyPlan], clock: Any = time.perf_counter,
                 deadline: float | None = None):
        self.plans = list(plans)
        self.clock = clock
        self.deadline = deadline
        self.actual: dict[int, float] = {}
        self.current: int | None = None
        self.current_since = 0.0
        self.firsts: dict[str, int] = {}
        for index, plan in enumerate(self.plans):
            self.firsts.setdefault(plan.template, index)
        self._ratios: dict[str | None, float] = {}  #: as of the keys finished so far
        #: when each key given a time limit (:meth:`WarmPolicy.share`) is to stop, by ``clock``
        self.deadlines: dict[int, float] = {}
        self.first_estimate = self.remaining()

    def _evidence(self, template: str | None) -> tuple[float, float, float]:
        """(weighted actual, weighted expected, mean expected of a key) of ``template``'s
        finished keys (None: every template's)."""
        mine = [i for i in range(len(self.plans))
                if template is None or self.plans[i].template == template]
        mean = sum(self.plans[i].seconds for i in mine) / len(mine) if mine else 0.0
        actual = expected = 0.0
        for i in mine:
            if i in self.actual:
                slow_first = (self.firsts.get(self.plans[i].template) == i
                              and self.actual[i] > self.plans[i].seconds)
                weight = FIRST_KEY_WEIGHT if slow_first else 1.0
                actual += weight * self.actual[i]
                expected += weight * self.plans[i].seconds
        return actual, expected, mean

    def ratio(self, template: str | None) -> float:
        """Actual over expected time of ``template``'s keys (None: of the run's), as corrected
        so far."""
        if template not in self._ratios:
            self._ratios[template] = self._ratio(template)
        return self._ratios[template]

    def _ratio(self, template: str | None) -> float:
        if template is None:
            actual, expected, mean = self._evidence(None)
            prior = RUN_PRIOR_KEYS_QUICKER if actual < expected else RUN_PRIOR_KEYS
            return (actual + prior * mean) / (expected + prior * mean) \
                if expected + mean > 0 else 1.0
        run = self.ratio(None)
        actual, expected, mean = self._evidence(template)
        if expected + mean <= 0:
            return run
        return (actual + TEMPLATE_PRIOR_KEYS * run * mean) / (expected + TEMPLATE_PRIOR_KEYS * mean)

    def expected(self, index: int) -> float:
        """Key ``index``'s expected seconds, as corrected so far."""
        plan = self.plans[index]
        return plan.seconds * self.ratio(plan.template)

    def least(self, index: int) -> float:
        """Key ``index``'s expected seconds with no time to search: its first configuration
        and the baseline, every search, as corrected so far."""
        plan = self.plans[index]
        return self.expected(index) * min(1.0, 2 / (plan.evaluations + 1))

    def start(self, index: int) -> None:
        self.current, self.current_since = index, self.clock()

    def finish(self, index: int, seconds: float) -> None:
        self.actual[index] = seconds
        self._ratios.clear()
        if self.current == index:
            self.current = None

    def remaining(self, pending: Sequence[int] | None = None) -> float:
        """Seconds left: the keys not finished (``pending``, default every one not finished or
        started) and what the key in progress is expected to take yet; with a ``deadline``, at
        most what is left until it, and no less than the least the keys left take."""
        if pending is None:
            pending = [i for i in range(len(self.plans))
                       if i not in self.actual and i != self.current]
        left = sum(self.expected(i) for i in pending)
        now = self.clock()
        if self.current is not None:
            left += max(0.0, self.expected(self.current) - (now - self.current_since))
        if self.deadline is None:
            return left
        least = sum(self.least(i) for i in pending)
        return min(left, max(self.deadline - now, least))


@dataclass
class WarmPolicy:
    """What ``warm`` was asked for beyond the keys: the rules and overrides of the plan, the
    databases read for warm starts, and the time limit of the whole run."""

    rules: PlanRules = field(default_factory=PlanRules)
    overrides: Overrides = field(default_factory=Overrides)
    #: (URL, label) of other databases read for warm starts and costs, nearest first
    warm_from: tuple[tuple[str, str], ...] = ()
    max_minutes: float | None = None
    started: float | None = None  #: when the run began (``time.perf_counter``)

    def stores(self, store: ResultStore, open_store: Any) -> list[tuple[ResultStore, str]]:
        """The tuning database and the ``warm_from`` ones, labelled."""
        return [(store, "this database")] + [(open_store(url), label)
                                             for url, label in self.warm_from if url != store.url]

    def plan(self, template: Any, context: Any, config: dict[str, Any],
             stores: Sequence[tuple[ResultStore, str]],
             costs: dict[str, TrialCosts]) -> KeyPlan:
        """The plan of one key (``costs``: a trial's seconds by template name, filled here)."""
        gpu = context.device.is_gpu is not False
        try:
            own = own_plan(template.cls)
        except ValueError as exc:  # another package's template: warned of, planned by the rules
            logger.warning("%s; warm plans its keys by its rules instead", exc)
            own = {}
        try:
            space = template.tuner.declared_space(template.cls, context, config)
            configurations = None if space is None else len(space.configurations())
        except Exception:  # noqa: BLE001 - a space that cannot be made: the template's own search
            space, configurations = None, None
        key = template.key(context, config)
        warm = nearest(stores, key, space) if space is not None else WarmStart()
        searches = int(own.get("searches", 1))
        strategy, evals, reason = choose(template.name, configurations, warm, self.rules,
                                         self.overrides, own)
        if evals is not None and reason in ("this device's trials", "large space"):
            evals = max(1, math.ceil(evals / searches))  # the rules' budget is the key's
        if template.name not in costs:
            costs[template.name] = trial_costs([s for s, _ in stores], key.function,
                                               warm.device or key.device_name, gpu)
        return KeyPlan(template.name, configurations, strategy, evals, reason, warm,
                       costs[template.name].of(key.arguments), searches)

    def plan_keys(self, context: Any, keys: Sequence[tuple[Any, dict[str, Any]]],
                  store: ResultStore, open_store: Any) -> list[KeyPlan]:
        """The plans of ``keys`` ((template, configuration) pairs) on ``context``, reading the
        stored trials of ``store`` and of the ``warm_from`` databases (``open_store(url)``)."""
        stores = self.stores(store, open_store)
        costs: dict[str, TrialCosts] = {}
        return [self.plan(template, context, config, stores, costs) for template, config in keys]

    def deadline(self) -> float | None:
        """When the run's time limit ends (``time.perf_counter``), or None without one."""
        if self.max_minutes is None:
            return None
        started = self.started if self.started is not None else time.perf_counter()
        return started + self.max_minutes * 60

    def share(self, estimator: Estimator, pending: Sequence[int], which: int = 0) -> float | None:
        """The seconds the next key (the first of ``pending``; ``which``: the one at that place
        in it, a key started ahead while the first is tuned) may take under ``max_minutes``:
        its share of what is left, in proportion to the expected costs of the keys left. A key
        started ahead gets, beside its share, the time until its turn: what the key in its turn
        is expected to take yet, at most what is left of that key's own limit (its search's
        clock starts now, its turn when that key ends; without it, keys started ahead spent
        half their share before their turn: the H200's dslash searches of 2026-11-30 under
        ``--max-minutes 4`` measured 5 of their 24 second-step candidates). Each key's limit
        is noted in ``estimator.deadlines``."""
        deadline = self.deadline()
        if deadline is None:
            return None
        left = deadline - self.max_minutes * 60 * RESERVE - time.perf_counter()
        seconds = time_shares(left, [estimator.expected(i) for i in pending])[which]
        now = estimator.clock()
        if which:  # the turn before it ends within what is left of the run, at the latest,
            # and by the time limit that key was given, where it was given one
            until_turn = min(estimator.remaining([]), max(0.0, left))
            turn_ends = estimator.deadlines.get(pending[0])
            if turn_ends is not None:
                until_turn = min(until_turn, max(0.0, turn_ends - now))
            seconds += until_turn
        estimator.deadlines[pending[which]] = now + seconds
        return seconds


def policy_from_args(args: Any, templates: Sequence[Any], started: float) -> WarmPolicy:
    """The policy of a ``warm`` command line (checked: ValueError for a bad value)."""
    from ..tune.store import database_url

    overrides = parse_overrides(args.strategy or [], args.max_evals or [],
                                [t.name for t in templates])
    if args.max_minutes is not None and not (math.isfinite(args.max_minutes)
                                             and args.max_minutes > 0):
        raise ValueError(f"--max-minutes must be a number above 0, got {args.max_minutes}")
    sources: list[tuple[str, str]] = []
    names = args.warm_from if args.warm_from else ([str(EXAMPLE_DB)] if EXAMPLE_DB.is_file() else [])
    for name in names:
        if name == "none":
            return WarmPolicy(PlanRules(), overrides, (), args.max_minutes, started)
        path = Path(name)
        if "://" not in name and not path.is_file():
            raise ValueError(f"--warm-from {name}: no such database file; give an existing "
                             "database (or none)")
        sources.append((database_url(name), path.name if "://" not in name else name))
    return WarmPolicy(PlanRules(), overrides, tuple(sources), args.max_minutes, started)
