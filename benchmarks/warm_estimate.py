"""How right is ``warm``'s estimate of the time left (issue 44, "An ETA that is right")?

Runs ``python -m autotune warm`` (the README's main command; every argument after ``--`` goes
to it, e.g. ``-- --device cuda``) in this process, keeping each key's plan (expected seconds)
and actual seconds in tuning order, then replays the estimator over them: at 5, 10, 20, 30 and
50% of the keys, and after 10% of the keys' time (as ``warm``'s closing line judges it), the
estimate of the time left (the :class:`~autotune.cli.warm_plan.Estimator`
fed the keys before, in order) against the actual time the keys after took. ``--replay FILE``
replays a saved run instead (of this or an earlier estimator), without tuning; ``--json FILE``
saves the run's keys. Each template's actual over expected is printed too.

Usage:
  AUTOTUNE_DB=/tmp/fresh.db python benchmarks/warm_estimate.py --json run.json -- --device cuda
  python benchmarks/warm_estimate.py --replay run.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import autotune.cli.warm as warm_module  # noqa: E402
from autotune.cli.warm_plan import Estimator, KeyPlan  # noqa: E402

POINTS = (0.05, 0.1, 0.2, 0.3, 0.5)


def run_warm(arguments: list[str]) -> tuple[int, list[dict]]:
    """``warm`` with these arguments; its keys (template, plan, expected, actual) in order."""
    from autotune.cli.main import main

    made: list[Estimator] = []

    class Kept(Estimator):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    warm_module.Estimator = Kept  # warm_device makes one per device
    try:
        status = main(["warm", *arguments])
    finally:
        warm_module.Estimator = Estimator
    rows = [{"template": p.template, "plan": p.text(), "expected": p.seconds,
             "actual": estimator.actual.get(i)}
            for estimator in made for i, p in enumerate(estimator.plans)]
    return status, rows


def _replayed(rows: list[dict]) -> tuple[list[dict], Estimator]:
    """The keys that finished, and an estimator of their plans (each row's expected seconds)."""
    rows = [r for r in rows if r["actual"] is not None]
    plans = [KeyPlan(r["template"], 1, None, None, "replay", seconds_per_trial=r["expected"] / 2)
             for r in rows]  # one evaluation and the baseline: 2 trials
    return rows, Estimator(plans, clock=lambda: 0.0)


def replay(rows: list[dict]) -> list[tuple[float, int, float, float]]:
    """(share, keys done, estimated left, actual left) at each of :data:`POINTS`."""
    rows, estimator = _replayed(rows)
    points = {max(1, round(share * len(rows))): share for share in POINTS}
    out = []
    for k, row in enumerate(rows):
        if k in points:
            out.append((points[k], k, estimator.remaining(), sum(r["actual"] for r in rows[k:])))
        estimator.start(k)
        estimator.finish(k, row["actual"])
    return out


def replay_by_time(rows: list[dict], share: float = 0.1) -> tuple[int, float, float]:
    """As ``warm``'s closing line judges it: after ``share`` of the run's time (the keys'
    actual seconds added up; the first key that ends past it), (keys done, estimated left,
    actual left)."""
    rows, estimator = _replayed(rows)
    total = sum(r["actual"] for r in rows)
    spent = 0.0
    for k, row in enumerate(rows):
        if spent >= share * total:
            return k, estimator.remaining(), total - spent
        estimator.start(k)
        estimator.finish(k, row["actual"])
        spent += row["actual"]
    return len(rows), 0.0, 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replay", metavar="FILE", help="a saved run's keys, not a new run")
    parser.add_argument("--json", metavar="FILE", help="save the run's keys here")
    parser.add_argument("warm", nargs="*", help="arguments of warm (after --)")
    args = parser.parse_args()
    status = 0
    if args.replay:
        rows = json.loads(Path(args.replay).read_text())
    else:
        status, rows = run_warm(args.warm)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        if r["actual"] is not None:
            t = totals[r["template"]]
            t[0], t[1], t[2] = t[0] + 1, t[1] + r["expected"], t[2] + r["actual"]
    print("| template | keys | expected | actual | ratio |\n|---|---|---|---|---|")
    for name, (n, expected, actual) in totals.items():
        print(f"| {name} | {n} | {expected:.1f} s | {actual:.1f} s | "
              f"{actual / expected if expected else float('nan'):.2f} |")
    print("\n| share of keys | keys done | estimated left | actual left | error |\n|---|---|---|---|---|")
    for share, k, estimated, actual in replay(rows):
        print(f"| {share:.0%} | {k} | {estimated:.1f} s | {actual:.1f} s | "
              f"{estimated / actual - 1:+.0%} |")
    k, estimated, actual = replay_by_time(rows)
    if actual > 0:
        print(f"| 10% of the time | {k} | {estimated:.1f} s | {actual:.1f} s | "
              f"{estimated / actual - 1:+.0%} |")
    return status


if __name__ == "__main__":
    sys.exit(main())
