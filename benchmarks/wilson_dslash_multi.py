"""The dslash on several right-hand sides in one launch (``MultiDslash``) against the one-field
dslash, and against the roofline of the traffic it must move, one run (issue 45).

Usage (GPU machine, from benchmarks/):
    python wilson_dslash_multi.py [--lattice 32,32,32,32] [--db FILE] [--nrhs 2 4]
        [--precisions half single] [--reconstructs 12 8] [--tuned] [--json FILE]

Per (precision, reconstruct): the tuned one-field dslash (``DslashTemplate`` with the stored
result of ``--db``, default a copy of ``tune.db.example`` in a temporary folder) on one field,
then ``MultiDslash`` on N fields for each N of ``--nrhs``: the one-field tuned parameters
with ``dir_split`` 1 and nothing staged at each ``wgs`` and ``min_blocks`` of a small sweep,
and with ``--tuned`` also tuned on its own key (into ``--db``: a search of about a minute per
N and variant on an H200 unless stored); the fastest is reported, with where it came from. Times are CUDA-event medians on one queue. The least traffic of a site and right-hand
side is 8 links / N plus the input and output spinors once each; divided into the copy
bandwidth measured in the same process it gives the per-right-hand-side roofline.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import DslashTemplate, Lattice, MultiDslash, haar_field
from operations.lqcd.dslash import least_bytes_per_site

from dslash_operands import empty, fields
from example_db import use_database
from timing import queue_time
from wilson_dslash import FLOPS, copy_bandwidth

SWEEP = [(64, 0), (128, 0), (128, 2), (256, 0), (256, 2), (64, 4), (128, 4)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lattice", default="32,32,32,32")
    parser.add_argument("--db")
    parser.add_argument("--nrhs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--precisions", nargs="+", default=["half", "single"])
    parser.add_argument("--reconstructs", type=int, nargs="+", default=[12, 8])
    parser.add_argument("--tuned", action="store_true",
                        help="time the key tuned for each N too (a search per N and variant)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    dims = tuple(int(v) for v in args.lattice.split(","))
    use_database(args.db)
    context = accel.create_some_context()
    queue = context.create_tuning_command_queue()
    bandwidth = copy_bandwidth(context, queue)
    lattice = Lattice(dims)
    u = haar_field(dims, seed=3)
    rng = np.random.default_rng(4)
    print(f"device: {context.device.describe()}  date: {time.strftime('%Y-%m-%d')}  copy "
          f"bandwidth {bandwidth / 1e9:.0f} GB/s")
    print("| variant | one field us | nrhs | best us a launch | us a field | speed-up | "
          "least B a site a field | roofline share | wgs, min_blocks |\n"
          "|---|---|---|---|---|---|---|---|---|")
    rows = []
    for precision in args.precisions:
        if precision == "double" and not context.device.double_precision:
            continue
        for reconstruct in args.reconstructs:
            template = DslashTemplate(context, dims, precision, reconstruct)
            links = template.gauge_to_device(queue, u)
            most = max(args.nrhs)
            inps = fields(context, queue, template, lattice, rng, most)
            outs = [empty(context, template, lattice) for _ in range(most)]
            one = template.instantiate(queue)
            single = queue_time(queue, lambda: one(outs[0], inps[0], links, 0),
                                repeats=args.repeats)
            for n in args.nrhs:
                best = None
                for shape in ([None] if args.tuned else []) + SWEEP:
                    multi = MultiDslash(template, queue, n, tuning=None if shape is None else
                                        {"wgs": shape[0], "min_blocks": shape[1]})
                    wgs, min_blocks = multi.parameters["wgs"], multi.parameters["min_blocks"]
                    try:
                        seconds = queue_time(queue, lambda: multi(outs[:n], inps[:n], links, 0),
                                             repeats=args.repeats)
                    except accel.AccelError as exc:  # launch bounds the kernel cannot meet
                        print(f"  ({precision} {reconstruct} nrhs {n} wgs {wgs} min_blocks "
                              f"{min_blocks}: {exc})")
                        continue
                    if best is None or seconds < best[0]:
                        best = (seconds, wgs, min_blocks, "tuned" if shape is None else "sweep")
                if best is None:
                    continue
                seconds, wgs, min_blocks, origin = best
                least = least_bytes_per_site(precision, reconstruct, n)
                roofline = lattice.half_volume * n * least / bandwidth
                row = {"precision": precision, "reconstruct": reconstruct, "nrhs": n,
                       "one_field_us": single * 1e6, "launch_us": seconds * 1e6,
                       "field_us": seconds / n * 1e6, "speedup": single * n / seconds,
                       "least_bytes": least, "share": roofline / seconds, "wgs": wgs,
                       "min_blocks": min_blocks, "origin": origin,
                       "gflops": FLOPS * lattice.half_volume * n / seconds / 1e9}
                rows.append(row)
                print(f"| {precision} {reconstruct} | {single * 1e6:.1f} | {n} | "
                      f"{seconds * 1e6:.1f} | {seconds / n * 1e6:.1f} | "
                      f"{row['speedup']:.2f}x | {least:.0f} | {row['share']:.0%} | "
                      f"{wgs}, {min_blocks} ({origin}) |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
            "lattice": dims, "copy_GBps": bandwidth / 1e9, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
