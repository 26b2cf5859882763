"""The dslash's launch shapes timed at several lattices: which shapes are fast where.

Issue 42 serves an untuned lattice another lattice's tuned parameters (``AUTOTUNE_MATCH=
similar``). Whether any rule can do that well depends on how each launch shape's time moves
with the lattice: this times a grid of shapes (``wgs``, ``dir_split``, ``sites``,
``min_blocks``; the other parameters at their ``test=`` values) at each lattice, in alternating
rounds on one queue (device time, ``queue_time``), and reports each shape's time over the best
of the grid at that lattice.

Usage (GPU):  python benchmarks/dslash_shape_grid.py [--lattices 16,16,16,16 20,20,20,20 ...]
                  [--precisions single half] [--rounds 3] [--json FILE]
PoCL (small):  python benchmarks/dslash_shape_grid.py --lattices 4,4,4,4 6,6,6,6
                  --precisions single --wgs 32 64 --rounds 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import accel, tune  # noqa: E402
from operations.lqcd import DslashTemplate, Lattice, gauge  # noqa: E402

from dslash_operands import on_device, random_spinor  # noqa: E402
from similar_sizes import RECONSTRUCT, dslash_runs, side_by_side  # noqa: E402

LATTICES = ["16,16,16,16", "20,20,20,20", "24,24,24,24", "28,28,28,28", "24,24,24,48",
            "32,32,32,32"]


def grid(wgs: list[int], dir_split: list[int], sites: list[int], min_blocks: list[int],
         warp: int) -> dict[str, dict]:
    """Label -> parameters (the ``test=`` values but the shape's), shapes whose directions'
    parts are not whole warps left out (the space's own restriction on GPUs)."""
    test = tune.tuner_of(DslashTemplate).test
    shapes = {}
    for w, d, s, m in itertools.product(wgs, dir_split, sites, min_blocks):
        if w % d or (w // d) % warp:
            continue
        shapes[f"wgs{w}/ds{d}/sites{s}/mb{m}"] = {**test, "wgs": w, "dir_split": d, "sites": s,
                                                   "min_blocks": m}
    return shapes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", help="device selector (default AUTOTUNE_DEVICE or best)")
    parser.add_argument("--lattices", nargs="+", default=LATTICES, metavar="X,Y,Z,T")
    parser.add_argument("--precisions", nargs="+", choices=("single", "half", "double"),
                        default=["single", "half"])
    parser.add_argument("--wgs", nargs="+", type=int, default=[32, 64, 128, 256])
    parser.add_argument("--dir-split", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--sites", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--min-blocks", nargs="+", type=int, default=[1])
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--json", help="write the times here")
    args = parser.parse_args()
    context = accel.select_devices(args.device)[0].create_context()
    queue = context.create_tuning_command_queue()
    warp = 32 if context.device.is_gpu else 1
    shapes = grid(args.wgs, args.dir_split, args.sites, args.min_blocks, warp)
    rows = []
    for text in args.lattices:
        dims = tuple(int(x) for x in text.split(","))
        lattice = Lattice(dims)
        u = gauge.haar_field(dims, seed=1)
        psi = random_spinor(lattice)
        for precision in args.precisions:
            started = time.perf_counter()
            src, out = on_device(context, queue, lattice, psi, precision)
            times = side_by_side(queue, dslash_runs(context, queue, dims, precision, u, src,
                                                    out, shapes), args.rounds)
            best = min(times.values())
            row = {"lattice": "x".join(map(str, dims)), "precision": precision,
                   "us": {label: t * 1e6 for label, t in times.items()},
                   "seconds": time.perf_counter() - started}
            rows.append(row)
            ranked = sorted(times.items(), key=lambda kv: kv[1])
            print(f"{row['lattice']} {precision} ({row['seconds']:.0f} s): " + ", ".join(
                f"{label} {t * 1e6:.1f} us ({t / best:.3f})" for label, t in ranked), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
            "reconstruct": RECONSTRUCT, "shapes": shapes, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
