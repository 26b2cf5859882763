"""The distributed dslash on several GPUs: time per dslash, and its exchange and kernel alone.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_dslash.py
    --dims X Y Z T --grid PX PY PZ PT [--precision single] [--reconstruct 12]
    [--policy overlap|overlap_in_order|fused|serial ...] [--rounds 3] [--transport auto|peer|host]
    [--graphs both|auto|off] [--json FILE]

One rank per GPU (``rank_context``); the operator's dslash of one parity (D_oe) is timed over
``--launches`` launches after a warm-up, every rank synchronised before and after; the exchange
(packing and shipping the faces: device to device, or through the host), the interior kernel
(the sites that need no ghost) and the one-kernel dslash with its ghosts in place are timed
alone the same way. The exchange's bandwidth counts the bytes each rank sends. GFLOP/s count 1320 flops per site of the parity, all ranks together.
Run it with ``-n 1 --grid 1 1 1 1`` for the one-GPU figure of the same code.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from autotune import parallel
from operations.lqcd import DistributedWilsonOperator, haar_field
from operations.lqcd.distributed import rank_context

from timing import ranks_time

FLOPS_PER_SITE = 1320


def timed(comm, queue, fn, launches: int) -> float:
    return ranks_time(comm, queue, fn, launches, warmup=5)


def add_block_arguments(parser: argparse.ArgumentParser, launches: int) -> None:
    """The lattice, grid, precision, compression and launch count options of the distributed
    dslash benchmarks."""
    parser.add_argument("--dims", type=int, nargs=4, required=True)
    parser.add_argument("--grid", type=int, nargs=4, required=True)
    parser.add_argument("--precision", default="single")
    parser.add_argument("--reconstruct", type=int, default=12)
    parser.add_argument("--launches", type=int, default=launches)


def block_operator(comm, args: argparse.Namespace, **options: Any) -> DistributedWilsonOperator:
    """The distributed operator of ``add_block_arguments``' options on this rank's device (SU(3)
    links, seeded: their values do not change the timing); ``options`` go to the operator."""
    context = rank_context(comm)
    dims = tuple(args.dims)
    return DistributedWilsonOperator(comm, context, haar_field(dims, seed=3), 0.12,
                                     tuple(args.grid), args.precision, args.reconstruct,
                                     check=False, **options)


def spinors(context, op) -> tuple:
    """A random input spinor of one parity of ``op``'s block (seeded by the rank) and an output."""
    rng = np.random.default_rng(op.comm.rank)
    half = op.lattice.half_volume
    inp = context.to_device(op.queue, (rng.standard_normal((12, half))
                                       + 1j * rng.standard_normal((12, half))).astype(op.dtype))
    return inp, context.allocate((12, half), op.dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser, launches=200)
    parser.add_argument("--policy", nargs="+", default=["overlap"],
                        choices=["overlap", "overlap_in_order", "fused", "serial"],
                        help="one or more: each timed, in alternating rounds (--rounds)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--transport", default="auto", choices=["auto", "peer", "host"])
    parser.add_argument("--graphs", default="both", choices=["both", "auto", "off"],
                        help="record each dslash once and launch it again (CUDA graphs): both "
                             "times the recorded policies with and without (\"+graph\" labels)")
    parser.add_argument("--json")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    op = block_operator(comm, args, policy=args.policy[0], transport=args.transport,
                        graphs=False if args.graphs == "off" else None)
    recordings = op.recordings  # None where not possible (one GPU, host transport, no graphs)
    labels = [(p, False) for p in args.policy]
    if recordings is not None and args.graphs == "both":
        labels += [(p, True) for p in args.policy if p in op.RECORDED_POLICIES]
    elif recordings is not None:
        labels = [(p, p in op.RECORDED_POLICIES) for p in args.policy]
    context, dims = op.context, tuple(args.dims)
    inp, out = spinors(context, op)
    half = op.lattice.half_volume
    by_policy: dict[str, list[float]] = {p + "+graph" * g: [] for p, g in labels}
    for _ in range(args.rounds if len(labels) > 1 else 1):
        for policy, graph in labels:
            op.policy = policy  # the next dslash meets its exchange this way
            op.recordings = recordings if graph else None
            if recordings is not None:  # what the calls before left on the copies' queue
                recordings.enqueued_directly()
            by_policy[policy + "+graph" * graph].append(
                timed(comm, op.queue, lambda: op.dslash_parity(out, inp, 0), args.launches))
    op.recordings = recordings
    medians = {p: statistics.median(v) for p, v in by_policy.items()}
    whole = medians[args.policy[0] + "+graph" * labels[0][1]]
    exchange = timed(comm, op.queue, lambda: op.exchange(inp, 1), args.launches)
    alone = timed(comm, op.queue, op.dslash_kernel(out, inp, 0), args.launches)
    pack = 0.0
    if op.face_elements:
        pack = timed(comm, op.queue, lambda: op.pack_faces(inp, 1), args.launches)
    interior = timed(comm, op.queue, op.dslash_kernel(out, inp, 0, "interior"), args.launches)
    sites = int(np.prod(dims)) // 2
    face_bytes = op.face_elements * op.dtype.itemsize
    result = {"device": context.device.describe(), "ranks": comm.size, "dims": list(dims),
              "grid": list(args.grid), "local": list(op.partition.local),
              "precision": args.precision, "reconstruct": args.reconstruct, "policy": args.policy[0],
              "dslash_seconds_by_policy": medians,
              "transport": op.transport.name, "transport_description": op.transport.description,
              "dslash_seconds": whole, "exchange_seconds": exchange, "kernel_seconds": alone,
              "interior_kernel_seconds": interior, "pack_kernel_seconds": pack,
              "exchange_gbytes_per_second": face_bytes / exchange / 1e9 if comm.size > 1 else None,
              "gflops": FLOPS_PER_SITE * sites / whole / 1e9,
              "kernel_gflops_per_gpu": FLOPS_PER_SITE * half / alone / 1e9,
              "bytes_sent_per_rank": face_bytes, "date": time.strftime("%Y-%m-%d")}
    everyone = comm.gather(result)
    if comm.rank == 0:
        print(json.dumps(everyone[0]))
        print(f"{comm.size} rank(s), {dims} over {tuple(args.grid)}, {args.policy[0]}, "
              f"{op.transport.name} transport: dslash {whole * 1e6:.1f} us "
              f"({result['gflops']:.0f} GFLOP/s in all), exchange alone {exchange * 1e6:.1f} us "
              f"({face_bytes / 1e6:.2f} MB out per rank; its packing {pack * 1e6:.1f} us), "
              f"interior kernel alone "
              f"{interior * 1e6:.1f} us, whole-block kernel alone {alone * 1e6:.1f} us")
        if len(medians) > 1:
            print("dslash by policy (median of the rounds): " + ", ".join(
                f"{p} {t * 1e6:.1f} us" for p, t in medians.items()))
        if args.json:
            Path(args.json).write_text(json.dumps(everyone, indent=1))


if __name__ == "__main__":
    with parallel.abort_on_error():  # a rank that raises ends every rank, with its rank number
        main()
