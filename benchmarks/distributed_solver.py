"""Mixed-precision CG on several GPUs: time to solution of the distributed Wilson operator.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_solver.py
    --dims X Y Z T --grid PX PY PZ PT [--kappa 0.2] [--tol 1e-10] [--reconstruct 12]
    [--transport auto|peer|host] [--json FILE]

One rank per GPU (``rank_context``). The right-hand side is one global Gaussian field (the
same for every grid, so 1 and N GPUs solve the same system); each rank takes its block. The
solve is the device-level even-odd CG on M_pc^dag M_pc in single precision with reliable
updates in double (``solvers.cg_mixed``, as ``solve(..., precision="mixed")`` runs it), to a
relative residual ``--tol`` of the normal equations; it is timed from the first kernel to the
last, every rank synchronised before and after, host conversions excluded, after one warm-up
solve of a few iterations (builds and tuning out of the way). Strong scaling: run the same
``--dims`` with ``-n 1 --grid 1 1 1 1`` and with N ranks.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

from operations import solvers
from operations.lqcd import DistributedWilsonOperator, haar_field
from operations.lqcd.distributed import rank_context
from operations.lqcd.wilson import WilsonLinearOperator

from timing import ranks_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs=4, required=True)
    parser.add_argument("--grid", type=int, nargs=4, required=True)
    # Haar links: kappa 0.2 needs a hundred iterations or so (66 at 8^4 for 0.18, 261 for 0.22),
    # enough that the solve, not its setup, is timed
    parser.add_argument("--kappa", type=float, default=0.2)
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--reconstruct", type=int, default=12)
    parser.add_argument("--transport", default="auto", choices=["auto", "peer", "host"])
    parser.add_argument("--json")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    context = rank_context(comm)
    dims = tuple(args.dims)
    u = haar_field(dims, seed=3)  # the timing does not depend on the links' values
    high = DistributedWilsonOperator(comm, context, u, args.kappa, tuple(args.grid), "double",
                                     args.reconstruct, check=False, transport=args.transport)
    low = high.with_precision("single")
    del u
    x, y, z, t = dims
    rng = np.random.default_rng(11)
    b = (rng.standard_normal((t, z, y, x, 4, 3), dtype=np.float32)
         + 1j * rng.standard_normal((t, z, y, x, 4, 3), dtype=np.float32))
    rhs = high.to_device(b).even
    del b
    A, A_low = WilsonLinearOperator(high, "MpcdagMpc"), WilsonLinearOperator(low, "MpcdagMpc")
    solvers.cg_mixed(A, A_low, rhs, args.tol, maxiter=20)  # warm-up: builds, tuning
    solved = []
    seconds = ranks_time(comm, high.queue,
                         lambda: solved.append(solvers.cg_mixed(A, A_low, rhs, args.tol)[1]))
    info = solved[0]
    result = {"device": context.device.describe(), "ranks": comm.size, "dims": list(dims),
              "grid": list(args.grid), "local": list(high.partition.local),
              "kappa": args.kappa, "tol": args.tol, "reconstruct": args.reconstruct,
              "transport": high.transport.name, "converged": bool(info.converged),
              "iterations": info.iterations, "seconds": seconds,
              "seconds_per_iteration": seconds / max(info.iterations, 1),
              "date": time.strftime("%Y-%m-%d")}
    if comm.rank == 0:
        print(json.dumps(result))
        print(f"{comm.size} rank(s), {dims} over {tuple(args.grid)}, {high.transport.name} "
              f"transport: mixed CG {info.iterations} iterations in {seconds:.3f} s "
              f"({seconds / max(info.iterations, 1) * 1e3:.3f} ms per iteration)")
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
