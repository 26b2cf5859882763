"""What a recorded launch costs the GPU (``queue.capture()``, CUDA graphs), with and without new
values for its value operations, against the same work enqueued call by call.

Usage (a CUDA GPU): python benchmarks/graph_launches.py [--device cuda:0] [--launches 2000]
    [--kernels 3] [--reps 200]

The work: ``--kernels`` short kernels (``tests/kernels/busy.mako``, 4096 work-items, ``--reps``
steps each) with a value written and the same value waited for between the first and the
rest (the wait is met at once: what is timed is the operations, not a neighbour). Timed over
``--launches`` back to back (the host far ahead), microseconds a launch, four ways: enqueued
call by call with a new count each time; the recording launched with a new count each time
(its value nodes updated before each launch); the recording launched with the same count; and
the kernels alone, enqueued. Then whether new values wait for the launch in flight: the host's
time for a second launch of a recording whose first (one long kernel) still runs.
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
    parser.add_argument("--launches", type=int, default=2000)
    parser.add_argument("--kernels", type=int, default=3)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--long-reps", type=int, default=2000000,
                        help="steps of the long kernel of the in-flight case")
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    queue = context.create_command_queue()
    kernel = context.build(BUSY).get_kernel("busy")
    n = 4096
    x = context.to_device(queue, np.ones(n, np.float32))
    y = context.zeros(queue, n, np.float32)
    flags = context.zeros(queue, 1, np.uint32)
    launch = queue.launcher(kernel, n, 128)
    kernel_args = [y, x, np.uint32(n), np.uint32(args.reps)]
    write, wait = queue.value_writer(flags, 0), queue.value_waiter(flags, 0)

    def enqueue(count: int, values: bool = True) -> None:
        launch(kernel_args)
        if values:
            write(count)
            wait(count)
        for _ in range(args.kernels - 1):
            launch(kernel_args)

    queue.finish()
    with queue.capture() as captured:
        enqueue(1)
    graph = captured.work
    counter = [1]

    def timed(step) -> float:
        queue.finish()
        start = time.perf_counter()
        for _ in range(args.launches):
            counter[0] += 1
            step(counter[0])
        queue.finish()
        return (time.perf_counter() - start) / args.launches * 1e6

    ways = {"enqueued, new counts": lambda c: enqueue(c),
            "recorded, new counts": lambda c: graph.launch(c),
            "recorded, one count": lambda c: graph.launch(None),
            "kernels alone, enqueued": lambda c: enqueue(c, values=False)}
    for _ in range(2):  # the first round warms up
        results = {name: timed(step) for name, step in ways.items()}
    print(f"{context.device.name}: {args.kernels} kernels of {n} work-items, {args.reps} steps, "
          f"one value written and waited for; us a launch over {args.launches}:")
    for name, us in results.items():
        print(f"  {name}: {us:.2f}")
    # does giving new values wait for the graph's launch in flight? One launch of long kernels,
    # then the host's time for a second launch, with new values and without
    long = [y, x, np.uint32(n), np.uint32(args.long_reps)]
    with queue.capture() as captured:
        launch(long)
        write(1)
        wait(1)
    slow = captured.work
    for values in (None, "new"):
        queue.finish()
        slow.launch(counter[0])
        start = time.perf_counter()
        counter[0] += 1
        slow.launch(counter[0] if values else None)
        host = time.perf_counter() - start
        queue.finish()
        whole = time.perf_counter() - start
        print(f"  a second launch behind one in flight ({'new' if values else 'the same'} "
              f"values): the host's call took {host * 1e6:.1f} us, both ran in {whole * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
