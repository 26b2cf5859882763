"""`warm --all-devices --jobs N` on N identical GPUs against one of them, for the same keys.

Usage (a machine with N identical GPUs):
    python benchmarks/warm_devices.py --gpus 4 [--json FILE] [-- WARM ARGUMENTS ...]

Runs ``python -m autotune warm ARGUMENTS --device cuda:0 --quiet`` (one GPU) and then
``python -m autotune warm ARGUMENTS --all-devices --device cuda --jobs N --quiet`` (all N), each
into a new database in a temporary folder, one after the other, and prints each one's wall
time, the ratio (the many-GPU issue's target: at most 0.3 with four) and the closing line of
the N-GPU run, which says how long each device was busy with its keys and when it began its
first (the rest of the wall time is starting the workers). ARGUMENTS (default none: every
registered key) name operations, ``--recorded FILE`` and so on. ``--one-device`` picks the
single GPU (default cuda:0), ``--devices`` the N (default cuda).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def warm(arguments: list[str], db: Path) -> tuple[float, str]:
    """One ``warm`` run into ``db``: its wall time and its closing summary line."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "autotune", "warm", "--db", str(db), "--quiet",
                             *arguments], cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - began
    lines = [line for line in result.stdout.splitlines() if line.startswith("warm: ")]
    if result.returncode != 0 or not lines:
        sys.exit(f"warm {' '.join(arguments)} failed (exit {result.returncode}):\n"
                 f"{result.stderr[-2000:]}")
    return wall, lines[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--one-device", default="cuda:0")
    parser.add_argument("--devices", default="cuda", help="the selector of the N devices")
    parser.add_argument("--json")
    parser.add_argument("arguments", nargs=argparse.REMAINDER,
                        help="after --: warm's own arguments (operations, --recorded FILE, ...)")
    args = parser.parse_args()
    extra = [a for a in args.arguments if a != "--"]
    with tempfile.TemporaryDirectory() as folder:
        one, one_line = warm(extra + ["--device", args.one_device], Path(folder) / "one.db")
        many, many_line = warm(extra + ["--all-devices", "--device", args.devices, "--jobs",
                                        str(args.gpus)], Path(folder) / "many.db")
    print(f"one GPU: {one:.1f} s ({one_line})")
    print(f"{args.gpus} GPUs: {many:.1f} s ({many_line})")
    print(f"ratio: {many / one:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "date": time.strftime("%Y-%m-%d"), "gpus": args.gpus, "arguments": extra,
            "one_gpu_seconds": one, "one_gpu_summary": one_line, "gpus_seconds": many,
            "gpus_summary": many_line, "ratio": many / one}, indent=1))


if __name__ == "__main__":
    main()
