"""Run by tests/test_distributed.py under ``mpiexec -n N``: the distributed Wilson operator on
``--grid`` against the single-process one, on every rank; rank 0 prints one JSON line.

Each rank runs in the test mode of the pytest plugin (templates use their ``test=`` parameters,
nothing is tuned or stored), as the test that starts it does.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

import numpy as np
from mpi4py import MPI

from autotune.tune.decorator import test_mode
from operations.lqcd import WilsonOperator, haar_field
from operations.lqcd.distributed import DistributedWilsonOperator, rank_context

test_mode.active = True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", type=int, nargs=4, required=True)
    parser.add_argument("--grid", type=int, nargs=4, required=True)
    parser.add_argument("--t-boundary", type=int, default=-1)
    parser.add_argument("--reconstruct", type=int, default=18)
    parser.add_argument("--precision", default="double")
    parser.add_argument("--policy", default="overlap")
    parser.add_argument("--transport", default="auto")
    parser.add_argument("--solves", nargs="*", default=["cg_eo", "cg", "bicgstab_eo", "cg_eo_mixed"])
    parser.add_argument("--tune-policy", action="store_true",
                        help="policy tuned (collectively) into AUTOTUNE_DB, as outside tests")
    parser.add_argument("--store-per-rank", metavar="DIR",
                        help="tune on a miss as outside tests, each rank into DIR/rank<r>.db, "
                             "and solve with GCR-Schwarz: which ranks tuned what")
    args = parser.parse_args()
    if args.store_per_rank:
        tuned_per_rank(args)
        return
    if args.tune_policy:
        args.policy = "tuned"
        test_mode.cached = True  # tune on a miss and store, into the test's database
    comm = MPI.COMM_WORLD
    context = rank_context(comm)  # one device per rank where there are enough
    dims = tuple(args.dims)
    u = haar_field(dims, seed=5)
    rng = np.random.default_rng(9)
    x, y, z, t = dims
    psi = rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
    kappa = 0.11
    one = WilsonOperator(context, u, kappa, args.precision, args.reconstruct, args.t_boundary)
    many = DistributedWilsonOperator(comm, context, u, kappa, tuple(args.grid), args.precision,
                                     args.reconstruct, args.t_boundary, policy=args.policy,
                                     transport=args.transport)
    scale = float(np.max(np.abs(psi)))
    result: dict = {"rank": comm.rank, "size": comm.size, "local": list(many.partition.local),
                    "device": context.device.describe(),
                    "transport": many.transport.name}
    for name in ("dslash", "apply", "apply_dagger", "apply_pc", "apply_pc_dagger"):
        got, want = getattr(many, name)(psi), getattr(one, name)(psi)
        result[name] = float(np.max(np.abs(got - want))) / scale
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for label in args.solves:
            method, *rest = label.split("_")
            even_odd = "eo" in rest
            precision = "mixed" if "mixed" in rest else None
            tol = 1e-10 if args.precision == "double" else 1e-5
            # Schwarz blocks of one rank's part, half precision inner solves: on one process
            # the same blocks (each rank's part), with one MR step length for all of them
            extra = ({"preconditioner": "schwarz", "block": many.partition.local,
                      "inner_iterations": 6, "inner_precision": "half"}
                     if "schwarz" in rest else {})
            xs, info = many.solve(psi, method, tol, even_odd, precision, **extra)
            x1, info1 = one.solve(psi, method, tol, even_odd, precision, **extra)
            result[label] = {"iterations": [info.iterations, info1.iterations],
                             "inner_iterations": [info.inner_iterations, info1.inner_iterations],
                             "true_residual": [info.true_residual, info1.true_residual],
                             "difference": float(np.max(np.abs(xs - x1)) / np.max(np.abs(x1)))}
    if any("schwarz" in label for label in args.solves):
        # a block that spans two ranks' parts is refused by name, on every rank
        wide = tuple(2 * n if g > 1 else n for n, g in zip(many.partition.local, args.grid))
        try:
            many.solve(psi, "gcr", 1e-8, True, preconditioner="schwarz", block=wide)
            result["schwarz_refusal"] = None
        except ValueError as exc:
            result["schwarz_refusal"] = str(exc)
    if many.policy_tuner is not None:
        tuner = many.policy_tuner
        field = many.to_device(psi)
        out = many.new_field()
        launches = 0
        while tuner.scanning and launches < 400:
            many.dslash_parity(out.even, field.odd, 0)
            launches += 1
        got, want = many.dslash(psi), one.dslash(psi)  # locked now
        result["policy"] = {"best": tuner.best, "scans": tuner.scans, "launches": launches,
                            "stored": tuner.stored, "after": float(np.max(np.abs(got - want))) / scale}
    everyone = comm.gather(result)
    if comm.rank == 0:
        print(json.dumps(everyone))
    sys.stdout.flush()


def tuned_per_rank(args: argparse.Namespace) -> None:
    """A mixed GCR-Schwarz solve (half precision inner solves) and a mixed BiCGstab one, every
    template tuned on a miss, each rank with its own database: rank 0 prints, per rank, the
    functions its database holds afterwards and the solves' results."""
    from pathlib import Path

    from autotune.tune.store import ResultStore, use_database

    test_mode.cached = True
    comm = MPI.COMM_WORLD
    context = rank_context(comm)
    dims = tuple(args.dims)
    rng = np.random.default_rng(9)
    x, y, z, t = dims
    psi = rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
    db = Path(args.store_per_rank) / f"rank{comm.rank}.db"
    with use_database(db):
        many = DistributedWilsonOperator(comm, context, haar_field(dims, seed=5), 0.11,
                                         tuple(args.grid), "double", args.reconstruct,
                                         args.t_boundary)
        _, gcr = many.solve(psi, "gcr", 1e-10, True, "mixed", preconditioner="schwarz",
                            block=many.partition.local, inner_iterations=4, inner_precision="half")
        _, bicg = many.solve(psi, "bicgstab", 1e-10, True, "mixed")
    comm.Barrier()
    functions = sorted({r.key.function for r in ResultStore.open(db).records()}) if db.exists() else []
    result = {"rank": comm.rank, "functions": functions,
              "gcr": [gcr.iterations, gcr.inner_iterations, gcr.true_residual],
              "bicgstab": [bicg.iterations, bicg.true_residual]}
    everyone = comm.gather(result)
    if comm.rank == 0:
        print(json.dumps(everyone))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
