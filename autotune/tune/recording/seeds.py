"""Where a search starts from what is stored: the best configurations of the nearest devices
(a warm start), what this device chose at the nearest sizes where the template declares sizes
that generalise (:func:`size_seeds`), the trials of an interrupted search of the same key (to go
on from), and what this device chose for the same function under other arguments (an online
scan's seeds)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .. import similar
from ..encoding import decode_parameters, encode_parameters
from ..evaluation import Trial
from ..records import ResultOrigin, TrialStatus, TuningKey, TuningRecord
from ..space import Space
from ..store import ResultStore, StoreError
from ..validation import record_problem, trial_problem
from ..verdicts import Freshness, Verdict

logger = logging.getLogger("autotune.tune")


#: How many of the nearest devices' best configurations a search measures first.
WARM_START_SEEDS = 8
#: How many of this device's choices at the nearest tuned sizes a search measures first
#: (:func:`size_seeds`).
SIZE_SEEDS = 3


def warm_start(store: ResultStore, key: TuningKey, space: Space | None,
               also: Sequence[ResultStore] = ()) -> tuple[list[dict[str, Any]],
                                                          list[tuple[dict[str, Any], float]]]:
    """Where a search for ``key`` should start: stored trials of the same function, version and
    arguments on the nearest devices (this device's own earlier trials first, then the same
    device name on another platform or driver, then any other device).

    Returns the best configurations of those devices, nearest first (measured first by every
    strategy; a device's stored result before its fastest trials), and the nearest device's
    trials as (configuration, time / its best) for model-based strategies. Only well-formed
    trials inside ``space`` count. ``also``: other databases read for the same
    (``tune.db.example``); a device's trials in ``store`` win over its trials there.
    """
    if space is None:
        return [], []
    by_device, chosen = device_trials([store, *also], key, space)
    devices = nearest_devices(by_device, key)
    seeds = best_of(by_device, devices, chosen)
    prior: list[tuple[dict[str, Any], float]] = []
    for device in devices:
        found = list(by_device[device].values())
        if len(found) >= 2:
            best = min(t for _, t in found)
            prior = [(params, t / best) for params, t in found]
            break
    return seeds[:WARM_START_SEEDS], prior


def nearest_devices(by_device: dict[tuple[str, str, str], Any], key: TuningKey
                    ) -> list[tuple[str, str, str]]:
    """The devices of ``by_device`` (name, platform, driver), nearest to ``key``'s first: the
    same device, then the same name on another platform or driver, then any other."""
    def nearness(device: tuple[str, str, str]) -> tuple[bool, ...]:
        name, platform, driver = device
        return (name != key.device_name, platform != key.device_platform,
                driver != key.driver_version)

    return sorted(by_device, key=nearness)


def best_of(by_device: dict[tuple[str, str, str], dict[tuple, tuple[dict[str, Any], float]]],
            devices: Sequence[tuple[str, str, str]],
            chosen: dict[tuple[str, str, str], dict[str, Any]] | None = None
            ) -> list[dict[str, Any]]:
    """Each of ``devices``' stored result (``chosen``), then its 3 fastest configurations in
    ``by_device``, in that order, without repeats: the seeds of a warm start (before the
    :data:`WARM_START_SEEDS` limit). The result comes first because it is the device's settled
    choice (its leaders timed again side by side, :mod:`..choice`), where a trial's median is one
    pass of the search: on a 2-core Xeon the trials of ``tune.db.example`` ranked one item a
    work-item 16% slower than four for float32 ``cdot_norm``, while the exhaustive search's
    choice, and every later side-by-side timing, had one item 4-6% faster. A search's tie rule
    prefers its earliest seed, so the order decides ties."""
    seeds: list[dict[str, Any]] = []
    chosen = chosen or {}
    for device in devices:
        ranked = sorted(by_device[device].values(), key=lambda item: item[1])
        first = [chosen[device]] if device in chosen else []
        for params in first + [params for params, _ in ranked[:3]]:
            if params not in seeds:
                seeds.append(params)
    return seeds


def device_trials(stores: Sequence[ResultStore], key: TuningKey, space: Space
                  ) -> tuple[dict[tuple[str, str, str], dict[tuple, tuple[dict[str, Any], float]]],
                             dict[tuple[str, str, str], dict[str, Any]]]:
    """The well-formed ``ok`` trials of ``key``'s function, version and arguments inside
    ``space``, by device (name, platform, driver), then by configuration: (parameters, median
    seconds). A device whose trials were not kept has its stored result (the key's best
    configuration and score) instead. A device found in an earlier store is not read from a
    later one; a store that cannot be read gives nothing. Also each device's stored result's
    parameters (inside ``space``), from the store its trials came from."""
    by_device: dict[tuple[str, str, str], dict[tuple, tuple[dict[str, Any], float]]] = {}
    chosen: dict[tuple[str, str, str], dict[str, Any]] = {}
    for store in stores:
        try:
            trials = store.trials(function=key.function, version=key.version,
                                  arguments=key.arguments)
            records = store.find(key.function, key.version, key.arguments)
        except StoreError as exc:
            logger.info("no warm start for %s from %s: %s", key.function, store.url, exc)
            continue
        known = set(by_device)
        rows = [(t.key.device, _inside(t.parameters, space), t.median_seconds) for t in trials
                if t.status == "ok" and t.key.device not in known and not trial_problem(t)]
        with_trials = {device for device, _, _ in rows}
        results = [(r.key.device, _inside(r.parameters, space), r.score) for r in records
                   if r.key.device not in known and not record_problem(r)]
        rows += [row for row in results if row[0] not in with_trials]
        for device, params, seconds in rows:
            if params is not None:
                found = by_device.setdefault(device, {})
                found[tuple(params[n] for n in space.names)] = (params, seconds)
        chosen.update((device, params) for device, params, _ in results
                      if device in by_device and params is not None)
    return by_device, chosen


def _inside(parameters: str, space: Space) -> dict[str, Any] | None:
    """Stored parameters decoded, or None where they are not a configuration of ``space``."""
    params = decode_parameters(parameters)
    if not isinstance(params, dict) or space.why_not(params) is not None:
        return None
    return params


def size_seeds(store: ResultStore, key: TuningKey, rules: dict[str, str], space: Space,
               limit: int = SIZE_SEEDS) -> list[dict[str, Any]]:
    """What this device chose for ``key``'s function and version at the nearest other sizes
    (the arguments the template declares in ``rules``, ``autotune_similar``; the others equal),
    nearest first, at most ``limit``, each inside ``space``: a new size's search measures them
    first, and among candidates it cannot tell apart the rule prefers a seed
    (:mod:`..choice`), so that sizes near each other choose alike where their timings allow.
    [] where nothing is declared or the database cannot be read."""
    if not rules or limit <= 0:
        return []
    try:
        rows = store.find(key.function, key.version, None, device_name=key.device_name,
                          device_platform=key.device_platform, driver_version=key.driver_version)
    except StoreError as exc:
        logger.info("no seeds from other sizes for %s: %s", key.function, exc)
        return []
    seeds: list[dict[str, Any]] = []
    for _, record in similar.ranked(rows, key, rules):
        params = None if record_problem(record) else _inside(record.parameters, space)
        if params is not None and params not in seeds:
            seeds.append(params)
            if len(seeds) == limit:
                break
    return seeds


def interrupted_trials(store: ResultStore, key: TuningKey, fingerprint: str) -> list[Trial]:
    """The successful trials of a search of ``key`` that stopped before storing its result:
    this very device, the same sources and space (``fingerprint``), and newer than the key's
    stored result, if any. A search that finds them goes on where that one stopped (a
    ``--force`` re-tune measures afresh: its predecessor's trials predate the stored result)."""
    try:
        record = store.get(key)
        trials = store.trials(key)
    except StoreError as exc:
        logger.info("not resuming %s: %s", key.function, exc)
        return []
    if record is not None and record.malformed:
        return []  # when it was stored is unknown: measure afresh
    since = record.created_at if record is not None else None
    found: list[Trial] = []
    for trial in trials:
        if trial.fingerprint != fingerprint or trial.status != "ok" or trial_problem(trial) \
                or trial.median_seconds is None:  # store.trials(key): this key's only
            continue
        if since is not None and not trial.created_at > since:
            continue
        found.append(Trial(
            decode_parameters(trial.parameters), TrialStatus.OK, "", trial.min_seconds,
            trial.median_seconds, trial.max_seconds, trial.gbps, trial.gflops))
    return found


def stored_choices(store: ResultStore, key: TuningKey, fingerprint: str,
                   judge: Callable[[TuningRecord], Verdict], scan: Space) -> list[dict[str, Any]]:
    """What this device chose for the same function, version and fingerprint (kernel sources
    and space) under other arguments, as candidates of ``scan``: the choices of the rows
    sharing the most argument values with ``key`` first, then the most often chosen, then the
    newest. A choice takes ``scan``'s value of each parameter it fixes; rows that ``judge``
    does not find fresh, or whose choice is then outside the scan, count for nothing. [] where
    the database cannot be read."""
    try:
        records = store.records(function=key.function)
    except StoreError as exc:
        logger.info("online tuning %s: no seeds read (%s)", key.function, exc)
        return []
    votes: dict[str, list[Any]] = {}
    mine = (key.function, key.version, key.device_name, key.device_platform)
    arguments = argument_values(key.arguments)
    fixed = fixed_parameters(scan)
    for record in records:
        theirs_key = record.key
        if (theirs_key.function, theirs_key.version, theirs_key.device_name,
                theirs_key.device_platform) != mine or theirs_key.arguments == key.arguments \
                or record.fingerprint != fingerprint \
                or record.origin == ResultOrigin.SIMILAR.value:  # another row's choice again
            continue
        verdict = judge(record)
        if verdict.freshness is not Freshness.FRESH or verdict.parameters is None:
            continue
        params = {**verdict.parameters, **fixed}  # as a candidate of this scan
        if scan.why_not(params) is not None:
            continue
        theirs = argument_values(theirs_key.arguments)
        shared = sum(1 for name, value in arguments.items() if name in theirs and theirs[name] == value)
        when = record.created_at.timestamp() if record.created_at is not None else 0.0
        entry = votes.setdefault(encode_parameters(params), [0, 0, when, params])
        entry[0] = max(entry[0], shared)
        entry[1] += 1
        entry[2] = max(entry[2], when)
    ranked = sorted(votes.values(), key=lambda e: (-e[0], -e[1], -e[2]))
    return [params for *_, params in ranked]


def fixed_parameters(space: Space) -> dict[str, Any]:
    """The parameters ``space`` does not vary, with their one value."""
    return {n: v[0] for n, v in space.parameters.items() if len(v) == 1}


def argument_values(arguments: str) -> dict[str, Any]:
    """An encoded argument set as a dict of JSON values (nothing in them is decoded into
    objects), {} if it is not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
