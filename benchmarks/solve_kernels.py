"""Where a solve's GPU time goes: every kernel of one solve timed by Nsight Compute, against the
solve's wall time, on each rank.

Usage (GPU machine with ncu, from the checkout; ``PYTHONPATH`` the checkout):
    python benchmarks/solve_kernels.py [--ranks N] [--ncu ncu] [--out DIR] [--json FILE] \\
        -- --dims 32 32 32 64 --grid 1 1 1 N --kappa 0.2 --sloppy half [--repeat 3] ...

The options after ``--`` are ``distributed_solver.py``'s, for one solve setting (one value each
of ``--kappa``, ``--sloppy``, ``--methods``, ``--recurrence``, ``--policy``, ``--graphs``). The
script runs it twice with N ranks under mpiexec: as it is (the solve's wall time, the median of
its ``--repeat``), then under ncu (``--profile-from-start off``, clocks left to the driver), where
``--profile`` puts one more solve in the profiler's range and each kernel's
``gpu__time_duration`` is recorded. Printed per rank: the kernels by name (the parity in the
name folded: ``_p0``/``_p1`` as ``_pX``), their launches, microseconds in all and per iteration
and share; then their sum per iteration against the wall time per iteration. What the sum does
not cover is time when no kernel of the solve ran: the host's waits for sums and its launches,
a neighbour's faces awaited. Under ncu kernels run one at a time, so kernels that overlap in a
real solve (the faces' packing beside the interior update) count in full: there the gap is a
lower bound.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from many_gpus import mpiexec

HERE = Path(__file__).resolve().parent
METRIC = "gpu__time_duration.sum"


def kernel_times(log: str) -> list[tuple[str, float]]:
    """(kernel name, nanoseconds) of each profiled launch in an ncu ``--csv --page raw`` log (the
    tool's own lines, which do not start with a quote, and the units row left out)."""
    table = [line for line in log.splitlines() if line.startswith('"')]
    if not table:
        return []
    rows = list(csv.DictReader(io.StringIO("\n".join(table))))
    out = []
    for row in rows:
        value = (row.get(METRIC) or "").replace(",", "")
        if row.get("Kernel Name") and re.fullmatch(r"[0-9.]+", value):
            out.append((row["Kernel Name"], float(value)))
    return out


def by_name(times: list[tuple[str, float]]) -> dict[str, dict[str, float]]:
    """Launches and nanoseconds per kernel name, the parity folded (``_p0``/``_p1`` -> ``_pX``)."""
    table: dict[str, dict[str, float]] = defaultdict(lambda: {"launches": 0, "ns": 0.0})
    for name, ns in times:
        row = table[re.sub(r"_p[01](?=_|$)", "_pX", name.split("(")[0])]
        row["launches"] += 1
        row["ns"] += ns
    return dict(sorted(table.items(), key=lambda kv: -kv[1]["ns"]))


def run(command: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=HERE)
    if done.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed ({done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--out", help="keep the logs here (default: a temporary folder)")
    parser.add_argument("--json")
    parser.add_argument("solver", nargs=argparse.REMAINDER,
                        help="-- then distributed_solver.py's options")
    args = parser.parse_args()
    solver = [a for a in args.solver if a != "--"]
    out = Path(args.out or tempfile.mkdtemp())
    out.mkdir(parents=True, exist_ok=True)
    launcher = [mpiexec(), "-n", str(args.ranks)]
    script = [sys.executable, str(HERE / "distributed_solver.py"), *solver]
    plain = run(launcher + script + ["--json", str(out / "plain.json")])
    (out / "plain.log").write_text(plain.stdout + plain.stderr)
    timed = json.loads((out / "plain.json").read_text())["runs"][0]
    profiler = (f"exec {shlex.quote(args.ncu)} --profile-from-start off --clock-control none "
                f"--csv --page raw --metrics {METRIC} --log-file {shlex.quote(str(out))}"
                f"/rank-$PMI_RANK.csv {shlex.join(script + ['--profile'])}")
    profiled = run(launcher + ["bash", "-c", profiler])
    (out / "profiled.log").write_text(profiled.stdout + profiled.stderr)
    iterations = max(timed["iterations"], 1)
    wall_us = timed["seconds_per_iteration"] * 1e6
    result = {"solver": solver, "ranks": args.ranks, "iterations": iterations,
              "wall_us_per_iteration": wall_us, "timed": timed, "per_rank": []}
    print(f"{args.ranks} rank(s), {shlex.join(solver)}: {iterations} iterations, "
          f"{timed['seconds']:.4f} s, {wall_us:.1f} us an iteration by wall clock")
    for rank in range(args.ranks):
        path = out / f"rank-{rank}.csv"
        table = by_name(kernel_times(path.read_text() if path.exists() else ""))
        if not table:
            raise SystemExit(f"ncu recorded no kernels for rank {rank}: see {path} and "
                             f"{out / 'profiled.log'}")
        total = sum(row["ns"] for row in table.values()) / 1e3
        print(f"\nrank {rank}: kernels {total / iterations:.1f} us an iteration "
              f"({total / iterations / wall_us:.0%} of the wall time; not in a kernel "
              f"{wall_us - total / iterations:.1f} us)")
        print("| kernel | launches | us | us an iteration | share |\n|---|---|---|---|---|")
        for name, row in table.items():
            print(f"| {name} | {row['launches']} | {row['ns'] / 1e3:.1f} | "
                  f"{row['ns'] / 1e3 / iterations:.2f} | {row['ns'] / 1e3 / total:.1%} |")
        result["per_rank"].append({"kernels_us_per_iteration": total / iterations,
                                   "kernels": table})
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
