"""Run by tests/test_distributed.py under ``mpiexec -n N``: the distributed Wilson operator on
``--grid`` against the single-process one, on every rank; rank 0 prints one JSON line. One
launch may check several cases of its rank count (``--cases``): starting ranks and building
their kernels is most of a launch's time.

Each rank runs in the test mode of the pytest plugin (templates use their ``test=`` parameters,
nothing is tuned or stored), as the test that starts it does.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
from mpi4py import MPI

from autotune import parallel, tune
from autotune.tune.serving import serving

test_mode = serving().test
from operations.lqcd import WilsonOperator, haar_field
from operations.lqcd.distributed import DistributedWilsonOperator, rank_context
from operations.lqcd.dslash import DslashTemplate

test_mode.active = True


CASE_OPTIONS = {"t_boundary": -1, "reconstruct": 18, "precision": "double", "policy": "overlap",
                "transport": "auto", "solves": ["cg_eo", "cg", "bicgstab_eo", "cg_eo_mixed"],
                "tuning": None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", type=int, nargs=4)
    parser.add_argument("--grid", type=int, nargs=4)
    parser.add_argument("--cases", metavar="JSON",
                        help="several cases in one launch: a JSON list of objects with dims, "
                             "grid and any of " + ", ".join(CASE_OPTIONS) + " (rank 0 prints "
                             "one list of the ranks' results per case)")
    parser.add_argument("--t-boundary", type=int, default=CASE_OPTIONS["t_boundary"])
    parser.add_argument("--reconstruct", type=int, default=CASE_OPTIONS["reconstruct"])
    parser.add_argument("--precision", default=CASE_OPTIONS["precision"])
    parser.add_argument("--policy", default=CASE_OPTIONS["policy"])
    parser.add_argument("--transport", default=CASE_OPTIONS["transport"])
    parser.add_argument("--solves", nargs="*", default=CASE_OPTIONS["solves"])
    parser.add_argument("--tune-policy", action="store_true",
                        help="policy tuned (collectively) into AUTOTUNE_DB, as outside tests")
    parser.add_argument("--store-per-rank", metavar="DIR",
                        help="tune on a miss as outside tests, each rank into DIR/rank<r>.db, "
                             "and solve with GCR-Schwarz: which ranks tuned what")
    parser.add_argument("--max-evals", type=int,
                        help="candidates each template's search times, where templates are tuned "
                             "(--tune-policy, --store-per-rank): who tunes is what those runs "
                             "check, not how well")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    with tune.search_settings(max_evals=args.max_evals, batches=1 if args.max_evals else None):
        if args.store_per_rank:
            tuned_per_rank(args)
            return
        if args.tune_policy:
            args.policy = "tuned"
            test_mode.cached = True  # tune on a miss and store, into the test's database
        context = rank_context(comm)  # one GPU a rank; the CPU device shared
        if args.cases:
            cases = [{**CASE_OPTIONS, **case} for case in json.loads(args.cases)]
        else:
            if args.dims is None or args.grid is None:
                parser.error("--dims and --grid (or --cases) are needed")
            cases = [{name: getattr(args, name, CASE_OPTIONS.get(name))  # tuning: a case's only
                      for name in ("dims", "grid", *CASE_OPTIONS)}]
        problems = [Problem(case) for case in cases]
        # the distributed operators first: a transport that cannot be had stops the run here
        many = [DistributedWilsonOperator(comm, context, p.u, p.kappa, p.grid, case["precision"],
                                          case["reconstruct"], case["t_boundary"],
                                          tuning=block_tuning(context, p, case),
                                          policy=case["policy"], transport=case["transport"],
                                          graphs=case.get("graphs"))
                for p, case in zip(problems, cases)]
        single = single_process_results(comm, context, problems)
        everyone = [comm.gather(compare(comm, context, *args))
                    for args in zip(problems, many, single)]
    if comm.rank == 0:
        print(json.dumps(everyone if args.cases else everyone[0]))
    sys.stdout.flush()


def block_tuning(context, problem: "Problem", case: dict) -> dict | None:
    """The block's dslash parameters: the test ones with the case's "tuning" over them (None,
    without: the operator asks its template as outside tests)."""
    if not case["tuning"]:
        return None
    base = DslashTemplate.autotune(context, problem.local, case["precision"], case["reconstruct"])
    return {**base, **case["tuning"]}


class Problem:
    """A case's global fields (the same on every rank) and the options of its solves."""

    def __init__(self, case: dict):
        self.case = case
        self.dims, self.grid = tuple(case["dims"]), tuple(case["grid"])
        self.u = haar_field(self.dims, seed=5)
        rng = np.random.default_rng(9)
        x, y, z, t = self.dims
        self.psi = (rng.standard_normal((t, z, y, x, 4, 3))
                    + 1j * rng.standard_normal((t, z, y, x, 4, 3)))
        self.kappa = 0.11
        self.tol = 1e-10 if case["precision"] == "double" else 1e-5
        self.local = tuple(n // g for n, g in zip(self.dims, self.grid))  # every rank's block

    def solve_options(self, label: str) -> tuple[tuple, dict]:
        method, *rest = label.split("_")
        # Schwarz blocks of one rank's part, half precision inner solves: on one process
        # the same blocks (each rank's part), with one MR step length for all of them
        extra = ({"preconditioner": "schwarz", "block": self.local, "inner_iterations": 6,
                  "inner_precision": "half"} if "schwarz" in rest else {})
        if method == "gcr":  # a basis of 8: fewer multi-vector passes for every rank to
            extra["nkrylov"] = 8  # compile than the default 16, and nothing less across ranks
        if "half" in rest:  # the sloppy operator in 16 bits (across ranks: 16-bit faces)
            extra["sloppy"] = "half"
        if method == "cg":  # both sides run the same recurrence: across ranks its default
            extra["cg_recurrence"] = next((r for r in ("classic", "pipelined") if r in rest),
                                          "single_reduction")
        return (method, self.tol, "eo" in rest, "mixed" if "mixed" in rest else None), extra


OPERATORS = ("dslash", "apply", "apply_dagger", "apply_pc", "apply_pc_dagger", "apply_pc_normal")


def single_process_results(comm, context, problems: list[Problem]) -> list[dict]:
    """Per case, what the single-process operator gives: each operator applied to psi
    ("operators") and each solve's solution and counts, on every rank.

    The single-process operator is the same on every rank (the same global fields, the same
    kind of device), so its work is shared out instead of repeated on each: per case, the
    operators with the double precision solves, the mixed ones and the Schwarz ones (each
    group builds its own kernels) go to the ranks in turn, at most one rank a core (ranks
    that share the cores of a CPU device would only slow each other). The others wait asleep
    (a test, then a short sleep): a blocking MPI call polls hard, and a spinning rank slows the
    ranks that work."""
    workers = max(1, min(comm.size, os.cpu_count() or 1))
    jobs = []
    for i, problem in enumerate(problems):
        groups: dict[str, list[str]] = {"double": ["operators"], "mixed": [], "schwarz": []}
        for label in problem.case["solves"]:
            groups["schwarz" if "schwarz" in label else "mixed" if "mixed" in label
                   else "double"].append(label)
        jobs += [(i, pieces) for pieces in groups.values() if pieces]
    mine: dict = {}
    for i, pieces in jobs[comm.rank::workers] if comm.rank < workers else ():
        problem = problems[i]
        case = problem.case
        one = WilsonOperator(context, problem.u, problem.kappa, case["precision"],
                             case["reconstruct"], case["t_boundary"])
        for piece in pieces:
            if piece == "operators":
                mine[i, piece] = {name: getattr(one, name)(problem.psi) for name in OPERATORS}
                continue
            positional, extra = problem.solve_options(piece)
            with warnings.catch_warnings():
                warnings.simplefilter("error", RuntimeWarning)
                x1, info = one.solve(problem.psi, *positional, **extra)
            mine[i, piece] = (x1, info.iterations, info.inner_iterations, info.true_residual)
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.01)
    results: list[dict] = [{} for _ in problems]
    for part in comm.allgather(mine):
        for (i, piece), value in part.items():
            results[i][piece] = value
    return results


