"""Where the per-call extra of other libraries' spinors goes in the Wilson dslash: the kept
views' re-check against the launches.

Usage (GPU machine): python benchmarks/interop_recheck.py [--calls 2000] [--rounds 15]

Times one dslash launch (``WilsonOperator.dslash_parity``) and ``apply_pc`` (two launches) on an
8^4 single precision lattice (the template's ``test=`` parameters) with our arrays, a second
pair of ours (the method's noise), PyTorch tensors, CuPy arrays, and those tensors' and arrays'
views passed directly (``context.as_array`` once: no re-check), all in the same rounds in an
order shuffled each round (``interop_overhead.per_call_samples``). Then the same again with the
dslash's launches replaced by no-ops, which leaves the host's own work: the extra over ours
there is the re-check alone. Prints us per call and the extra over ours (the median of each
round's difference). Diagnostic: it replaces the launchers of the dslash's private cache.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable

from autotune import accel
from interop_overhead import CONTROL, dslash_operands, per_call_samples

SHORT = {"ours": "ours", CONTROL: "control", "torch (DLPack)": "torch", "cupy (CAI v3)": "cupy"}


def report(queue: accel.CommandQueue, calls: dict[str, Callable[[], None]], n: int,
           rounds: int) -> None:
    """Print each call's us and its extra over the same way's ``ours``."""
    samples = per_call_samples(queue, calls, n, rounds)
    for name, got in samples.items():
        ours = samples[name.split(":")[0] + ":ours"]
        extra = statistics.median(g - o for g, o in zip(got, ours))
        print(f"  {name:24s} {statistics.median(got):7.2f} us  extra {extra:+.2f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    context = accel.create_some_context("cuda")
    op, given = dslash_operands(context)
    queue = op.queue
    kinds = {SHORT[k]: v for k, v in given.items()}
    for kind in [k for k in kinds if k in ("torch", "cupy")]:
        p, o = kinds[kind]
        kinds[f"views {kind}"] = (context.as_array(p, queue=queue),
                                  context.as_array(o, queue=queue))
    calls: dict[str, Callable[[], None]] = {}
    for kind, (p, o) in kinds.items():
        calls[f"launch:{kind}"] = lambda p=p, o=o: op.dslash_parity(o, p, 1)
        calls[f"apply_pc:{kind}"] = lambda p=p, o=o: op.apply_pc(p, o)
    print(f"{context.device.name}: real launches")
    report(queue, calls, args.calls, args.rounds)
    launchers = op._dslash._launchers
    for key in list(launchers):
        launchers[key] = lambda launch_args: None
    print(f"{context.device.name}: launches replaced by no-ops (the host's work alone)")
    report(queue, calls, args.calls, args.rounds)


if __name__ == "__main__":
    main()
