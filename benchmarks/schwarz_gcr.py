"""GCR with the Schwarz preconditioner against mixed CG and mixed BiCGstab, one GPU.

Usage (GPU machine): AUTOTUNE_DB=<a copy of tune.db.example> python benchmarks/schwarz_gcr.py
    [--dims 32 32 32 32] [--kappa 0.22] [--blocks 8,8,8,8 16,16,16,16 32,32,32,32]
    [--inner-iterations 10] [--inner-precision half] [--json FILE]

``WilsonOperator.solve`` to a true residual of 1e-10 on Haar-random links (12 parameters,
antiperiodic in time), even-odd: mixed CG (normal equations, single sloppy with reliable
updates in double; and half sloppy), mixed BiCGstab (single sloppy), and double precision
flexible GCR (16 steps between restarts) preconditioned by additive Schwarz with the given
blocks (``inner_iterations`` MR steps in ``inner_precision`` on the block system). Each solve
runs once to build and tune, then is timed: ``info.solver_seconds``, the linear solver from
its first kernel to its solution (the right-hand side's setup, the odd sites and the host-side
check that ``info.seconds`` also counts are left out); the true residual of M x = b is
recomputed in double precision.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import WilsonOperator, haar_field


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs=4, default=[32, 32, 32, 32])
    parser.add_argument("--kappa", type=float, default=0.22)
    parser.add_argument("--blocks", nargs="+", default=["8,8,8,8", "16,16,16,16", "32,32,32,32"])
    parser.add_argument("--inner-iterations", type=int, default=10)
    parser.add_argument("--inner-precision", default="half")
    parser.add_argument("--json")
    args = parser.parse_args()
    context = accel.create_some_context()
    dims = tuple(args.dims)
    op = WilsonOperator(context, haar_field(dims, seed=4), args.kappa, "double", 12, check=False)
    x, y, z, t = dims
    rng = np.random.default_rng(1)
    b = rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
    runs = [("mixed CG (single)", {"method": "cg", "precision": "mixed"}),
            ("mixed CG (half)", {"method": "cg", "precision": "mixed", "sloppy": "half"}),
            ("mixed BiCGstab (single)", {"method": "bicgstab", "precision": "mixed"})]
    for text in args.blocks:
        block = tuple(int(v) for v in text.split(","))
        runs.append((f"GCR-Schwarz {'x'.join(map(str, block))}",
                     {"method": "gcr", "preconditioner": "schwarz", "block": block,
                      "inner_iterations": args.inner_iterations,
                      "inner_precision": args.inner_precision}))
    rows = []
    for label, kwargs in runs:
        op.solve(b, tol=1e-10, maxiter=20000, **kwargs)  # build and tune
        _, info = op.solve(b, tol=1e-10, maxiter=20000, **kwargs)
        row = {"solver": label, "converged": info.converged, "iterations": info.iterations,
               "inner_iterations": info.inner_iterations, "seconds": info.solver_seconds,
               "whole_solve_seconds": info.seconds,
               "preconditioner_seconds": info.preconditioner_seconds,
               "true_residual": info.true_residual, "reliable_updates": info.reliable_updates}
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"device": context.device.describe(), "dims": list(dims), "kappa": args.kappa,
              "date": time.strftime("%Y-%m-%d"), "rows": rows}
    print(f"\n{result['device']}, {dims}, kappa {args.kappa}, {result['date']}")
    print("| solver | iterations (inner) | seconds | in the preconditioner | true residual |")
    print("|---|---|---|---|---|")
    for r in rows:
        inner = f" ({r['inner_iterations']})" if r["inner_iterations"] else ""
        print(f"| {r['solver']} | {r['iterations']}{inner} | {r['seconds']:.3f} | "
              f"{r['preconditioner_seconds']:.3f} | {r['true_residual']:.1e} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
