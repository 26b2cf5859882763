"""How much where a fused BLAS pass's vectors land moves its time, per configuration (issue
44: on a 2-core Xeon's PoCL, ``warm`` now and then keeps work-groups of 16 where 256 run 1.7x
faster elsewhere).

Each placement allocates the pass's two vectors afresh after a spacer buffer of another size
(so that they land elsewhere in memory) and times every configuration on them, alternating;
the configurations' times over the placements show whether a ranking made on one placement
(the tuning process's) holds on another.

    python benchmarks/blas_placement.py [--dtype float64] [--op axpy] [--placements 12]
                                        [--after complex128 ...]

``--after DTYPE ...`` first tunes the same operation for those types in this process (into a
temporary database), as ``warm`` does before it reaches the key.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune import accel, tune  # noqa: E402
from operations.blas import BlasTemplate  # noqa: E402
from operations.fused import tuning_length  # noqa: E402

from timing import queue_time  # noqa: E402

BASE = {"groups_per_cu": 4, "ipt": 4, "shuffle": False, "vec": 1}
CONFIGS = {f"wgs {w}": dict(BASE, wgs=w) for w in (16, 64, 256)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="float64")
    parser.add_argument("--op", default="axpy")
    parser.add_argument("--placements", type=int, default=12)
    parser.add_argument("--after", nargs="*", default=[], metavar="DTYPE",
                        help="tune the operation for these types in this process first")
    parser.add_argument("--json", help="write the times here")
    args = parser.parse_args()
    context = accel.select_devices(None)[0].create_context()
    with tempfile.TemporaryDirectory() as folder, tune.use_database(f"{folder}/tune.db"):
        for before in args.after:
            BlasTemplate.autotune(context, np.dtype(before), args.op)
    queue = context.create_tuning_command_queue()
    dtype = np.dtype(args.dtype)
    n = tuning_length(context.device, dtype, 2)
    passes = {label: BlasTemplate(context, dtype, args.op, tuning=p).instantiate(queue, n)
              for label, p in CONFIGS.items()}
    rng = np.random.default_rng(0)
    times: dict[str, list[float]] = {label: [] for label in CONFIGS}
    for _ in range(args.placements):
        spacer = context.allocate(int(rng.integers(1, 1 << 22)), np.uint8)
        x = context.to_device(queue, np.ones(n, dtype))
        y = context.to_device(queue, np.ones(n, dtype))
        for label, run in passes.items():
            times[label].append(queue_time(queue, lambda r=run, x=x, y=y: r(x, y, a=0.5), repeats=5,
                                           batches=5) * 1e3)
        del x, y, spacer
    print(f"{context.device.name}, {time.strftime('%Y-%m-%d')}: {args.dtype} {args.op}, n = {n}, "
          f"{args.placements} placements, after tuning {args.after or 'nothing'} "
          "(ms: min, median, max)")
    for label, ms in times.items():
        print(f"  {label:8} {min(ms):7.2f} {statistics.median(ms):7.2f} {max(ms):7.2f}   "
              + " ".join(f"{t:.2f}" for t in ms))
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.name, "dtype": args.dtype,
                                               "op": args.op, "n": n, "times_ms": times}))


if __name__ == "__main__":
    main()
