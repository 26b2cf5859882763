"""Host time of a locked ``tuner.measure(queue)``: what online tuning adds to every launch once
it has chosen. Compares ``with tuner.measure(queue) as params: pass`` with a ``with`` over a
no-op context manager (the cost of the statement itself), best of 5 runs of N iterations.
No device work is timed: a locked tuner touches neither the device nor the database.

With ``--baseline DIR`` (another checkout of autotune, e.g. ``git worktree add /tmp/base
COMMIT``) the measurement runs in fresh processes, ``--rounds`` times for this checkout and the
baseline in turn (A B A B ...), and the medians of both are printed side by side.

Usage: python benchmarks/online_overhead.py [--iterations 1000000] [--baseline DIR [--rounds 5]]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, {repo!r})
    from autotune import accel, tune

    class NoOp:
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return None

    def per_with(make, iterations):
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(iterations):
                with make():
                    pass
            best = min(best, (time.perf_counter() - start) / iterations)
        return best

    context = accel.create_some_context()
    queue = context.create_command_queue(timed=True)
    tuner = tune.OnlineTuner(context, "benchmarks.online_overhead", {{"wgs": [64]}}, {{"wgs": 64}},
                             samples=1, db="sqlite://")  # an in-memory database
    while tuner.best is None:  # one candidate, one sample: the scan is one empty launch
        with tuner.measure(queue):
            pass
    measure = tuner.measure
    noop = NoOp()
    plain = per_with(lambda: noop, {iterations})
    locked = per_with(lambda: measure(queue), {iterations})
    print(json.dumps({{"plain": plain, "locked": locked, "device": context.device.name}}))
""")


def _run(repo: Path, iterations: int) -> dict:
    child = subprocess.run([sys.executable, "-c", CHILD.format(repo=str(repo), iterations=iterations)],
                           capture_output=True, text=True, check=True, cwd=repo)
    return json.loads(child.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1_000_000)
    parser.add_argument("--baseline", metavar="DIR",
                        help="another checkout of autotune, measured alternately with this one")
    parser.add_argument("--rounds", type=int, default=5,
                        help="fresh processes per checkout with --baseline")
    args = parser.parse_args()
    checkouts = [("this checkout", REPO)]
    if args.baseline:
        checkouts.append(("baseline", Path(args.baseline).resolve()))
    rounds = args.rounds if args.baseline else 1
    runs: dict[str, list[dict]] = {name: [] for name, _ in checkouts}
    for _ in range(rounds):
        for name, repo in checkouts:
            runs[name].append(_run(repo, args.iterations))
    device = runs["this checkout"][0]["device"]
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"device {device}" + (f", median of {rounds} processes each" if rounds > 1 else ""))
    for name, _ in checkouts:
        plain = statistics.median(r["plain"] for r in runs[name])
        locked = statistics.median(r["locked"] for r in runs[name])
        spread = [(r["locked"] - r["plain"]) * 1e9 for r in runs[name]]
        print(f"{name}:")
        print(f"  with over a no-op context manager:  {plain * 1e9:6.0f} ns")
        print(f"  with tuner.measure(queue), locked:  {locked * 1e9:6.0f} ns")
        print(f"  added by the tuner:                 {(locked - plain) * 1e9:6.0f} ns per launch"
              + (f" (runs {min(spread):.0f}-{max(spread):.0f} ns)" if rounds > 1 else ""))


if __name__ == "__main__":
    main()
