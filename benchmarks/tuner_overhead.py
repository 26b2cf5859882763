"""Framework overheads, measured side by side in one run on one device.

- Compile time of a small kernel: our in-process NVRTC path against pycuda's nvcc path (CUDA),
  or the OpenCL compiler (OpenCL). Each build uses a distinct source so no cache is hit.
- Cost of a tuning-database hit: in-process memo, and a fresh process's first lookup (database).
- Whole tuning time of the example ScaleTemplate.

Usage: python benchmarks/tuner_overhead.py [--device SELECTOR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from autotune import accel, tune
from operations.scale import ScaleTemplate

TEMPLATE = Path(__file__).resolve().parents[1] / "operations" / "scale.mako"


def compile_times(context: accel.Context, compiler: str | None, count: int) -> list[float]:
    if compiler is not None:
        context.compiler = compiler  # CUDA contexts: "nvrtc" or "nvcc"
    times = []
    for i in range(count):
        # A distinct source each time (the work-group size) so nothing is served from a cache.
        salt = f"{compiler}-{i}-{time.time_ns()}"
        program = context.build(TEMPLATE, {"wgs": 32 + i, "ctype": f"float /* {salt} */"})
        program.get_kernel("scale")
        times.append(program.compile_seconds)
    return times


def hit_costs(context: accel.Context) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["AUTOTUNE_DB"] = str(Path(tmp) / "bench.db")
        start = time.perf_counter()
        ScaleTemplate.autotune(context, np.float32)
        tuning = time.perf_counter() - start
        n = 20000
        start = time.perf_counter()
        for _ in range(n):
            ScaleTemplate.autotune(context, np.float32)
        memo = (time.perf_counter() - start) / n
        db_times = []
        for _ in range(50):
            tune.clear_memo()
            start = time.perf_counter()
            ScaleTemplate.autotune(context, np.float32)
            db_times.append(time.perf_counter() - start)
        return {"tuning_seconds": tuning, "memo_hit_seconds": memo,
                "database_hit_seconds": statistics.median(db_times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None)
    parser.add_argument("--json", default=None)
    parser.add_argument("--count", type=int, default=8)
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    result: dict = {"device": context.device.describe(), "date": time.strftime("%Y-%m-%d")}
    if context.backend == "cuda":
        for compiler in ("nvrtc", "nvcc"):
            result[f"compile_{compiler}_seconds"] = statistics.median(
                compile_times(context, compiler, args.count))
        context.compiler = "nvrtc"
    else:
        result["compile_opencl_seconds"] = statistics.median(compile_times(context, None, args.count))
    result.update(hit_costs(context))
    print(f"device: {result['device']}  date: {result['date']}")
    print("| measurement | value |\n|---|---|")
    for name, value in result.items():
        if name.endswith("seconds"):
            unit = (value * 1e6, "us") if value < 1e-3 else (value * 1e3, "ms")
            print(f"| {name.removesuffix('_seconds').replace('_', ' ')} | {unit[0]:.1f} {unit[1]} |")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
