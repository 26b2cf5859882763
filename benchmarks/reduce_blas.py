"""Reductions and axpy_norm against CUB (CuPy's sum), cuBLAS and a device copy, in one run.

Usage (GPU machine): python benchmarks/reduce_blas.py [--sizes 20 24 28] [--json FILE]

Bandwidths count the bytes each operation must move at least once: a reduction reads its
input; a copy reads and writes; axpy_norm reads x and y and writes y (cuBLAS axpy then nrm2
moves four vectors). Times are medians of CUDA-event-timed batches on one stream per library.
The tuned parameters come from a fresh database (tuned at 2^24 elements, used at every size).
"""

from __future__ import annotations

import argparse
import json
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
    test_params = ReduceTemplate.autotune.__func__.autotune_test
    for log2 in args.sizes:
        n = 1 << log2
        for dtype in (np.float32, np.float64):
            item = np.dtype(dtype).itemsize
            x = cupy.random.standard_normal(n, dtype=dtype)
            y = cupy.random.standard_normal(n, dtype=dtype)
            z = cupy.empty_like(x)
            dx, dy = context.wrap(x), context.wrap(y)
            copy = cupy_time(cupy, lambda: z.data.copy_from_device_async(x.data, n * item))
            cub = cupy_time(cupy, lambda: x.sum())
            result = {"n": f"2^{log2}", "dtype": np.dtype(dtype).name,
                      "copy_GBps": 2 * n * item / copy / 1e9, "cub_sum_GBps": n * item / cub / 1e9}
            for label, params in (("tuned", tuned[("sum", dtype)]), ("default", test_params)):
                fn = ReduceTemplate(context, dtype, "sum", params).instantiate(queue, n)
                t = ours_time(queue, lambda: fn.enqueue([dx], {}))
                result[f"ours_sum_{label}_GBps"] = n * item / t / 1e9
            got = ReduceTemplate(context, dtype, "sum", tuned[("sum", dtype)]).instantiate(queue, n)(dx)
            assert abs(got - float(x.astype(cupy.float64).sum())) <= 1e-6 * float(cupy.abs(x).sum())
            a = dtype(1e-3)
            axpy_norm = BlasTemplate(context, dtype, "axpy_norm", tuned[("axpy_norm", dtype)])
            fn = axpy_norm.instantiate(queue, n)
            t_ours = ours_time(queue, lambda: fn.enqueue([dx, dy], {"a": a}))
            t_cublas = cupy_time(cupy, lambda: (cublas.axpy(a, x, y), cublas.nrm2(y)))
            result.update({
                "axpy_norm_ours_us": t_ours * 1e6, "axpy_nrm2_cublas_us": t_cublas * 1e6,
                "axpy_norm_speedup": t_cublas / t_ours,
                "axpy_norm_ours_GBps": 3 * n * item / t_ours / 1e9,
            })
            rows.append(result)
            print(json.dumps(result), flush=True)
            x = y = z = dx = dy = None  # free the GPU memory before the next size
            cupy.get_default_memory_pool().free_all_blocks()
    info = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
            "tuning_seconds": tuning_seconds,
            "tuned": {f"{k[0]}/{np.dtype(k[1]).name}": v for k, v in tuned.items()}, "rows": rows}
    print(f"\ndevice: {info['device']}  date: {info['date']}  tuning 4 keys: {tuning_seconds:.1f} s")
    print("| n | dtype | copy GB/s | CUB sum GB/s | ours tuned GB/s | ours default GB/s | "
          "axpy_norm ours us | cuBLAS axpy+nrm2 us | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['n']} | {r['dtype']} | {r['copy_GBps']:.0f} | {r['cub_sum_GBps']:.0f} | "
              f"{r['ours_sum_tuned_GBps']:.0f} | {r['ours_sum_default_GBps']:.0f} | "
              f"{r['axpy_norm_ours_us']:.1f} | {r['axpy_nrm2_cublas_us']:.1f} | "
              f"{r['axpy_norm_speedup']:.2f}x |")
    for k, v in info["tuned"].items():
        print(f"tuned {k}: {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1))
    tune.clear_memo()


if __name__ == "__main__":
    main()
