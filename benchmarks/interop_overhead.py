"""Host time per call of axpy_norm and of the Wilson dslash with other libraries' arrays,
against our own arrays.

Usage (GPU machine): python benchmarks/interop_overhead.py [--n 4096] [--calls 2000] [--json FILE]
(on an OpenCL device, ``--device opencl`` times pyopencl arrays instead).

Each row enqueues ``axpy_norm`` (``FusedPass.enqueue``, results not fetched) ``--calls`` times
on the same vectors, and ``WilsonOperator.apply_pc`` (two dslash launches, an 8^4 single
precision lattice, the template's test= parameters) and ``dslash_parity`` (one of those
launches on its own) on the same spinors, and reports the host
microseconds per call (median of --rounds rounds, the kinds interleaved round by round in an
order shuffled each round, the queue drained after each), and the extra over our own arrays
(the median of each round's difference): the cost of the protocol, paid on every call because every call
orders the queue after the producer's work again (the call site keeps its views, re-checks
each object's pointer and layout, and waits once per producer stream; the legacy default
stream needs no event). ``wrap`` rows time ``context.as_array(obj, queue=queue)`` alone: the
first call with a new object pays it. The ``ours (control)`` row is a second pair of our own
arrays timed like the others: its "extra" is the method's noise (a fixed order A B C gave the
later kinds up to +0.6 us on an H200's host: docs/accel.md).
The target is under 3 us extra per call on a GPU (CUDA); on OpenCL the rows show what a
pyopencl array's marker and barrier cost on that device.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from autotune import accel
from operations.blas import BlasTemplate

TARGET_US = 3.0
CONTROL = "ours (control)"  #: a second pair of our arrays: the extra the method reports for nothing


def per_call_us(queue: accel.CommandQueue, call: Callable[[], None], calls: int,
                rounds: int) -> float:
    """Median over rounds of the host microseconds per call."""
    return statistics.median(per_call_samples(queue, {"": call}, calls, rounds)[""])


def per_call_samples(queue: accel.CommandQueue, calls_of: dict[str, Callable[[], None]],
                     calls: int, rounds: int) -> dict[str, list[float]]:
    """Host microseconds per call of each kind, ``rounds`` samples each, the kinds interleaved
    round by round (a slow moment of the host falls on every kind alike) in an order shuffled
    each round (a kind's place in the round biases it otherwise); the queue drained after each
    sample."""
    for call in calls_of.values():
        call()
    queue.finish()
    samples: dict[str, list[float]] = {kind: [] for kind in calls_of}
    shuffled = random.Random(0)  # no kind always first (or after the same one)
    for _ in range(rounds):
        order = list(calls_of)
        shuffled.shuffle(order)
        for kind in order:
            call = calls_of[kind]
            start = time.perf_counter()
            for _ in range(calls):
                call()
            samples[kind].append((time.perf_counter() - start) / calls * 1e6)
            queue.finish()
    return samples


def compare(queue: accel.CommandQueue, calls_of: dict[str, Callable[[], None]], calls: int,
            rounds: int) -> dict[str, tuple[float, float]]:
    """(median us per call, median over rounds of the extra over ``ours`` in the same round)."""
    samples = per_call_samples(queue, calls_of, calls, rounds)
    ours = samples["ours"]
    return {kind: (statistics.median(got),
                   statistics.median(g - o for g, o in zip(got, ours)))
            for kind, got in samples.items()}


def inputs(context: accel.Context, queue: accel.CommandQueue, x: np.ndarray,
           y: np.ndarray) -> dict[str, tuple[Any, Any]]:
    """(x, y) per kind of array available here."""
    kinds: dict[str, tuple[Any, Any]] = {
        "ours": (context.to_device(queue, x), context.to_device(queue, y)),
        CONTROL: (context.to_device(queue, x), context.to_device(queue, y))}
    if context.backend == "cuda":
        try:
            import torch  # before CuPy (see tests/test_accel_memory.py)

            device = f"cuda:{context.device_index}"
            kinds["torch (DLPack)"] = (torch.tensor(x, device=device),
                                       torch.tensor(y, device=device))
        except ImportError:
            print("PyTorch is not installed: no torch rows")
        try:
            import cupy

            with cupy.cuda.Device(context.device_index):
                kinds["cupy (CAI v3)"] = (cupy.asarray(x), cupy.asarray(y))
        except ImportError:
            print("CuPy is not installed: no CuPy rows")
    else:
        import pyopencl as cl
        import pyopencl.array as cl_array

        theirs = cl.CommandQueue(context.cl_context)
        kinds["pyopencl"] = (cl_array.to_device(theirs, x), cl_array.to_device(theirs, y))
    return kinds


def _verdict(kind: str, extra: float) -> str:
    if kind == "ours":
        return ""
    if kind == CONTROL:
        return "  (the method's noise)"
    return f"  {'ok' if extra < TARGET_US else 'OVER'} (target < {TARGET_US} us)"


def dslash_operands(context: accel.Context) -> tuple[Any, dict[str, tuple[Any, Any]]]:
    """The Wilson operator these rows time (8^4, single precision, 12 parameters, the dslash
    template's test= parameters) and (psi, out) even-site spinors per kind of array."""
    from autotune import tune
    from operations.lqcd import WilsonOperator, haar_field
    from operations.lqcd.dslash import DslashTemplate

    test = tune.tuner_of(DslashTemplate).test
    op = WilsonOperator(context, haar_field((8, 8, 8, 8), seed=1), 0.12, "single", 12,
                        tuning=test)
    half = op.lattice.half_volume
    rng = np.random.default_rng(2)
    psi = (rng.standard_normal((12, half)) + 1j * rng.standard_normal((12, half))).astype(np.complex64)
    return op, inputs(context, op.queue, psi, np.zeros_like(psi))


def dslash_rows(context: accel.Context, calls: int, rounds: int) -> list[dict[str, Any]]:
    """``apply_pc``, and one dslash launch (``dslash_parity``), on each kind of spinor array:
    host us per call and the extra over ours."""
    op, kinds = dslash_operands(context)
    rows = []
    ways = {  # the operator's even-site application, and one dslash launch of it on its own
        "dslash": ("apply_pc (2 dslash launches)", lambda p, o: op.apply_pc(p, o)),
        "dslash_parity": ("dslash_parity (1 launch, D_oe)",
                          lambda p, o: op.dslash_parity(o, p, 1)),
    }
    for label, (what, call) in ways.items():
        print(f"{context.device.name}: {what}, 8^4 single 12, host us per call")
        timed = compare(op.queue, {kind: (lambda p=p, o=o: call(p, o))
                                   for kind, (p, o) in kinds.items()}, calls, rounds)
        for kind in kinds:
            call_us, extra = timed[kind]
            rows.append({"kind": f"{label} {kind}", "call_us": call_us, "extra_us": extra,
                         "within_target": kind in ("ours", CONTROL) or extra < TARGET_US})
            print(f"  {kind:16s} {call_us:7.2f} us/call  extra {extra:+6.2f} us"
                  + _verdict(kind, extra))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--n", type=int, default=4096, help="elements (small: host-bound)")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json")
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    queue = context.create_command_queue()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(args.n), rng.standard_normal(args.n)
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(queue, args.n)
    rows = []
    print(f"{context.device.name}: axpy_norm, {args.n} float64 elements, host us per call "
          f"(median of {args.rounds} interleaved rounds)")
    kinds = inputs(context, queue, x, y)
    timed = compare(queue, {kind: (lambda v=v: fn.enqueue(v, {"a": 1e-9}, fetch=False))
                            for kind, v in kinds.items()}, args.calls, args.rounds)
    for kind, (dx, dy) in kinds.items():
        call_us, extra = timed[kind]
        wrap_us = per_call_us(queue, lambda: context.as_array(dy, queue=queue),
                              args.calls, args.rounds)
        rows.append({"kind": kind, "call_us": call_us, "extra_us": extra, "wrap_us": wrap_us,
                     "within_target": kind in ("ours", CONTROL) or extra < TARGET_US})
        print(f"  {kind:16s} {call_us:7.2f} us/call  extra {extra:+6.2f} us  "
              f"(wrap alone {wrap_us:6.2f} us)" + _verdict(kind, extra))
    rows += dslash_rows(context, args.calls, args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": context.device.name, "n": args.n, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
