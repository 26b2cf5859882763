"""Wilson dslash throughput against the copy bandwidth and a CuPy roll + einsum operator, one run.

Usage (GPU machine): python benchmarks/wilson_dslash.py [--lattices 32,32,32,32 24,24,24,64] [--json FILE]
                    [--db FILE] [--repeats N]

Single-parity dslash (D_eo, no xpay): 1320 flops per output site, in half (16-bit storage,
operations.lqcd.half), single and double precision. Bytes per site count 8 links, 8 neighbour
spinors and one output spinor with no cache reuse (what the issue asks to report; half: 2
bytes a number and a 4-byte norm per spinor);
so "effective bandwidth" can exceed the copy bandwidth when caches serve repeated neighbours.
The roofline is the least traffic of a site (8 links, the input and output spinors once each:
``least_bytes_per_site``) divided into the copy bandwidth of a 1 GiB device-to-device copy on
the same queue (bytes read and written), measured in the same process; each variant reports
the share of it reached.
The CuPy operator applies the full-lattice hopping term with rolls and einsums; its GFLOP/s
uses the same 1320 flops per site.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune import accel
from operations.lqcd import DslashTemplate, Lattice, gauge, half
from operations.lqcd.dslash import ARITHMETIC, bytes_per_site, least_bytes_per_site
from operations.lqcd.gamma import GAMMA

from timing import cupy_time, queue_time as event_time

FLOPS = 1320


def cupy_hop(cupy, u, psi, gammas):
    """Full-lattice D psi with rolls and einsums (antiperiodic in time): the straightforward way."""
    axes = {0: 3, 1: 2, 2: 1, 3: 0}
    eye = cupy.eye(4, dtype=psi.dtype)
    out = cupy.zeros_like(psi)
    for mu in range(4):
        fwd = cupy.roll(psi, -1, axis=axes[mu])
        bwd = cupy.roll(psi, 1, axis=axes[mu])
        if mu == 3:
            fwd[-1] *= -1
            bwd[0] *= -1
        out += cupy.einsum("...ij,ab,...bj->...ai", u[mu], eye - gammas[mu], fwd)
        ub = cupy.roll(u[mu], 1, axis=axes[mu])
        out += cupy.einsum("...ji,ab,...bj->...ai", ub.conj(), eye + gammas[mu], bwd)
    return out


def copy_bandwidth(context, queue, nbytes: int = 1 << 30) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes`` (read and written), beyond the
    caches: the memory bandwidth the roofline divides."""
    source = context.allocate(nbytes // 4, np.float32)
    target = context.allocate(nbytes // 4, np.float32)
    seconds = event_time(queue, lambda: target.copy_from(queue, source), repeats=5, batches=7)
    return 2 * nbytes / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lattices", nargs="+", default=["32,32,32,32", "24,24,24,64"])
    parser.add_argument("--precisions", nargs="+", default=["half", "single", "double"])
    parser.add_argument("--json")
    parser.add_argument("--db", help="tuning database to fill (default: a fresh temporary one)")
    parser.add_argument("--repeats", type=int, default=20,
                        help="launches per timed batch of our dslash (7 batches, their median)")
    args = parser.parse_args()
    import cupy

    os.environ["AUTOTUNE_DB"] = args.db or str(Path(tempfile.mkdtemp()) / "bench.db")
    context = accel.create_some_context("cuda")
    queue = context.create_tuning_command_queue()
    memory_Bps = copy_bandwidth(context, queue)
    print(f"copy bandwidth (1 GiB, read + written): {memory_Bps / 1e9:.0f} GB/s", flush=True)
    rows = []
    for text in args.lattices:
        dims = tuple(int(v) for v in text.split(","))
        lattice = Lattice(dims)
        vh = lattice.half_volume
        u = gauge.haar_field(dims, seed=1)
        rng = np.random.default_rng(3)
        psi = rng.standard_normal(lattice.shape + (4, 3)) + 1j * rng.standard_normal(lattice.shape + (4, 3))
        for precision in args.precisions:
            real_dtype, dtype = ARITHMETIC[precision]
            if precision == "half":
                src = half.to_device(context, queue, lattice.spinor_to_device(psi, 1, np.complex128))
                out = half.HalfSpinor.allocate(context, vh)
                values = src.values
            else:
                src = values = context.to_device(queue, lattice.spinor_to_device(psi, 1, dtype))
                out = context.allocate((12, vh), dtype)
            copy_dst = context.allocate(values.shape, values.dtype)
            t_copy = event_time(queue, lambda: copy_dst.copy_from(queue, values))
            copy_gbps = 2 * values.nbytes / t_copy / 1e9
            gu = cupy.asarray(u.astype(dtype))
            gpsi = cupy.asarray(psi.astype(dtype))
            gammas = cupy.asarray(GAMMA.astype(dtype))
            t_cupy = cupy_time(cupy, lambda: cupy_hop(cupy, gu, gpsi, gammas), repeats=5, batches=5)
            cupy_gflops = FLOPS * lattice.volume / t_cupy / 1e9
            gu = gpsi = None  # free the GPU memory before the ops below
            cupy.get_default_memory_pool().free_all_blocks()
            for reconstruct in (18, 12, 8):
                site_bytes = bytes_per_site(precision, reconstruct)
                started = time.perf_counter()
                tuned = DslashTemplate.autotune(context, dims, precision, reconstruct)
                tuning_seconds = time.perf_counter() - started
                result = {"dims": "x".join(map(str, dims)), "precision": precision,
                          "reconstruct": reconstruct, "copy_GBps": copy_gbps,
                          "cupy_GFLOPs": cupy_gflops, "tuned": tuned,
                          "tuning_seconds": tuning_seconds}
                for label, params in (("tuned", tuned), ("default", {"wgs": 64})):
                    template = DslashTemplate(context, dims, precision, reconstruct, -1, params)
                    links = template.gauge_to_device(queue, u)  # in the layout params choose
                    dslash = template.instantiate(queue)
                    t = event_time(queue, lambda: dslash(out, src, links, 0), repeats=args.repeats)
                    result[f"{label}_GFLOPs"] = FLOPS * vh / t / 1e9
                    result[f"{label}_GBps"] = site_bytes * vh / t / 1e9
                    result[f"{label}_us"] = t * 1e6
                result["speedup_vs_cupy"] = result["tuned_GFLOPs"] / cupy_gflops
                least = least_bytes_per_site(precision, reconstruct)
                result["least_bytes_per_site"] = least
                result["memory_GBps"] = memory_Bps / 1e9
                result["roofline_GFLOPs"] = FLOPS / least * memory_Bps / 1e9
                result["roofline_share"] = result["tuned_GFLOPs"] / result["roofline_GFLOPs"]
                rows.append(result)
                print(json.dumps(result), flush=True)
                links = None
    info = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"), "rows": rows}
    print(f"\ndevice: {info['device']}  date: {info['date']}")
    print("| lattice | precision | recon | tuned GFLOP/s | tuned GB/s | default GFLOP/s | copy GB/s | "
          "CuPy GFLOP/s | vs CuPy | tuned |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['dims']} | {r['precision']} | {r['reconstruct']} | {r['tuned_GFLOPs']:.0f} | "
              f"{r['tuned_GBps']:.0f} | {r['default_GFLOPs']:.0f} | {r['copy_GBps']:.0f} | "
              f"{r['cupy_GFLOPs']:.1f} | {r['speedup_vs_cupy']:.0f}x | wgs={r['tuned']['wgs']} |")
    print(f"\nroofline: least traffic / copy bandwidth {memory_Bps / 1e9:.0f} GB/s")
    print("| lattice | precision | recon | bytes/site | roofline GFLOP/s | ours GFLOP/s | share |")
    print("|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: -r["roofline_share"]):
        print(f"| {r['dims']} | {r['precision']} | {r['reconstruct']} | {r['least_bytes_per_site']} | "
              f"{r['roofline_GFLOPs']:.0f} | {r['tuned_GFLOPs']:.0f} | {100 * r['roofline_share']:.0f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
