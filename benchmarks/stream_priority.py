"""Whether a high-priority queue's kernel starts ahead of a normal queue's waiting blocks.

Usage (a CUDA GPU): python benchmarks/stream_priority.py [--device cuda:0] [--reps 400000]

A long kernel of 65536 blocks (``tests/kernels/busy.mako``, ``--reps`` steps a work-item) on a
normal queue, then, 2 ms later, a one-block kernel on a second queue, first of normal priority,
then of high (``create_command_queue(priority="high")``), twice each: when the short kernel
finished, against when the long one did. With priorities the short one ends a few of the long
one's block times in; without, about when the long one ends.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from autotune import accel

BUSY = Path(__file__).resolve().parents[1] / "tests" / "kernels" / "busy.mako"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--reps", type=int, default=400000)
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    kernel = context.build(BUSY).get_kernel("busy")
    n = 1 << 24
    for priority in ("normal", "high", "normal", "high"):
        second = context.create_command_queue(priority=priority)
        first = context.create_command_queue()
        x = context.to_device(first, np.ones(n, np.float32))
        y, y1 = context.allocate(n, np.float32), context.allocate(256, np.float32)
        for queue, out, items in ((first, y, n), (second, y1, 256)):  # loaded and warm
            queue.enqueue_kernel(kernel, [out, x, np.uint32(items), np.uint32(2)], items, 256)
            queue.finish()
        start = time.perf_counter()
        first.enqueue_kernel(kernel, [y, x, np.uint32(n), np.uint32(args.reps)], n, 256)
        long_done = first.mark()
        time.sleep(0.002)
        second.enqueue_kernel(kernel, [y1, x, np.uint32(256), np.uint32(args.reps)], 256, 256)
        second.mark().wait()
        short = time.perf_counter() - start
        long_done.wait()
        whole = time.perf_counter() - start
        print(f"second queue {second.priority}: the short kernel done after {short * 1e3:.1f} ms "
              f"of the long kernel's {whole * 1e3:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
