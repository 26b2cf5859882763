"""Search strategies compared on recorded landscapes: ours, and Kernel Tuner's in its
simulation mode, over the same data at the same budgets.

A landscape is one key's complete set of trials (every valid configuration measured, as a
brute-force search stores them). Each strategy is replayed ``--seeds`` times at budgets of 2%,
5% and 10% of the configurations (``--budgets``), and at budgets given in evaluations
(``--evals``, none by default: the small budgets of a template's own search or of ``warm``'s
plans); the table gives the median and 90th percentile, over the seeds, of (best time found) /
(true best time). Kernel Tuner gets the same landscape as a cache file and runs with
``simulation_mode=True`` and ``max_fevals`` equal to our ``max_evals`` (distinct valid
configurations measured); numpy's and Python's random generators are seeded before each run,
but some of Kernel Tuner's strategies (diff_evo, bayes_opt) draw from
generators of their own and differ between runs. A warm start (``--warm-from DEVICE``) seeds our
strategies with another device's recorded trials of the same key, as the tuner does.

Usage: python benchmarks/strategies.py --db DB --function PATTERN [--device NAME]
       [--arguments JSON] [--seeds 50] [--budgets 0.02 0.05 0.10] [--evals N ...] [--kernel-tuner]
       [--warm-from DEVICE] [--band 0.03] [--json FILE]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import statistics
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import numpy as np

from autotune import tune
from autotune.tune.replay import landscape

OURS = ["random", "local", "annealing", "genetic", "bayes"]
KERNEL_TUNER = ["random_sample", "genetic_algorithm", "greedy_ils", "greedy_mls", "simulated_annealing",
                "dual_annealing", "pso", "firefly_algorithm", "diff_evo", "mls", "bayes_opt"]


def _order(values: set) -> list:
    return sorted(values, key=lambda v: (str(type(v)), v))


def recorded_space(trials: list[tune.records.TrialRecord]) -> tune.Space:
    """The space a complete landscape spans: each parameter's recorded values, in order, and
    only the recorded combinations valid."""
    params = [json.loads(t.parameters) for t in trials if not tune.validation.trial_problem(t)]
    names = list(params[0])
    lists = {n: _order({p[n] for p in params}) for n in names}
    recorded = {tuple(p[n] for n in names) for p in params}
    return tune.Space(lists, [tune.restriction("recorded", lambda p: tuple(p[n] for n in names) in recorded)])


def load(store: tune.store.ResultStore, function: str, device: str | None,
         arguments: str | None) -> tuple[tune.TuningKey, list[tune.records.TrialRecord]]:
    trials = store.trials(function=function)
    keys: dict[tune.TuningKey, list] = {}
    for t in trials:
        if (device is None or device.lower() in t.key.device_name.lower()) and \
                (arguments is None or t.key.arguments == arguments):
            keys.setdefault(t.key, []).append(t)
    if not keys:
        raise SystemExit(f"no trials of {function} match the device and arguments")
    key = max(keys, key=lambda k: len(keys[k]))  # the most complete landscape
    return key, keys[key]


def _median_p90(values: list[float]) -> dict[str, float]:
    """Median and 90th percentile (the nearest rank) of ``values``."""
    values = sorted(values)
    return {"median": statistics.median(values),
            "p90": values[max(0, math.ceil(0.9 * len(values)) - 1)]}


def ratios(found: list[float], best: float) -> dict[str, float]:
    return _median_p90([f / best for f in found])


def to_band(histories: list[list[float]], best: float, band: float) -> dict[str, float]:
    """Evaluations each run needed to come within ``band`` of the true best (infinite if it
    never did within its budget): median and 90th percentile over the runs."""
    needed = [next((i + 1 for i, t in enumerate(h) if t <= (1 + band) * best), math.inf)
              for h in histories]
    return {**_median_p90(needed),
            "reached": sum(1 for n in needed if math.isfinite(n)) / len(needed)}


def _patch_kernel_tuner() -> None:
    """Kernel Tuner 1.5.0's neighbour cache keeps the numpy array a neighbour query returns and
    later appends to it, so its neighbourhood strategies (greedy_ils, mls, greedy_mls,
    simulated_annealing) raise AttributeError; hand them lists instead."""
    from kernel_tuner.searchspace import Searchspace

    query = Searchspace.get_neighbors_indices_no_cache
    if getattr(query, "returns_lists", False):
        return

    def as_list(self, *args, **kwargs):
        return list(query(self, *args, **kwargs))

    as_list.returns_lists = True
    Searchspace.get_neighbors_indices_no_cache = as_list


def kernel_tuner_runs(tune_params: dict[str, list], times: dict[tuple, float | None], strategy: str,
                      budget: int, seeds: int) -> list[float]:
    """Kernel Tuner's ``strategy`` over a landscape (``times`` per configuration of
    ``tune_params``) as a cache file, ``seeds`` times."""
    import kernel_tuner
    from constraint import FunctionConstraint  # Kernel Tuner's constraint solver

    _patch_kernel_tuner()
    names = list(tune_params)
    valid = set(times)
    cache = {"device_name": "recorded", "kernel_name": "landscape", "problem_size": [1],
             "tune_params_keys": names, "tune_params": tune_params, "objective": "time", "cache": {}}
    for key, seconds in times.items():
        entry = dict(zip(names, key))
        entry["time"] = seconds * 1e3 if seconds is not None else "RuntimeFailedConfig"
        entry.update(compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
        cache["cache"][",".join(str(v) for v in key)] = entry
    found = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "landscape.json"
        text = json.dumps(cache)
        for seed in range(seeds):
            path.write_text(text)  # a fresh copy: simulation must not grow it
            np.random.seed(seed)
            random.seed(seed)
            with redirect_stdout(io.StringIO()):
                results, _ = kernel_tuner.tune_kernel(
                    "landscape", "__global__ void landscape() {}", 1, [], tune_params,
                    restrictions=[FunctionConstraint(lambda *values: tuple(values) in valid)],
                    cache=str(path), simulation_mode=True, strategy=strategy,
                    strategy_options={"max_fevals": budget}, quiet=True, verbose=False)
            times = [r["time"] for r in results if isinstance(r.get("time"), (int, float))]
            found.append(min(times) / 1e3 if times else math.inf)
    return found


def _isolated(fn, *args, timeout: float = 300.0):
    """``fn(*args)`` in a fresh process, given up after ``timeout`` seconds: Kernel Tuner's
    simulations keep memory between calls, and some of its neighbourhood strategies can loop
    without spending their budget, so each strategy and budget gets a process of its own."""
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(1) as pool:
        try:
            return pool.apply_async(fn, args).get(timeout=timeout)
        except multiprocessing.TimeoutError:
            pool.terminate()
            raise TimeoutError(f"did not finish in {timeout:.0f} s") from None


def key_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that name a recorded key: its database, function, device and arguments."""
    parser.add_argument("--db", required=True)
    parser.add_argument("--function", required=True, help="function name or pattern with %%")
    parser.add_argument("--device", help="part of the device name")
    parser.add_argument("--arguments", help="the key's canonical arguments JSON")


