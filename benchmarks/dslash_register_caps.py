"""Would tighter register caps help the latency-bound dslash variants? (issue 45)

The profiles of 2026-11-30 found half 18/12/8 and double 8 latency-bound at 18-23% occupancy,
held there by 113-168 registers a work-item. ``min_blocks`` (``__launch_bounds__``' minimum
resident blocks) caps the registers at ``65536 / (wgs x min_blocks)``; the tuning space offers
0, 1, 2 and 4. This times each variant's stored configuration beside the same configuration
with other ``wgs`` and ``min_blocks`` pairs, caps the space does not offer included (5, 6, 8),
reporting each kernel's registers and spilled bytes, so that a wider space is added only if it
pays (a new space stales every stored dslash row).

Usage (GPU machine): python benchmarks/dslash_register_caps.py [--lattice 32,32,32,32]
    [--variants half,18 half,12 half,8 double,8] [--db FILE] [--json FILE]

The stored configurations come from ``--db`` (default a copy of ``tune.db.example``); times
are medians of CUDA-event batches on one queue (``timing.queue_time``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import DslashTemplate, Lattice, haar_field

from dslash_operands import empty, fields
from example_db import use_database
from timing import queue_time

#: (wgs, min_blocks) pairs tried beside the stored one; min_blocks x wgs at most 2048
SHAPES = [(64, 4), (64, 8), (64, 10), (64, 12), (128, 2), (128, 3), (128, 4), (128, 5),
          (128, 6), (128, 8), (256, 2), (256, 3), (256, 4)]


def timed(template: DslashTemplate, queue, inp, out, links) -> tuple[float, int, int]:
    """Seconds a launch of ``template``'s parity-0 dslash, its kernel's registers and spilled
    bytes a work-item."""
    limits = template.kernel(0, False, False, storage="hhh").limits
    dslash = template.instantiate(queue)
    seconds = queue_time(queue, lambda: dslash(out, inp, links, 0), repeats=20)
    return seconds, limits.registers or 0, limits.private_memory or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lattice", default="32,32,32,32")
    parser.add_argument("--variants", nargs="+", default=["half,18", "half,12", "half,8",
                                                          "double,8"])
    parser.add_argument("--db")
    parser.add_argument("--json")
    args = parser.parse_args()
    dims = tuple(int(v) for v in args.lattice.split(","))
    use_database(args.db)
    context = accel.create_some_context()
    queue = context.create_tuning_command_queue()
    lattice = Lattice(dims)
    u = haar_field(dims, seed=3)
    rng = np.random.default_rng(4)
    print(f"device: {context.device.describe()}  date: {time.strftime('%Y-%m-%d')}")
    rows = []
    for variant in args.variants:
        precision, reconstruct = variant.split(",")[0], int(variant.split(",")[1])
        template = DslashTemplate(context, dims, precision, reconstruct)
        stored = dict(template.tuning)
        links = template.gauge_to_device(queue, u)
        inp = fields(context, queue, template, lattice, rng, 1)[0]
        out = empty(context, template, lattice)
        base = timed(template, queue, inp, out, links)
        print(f"{precision} {reconstruct}: stored {stored}: {base[0] * 1e6:.1f} us, "
              f"{base[1]} registers, {base[2]} B spilled", flush=True)
        rows.append({"precision": precision, "reconstruct": reconstruct, "stored": True,
                     "params": stored, "us": base[0] * 1e6, "registers": base[1],
                     "spilled": base[2]})
        for wgs, min_blocks in SHAPES:
            params = {**stored, "wgs": wgs, "min_blocks": min_blocks}
            if wgs % params["dir_split"] or params == stored:
                continue
            try:  # explicit parameters: the space's limits, not its lists (caps it lacks)
                other = DslashTemplate(context, dims, precision, reconstruct, tuning=params)
                seconds, registers, spilled = timed(other, queue, inp, out, links)
            except (accel.AccelError, ValueError) as exc:
                print(f"  wgs {wgs} min_blocks {min_blocks}: {exc}")
                continue
            rows.append({"precision": precision, "reconstruct": reconstruct, "stored": False,
                         "params": params, "us": seconds * 1e6, "registers": registers,
                         "spilled": spilled})
            print(f"  wgs {wgs:3d} min_blocks {min_blocks:2d}: {seconds * 1e6:7.1f} us "
                  f"({seconds / base[0]:.3f} of stored), {registers} registers, {spilled} B "
                  "spilled", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.describe(),
                                               "date": time.strftime("%Y-%m-%d"),
                                               "lattice": dims, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
