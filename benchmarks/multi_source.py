"""Several sources solved together (``WilsonOperator.solve_many``: CG in lockstep, each dslash
one launch for every source) against the same sources solved one after another
(``WilsonOperator.solve``), one run.

Usage (GPU machine, from benchmarks/):
    python multi_source.py [--dims 32 32 32 32] [--precision mixed] [--sloppy half]
        [--reconstruct 12] [--sources 1 4 12] [--kappa 0.12] [--tol 1e-10] [--db FILE]
        [--json FILE]

Per N of ``--sources``: N Gaussian sources; first ``solve_many`` with ``maxiter`` 2 (which
tunes the multi-RHS dslash's key for N, or reads it from ``--db``), then the N sources one by
one with ``solve`` and all together with ``solve_many``, each timed by wall clock around the
call (host checks included, as a user sees them), and the linear solvers alone
(``info.solver_seconds``). Reports seconds, iterations and the speed-ups.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import WilsonOperator, weak_field

from example_db import use_database


def add_solve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the solve timed (this script's and ``solve_profile.py``'s)."""
    parser.add_argument("--dims", type=int, nargs=4, default=[32, 32, 32, 32])
    parser.add_argument("--precision", default="mixed", choices=["mixed", "single", "double"])
    parser.add_argument("--sloppy", default="half", choices=["half", "single"])
    parser.add_argument("--reconstruct", type=int, default=12)
    parser.add_argument("--kappa", type=float, default=0.12)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--db")
    parser.add_argument("--json")


def solve_setup(args: argparse.Namespace) -> tuple[accel.Context, WilsonOperator, dict, tuple]:
    """The database (``--db``, else a copy of tune.db.example), the device, the Wilson operator
    of ``args``, the solve's precision options and a host spinor's shape."""
    use_database(args.db)
    context = accel.create_some_context()
    dims = tuple(args.dims)
    mixed = args.precision == "mixed"
    op = WilsonOperator(context, weak_field(dims, 0.3, seed=1), args.kappa,
                        "double" if mixed else args.precision, args.reconstruct, check=False)
    how = {"precision": "mixed", "sloppy": args.sloppy} if mixed else {}
    x, y, z, t = dims
    return context, op, how, (t, z, y, x, 4, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_solve_arguments(parser)
    parser.add_argument("--sources", type=int, nargs="+", default=[1, 4, 12])
    args = parser.parse_args()
    context, op, how, shape = solve_setup(args)
    dims, mixed = tuple(args.dims), args.precision == "mixed"
    rng = np.random.default_rng(2)
    print(f"device: {context.device.describe()}  date: {time.strftime('%Y-%m-%d')}  "
          f"{args.precision}{f' ({args.sloppy})' if mixed else ''} {args.reconstruct}, {dims}, "
          f"kappa {args.kappa}, tol {args.tol}")
    print("| sources | one by one s | together s | speed-up | solver one by one s | solver "
          "together s | solver speed-up | iterations (one / together) |\n"
          "|---|---|---|---|---|---|---|---|")
    rows = []
    for n in args.sources:
        bs = [rng.standard_normal(shape) + 1j * rng.standard_normal(shape) for _ in range(n)]
        with warnings.catch_warnings():  # warm-ups (kernels built, keys read or tuned): cut short
            warnings.simplefilter("ignore", RuntimeWarning)
            op.solve(bs[0], "cg", args.tol, maxiter=2, **how)
            op.solve_many(bs, args.tol, maxiter=2, **how)
        start = time.perf_counter()
        alone = [op.solve(b, "cg", args.tol, **how)[1] for b in bs]
        one_by_one = time.perf_counter() - start
        start = time.perf_counter()
        together = [info for _, info in op.solve_many(bs, args.tol, **how)]
        batched = time.perf_counter() - start
        assert all(i.converged for i in alone + together)
        # the linear solvers alone (info.solver_seconds: from the solver's first kernel to its
        # solution; together, every source's counts from the same start)
        solver_alone = sum(i.solver_seconds for i in alone)
        solver_together = max(i.solver_seconds for i in together)
        row = {"sources": n, "one_by_one_s": one_by_one, "together_s": batched,
               "speedup": one_by_one / batched, "solver_one_by_one_s": solver_alone,
               "solver_together_s": solver_together,
               "solver_speedup": solver_alone / solver_together,
               "iterations_alone": [i.iterations for i in alone],
               "iterations_together": [i.iterations for i in together],
               "true_residual_together": max(i.true_residual for i in together)}
        rows.append(row)
        print(f"| {n} | {one_by_one:.3f} | {batched:.3f} | {row['speedup']:.2f}x | "
              f"{solver_alone:.4f} | {solver_together:.4f} | {row['solver_speedup']:.2f}x | "
              f"{max(row['iterations_alone'])} / {max(row['iterations_together'])} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
            "dims": dims, "precision": args.precision, "sloppy": args.sloppy if mixed else None,
            "reconstruct": args.reconstruct,
            "kappa": args.kappa, "tol": args.tol, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
