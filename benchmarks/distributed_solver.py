"""Solvers on several GPUs: time to solution of the distributed Wilson operator.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_solver.py
    --dims X Y Z T --grid PX PY PZ PT [--kappa 0.2 ...] [--tol 1e-10] [--reconstruct 12]
    [--transport auto|peer|host] [--methods cg bicgstab gcr-schwarz] [--block BX BY BZ BT]
    [--recurrence auto|classic|single_reduction|pipelined ...]
    [--inner-iterations 10 ...] [--inner-precision half] [--nkrylov 16] [--delta 0.1 ...]
    [--sloppy single half] [--policy overlap ...] [--repeat 1] [--profile] [--json FILE]

One rank per GPU (``rank_context``). The right-hand side is one global Gaussian field (the
same for every grid, so 1 and N GPUs solve the same system); each rank takes its block. The
even-odd system M_pc x_e = b_e + kappa D_eo b_o is solved at the device level, as
``WilsonOperator.solve`` runs it: "cg" is CG on the normal equations in single precision with
reliable updates in double (``solvers.cg_mixed``, to a tenth of ``--tol`` on the normal
equations, as ``solve`` asks; ``--sloppy half``: in half precision, 16-bit links and fields
between the dslashes, 16-bit faces; several values run each), "bicgstab" mixed BiCGstab on M_pc (``solvers.bicgstab_mixed``),
"gcr-schwarz" double precision flexible GCR on M_pc preconditioned by additive Schwarz with
``--block`` blocks (default: each rank's part; the preconditioner communicates nothing) and
``--inner-iterations`` MR steps in ``--inner-precision``, restarted every ``--nkrylov`` steps,
"gcr-schwarz-mixed" the same GCR in single precision with reliable updates in double whenever
the residual has fallen by ``--delta`` (``solvers.gcr_mixed``). Each is timed from the first
kernel to the last, every rank synchronised before and after, host conversions excluded, after one
warm-up solve of a few iterations (builds and tuning out of the way). Strong scaling: run the
same ``--dims`` with ``-n 1 --grid 1 1 1 1`` and with N ranks. ``--repeat N`` times each solve N times and reports the median (every
time is in the JSON). ``--policy``: how each dslash meets its exchange
(``DistributedWilsonOperator``'s ``policy``, default overlap); several run each solve once per
policy, all in one process. ``--profile``: after the timed solves, one more solve inside the
range a CUDA profiler started with ``--profile-from-start off`` records (one solve setting only;
``benchmarks/solve_kernels.py`` runs it under Nsight Compute). Several ``--kappa`` values run
every method at each (the links are the same); several ``--inner-iterations`` and ``--delta``
(and ``--nkrylov``) values run the GCR methods once per combination, all in one process.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from autotune import parallel
from operations import solvers
from operations.lqcd import DistributedWilsonOperator, haar_field
from operations.lqcd.distributed import rank_context
from operations.lqcd.schwarz import SchwarzPreconditioner

from timing import profiled, ranks_time


METHODS = ("cg", "bicgstab", "gcr-schwarz", "gcr-schwarz-mixed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs=4, required=True)
    parser.add_argument("--grid", type=int, nargs=4, required=True)
    # Haar links: kappa 0.2 needs a hundred iterations or so (66 at 8^4 for 0.18, 261 for 0.22),
    # enough that the solve, not its setup, is timed
    parser.add_argument("--kappa", type=float, nargs="+", default=[0.2])
    parser.add_argument("--tol", type=float, default=1e-10)
    parser.add_argument("--reconstruct", type=int, default=12)
    parser.add_argument("--transport", default="auto", choices=["auto", "peer", "host"])
    parser.add_argument("--methods", nargs="+", default=["cg"], choices=METHODS)
    parser.add_argument("--recurrence", nargs="+", default=["auto"],
                        choices=["auto", *solvers.CG_RECURRENCES],
                        help="CG's recurrences, each run (auto: the solver's choice, "
                             "single_reduction across ranks)")
    parser.add_argument("--block", type=int, nargs=4,
                        help="Schwarz blocks (default: each rank's part)")
    parser.add_argument("--inner-iterations", type=int, nargs="+", default=[10])
    parser.add_argument("--inner-precision", default="half")
    parser.add_argument("--sloppy", nargs="+", default=["single"], choices=["single", "half"],
                        help="the mixed solvers' sloppy precisions, each run")
    parser.add_argument("--nkrylov", type=int, nargs="+", default=[16])
    parser.add_argument("--delta", type=float, nargs="+", default=[0.1])
    parser.add_argument("--repeat", type=int, default=1,
                        help="time each solve this many times; the median is reported")
    parser.add_argument("--graphs", nargs="+", default=["auto"], choices=["auto", "off"],
                        help="record each dslash once and launch it again (CUDA graphs): "
                             "auto where possible, off never; each setting solved in turn")
    parser.add_argument("--policy", nargs="+", default=["overlap"],
                        choices=list(DistributedWilsonOperator.POLICIES) + ["tuned"])
    parser.add_argument("--profile", action="store_true",
                        help="one more solve in the profiler's range (one solve setting only)")
    parser.add_argument("--json")
    args = parser.parse_args()
    settings = (len(args.kappa) * len(args.graphs) * len(args.policy) * len(args.sloppy)
                * len(args.methods) * len(args.recurrence))
    if args.profile and settings != 1:
        parser.error(f"--profile records one solve setting, got {settings}: give one value each "
                     "of --kappa, --graphs, --policy, --sloppy, --methods and --recurrence")
    comm = MPI.COMM_WORLD
    context = rank_context(comm)
    dims = tuple(args.dims)
    u = haar_field(dims, seed=3)
    x, y, z, t = dims
    rng = np.random.default_rng(11)
    b = (rng.standard_normal((t, z, y, x, 4, 3), dtype=np.float32)
         + 1j * rng.standard_normal((t, z, y, x, 4, 3), dtype=np.float32))
    result: dict[str, Any] = {
        "device": context.device.describe(), "ranks": comm.size, "dims": list(dims),
        "grid": list(args.grid), "kappa": args.kappa, "tol": args.tol,
        "reconstruct": args.reconstruct, "inner_iterations": args.inner_iterations,
        "inner_precision": args.inner_precision, "sloppy": args.sloppy, "nkrylov": args.nkrylov, "delta": args.delta,
        "date": time.strftime("%Y-%m-%d"), "runs": []}
    for kappa, graphs, policy in ((k, g, p) for k in args.kappa for g in args.graphs
                                  for p in args.policy):
        high = DistributedWilsonOperator(comm, context, u, kappa, tuple(args.grid), "double",
                                         args.reconstruct, check=False, transport=args.transport,
                                         graphs=None if graphs == "auto" else False,
                                         policy=policy)
        result.update(local=list(high.partition.local), transport=high.transport.name)
        block = tuple(args.block) if args.block else high.partition.local
        result["block"] = list(block)
        field = high.to_device(b)
        for row in (r for sloppy in args.sloppy
                    for r in _runs(args, comm, high, field, block, sloppy)):
            row["kappa"] = kappa
            row["policy"] = policy
            row["graphs"] = high.recordings is not None
            result["runs"].append(row)
            if comm.rank == 0:  # each as it finishes: a run cut short keeps what it measured
                inner = (f" ({row['inner_iterations']} inner, {row['inner_steps']} per step, "
                         f"nkrylov {row['nkrylov']}, delta {row['delta']}, "
                         f"{row['reliable_updates']} updates)"
                         if row["inner_iterations"] else "")
                print(f"{comm.size} rank(s), {dims} over {tuple(args.grid)}, "
                      f"{high.transport.name} transport, policy {policy}"
                      f"{', dslashes recorded' if row['graphs'] else ''}"
                      f" ({row['recorded']} recorded, {row['launched']} launched)"
                      f", kappa {kappa}: "
                      f"{row['method']}"
                      f"{'' if row['method'] == 'gcr-schwarz' else ' (double-' + row['sloppy'] + ')'}"
                      f"{' (' + row['recurrence'] + ')' if row['recurrence'] else ''} "
                      f"{row['iterations']} iterations{inner} in {row['seconds']:.3f} s "
                      f"(median of {len(row['seconds_all'])}: "
                      f"{min(row['seconds_all']):.3f}-{max(row['seconds_all']):.3f}) "
                      f"(true residual {row['true_residual']:.1e})", flush=True)
    if comm.rank == 0:
        print(json.dumps(result))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))


def _runs(args: argparse.Namespace, comm: Any, high: DistributedWilsonOperator, field: Any,
          block: tuple[int, ...], sloppy: str) -> Iterator[dict[str, Any]]:
    """Each requested solve at ``high``'s kappa with ``sloppy`` the mixed solvers' low
    precision, timed after a warm-up: one row per method, and per (inner iterations, delta)
    for the GCR methods."""
    low = high.with_precision(sloppy)
    # the even-odd system M_pc x_e = b_e + kappa D_eo b_o: CG on its normal equations, BiCGstab
    # and GCR on it directly
    rhs = high.context.allocate(12 * high.lattice.half_volume, high.dtype)
    high.dslash_parity(rhs, field.odd, 0, x=field.even, a=high.kappa)
    rhs_n = high.context.allocate(rhs.size, high.dtype)
    high.apply_pc_dagger(rhs, out=rhs_n)
    normal = high.linear_operator("MpcdagMpc"), low.linear_operator("MpcdagMpc")
    direct = high.linear_operator("Mpc"), low.linear_operator("Mpc")
    blocks = None
    for method in args.methods:
        gcr = method.startswith("gcr")
        settings = ([(n, d, k, None) for n in args.inner_iterations for k in args.nkrylov
                     for d in (args.delta if method.endswith("mixed") else args.delta[:1])]
                    if gcr else [(0, 0.0, 0, None if r == "auto" else r) for r in args.recurrence]
                    if method == "cg" else [(0, 0.0, 0, None)])
        for inner_steps, delta, nkrylov, recurrence in settings:
            K = None
            if gcr:
                # the Schwarz preconditioner on the outer solver's vectors (its block operator
                # made and its MR step tuned once)
                blocks = blocks or high.with_domain(block, args.inner_precision).linear_operator(
                    "Mpc")
                K = SchwarzPreconditioner(direct[1 if method.endswith("mixed") else 0], blocks,
                                          inner_steps)
            solve = _solver(method, args, normal, direct, rhs, rhs_n, K, delta, nkrylov,
                            recurrence)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the short warm-up stops early
                solve(5)  # warm-up: builds, tuning
            inner_before, pre_before = (K.inner_iterations, K.seconds) if K else (0, 0.0)
            recorded_before = _recorded(high, low)
            solved = []
            times = [ranks_time(comm, high.queue, lambda: solved.append(solve(20000)[1]))
                     for _ in range(args.repeat)]
            recorded = [a - b for a, b in zip(_recorded(high, low), recorded_before)]
            if args.profile:
                comm.Barrier()
                with profiled(high.queue):
                    solve(20000)
            seconds = float(np.median(times))
            info = solved[0]
            yield {"method": method, "sloppy": sloppy, "converged": bool(info.converged),
                   "recurrence": (solvers.check_recurrence(normal[0], recurrence)
                                  if method == "cg" else None),
                   "iterations": info.iterations, "true_residual": info.true_residual,
                   "seconds": seconds, "seconds_all": times,
                   "seconds_per_iteration": seconds / max(info.iterations, 1),
                   "inner_steps": inner_steps, "delta": delta, "nkrylov": nkrylov,
                   "inner_iterations": (K.inner_iterations - inner_before) // args.repeat if K else 0,
                   "preconditioner_seconds": (K.seconds - pre_before) / args.repeat if K else 0.0,
                   "reliable_updates": info.reliable_updates,
                   # dslashes recorded and launched from recordings in the timed solves
                   "recorded": recorded[0], "launched": recorded[1]}


def _recorded(*ops: DistributedWilsonOperator) -> tuple[int, int]:
    """The dslashes the operators recorded and launched from recordings so far."""
    return (sum(op.recordings.recorded for op in ops if op.recordings is not None),
            sum(op.recordings.launched for op in ops if op.recordings is not None))


def _solver(method: str, args: argparse.Namespace, normal: tuple[Any, Any],
            direct: tuple[Any, Any], rhs: Any, rhs_n: Any, K: SchwarzPreconditioner | None,
            delta: float, nkrylov: int,
            recurrence: str | None = None) -> Callable[[int], tuple[Any, Any]]:
    """``solve(maxiter)`` for ``method`` (CG on the normal equations to a tenth of ``--tol``,
    as ``WilsonOperator.solve`` asks; ``recurrence`` CG's)."""
    if method == "cg":
        return lambda maxiter: solvers.cg_mixed(*normal, rhs_n, args.tol * 0.1, maxiter=maxiter,
                                                recurrence=recurrence)
    if method == "bicgstab":
        return lambda maxiter: solvers.bicgstab_mixed(*direct, rhs, args.tol, maxiter=maxiter)
    if method == "gcr-schwarz":
        return lambda maxiter: solvers.gcr(direct[0], rhs, args.tol, maxiter, nkrylov,
                                           preconditioner=K)
    return lambda maxiter: solvers.gcr_mixed(*direct, rhs, args.tol, maxiter, nkrylov,
                                             preconditioner=K, delta=delta)


if __name__ == "__main__":
    with parallel.abort_on_error():  # a rank that raises ends every rank, with its rank number
        main()
