"""Host time of a locked ``tuner.measure(queue)``: what online tuning adds to every launch once
it has chosen. Compares ``with tuner.measure(queue) as params: pass`` with a ``with`` over a
no-op context manager (the cost of the statement itself), best of 5 runs of N iterations.
No device work is timed: a locked tuner touches neither the device nor the database.

Usage: python benchmarks/online_overhead.py [--iterations 1000000]
"""

from __future__ import annotations

import argparse
import platform
import time
from typing import Any, Callable

from autotune import accel, tune


class _NoOp:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def _per_with(make: Callable[[], Any], iterations: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            with make():
                pass
        best = min(best, (time.perf_counter() - start) / iterations)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1_000_000)
    args = parser.parse_args()
    context = accel.create_some_context()
    queue = context.create_command_queue(timed=True)
    tuner = tune.OnlineTuner(context, "benchmarks.online_overhead", {"wgs": [64]}, {"wgs": 64},
                             samples=1, db="sqlite://")  # an in-memory database
    while tuner.best is None:  # one candidate, one sample: the scan is one empty launch
        with tuner.measure(queue):
            pass
    measure = tuner.measure
    noop = _NoOp()
    plain = _per_with(lambda: noop, args.iterations)
    locked = _per_with(lambda: measure(queue), args.iterations)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"device {context.device.name}")
    print(f"with over a no-op context manager:  {plain * 1e9:6.0f} ns")
    print(f"with tuner.measure(queue), locked:  {locked * 1e9:6.0f} ns")
    print(f"added by the tuner:                 {(locked - plain) * 1e9:6.0f} ns per launch")


if __name__ == "__main__":
    main()
