"""Time to render a kernel from its Mako template (no device, no compiler): the Wilson dslash's
``dslash.mako`` for CUDA, one kernel and the even-odd solver's group, the median of ``--runs``
renders after one warm-up. Every candidate a search builds is rendered first.

Usage: python benchmarks/render_time.py [--dims 32,32,32,32] [--precision half] [--runs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.accel.render import render  # noqa: E402
from operations.lqcd import dslash  # noqa: E402

PARAMS = {"wgs": 128, "sites": 1, "dir_split": 1, "stage": False, "link_load": 16,
          "fast_math": False, "half_bits": False, "project16": "none", "min_blocks": 4,
          "carveout": -1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dims", default="32,32,32,32")
    parser.add_argument("--precision", default="half", choices=("half", "single", "double"))
    parser.add_argument("--reconstruct", type=int, default=12)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    dims = tuple(int(v) for v in args.dims.split(","))
    base = {**dslash.kernel_arguments(dims, args.precision, args.reconstruct),
            **dslash.render_tuned(args.precision, args.reconstruct, PARAMS)}
    half = args.precision == "half"
    groups = {"one kernel": [(0, False, False, "hhh") if half else (0, False, False)],
              "the solver's group": list(dslash.HALF_SOLVER_VARIANTS) if half
              else [v[:3] for v in dslash.SOLVER_VARIANTS]}
    for label, variants in groups.items():
        kws = {**base, "variants": variants}
        render(dslash.TEMPLATE, "cuda", kws)  # the template compiled once
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            render(dslash.TEMPLATE, "cuda", kws)
            times.append(time.perf_counter() - started)
        print(f"{label}: {statistics.median(times) * 1e3:.1f} ms a render "
              f"({args.precision} {args.reconstruct}, {args.dims})")


if __name__ == "__main__":
    main()