def compare(comm, context, problem: Problem, many: DistributedWilsonOperator,
            single: dict) -> dict:
    """One case on this rank: the distributed operator ``many`` against the single-process
    one's results (``single``, from :func:`single_process_results`)."""
    case, psi = problem.case, problem.psi
    want = single["operators"]
    scale = float(np.max(np.abs(psi)))
    result: dict = {"rank": comm.rank, "size": comm.size, "local": list(many.partition.local),
                    "device": context.device.describe(),
                    "transport": many.transport.name,
                    "description": many.transport.description}
    for name in OPERATORS:
        result[name] = float(np.max(np.abs(getattr(many, name)(psi) - want[name]))) / scale
    result["kernels_alone"] = kernels_alone(many, psi)
    result["dir_split"] = many.template.parameters["dir_split"]
    result["face_elements"] = many.face_elements
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for label in case["solves"]:
            positional, extra = problem.solve_options(label)
            # the global answer written into the caller's array (NaN first: every entry is)
            into = np.full(psi.shape, np.nan, dtype=np.complex128)
            xs, info = many.solve(psi, *positional, out=into, **extra)
            x1, iterations, inner_iterations, true_residual = single[label]
            result[label] = {"iterations": [info.iterations, iterations],
                             "inner_iterations": [info.inner_iterations, inner_iterations],
                             "true_residual": [info.true_residual, true_residual],
                             "difference": float(np.max(np.abs(xs - x1)) / np.max(np.abs(x1))),
                             "into_out": xs is into}
    result["repeated"] = repeated_dslash(many, psi)
    recordings = many.recordings
    result["recordings"] = None if recordings is None else {
        "recorded": recordings.recorded, "launched": recordings.launched,
        "failed": recordings.failed}
    if any("schwarz" in label for label in case["solves"]):
        # a block that spans two ranks' parts is refused by name, on every rank
        wide = tuple(2 * n if g > 1 else n for n, g in zip(many.partition.local, problem.grid))
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
        got = many.dslash(psi)  # locked now
        result["policy"] = {"best": tuner.best, "scans": tuner.scans, "launches": launches,
                            "stored": tuner.stored,
                            "after": float(np.max(np.abs(got - want["dslash"]))) / scale}
    return result


