"""Solvers on several GPUs: time to solution of the distributed Wilson operator.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_solver.py
    --dims X Y Z T --grid PX PY PZ PT [--kappa 0.2] [--tol 1e-10] [--reconstruct 12]
    [--transport auto|peer|host] [--methods cg bicgstab gcr-schwarz] [--block BX BY BZ BT]
    [--inner-iterations 10] [--inner-precision half] [--nkrylov 16] [--delta 0.1] [--json FILE]

One rank per GPU (``rank_context``). The right-hand side is one global Gaussian field (the
same for every grid, so 1 and N GPUs solve the same system); each rank takes its block. The
even-odd system M_pc x_e = b_e + kappa D_eo b_o is solved at the device level, as
``WilsonOperator.solve`` runs it: "cg" is CG on the normal equations in single precision with
reliable updates in double (``solvers.cg_mixed``, to a tenth of ``--tol`` on the normal
equations, as ``solve`` asks), "bicgstab" mixed BiCGstab on M_pc (``solvers.bicgstab_mixed``),
"gcr-schwarz" double precision flexible GCR on M_pc preconditioned by additive Schwarz with
``--block`` blocks (default: each rank's part; the preconditioner communicates nothing) and
``--inner-iterations`` MR steps in ``--inner-precision``, restarted every ``--nkrylov`` steps,
"gcr-schwarz-mixed" the same GCR in single precision with reliable updates in double whenever
the residual has fallen by ``--delta`` (``solvers.gcr_mixed``). Each is timed from the first
kernel to the last, every rank synchronised before and after, host conversions excluded, after one
warm-up solve of a few iterations (builds and tuning out of the way). Strong scaling: run the
same ``--dims`` with ``-n 1 --grid 1 1 1 1`` and with N ranks.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
from mpi4py import MPI

from operations import solvers
from operations.lqcd import DistributedWilsonOperator, haar_field
from operations.lqcd.distributed import rank_context
from operations.lqcd.schwarz import SchwarzPreconditioner
from operations.lqcd.wilson import WilsonLinearOperator

from timing import ranks_time


METHODS = ("cg", "bicgstab", "gcr-schwarz", "gcr-schwarz-mixed")


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
    parser.add_argument("--methods", nargs="+", default=["cg"], choices=METHODS)
    parser.add_argument("--block", type=int, nargs=4,
                        help="Schwarz blocks (default: each rank's part)")
    parser.add_argument("--inner-iterations", type=int, default=10)
    parser.add_argument("--inner-precision", default="half")
    parser.add_argument("--nkrylov", type=int, default=16)
    parser.add_argument("--delta", type=float, default=0.1)
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
    field = high.to_device(b)
    del b
    block = tuple(args.block) if args.block else high.partition.local
    # the even-odd system M_pc x_e = b_e + kappa D_eo b_o: CG on its normal equations, BiCGstab
    # and GCR on it directly
    rhs = high.context.allocate(12 * high.lattice.half_volume, high.dtype)
    high.dslash_parity(rhs, field.odd, 0, x=field.even, a=high.kappa)
    rhs_n = high.context.allocate(rhs.size, high.dtype)
    high.apply_pc_dagger(rhs, out=rhs_n)
    normal = WilsonLinearOperator(high, "MpcdagMpc"), WilsonLinearOperator(low, "MpcdagMpc")
    direct = WilsonLinearOperator(high, "Mpc"), WilsonLinearOperator(low, "Mpc")
    preconditioners: dict[int, SchwarzPreconditioner] = {}

    def schwarz(outer: int) -> SchwarzPreconditioner:
        """The Schwarz preconditioner on ``direct[outer]``'s vectors, made (and its block
        operator and MR step tuned) only when a run asks for it."""
        if outer not in preconditioners:
            blocks = WilsonLinearOperator(high.with_domain(block, args.inner_precision), "Mpc")
            preconditioners[outer] = SchwarzPreconditioner(direct[outer], blocks,
                                                           args.inner_iterations)
        return preconditioners[outer]

    solves = {
        "cg": lambda maxiter: solvers.cg_mixed(*normal, rhs_n, args.tol * 0.1, maxiter=maxiter),
        "bicgstab": lambda maxiter: solvers.bicgstab_mixed(*direct, rhs, args.tol, maxiter=maxiter),
        "gcr-schwarz": lambda maxiter: solvers.gcr(direct[0], rhs, args.tol, maxiter,
                                                   args.nkrylov, preconditioner=schwarz(0)),
        "gcr-schwarz-mixed": lambda maxiter: solvers.gcr_mixed(
            *direct, rhs, args.tol, maxiter, args.nkrylov, preconditioner=schwarz(1),
            delta=args.delta),
    }
    result = {"device": context.device.describe(), "ranks": comm.size, "dims": list(dims),
              "grid": list(args.grid), "local": list(high.partition.local),
              "kappa": args.kappa, "tol": args.tol, "reconstruct": args.reconstruct,
              "transport": high.transport.name, "block": list(block),
              "inner_iterations": args.inner_iterations, "inner_precision": args.inner_precision,
              "nkrylov": args.nkrylov, "delta": args.delta, "date": time.strftime("%Y-%m-%d"), "methods": {}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the short warm-up does not converge
        for method in args.methods:
            solves[method](5)  # warm-up: builds, tuning
            K = (schwarz(1 if method.endswith("mixed") else 0) if method.startswith("gcr")
                 else None)
            inner_before, pre_before = (K.inner_iterations, K.seconds) if K else (0, 0.0)
            solved = []
            seconds = ranks_time(comm, high.queue, lambda: solved.append(solves[method](20000)[1]))
            info = solved[0]
            result["methods"][method] = {
                "converged": bool(info.converged), "iterations": info.iterations,
                "true_residual": info.true_residual, "seconds": seconds,
                "seconds_per_iteration": seconds / max(info.iterations, 1),
                "inner_iterations": K.inner_iterations - inner_before if K else 0,
                "preconditioner_seconds": K.seconds - pre_before if K else 0.0,
                "reliable_updates": info.reliable_updates}
            if comm.rank == 0:  # each as it finishes: a run cut short keeps what it measured
                r = result["methods"][method]
                inner = f" ({r['inner_iterations']} inner)" if r["inner_iterations"] else ""
                print(f"{comm.size} rank(s), {dims} over {tuple(args.grid)}, "
                      f"{high.transport.name} transport: {method} {r['iterations']} "
                      f"iterations{inner} in {r['seconds']:.3f} s (true residual "
                      f"{r['true_residual']:.1e})", flush=True)
    if comm.rank == 0:
        print(json.dumps(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
