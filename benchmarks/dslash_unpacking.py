"""Half precision dslash: ways of turning its 16-bit words into floats, at the tuned launch shape
and a few others (issue 45). Not all of them are tuning parameters yet; this times them side by
side in one process so that the ones worth a place in the space can be chosen.

For each 8-, 12- and 18-parameter half dslash (single parity, D_eo, no xpay), the tuned row of
``--db`` (default tune.db.example) for this device, and the launch shapes ``--shapes`` (wgs,
min_blocks), with every combination of ``half_bits`` (bit arithmetic instead of conversion
instructions, for links and spinors) and ``project16`` (dslash.mako: a neighbour's spin
projection added in integers before conversion, 12 conversions a hop instead of 24, "cvt" or
"bits"). Reports microseconds, GFLOP/s (1320 flops a site) and the share of the roofline
(least traffic over the copy bandwidth measured here, as benchmarks/wilson_dslash.py), and the
largest difference from the first kernel's output (within two 16-bit steps: the sums are exact).

Usage (GPU machine): python benchmarks/dslash_unpacking.py [--dims 32,32,32,32] [--json FILE]
                     [--shapes 64:0 128:4 128:2 32:1] [--device cuda]
PoCL check:          python benchmarks/dslash_unpacking.py --device opencl --dims 4,4,4,8 --shapes
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from autotune import accel, tune
from autotune.tune.encoding import decode_parameters, encode_arguments, validate_parameters
from autotune.tune.store import ResultStore
from operations.lqcd import DslashTemplate, Lattice, gauge, half
from operations.lqcd.dslash import Dslash, least_bytes_per_site

from timing import queue_time
from wilson_dslash import FLOPS, copy_bandwidth

ROOT = Path(__file__).resolve().parents[1]


def stored_parameters(db: str, device: str, dims: tuple[int, ...], reconstruct: int,
                      precision: str = "half") -> dict | None:
    """The tuned parameters of the dslash of ``dims`` on ``device`` in ``db``, read through the
    store and validated against ``test=`` (a row served as similar is not a tuning)."""
    tuner = tune.tuner_of(DslashTemplate)
    store = ResultStore(f"sqlite:///{db}")
    try:
        rows = store.find(tuner.name(DslashTemplate), DslashTemplate.autotune_version,
                          encode_arguments({"dims": tuple(dims), "precision": precision,
                                            "reconstruct": reconstruct}), device_name=device)
    finally:
        store.dispose()
    for row in rows:
        if row.origin != "similar":
            return validate_parameters(decode_parameters(row.parameters), tuner.test)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", default="32,32,32,32")
    parser.add_argument("--db", default=str(ROOT / "tune.db.example"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", nargs="*", default=["64:0", "128:4", "128:2", "32:1"],
                        help="launch shapes wgs:min_blocks besides the tuned one")
    parser.add_argument("--json")
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    queue = context.create_tuning_command_queue()
    bandwidth = copy_bandwidth(context, queue)
    print(f"copy bandwidth {bandwidth / 1e9:.0f} GB/s", flush=True)
    dims = tuple(int(v) for v in args.dims.split(","))
    lattice = Lattice(dims)
    u = gauge.haar_field(dims, seed=1)
    rng = np.random.default_rng(3)
    psi = rng.standard_normal(lattice.shape + (4, 3)) + 1j * rng.standard_normal(lattice.shape + (4, 3))
    src = half.to_device(context, queue, lattice.spinor_to_device(psi, 1, np.complex128))
    out = half.HalfSpinor.allocate(context, lattice.half_volume)
    shapes = [None] + [tuple(int(v) for v in s.split(":")) for s in args.shapes]
    rows = []
    for reconstruct in (18, 12, 8):
        tuned = stored_parameters(args.db, context.device.name, dims, reconstruct) \
            or DslashTemplate(context, dims, "half", reconstruct, -1, {"wgs": 32}).tuning
        roofline = FLOPS / least_bytes_per_site("half", reconstruct) * bandwidth
        first = None
        for shape in shapes:
            if shape is not None and shape == (tuned["wgs"], tuned["min_blocks"]):
                continue
            base = tuned if shape is None else {**tuned, "wgs": shape[0], "min_blocks": shape[1]}
            for half_bits, project16 in itertools.product((False, True), ("none", "cvt", "bits")):
                template = DslashTemplate(context, dims, "half", reconstruct, -1,
                                          {**base, "half_bits": half_bits,
                                           "project16": project16})
                links = template.gauge_to_device(queue, u)
                dslash = Dslash(template, queue)
                seconds = queue_time(queue, lambda: dslash(out, src, links, 0), repeats=50)
                got = half.from_device(queue, out)
                first = got if first is None else first
                gflops = FLOPS * lattice.half_volume / seconds / 1e9
                row = {"reconstruct": reconstruct, "wgs": base["wgs"],
                       "min_blocks": base["min_blocks"], "tuned_shape": shape is None,
                       "half_bits": half_bits, "project16": project16, "us": seconds * 1e6,
                       "GFLOPs": gflops, "share": gflops * 1e9 / roofline,
                       "difference": float(np.max(np.abs(got - first)) / np.max(np.abs(first)))}
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{context.device.describe()}, {time.strftime('%Y-%m-%d')}, {args.dims}")
    print("| recon | wgs | min_blocks | half_bits | project16 | us | roofline share |\n"
          "|---|---|---|---|---|---|---|")
    for r in rows:
        if r["tuned_shape"]:
            print(f"| {r['reconstruct']} | {r['wgs']} | {r['min_blocks']} | {r['half_bits']} | "
                  f"{r['project16']} | {r['us']:.1f} | {r['share']:.1%} |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
             "dims": dims, "copy_GBps": bandwidth / 1e9, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
