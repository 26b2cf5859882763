"""Framework overheads, measured side by side in one run on one device.

- Compile time of a small kernel: our in-process NVRTC path against pycuda's nvcc path (CUDA),
  or the OpenCL compiler (OpenCL). Each build uses a distinct source so no cache is hit.
- Whole tuning time of the example ScaleTemplate.

What serving a stored result costs (memo, database, a fresh process) is ``serving.py``'s.

Usage: python benchmarks/tuner_overhead.py [--device SELECTOR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
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


def tuning_time(context: accel.Context) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp, tune.use_database(Path(tmp) / "bench.db"):
        start = time.perf_counter()
        tune.tuner_of(ScaleTemplate).retune(ScaleTemplate, context, np.dtype(np.float32))
        return {"tuning_seconds": time.perf_counter() - start}


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
    result.update(tuning_time(context))
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