def repeated_dslash(many: DistributedWilsonOperator, psi: np.ndarray) -> float:
    """The same dslash on the same arrays four times (a key comes again in each exchange phase,
    so where dslashes are recorded the later calls are recorded and launched): how far the
    last result is from the first (relative)."""
    field = many.to_device(psi)
    out = many.new_field()
    many.dslash_parity(out.even, field.odd, 0)
    first = out.even.get(many.queue)
    for _ in range(3):
        many.dslash_parity(out.even, field.odd, 0)
    return float(np.max(np.abs(out.even.get(many.queue) - first))) / float(np.max(np.abs(first)))


def kernels_alone(many: DistributedWilsonOperator, psi: np.ndarray) -> float:
    """How far the dslash kernels run apart from the exchange are from the dslash (D_eo psi_o
    on this rank's block, relative): after one exchange, "all" the sites alone, "interior"
    then "exterior" together (the exterior on a queue of its own), and the "fused" launch
    (twice: its ticket counter starts each launch from 0 again), each against
    ``dslash_parity`` (which exchanges itself)."""
    field = many.to_device(psi)
    want = many.new_field()
    many.dslash_parity(want.even, field.odd, 0)
    expected = want.even.get(many.queue)
    many.exchange(field.odd, 1)
    whole, parts, fused, again = (many.new_field() for _ in range(4))
    many.dslash_kernel(whole.even, field.odd, 0)()
    parts.even.zero(many.queue)
    many.dslash_kernel(parts.even, field.odd, 0, "interior")()
    # the interior update leaves the boundary sites (the exterior update's) alone
    sites, count = many._boundary[0]
    boundary = sites.get(many.queue)[:count]
    if np.any(parts.even.get(many.queue).reshape(12, -1)[:, boundary]):
        return float("inf")
    # the exterior update on a queue of its own (as policy "overlap" runs it), after the interior
    other = many.context.create_command_queue()
    other.wait_for_queue(many.queue)
    many.dslash_kernel(parts.even, field.odd, 0, "exterior", queue=other)()
    many.queue.wait_for_queue(other)
    many.dslash_kernel(fused.even, field.odd, 0, "fused")()
    many.dslash_kernel(again.even, field.odd, 0, "fused")()
    scale = float(np.max(np.abs(expected)))
    return max(float(np.max(np.abs(got.even.get(many.queue) - expected))) / scale
               for got in (whole, parts, fused, again))


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
                            block=many.partition.local, inner_iterations=4, inner_precision="half",
                            nkrylov=8)  # (as in solve_options)
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
    # a rank that raises ends every rank with its error and rank number, however it was
    # started (python SCRIPT or python -m mpi4py SCRIPT)
    with parallel.abort_on_error():
        main()
