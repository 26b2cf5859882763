"""A whole spinor field's copies between the host and the device: from and into ordinary
(pageable) numpy memory, as ``WilsonOperator.to_device``/``from_device`` do now, against
through a reused page-locked buffer (``Context.empty_host``) with a host copy beside it.

Usage (GPU machine, ``PYTHONPATH`` the checkout):
    python benchmarks/host_copies.py [--device cuda] [--mib 192] [--repeats 7] [--json FILE]

A solve of one 32^4 source moves 192 MiB each way (12 V complex128). Each way is timed by wall
clock around the whole call, as a user's solve pays it (median of ``--repeats``):

- up, pageable: ``DeviceArray.set`` from the caller's array;
- up, staged: the caller's array copied into the page-locked buffer, then ``set`` from it;
- down, pageable: ``DeviceArray.get`` into a new array (its pages touched first by the copy);
- down, staged: ``get`` into the page-locked buffer, then a new array copied from it (what a
  caller must get: an array of its own);
- down, into an array used before: ``get(out=)`` into pageable memory whose pages are present
  (what ``WilsonOperator.solve(out=)`` does with an array the caller reuses).

The buffer's allocation (once an operator) is reported apart. On a CPU device the two ways are
the same memory and the figures only check that the script runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timezone

import numpy as np

from autotune import accel


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median wall time of ``run()`` over ``repeats`` calls, after one untimed."""
    run()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default=None, help="device selector (default: the best)")
    parser.add_argument("--mib", type=int, default=192)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json")
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    queue = context.create_command_queue()
    n = args.mib * (1 << 20) // 16
    host = np.random.default_rng(0).standard_normal(2 * n).view(np.complex128)
    device = context.allocate(n, np.complex128)
    began = time.perf_counter()
    staging = context.empty_host(n, np.complex128)
    staging[:] = 0  # its pages made present, as a reused buffer's are
    allocated = time.perf_counter() - began

    def up_staged() -> None:
        np.copyto(staging, host)
        device.set(queue, staging)

    def down_staged() -> np.ndarray:
        device.get(queue, out=staging)
        return staging.copy()

    reused = np.zeros_like(host)  # a caller's array, written before (``solve(out=)``)
    rows = {"up, pageable": median_seconds(lambda: device.set(queue, host), args.repeats),
            "up, staged": median_seconds(up_staged, args.repeats),
            "down, pageable": median_seconds(lambda: device.get(queue), args.repeats),
            "down, staged": median_seconds(down_staged, args.repeats),
            "down, into an array used before": median_seconds(
                lambda: device.get(queue, out=reused), args.repeats)}
    assert np.array_equal(down_staged(), host)
    nbytes = host.nbytes
    print(f"device: {context.device.name} ({context.backend})  {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC  "
          f"{nbytes / (1 << 20):.0f} MiB a copy; page-locked buffer allocated in "
          f"{allocated * 1e3:.1f} ms")
    print("| way | ms | GB/s |\n|---|---|---|")
    for name, seconds in rows.items():
        print(f"| {name} | {seconds * 1e3:.1f} | {nbytes / seconds / 1e9:.1f} |")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": context.device.name, "bytes": nbytes,
                       "allocate_seconds": allocated, "seconds": rows}, out, indent=1)


if __name__ == "__main__":
    main()