def recorded_key(args: argparse.Namespace) -> tuple[tune.store.ResultStore, str, tune.TuningKey,
                                                     list[tune.records.TrialRecord]]:
    """The store, the function pattern, the key and its trials that :func:`key_arguments`'
    options name (the most complete landscape among the matching keys)."""
    store = tune.store.ResultStore.open(args.db, read_only=True)
    function = args.function if "%" in args.function else f"%{args.function}%"
    return (store, function, *load(store, function, args.device, args.arguments))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    key_arguments(parser)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--budgets", type=float, nargs="*", default=[0.02, 0.05, 0.10])
    parser.add_argument("--evals", type=int, nargs="*", default=[],
                        help="budgets in evaluations, after the fractions' (none by default)")
    parser.add_argument("--strategies", nargs="+", default=OURS)
    parser.add_argument("--kernel-tuner", action="store_true", help="also Kernel Tuner's strategies")
    parser.add_argument("--kt-strategies", nargs="+", default=KERNEL_TUNER)
    parser.add_argument("--warm-from", help="part of another device's name: warm-start our strategies")
    parser.add_argument("--band", type=float, default=0.03,
                        help="also count the evaluations our strategies need to come within this "
                             "fraction of the true best (default 0.03)")
    parser.add_argument("--json")
    args = parser.parse_args()
    store, function, key, trials = recorded_key(args)
    space = recorded_space(trials)
    land = landscape(trials, space)
    n = len(land.times)
    best = land.best_score
    seeds, prior = [], []
    if args.warm_from:
        _, other = load(store, function, args.warm_from, key.arguments)
        other_land = landscape(other, space)
        ranked = sorted((t, k) for k, t in other_land.times.items() if t is not None)
        seeds = [dict(zip(space.names, k)) for _, k in ranked[:8]]
        prior = [(dict(zip(space.names, k)), t / ranked[0][0]) for t, k in ranked]
    result: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "function": key.function,
                              "device": key.device_name, "arguments": key.arguments,
                              "configurations": n, "best_seconds": best, "best": land.best,
                              "seeds": args.seeds, "warm_from": args.warm_from, "rows": []}
    print(f"{key.function} on {key.device_name} {key.arguments}: {n} configurations, best "
          f"{best * 1e3:.4f} ms {land.best}" + (f"; warm start from {args.warm_from}" if seeds else ""))
    print("| budget | evals | strategy | median best/true | p90 |\n|---|---|---|---|---|")
    budgets = [(f, max(1, round(f * n))) for f in args.budgets] + [(e / n, e) for e in args.evals]
    for fraction, budget in budgets:
        rows = []
        for name in args.strategies:
            runs = [tune.replay(land, name, max_evals=budget, seed=s, seeds=seeds, prior=prior)
                    for s in range(args.seeds)]
            rows.append({"tuner": "autotune", "strategy": name,
                         **ratios([r.best_score for r in runs], best),
                         "to_band": to_band([r.history for r in runs], best, args.band)})
        if args.kernel_tuner:
            for name in args.kt_strategies:
                try:
                    found = _isolated(kernel_tuner_runs, {n: list(v) for n, v in space.parameters.items()},
                                      dict(land.times), name, budget, args.seeds)
                except Exception as exc:  # a strategy that fails on this landscape is reported
                    print(f"Kernel Tuner {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                rows.append({"tuner": "Kernel Tuner", "strategy": name, **ratios(found, best)})
        for row in rows:
            print(f"| {fraction:.0%} | {budget} | {row['tuner']} {row['strategy']} | "
                  f"{row['median']:.3f} | {row['p90']:.3f} |")
        ours = min((r for r in rows if r["tuner"] == "autotune"), key=lambda r: (r["median"], r["p90"]))
        theirs = [r for r in rows if r["tuner"] != "autotune"]
        summary = {"budget": fraction, "evals": budget, "rows": rows, "ours_best": ours}
        if theirs:
            summary["kernel_tuner_best"] = min(theirs, key=lambda r: (r["median"], r["p90"]))
        result["rows"].append(summary)
    print("\nbest per budget (median, p90):")
    for summary in result["rows"]:
        line = (f"  {summary['budget']:.0%}: ours {summary['ours_best']['strategy']} "
                f"{summary['ours_best']['median']:.3f} / {summary['ours_best']['p90']:.3f}")
        if "kernel_tuner_best" in summary:
            kt = summary["kernel_tuner_best"]
            line += f"; Kernel Tuner {kt['strategy']} {kt['median']:.3f} / {kt['p90']:.3f}"
        print(line)
    print(f"\nevaluations to come within {args.band:.0%} of the true best (median / p90 over the "
          "seeds; share of seeds that did within the budget):")
    for summary in result["rows"]:
        for row in summary["rows"]:
            if "to_band" in row:
                band = row["to_band"]
                print(f"  {summary['budget']:.0%} ({summary['evals']}): {row['strategy']} "
                      f"{band['median']} / {band['p90']} ({band['reached']:.0%})")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
