"""Where a Wilson solve's wall time goes on the host: Python's profile of one solve, after a
first solve has built and tuned everything.

Usage (GPU machine, from benchmarks/, ``PYTHONPATH`` the checkout):
    python solve_profile.py [--dims 32 32 32 32] [--precision mixed] [--sloppy half]
        [--reconstruct 12] [--sources 1] [--tol 1e-10] [--db FILE] [--top 25] [--json FILE]

One solve (``WilsonOperator.solve``, or ``solve_many`` with ``--sources`` above 1) of Gaussian
sources runs first untimed, then again under ``cProfile``. Printed: the call's wall time, the
solver's own (``info.solver_seconds``: the iterations, without the host's copies and checks),
and the functions with the most time of their own (``tottime``) and the most in all (``cumtime``):
a wait for the device shows as the time of the call that waits (a copy to the host, a reduction's
result), Python's own work as the time of the launches. ``--json`` keeps the figures and the rows.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
import warnings
from pathlib import Path

import numpy as np

from multi_source import add_solve_arguments, solve_setup


def profile_rows(stats: pstats.Stats, key: str, top: int) -> list[dict]:
    """The ``top`` functions by ``key`` ("tottime" or "cumtime")."""
    rows = []
    for (path, line, name), (calls, _, own, total, _) in stats.stats.items():
        rows.append({"function": f"{Path(path).name}:{line}({name})", "calls": calls,
                     "tottime": own, "cumtime": total})
    rows.sort(key=lambda r: -r[key])
    return rows[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_solve_arguments(parser)
    parser.add_argument("--sources", type=int, default=1)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    context, op, how, shape = solve_setup(args)
    dims = tuple(args.dims)
    rng = np.random.default_rng(2)
    bs = [rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
          for _ in range(args.sources)]

    def solve() -> list:
        if args.sources == 1:
            return [op.solve(bs[0], tol=args.tol, **how)]
        return op.solve_many(bs, tol=args.tol, **how)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        solve()  # builds, tunes or reads every kernel's parameters
        profiler = cProfile.Profile()
        started = time.perf_counter()
        profiler.enable()
        answers = solve()
        profiler.disable()
        wall = time.perf_counter() - started
    solver = sum(info.solver_seconds for _, info in answers)
    print(f"device: {context.device.describe()}  date: {time.strftime('%Y-%m-%d')}  "
          f"{args.precision} ({args.sloppy}) {args.reconstruct}, {dims}, {args.sources} "
          f"source(s), tol {args.tol}")
    print(f"wall {wall:.4f} s under the profiler, the solvers' own {solver:.4f} s, "
          f"iterations {[info.iterations for _, info in answers]}")
    stats = pstats.Stats(profiler, stream=io.StringIO())
    result = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
              "dims": dims, "sources": args.sources, "wall_s": wall, "solver_s": solver}
    for key in ("tottime", "cumtime"):
        rows = profile_rows(stats, key, args.top)
        result[key] = rows
        print(f"\n| by {key} | calls | tottime s | cumtime s |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['function']} | {r['calls']} | {r['tottime']:.4f} | {r['cumtime']:.4f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
