"""``AUTOTUNE_RECORD`` and ``warm --recorded`` on a CG solve of the Wilson operator.

Into a fresh database: (1) a CG solve on a first lattice tunes what it needs; (2) a solve on
an untuned lattice with ``AUTOTUNE_RECORD`` set records every key it did not find exactly
(``--match``: exact tunes them then and there, similar serves the nearest lattice's);
(3) ``python -m autotune warm --recorded`` tunes them; (4) a solve on that lattice again, with
a second record file, must tune nothing and record nothing. Each step is a fresh process.

Usage (GPU):  python benchmarks/recorded_solver.py [--tuned 24,24,24,24] [--untuned 20,20,20,40]
                                                   [--match similar] [--max-evals N]
PoCL:         python benchmarks/recorded_solver.py --tuned 4,4,4,4 --untuned 4,4,4,8 --max-evals 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SOLVE = """
import json, sys
import numpy as np
from autotune import accel, tune
from operations.lqcd import WilsonOperator, weak_field
dims = tuple(int(v) for v in sys.argv[1].split(","))
max_evals = int(sys.argv[2]) if sys.argv[2] != "None" else None
context = accel.create_some_context()
x, y, z, t = dims
rng = np.random.default_rng(0)
b = rng.standard_normal((t, z, y, x, 4, 3)) + 1j * rng.standard_normal((t, z, y, x, 4, 3))
searches = []
with tune.observing(lambda event, data: searches.append(1) if event == "start" else None), \\
        tune.search_settings(max_evals=max_evals):
    op = WilsonOperator(context, weak_field(dims, 0.1, seed=3), 0.12, "single", 12)
    solution, info = op.solve(b, "cg", 1e-6)
print(json.dumps({"searches": len(searches), "iterations": info.iterations,
                  "converged": bool(info.converged)}))
"""


def _run(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({done.returncode}):\n{done.stderr}")
    return done.stdout


def _solve(dims: str, max_evals: int | None, env: dict[str, str]) -> dict:
    out = _run([sys.executable, "-c", SOLVE, dims, str(max_evals)], env)
    return json.loads(out.strip().splitlines()[-1])


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuned", default="24,24,24,24", help="the lattice tuned first")
    parser.add_argument("--untuned", default="20,20,20,40", help="the lattice recorded")
    parser.add_argument("--match", choices=("exact", "similar"), default="similar")
    parser.add_argument("--max-evals", type=int, help="budget of every search (default: each "
                        "template's own)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="recorded-solver-"))
    env = {**os.environ, "AUTOTUNE_DB": str(folder / "tuning.db"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("AUTOTUNE_RECORD", None)
    first = _solve(args.tuned, args.max_evals, env)
    print(f"1. CG on {args.tuned} (fresh database): {first['searches']} searches", flush=True)
    wanted, again = folder / "wanted.jsonl", folder / "again.jsonl"
    second = _solve(args.untuned, args.max_evals,
                    {**env, "AUTOTUNE_RECORD": str(wanted), "AUTOTUNE_MATCH": args.match})
    lines = _lines(wanted)
    print(f"2. CG on {args.untuned}, AUTOTUNE_MATCH={args.match}, AUTOTUNE_RECORD set: "
          f"{second['searches']} searches, {len(lines)} keys recorded:")
    for line in lines:
        print(f"   {line['served']:8} {line['function']} {line['arguments']}")
    warm = [sys.executable, "-m", "autotune", "warm", "--recorded", str(wanted), "--quiet"]
    if args.max_evals:
        warm += ["--max-evals", str(args.max_evals)]
    summary = _run(warm, env).strip().splitlines()[-1]
    print(f"3. {' '.join(warm[1:])}: {summary}")
    third = _solve(args.untuned, args.max_evals, {**env, "AUTOTUNE_RECORD": str(again)})
    left = _lines(again)
    print(f"4. CG on {args.untuned} again (exact): {third['searches']} searches, {len(left)} keys "
          f"recorded, converged {third['converged']}")
    ok = third["searches"] == 0 and not left and lines
    print("target met: every recorded key served exactly, nothing tuned" if ok
          else "TARGET NOT MET")


if __name__ == "__main__":
    main()
