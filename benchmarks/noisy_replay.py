"""Strategies replayed on a recorded landscape with measurement noise, as on a GPU: does the
search end on the same (truly fastest) configurations whatever the noise of the process?

On a GPU, a configuration measured in one process is not timed the same in another: each
process sees its own small bias per configuration (clocks, placement, the other work of the
machine: about 1% between processes, issue 41), plus the noise of each measurement. A search
with a fixed seed then still takes other paths in other processes, and may end elsewhere.

This replays each strategy in ``--processes`` simulated processes. Process ``p`` draws, for
every configuration, a bias ``exp(N(0, --bias))`` that holds for the whole process and a
measurement noise ``exp(N(0, --noise))``; the strategy keeps its seed (``--seed``, 1 as
``gemm_vs_cublas.py`` and ``choice_stability.py`` tune). Each configuration is measured once
(the evaluator never measures twice), so its replayed time is true time x bias x noise. The
strategy's choice (the fastest it measured) is then judged by its **true** time: the table
gives the share of processes whose choice is within ``--within`` (1%) of the true best, and the
median and 90th percentile of (true time of the choice) / (true best), and the share whose
search measured a configuration within 1% of the true best at all (what a search controls;
noise then decides whether it is chosen).

The reference row ``top-N`` is the choice among the N truly fastest configurations, measured
under the same noise: the share that any search which finds them can reach (noise alone picks
among them).

Usage: python benchmarks/noisy_replay.py --db DB --function PATTERN [--device NAME]
       [--arguments JSON] [--processes 50] [--seed 1] [--bias 0.007] [--noise 0.003]
       [--evals 300] [--budgets 0.02 0.05 0.10] [--strategies local annealing]
       [--order NAME ...] [--first JSON] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autotune import tune
from autotune.tune.replay import Landscape, landscape

from strategies import _median_p90, key_arguments, recorded_key, recorded_space


def noisy(land: Landscape, process: int, bias: float, noise: float, seed: int = 0) -> Landscape:
    """``land`` as process ``process`` measures it (:meth:`Landscape.noisy`)."""
    return land.noisy(bias, noise, [seed, process])


def reordered(space: tune.Space, names: Sequence[str]) -> tune.Space:
    """``space`` with its parameters in the order ``names`` (then the rest): the order a
    template declares, which decides the order of the valid configurations a seeded strategy
    draws from."""
    order = [n for n in names if n in space.parameters] + [n for n in space.names if n not in names]
    return tune.Space({n: space.parameters[n] for n in order}, space.restrictions)


def _watched(strategy: str, first: Mapping[str, Any] | None, seen: list[set]):
    """``strategy`` as a callable that measures ``first`` before it (the template's ``test=``
    parameters, which a tuned search times before its strategy starts) and appends the set of
    configurations it measured to ``seen``."""
    run = tune.strategies.strategy_named(strategy)[1]

    def watched(ctx: Any) -> None:
        seen.append(ctx.evaluator.scores.keys())  # a live view: complete when the run ends
        if first is not None:
            ctx.evaluate([dict(first)])
        run(ctx)

    return watched


def processes(land: Landscape, strategy: str, evals: int,
              args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """For each simulated process, over the true best: the true time of the choice of
    ``strategy``, and the true time of the fastest configuration it measured (whether the
    search reached the best region, whatever the noise then chose)."""
    best = land.best_score
    seen: list = []
    run_strategy = _watched(strategy, args.first, seen)
    chosen, reached = [], []
    for p in range(args.processes):
        measured = noisy(land, p, args.bias, args.noise, args.noise_seed)
        run = tune.replay(measured, run_strategy, max_evals=evals, seed=args.seed)
        key = None if run.best is None else tuple(run.best[n] for n in land.space.names)
        true = land.times.get(key) if key is not None else None
        chosen.append(math.inf if true is None else true / best)
        times = [land.times[k] for k in seen[-1] if land.times.get(k) is not None]
        reached.append(min(times, default=math.inf) / best)
    return chosen, reached


def top(land: Landscape, count: int, args: argparse.Namespace) -> list[float]:
    """The choice among the ``count`` truly fastest configurations, measured with the noise of
    each process: what noise alone does to a search that finds them all."""
    ranked = sorted((t, k) for k, t in land.times.items() if t is not None)[:count]
    best = land.best_score
    found = []
    for p in range(args.processes):
        measured = noisy(land, p, args.bias, args.noise, args.noise_seed).times
        key = min((k for _, k in ranked), key=lambda k: measured[k])
        found.append(land.times[key] / best)
    return found


def _share(ratios: list[float], within: float) -> float:
    return sum(1 for r in ratios if r <= 1 + within) / len(ratios)


def summary(chosen: list[float], within: float, reached: list[float] | None = None) -> dict[str, float]:
    """Share of the processes whose choice is within ``within`` of the true best, median and
    p90 of the choice's ratio; the share whose search measured such a configuration."""
    row = {"within": _share(chosen, within), **_median_p90(chosen)}
    return row if reached is None else {**row, "reached": _share(reached, within)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    key_arguments(parser)
    parser.add_argument("--processes", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1, help="the strategy's seed (every process)")
    parser.add_argument("--noise-seed", type=int, default=0, help="seeds the processes' noise")
    parser.add_argument("--bias", type=float, default=0.007,
                        help="per-process bias of each configuration, log-normal sd (0.007)")
    parser.add_argument("--noise", type=float, default=0.003,
                        help="per-measurement noise, log-normal sd (0.003)")
    parser.add_argument("--evals", type=int, nargs="*", default=[300], help="budgets in evaluations")
    parser.add_argument("--budgets", type=float, nargs="*", default=[0.02, 0.05, 0.10],
                        help="budgets as fractions of the configurations")
    parser.add_argument("--strategies", nargs="+", default=["local", "annealing"])
    parser.add_argument("--within", type=float, default=0.01)
    parser.add_argument("--top", type=int, default=3, help="the reference row's N (0: none)")
    parser.add_argument("--order", nargs="+", default=[],
                        help="parameter order as the template declares it")
    parser.add_argument("--first", type=json.loads,
                        help="a configuration measured before each strategy (the test= parameters)")
    parser.add_argument("--json")
    args = parser.parse_args()
    _, _, key, trials = recorded_key(args)
    space = reordered(recorded_space(trials), args.order)
    land = landscape(trials, space)
    n = len(land.times)
    budgets = [(f"{e}", e) for e in args.evals] + [(f"{f:.0%}", max(1, round(f * n))) for f in args.budgets]
    print(f"{key.function} on {key.device_name} {key.arguments}: {n} configurations, best "
          f"{land.best_score * 1e3:.4f} ms; {args.processes} processes, seed {args.seed}, bias "
          f"{args.bias:.2%}, noise {args.noise:.2%}")
    print(f"| budget | evals | strategy | chosen within {args.within:.0%} | median true/best | p90 | "
          f"measured one within {args.within:.0%} |\n|---|---|---|---|---|---|---|")
    rows = []
    if args.top:
        rows.append({"budget": "-", "evals": args.top, "strategy": f"top-{args.top}",
                     **summary(top(land, args.top, args), args.within)})
    for label, evals in budgets:
        for name in args.strategies:
            chosen, reached = processes(land, name, evals, args)
            rows.append({"budget": label, "evals": evals, "strategy": name,
                         **summary(chosen, args.within, reached)})
    for row in rows:
        print(f"| {row['budget']} | {row['evals']} | {row['strategy']} | "
              f"{round(row['within'] * args.processes)}/{args.processes} | {row['median']:.3f} | "
              f"{row['p90']:.3f} | " + (f"{round(row['reached'] * args.processes)}/{args.processes} |"
                                        if "reached" in row else "- |"))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d"), "function": key.function, "device": key.device_name,
             "arguments": key.arguments, "configurations": n, "settings": vars(args), "rows": rows},
            indent=1, default=str))


if __name__ == "__main__":
    main()
