"""Would a work-group's sites taken as a box of x rows help the cache-bound dslash? (issue 45)

The Nsight Compute profiles of 2026-12-02 (``dslash_profile.py``, L2 and L1 throughput added)
found half 18 and double 8 bound by the L2 cache's throughput (85% and 90% of its peak), not by
latency: the L2 serves about twice a site's least traffic, because a work-group of wgs
consecutive sites takes wgs / (X/2) whole x rows in a line along y, so that its z and t
neighbours (half of a site's eight) are never its own sites' and come from L2.
``dslash.mako``'s ``tile`` (ry, rz, rt) gives each work-group a ry x rz x rt box of x rows in
(y, z, t) instead. This times each variant's stored configuration beside the same
configuration with every box its ``wgs`` (and the other ``wgs`` given) can make, checks that
each tiled kernel's output is the stored kernel's bit for bit (the per-site arithmetic is the
same), and reports the best box's time against the stored one's.

Usage (GPU machine): python benchmarks/dslash_tiles.py [--lattice 32,32,32,32]
    [--variants half,18 half,12 half,8 double,8] [--wgs 64 128 256] [--ry 2 4] [--db FILE]
    [--json FILE]

The stored configurations come from ``--db`` (default a copy of ``tune.db.example``); times
are medians of CUDA-event batches on one queue (``timing.queue_time``). ``tile`` is not a
tuning parameter: it becomes one if it pays (a new space stales every stored dslash row).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import DslashTemplate, Lattice, haar_field
from operations.lqcd import half as half_storage
from operations.lqcd.dslash import TEMPLATE

from dslash_operands import empty, fields
from example_db import use_database
from timing import queue_time


def boxes(dims: tuple[int, ...], wgs: int) -> list[tuple[int, int, int]]:
    """Every (ry, rz, rt) with X/2 x ry x rz x rt = wgs, each dividing its extent."""
    x, y, z, t = dims
    rows, left = divmod(wgs, x // 2)
    if left:
        return []
    return [(a, b, c) for a, b, c in itertools.product(range(1, rows + 1), repeat=3)
            if a * b * c == rows and y % a == 0 and z % b == 0 and t % c == 0]


def launcher(template: DslashTemplate, queue, params: dict, tile, out, inp, links):
    """A function launching the parity-0 dslash with ``params`` and ``tile`` (None: the
    template's own kernel)."""
    sites = template.lattice.half_volume
    if template.half:
        codes, args = zip(*(half_storage.kernel_args(f, sites) for f in (out, inp, inp)))
        variant = (0, False, False, "".join(codes))
        args = [*args[0], *args[1], links, *args[2], np.float32(0)]
        name = f"dslash_p0_{variant[3]}"
    else:
        variant = (0, False, False)
        args = [out, inp, links, inp, template.real_dtype.type(0)]
        name = "dslash_p0"
    program = template.context.build(TEMPLATE, {**template.render_arguments(params),
                                                "variants": [variant], "tile": tile})
    kernel = program.get_kernel(name)
    kernel.set_carveout(params["carveout"])
    launch = queue.launcher(kernel, template.launch_size(params), params["wgs"])
    return (lambda: launch(args)), kernel.limits


def snapshot(queue, out) -> list[np.ndarray]:
    """The output's arrays on the host."""
    if isinstance(out, half_storage.HalfSpinor):
        return [out.values.get(queue), out.norms.get(queue)]
    return [out.get(queue)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lattice", default="32,32,32,32")
    parser.add_argument("--variants", nargs="+", default=["half,18", "half,12", "half,8",
                                                          "double,8"])
    parser.add_argument("--wgs", nargs="+", type=int, default=[64, 128, 256])
    parser.add_argument("--ry", nargs="+", type=int, default=[2, 4],
                        help="rows along y a box may take (a warp: 2 whole x rows of 16)")
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
        run, limits = launcher(template, queue, stored, None, out, inp, links)
        run()
        want = snapshot(queue, out)
        base = queue_time(queue, run, repeats=20)
        print(f"{precision} {reconstruct}: stored {stored}: {base * 1e6:.1f} us, "
              f"{limits.registers} registers", flush=True)
        rows.append({"precision": precision, "reconstruct": reconstruct, "tile": None,
                     "params": stored, "us": base * 1e6, "registers": limits.registers})
        plain = (stored["sites"], stored["dir_split"], stored["stage"]) == (1, 1, False)
        for wgs in sorted({stored["wgs"], *args.wgs}):
            params = {**stored, "wgs": wgs}
            if not plain or params["min_blocks"] * wgs > 2048:
                continue
            tiles = [b for b in boxes(dims, wgs) if b[0] in args.ry]
            for tile in [None, *tiles] if wgs != stored["wgs"] else tiles:
                try:
                    run, limits = launcher(template, queue, params, tile, out, inp, links)
                except (accel.AccelError, ValueError) as exc:
                    print(f"  wgs {wgs} tile {tile}: {exc}")
                    continue
                run()
                same = all(np.array_equal(a, b) for a, b in zip(snapshot(queue, out), want))
                seconds = queue_time(queue, run, repeats=20)
                rows.append({"precision": precision, "reconstruct": reconstruct, "tile": tile,
                             "params": params, "us": seconds * 1e6, "same_output": same,
                             "registers": limits.registers})
                print(f"  wgs {wgs:3d} tile {str(tile):10s}: {seconds * 1e6:7.1f} us "
                      f"({seconds / base:.3f} of stored){'' if same else '  OUTPUT DIFFERS'}",
                      flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.describe(),
                                               "date": time.strftime("%Y-%m-%d"),
                                               "lattice": dims, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
