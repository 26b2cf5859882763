"""Every two- (or N-) GPU figure of the "Many GPUs" targets in one run, with the scaling worked
out: the distributed dslash's policies in several processes (the spread between runs is large),
one GPU at the block's size (weak scaling) and at the whole lattice's (strong scaling), and the
mixed CG's time to solution with each recurrence on one GPU and on N.

Usage (the GPU machine, after ../shared/device's setup with mpi4py and mpich):
    python benchmarks/many_gpus.py --out DIR [--gpus 2] [--runs 3] [--db tune.db]
        [--dims 32 32 32 32] [--solver] [--part all|dslash|solver] [--tune-first]

``--dims`` is one GPU's block; the lattice is cut in t over ``--gpus`` GPUs. Each step is one
``mpiexec`` of ``distributed_dslash.py`` or ``distributed_solver.py`` (their JSON files and logs
go to DIR); the summary (``summary.json`` and a Markdown table on the screen) takes, per policy,
the median and the best of the runs' medians. Weak scaling is one GPU's dslash at the block
over N GPUs' at N blocks; strong scaling one GPU's at the whole lattice over N GPUs'.
``--part dslash`` or ``--part solver`` runs one half (``summary_dslash.json`` or
``summary_solver.json``), so that each fits a command's time limit on large lattices (the
mixed CG at 48^3 x 96 on one GPU, with its dslash keys tuned first, is minutes on its own).
``--tune-first`` tunes the dslash keys of the block and the lattice (single precision; with
the solver double and half too) on all the GPUs at once before the runs (four H200s: 6 keys
at 48^3 in 44 s), into ``--db``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
POLICIES = ("overlap", "overlap_in_order", "fused")


@functools.cache
def mpiexec() -> str:
    """The mpiexec the tests use (found once)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from processes import mpiexec as found

    return found()


