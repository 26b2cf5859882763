"""Whether a small dslash is timed as the kernel or as the host that launches it.

For each lattice, precision and launch configuration: the device time per call as the tuner
and the benchmarks time it (``timing.queue_time``: ``start_tuning`` batches, on CUDA behind
the queue's gate since the change that came with this script), the host's time to enqueue one
call from Python, and the wall time per call of 200 calls enqueued back to back and waited
for (what a host-bound solve sees). Where the enqueue takes longer than the kernel, the wall
time follows the host and events around an ungated batch would too; the gated device time
follows the kernel. Two copies of each configuration (own links buffers) are timed in
alternating rounds, so that a difference between identical launches shows the noise.

    python benchmarks/host_bound_timing.py [--dims 20 20 20 20 --dims 24 24 24 48]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from autotune import accel  # noqa: E402
from operations.lqcd import DslashTemplate, Lattice, gauge  # noqa: E402

from dslash_operands import on_device, random_spinor  # noqa: E402
from timing import queue_time  # noqa: E402

BASE = {"stage": False, "fast_math": False, "half_bits": False, "project16": "none",
        "carveout": -1}
#: the launch shapes the similar-size runs of 2026-12-01 chose at 24^4 and at 20^4
CONFIGS = {
    "single": {"wgs128_split4": dict(BASE, wgs=128, sites=1, dir_split=4, link_load=16,
                                     min_blocks=2),
               "wgs32_sites2": dict(BASE, wgs=32, sites=2, dir_split=1, link_load=8,
                                    min_blocks=2)},
    "half": {"wgs64": dict(BASE, wgs=64, sites=1, dir_split=1, link_load=16, min_blocks=0)},
}


def host_times(queue, fn, calls: int = 200) -> tuple[float, float]:
    """(enqueue, wall) seconds per call of ``calls`` calls enqueued back to back."""
    fn()
    queue.finish()
    began = time.perf_counter()
    for _ in range(calls):
        fn()
    enqueued = time.perf_counter()
    queue.finish()
    return (enqueued - began) / calls, (time.perf_counter() - began) / calls


def runs_for(context, queue, dims, precision, reconstruct) -> dict:
    lattice = Lattice(dims)
    links = gauge.haar_field(dims, seed=1)
    src, out = on_device(context, queue, lattice, random_spinor(lattice), precision)
    runs = {}
    for label, params in CONFIGS[precision].items():
        for copy in "ab":
            template = DslashTemplate(context, dims, precision, reconstruct, -1, params)
            u = template.gauge_to_device(queue, links)
            dslash = template.instantiate(queue)
            runs[label + "/" + copy] = lambda d=dslash, u=u: d(out, src, u, 0)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs=4, action="append",
                        help="lattice extents (repeat; default 20^4 and 24^3 x 48)")
    parser.add_argument("--precisions", nargs="+", choices=sorted(CONFIGS),
                        default=sorted(CONFIGS, reverse=True))
    parser.add_argument("--reconstruct", type=int, default=12, choices=(8, 12, 18))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    context = accel.select_devices(None)[0].create_context()
    queue = context.create_tuning_command_queue()
    rows = []
    for dims in args.dims or [(20, 20, 20, 20), (24, 24, 24, 48)]:
        for precision in args.precisions:
            runs = runs_for(context, queue, tuple(dims), precision, args.reconstruct)
            samples: dict[str, list[tuple[float, float, float]]] = {k: [] for k in runs}
            for _ in range(args.rounds):
                for label, fn in runs.items():
                    device = queue_time(queue, fn, repeats=50, batches=7)
                    samples[label].append((device, *host_times(queue, fn)))
            for label, s in samples.items():
                device, enqueue, wall = (statistics.median(x[i] for x in s) * 1e6
                                         for i in range(3))
                row = {"dims": "x".join(map(str, dims)), "precision": precision,
                       "config": label, "device_us": device, "enqueue_us": enqueue,
                       "wall_us": wall}
                rows.append(row)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                                  for k, v in row.items()}), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.describe(),
                                               "date": time.strftime("%Y-%m-%d"),
                                               "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
