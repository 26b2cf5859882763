"""Reductions and axpy_norm against CUB (CuPy's sum), cuBLAS and a device copy, in one run.

Usage (GPU machine): python benchmarks/reduce_blas.py [--sizes 20 24 28] [--json FILE]

Bandwidths count the bytes each operation must move at least once: a reduction reads its
input; a copy reads and writes; axpy_norm reads x and y and writes y (cuBLAS axpy then nrm2
moves four vectors). Each column is timed with CUDA events (median of 7 batches of 20 calls) in
each of --rounds interleaved rounds, and reports the median over the rounds. The last column is
the speed-up axpy_norm would have if it moved its 3 vectors at the copy's bandwidth: an upper
bound, which shows how far below bandwidth cuBLAS runs.
The tuned parameters come from a fresh database (tuned on 256 MiB vectors, used at every size).
"""

from __future__ import annotations

import argparse
import json
import statistics
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune import accel, tune
from operations.blas import BlasTemplate
from operations.reduce import ReduceTemplate

from timing import cupy_time, queue_time as ours_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 24, 28], help="log2 sizes")
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved rounds; each column reports its median over them")
    parser.add_argument("--json")
    args = parser.parse_args()
    import cupy
    from cupy import cublas

    os.environ["AUTOTUNE_DB"] = str(Path(tempfile.mkdtemp()) / "bench.db")
    context = accel.create_some_context("cuda")
    queue = context.create_tuning_command_queue()
    rows = []
    tuned: dict = {}
    started = time.perf_counter()
    for dtype in (np.float32, np.float64):
        tuned[("sum", dtype)] = ReduceTemplate.autotune(context, dtype, "sum")
        tuned[("axpy_norm", dtype)] = BlasTemplate.autotune(context, dtype, "axpy_norm")
    tuning_seconds = time.perf_counter() - started
    test_params = tune.tuner_of(ReduceTemplate).test
    for log2 in args.sizes:
        n = 1 << log2
        for dtype in (np.float32, np.float64):
            item = np.dtype(dtype).itemsize
            x = cupy.random.standard_normal(n, dtype=dtype)
            y = cupy.random.standard_normal(n, dtype=dtype)
            z = cupy.empty_like(x)
            dx, dy = context.wrap(x), context.wrap(y)
            a = dtype(1e-3)
            sums = {label: ReduceTemplate(context, dtype, "sum", params).instantiate(queue, n)
                    for label, params in (("tuned", tuned[("sum", dtype)]), ("default", test_params))}
            got = sums["tuned"](dx)
            assert abs(got - float(x.astype(cupy.float64).sum())) <= 1e-6 * float(cupy.abs(x).sum())
            fused = BlasTemplate(context, dtype, "axpy_norm", tuned[("axpy_norm", dtype)])
            axpy_norm = fused.instantiate(queue, n)
            timers = {
                "copy": lambda: cupy_time(cupy, lambda: z.data.copy_from_device_async(x.data, n * item)),
                "cub_sum": lambda: cupy_time(cupy, lambda: x.sum()),
                # fetch=False: the result stays on the device, as CuPy's and cuBLAS's do
                "ours_sum_tuned": lambda: ours_time(
                    queue, lambda: sums["tuned"].enqueue([dx], {}, fetch=False)),
                "ours_sum_default": lambda: ours_time(
                    queue, lambda: sums["default"].enqueue([dx], {}, fetch=False)),
                "ours_axpy_norm": lambda: ours_time(
                    queue, lambda: axpy_norm.enqueue([dx, dy], {"a": a}, fetch=False)),
                "cublas_axpy_nrm2": lambda: cupy_time(cupy, lambda: (cublas.axpy(a, x, y), cublas.nrm2(y))),
                "cublas_nrm2": lambda: cupy_time(cupy, lambda: cublas.nrm2(y)),
            }
            # Interleaved rounds, so that clock and thermal drift touch every column alike.
            samples: dict = {k: [] for k in timers}
            for _ in range(args.rounds):
                for k, timer in timers.items():
                    samples[k].append(timer())
            t = {k: statistics.median(v) for k, v in samples.items()}
            spread = {k: (max(v) - min(v)) / statistics.median(v) for k, v in samples.items()}
            bytes_ = n * item
            result = {
                "n": f"2^{log2}", "dtype": np.dtype(dtype).name,
                "copy_GBps": 2 * bytes_ / t["copy"] / 1e9,
                "cub_sum_GBps": bytes_ / t["cub_sum"] / 1e9,
                "ours_sum_tuned_GBps": bytes_ / t["ours_sum_tuned"] / 1e9,
                "ours_sum_default_GBps": bytes_ / t["ours_sum_default"] / 1e9,
                "sum_vs_cub": t["cub_sum"] / t["ours_sum_tuned"],
                "axpy_norm_ours_us": t["ours_axpy_norm"] * 1e6,
                "axpy_nrm2_cublas_us": t["cublas_axpy_nrm2"] * 1e6,
                "axpy_norm_speedup": t["cublas_axpy_nrm2"] / t["ours_axpy_norm"],
                "axpy_norm_ours_GBps": 3 * bytes_ / t["ours_axpy_norm"] / 1e9,
                "cublas_nrm2_GBps": bytes_ / t["cublas_nrm2"] / 1e9,
                # the speed-up if axpy_norm moved its 3 vectors at the measured copy bandwidth
                "axpy_norm_speedup_at_copy_bw": t["cublas_axpy_nrm2"] / (3 * bytes_ / (2 * bytes_ / t["copy"])),
                "spread": spread,
            }
            rows.append(result)
            print(json.dumps(result), flush=True)
            x = y = z = dx = dy = sums = axpy_norm = fused = None  # free the GPU memory before the next size
            cupy.get_default_memory_pool().free_all_blocks()
    info = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
            "tuning_seconds": tuning_seconds,
            "tuned": {f"{k[0]}/{np.dtype(k[1]).name}": v for k, v in tuned.items()}, "rows": rows}
    print(f"\ndevice: {info['device']}  date: {info['date']}  tuning 4 keys: {tuning_seconds:.1f} s")
    print("| n | dtype | copy GB/s | CUB sum GB/s | ours tuned GB/s | ours default GB/s | ours/CUB | "
          "axpy_norm ours us | cuBLAS axpy+nrm2 us | speed-up | cuBLAS nrm2 GB/s | speed-up at copy bw |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['dtype']} | {r['copy_GBps']:.0f} | {r['cub_sum_GBps']:.0f} | "
              f"{r['ours_sum_tuned_GBps']:.0f} | {r['ours_sum_default_GBps']:.0f} | {r['sum_vs_cub']:.3f} | "
              f"{r['axpy_norm_ours_us']:.1f} | {r['axpy_nrm2_cublas_us']:.1f} | "
              f"{r['axpy_norm_speedup']:.2f}x | {r['cublas_nrm2_GBps']:.0f} | "
              f"{r['axpy_norm_speedup_at_copy_bw']:.2f}x |")
    for k, v in info["tuned"].items():
        print(f"tuned {k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))
    tune.clear_memo()


if __name__ == "__main__":
    main()
