"""The tuned GEMM against cuBLAS (through CuPy, TF32 off) on the same GPU in one run.

Tunes ``GemmTemplate`` at ``--size``^3 into a fresh database (or ``--db``), with ``--strategy``
and ``--max-evals`` (default: the whole space), then times the best configuration, the ``test=``
configuration and cuBLAS's SGEMM/DGEMM with CUDA events, in interleaved rounds; A is passed
column-major to both (our kernel reads A transposed; cuBLAS is told the same layout).

Usage (GPU machine): python benchmarks/gemm_vs_cublas.py [--size 4096] [--dtype float32]
                     [--strategy local] [--max-evals N] [--max-seconds S] [--batches N]
                     [--resume] [--db DB] [--json FILE]
``--resume`` goes on from the trials that an interrupted run stored in ``--db`` (a complete
landscape, ``--strategy brute_force``, can take several runs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune import accel, tune
from operations.gemm import TEST_PARAMETERS, GemmTemplate

from timing import cupy_time, queue_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--strategy", default="brute_force")
    parser.add_argument("--max-evals", type=int)
    parser.add_argument("--max-seconds", type=float)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batches", type=int, help="timed batches per configuration (default 5)")
    parser.add_argument("--resume", action="store_true",
                        help="go on from the trials an interrupted search stored in --db")
    parser.add_argument("--db", help="tuning database (default: a fresh temporary one)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    import cupy

    n, dtype = args.size, np.dtype(args.dtype)
    context = accel.create_some_context("cuda")
    queue = context.create_tuning_command_queue()
    db = args.db or str(Path(tempfile.mkdtemp()) / "gemm.db")
    started = time.perf_counter()
    with tune.use_database(db), tune.search_settings(strategy=args.strategy, max_evals=args.max_evals,
                                                      max_seconds=args.max_seconds, seed=args.seed,
                                                      batches=args.batches, resume=args.resume or None):
        outcome = tune.tuner_of(GemmTemplate).retune(GemmTemplate, context, dtype, n, n, n)
    tuning_seconds = time.perf_counter() - started
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    at = context.to_device(queue, np.ascontiguousarray(a.T))
    db_ = context.to_device(queue, b)
    c = context.allocate((n, n), dtype)
    ours = {label: GemmTemplate(context, dtype, n, n, n, params).instantiate(queue)
            for label, params in (("tuned", outcome.parameters), ("test=", TEST_PARAMETERS))}
    # cuBLAS: C = A B with A column-major (its natural layout), B and C row-major = column-major
    # transposes: C^T = B^T A^T, all three as column-major views.
    ga = cupy.asarray(a, order="F")
    gb = cupy.asarray(b)
    gc = cupy.empty((n, n), dtype)
    from cupy_backends.cuda.libs import cublas

    handle = cupy.cuda.device.get_cublas_handle()
    cublas.setMathMode(handle, cublas.CUBLAS_DEFAULT_MATH)  # TF32 off
    gemm_fn = cublas.sgemm if dtype == np.float32 else cublas.dgemm
    one, zero = np.array(1, dtype), np.array(0, dtype)

    def cublas_call():
        # column-major: C^T (n x n) = B^T (n x n) * A^T; B row-major is B^T column-major
        gemm_fn(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T, n, n, n, one.ctypes.data,
                gb.data.ptr, n, ga.data.ptr, n, zero.ctypes.data, gc.data.ptr, n)

    cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)
    cublas_call()
    cupy.cuda.Device().synchronize()
    flops = 2 * n ** 3
    rounds = {"tuned": [], "test=": [], "cuBLAS": []}
    for _ in range(args.rounds):
        for label, fn in ours.items():
            rounds[label].append(queue_time(queue, lambda fn=fn: fn(c, at, db_), 3, 3))
        rounds["cuBLAS"].append(cupy_time(cupy, cublas_call, repeats=3, batches=3))
    seconds = {k: statistics.median(v) for k, v in rounds.items()}
    # both compute the same product
    ours["tuned"](c, at, db_)
    diff = float(np.abs(c.get(queue) - cupy.asnumpy(gc)).max() / np.abs(cupy.asnumpy(gc)).max())
    result = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"), "size": n,
              "dtype": dtype.name, "strategy": args.strategy, "max_evals": args.max_evals,
              "tuning_seconds": tuning_seconds, "tuned": outcome.parameters,
              "tflops": {k: flops / v / 1e12 for k, v in seconds.items()},
              "ours_over_cublas": seconds["cuBLAS"] / seconds["tuned"], "max_relative_difference": diff}
    print(json.dumps(result))
    print(f"\n{result['device']}, {result['date']}, {n}^3 {dtype.name}, tuned with {args.strategy} "
          f"({args.max_evals or 'all'} evaluations) in {tuning_seconds:.0f} s")
    print("| | TFLOP/s |\n|---|---|")
    for k, v in result["tflops"].items():
        print(f"| {k} | {v:.2f} |")
    print(f"ours / cuBLAS: {result['ours_over_cublas']:.3f} (target >= 0.7 in float32); "
          f"max relative difference {diff:.1e}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