def run(command: list[str], log: Path, env: dict, timeout: float) -> int:
    with log.open("w") as out:
        try:
            return subprocess.run(command, cwd=HERE, stdout=out, stderr=subprocess.STDOUT,
                                  env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            out.write(f"\n(timed out after {timeout:g} s)\n")
            return 124


def dslash(out: Path, env: dict, ranks: int, dims: list[int], grid: list[int], tag: str,
           policies: tuple[str, ...]) -> dict[str, float] | None:
    """One distributed_dslash.py run: seconds per policy (None where it failed)."""
    path = out / f"dslash_{tag}.json"
    command = [mpiexec(), "-n", str(ranks), sys.executable, "distributed_dslash.py",
               "--dims", *map(str, dims), "--grid", *map(str, grid), "--policy", *policies,
               "--rounds", "3", "--json", str(path)]
    if run(command, out / f"dslash_{tag}.log", env, 300) != 0 or not path.exists():
        return None
    return json.loads(path.read_text())[0]["dslash_seconds_by_policy"]


def solver(out: Path, env: dict, ranks: int, dims: list[int], grid: list[int],
           tag: str) -> dict[str, float] | None:
    """One distributed_solver.py run of the mixed CG with each recurrence, double-single and
    double-half, recorded and not: seconds each ("classic/half+graph" and so on)."""
    path = out / f"cg_{tag}.json"
    command = [mpiexec(), "-n", str(ranks), sys.executable, "distributed_solver.py",
               "--dims", *map(str, dims), "--grid", *map(str, grid), "--kappa", "0.2",
               "--recurrence", "classic", "single_reduction", "pipelined", "--graphs", "auto", "off",
               "--sloppy", "single", "half", "--json", str(path)]
    if run(command, out / f"cg_{tag}.log", env, 540) != 0 or not path.exists():
        return None
    return {f"{row['recurrence']}/{row['sloppy']}" + "+graph" * row["graphs"]: row["seconds"]
            for row in json.loads(path.read_text())["runs"]}


def tune_first(out: Path, env: dict, gpus: int, dims: list[list[int]],
               precisions: tuple[str, ...], devices: str = "cuda") -> None:
    """Tune the dslash keys the runs will ask for (each of ``dims`` in each precision, 12
    parameters) on the ``gpus`` GPUs at once, into ``env``'s AUTOTUNE_DB, before anything is
    timed: ``warm --recorded`` of a record file written here for this machine's GPU (the
    runs' ranks would otherwise each search their keys at first use, with a full search)."""
    from autotune import accel
    from autotune.tune.misses import record_line
    from autotune.tune.registry import registered_templates

    context = accel.select_devices(devices)[0].create_context()
    dslash = next(t for t in registered_templates() if t.name == "wilson_dslash")
    records = out / "dslash_keys.jsonl"
    records.write_text("".join(
        record_line(dslash.key(context, {"dims": tuple(d), "precision": p, "reconstruct": 12}),
                    "missed") for d in dims for p in precisions))
    command = [sys.executable, "-m", "autotune", "warm", "--all-devices", "--device", devices,
               "--jobs", str(gpus), "--recorded", str(records), "--max-evals",
               "wilson_dslash=24", "--quiet"]
    if run(command, out / "dslash_keys.log", env, 540) != 0:
        sys.exit(f"tuning the dslash keys failed: {out / 'dslash_keys.log'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--gpus", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3, help="N-GPU dslash processes")
    parser.add_argument("--db", help="AUTOTUNE_DB for every step (default: as set)")
    parser.add_argument("--dims", type=int, nargs=4, default=[32, 32, 32, 32])
    parser.add_argument("--solver", action="store_true", help="the mixed CG too")
    parser.add_argument("--part", choices=("all", "dslash", "solver"), default="all",
                        help="the dslash's runs, the solver's (implies --solver) or both")
    parser.add_argument("--tune-first", action="store_true",
                        help="tune the dslash keys of the block and the lattice on every GPU "
                             "at once first (warm --recorded; --db should be set)")
    args = parser.parse_args()
    args.solver = args.solver or args.part == "solver"
    args.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    if args.db:
        env["AUTOTUNE_DB"] = str(Path(args.db).resolve())
    n = args.gpus
    block = list(args.dims)
    whole = block[:3] + [block[3] * n]
    one, cut = [1, 1, 1, 1], [1, 1, 1, n]
    if args.tune_first:
        tune_first(args.out, env, n, [block, whole],
                   ("double", "single", "half") if args.solver else ("single",))
    summary: dict = {"date": time.strftime("%Y-%m-%d"), "gpus": n, "block": block, "lattice": whole}
    dslashes = args.part != "solver"
    summary["one_gpu_block"] = (dslash(args.out, env, 1, block, one, "1_block", ("overlap",))
                                if dslashes else None)
    summary["one_gpu_lattice"] = (dslash(args.out, env, 1, whole, one, "1_lattice", ("overlap",))
                                  if dslashes else None)
    runs = [dslash(args.out, env, n, whole, cut, f"{n}_run{i}", POLICIES)
            for i in range(args.runs if dslashes else 0)]
    summary["runs"] = runs
    good = [r for r in runs if r]
    t_block = (summary["one_gpu_block"] or {}).get("overlap")
    t_whole = (summary["one_gpu_lattice"] or {}).get("overlap")
    rows = []
    for policy in [p + g for p in POLICIES for g in ("", "+graph")]:
        times = [r[policy] for r in good if policy in r]
        if not times:
            continue
        median, best = statistics.median(times), min(times)
        row = {"policy": policy, "median_us": median * 1e6, "best_us": best * 1e6,
               "all_us": [t * 1e6 for t in times]}
        if t_block and t_whole:
            row.update(weak_median=t_block / median, weak_best=t_block / best,
                       strong_median=t_whole / median, strong_best=t_whole / best)
        rows.append(row)
    summary["policies"] = rows
    if args.solver:
        cg_one = solver(args.out, env, 1, whole, one, "1")
        cg_n = solver(args.out, env, n, whole, cut, str(n))
        summary["cg"] = {"one_gpu": cg_one, f"{n}_gpus": cg_n,
                         "strong": {k: cg_one[k.split("+")[0]] / t for k, t in (cg_n or {}).items()
                                    if cg_one and k.split("+")[0] in cg_one}}
    name = "summary.json" if args.part == "all" else f"summary_{args.part}.json"
    (args.out / name).write_text(json.dumps(summary, indent=1))
    if dslashes:
        print_dslash(t_block, t_whole, rows)
    if args.solver:
        print(f"mixed CG seconds, one GPU {summary['cg']['one_gpu']}, {n} GPUs "
              f"{summary['cg'][f'{n}_gpus']}, strong scaling {summary['cg']['strong']}")


def print_dslash(t_block: float | None, t_whole: float | None, rows: list[dict]) -> None:
    """The dslash's table: each policy's median and best, weak and strong scaling."""
    print(f"one GPU: block {t_block and t_block * 1e6:.1f} us, lattice "
          f"{t_whole and t_whole * 1e6:.1f} us" if t_block and t_whole else "one GPU: failed")
    print("| policy | median | best | runs | weak (median / best) | strong (median / best) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        scaling = (f"{row['weak_median']:.1%} / {row['weak_best']:.1%} | "
                   f"{row['strong_median']:.2f}x / {row['strong_best']:.2f}x"
                   if "weak_median" in row else "- | -")
        print(f"| {row['policy']} | {row['median_us']:.1f} us | {row['best_us']:.1f} us | "
              f"{', '.join(f'{t:.1f}' for t in row['all_us'])} | {scaling} |")


if __name__ == "__main__":
    main()
