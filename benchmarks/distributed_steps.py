"""Where the distributed dslash's time goes: each step of an overlapped dslash timed alone.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_steps.py
    --dims X Y Z T --grid PX PY PZ PT [--precision single] [--reconstruct 12]
    [--tuning '{"wgs": 256, ...}'] [--launches 300] [--rounds 2]

Rows (wall microseconds per call, every rank synchronised around ``--launches`` calls, the
slowest rank's time; ``--rounds`` rounds): the overlapped dslash; the pack kernel; the
one-byte token each transport's finish exchanges, through ``autotune.parallel.wait`` (with
its deadline) and through ``MPI.Request.Waitall``; the peer copies with the host's wait for
them; the whole shipping (copies and token); the exchange (pack and ship); the interior,
exterior and whole-block kernels and interior + exterior back to back; an empty marker waited
for. First, with neighbours, the host's timeline of the overlapped dslash
(:func:`host_timeline`). ``--tuning`` gives the dslash's parameters (JSON) instead of the
tuned ones: the block's kernels take them with one site a work-item and every direction
(``sites`` and ``dir_split`` 1), so the one-GPU tuning may not suit them. With one rank the
exchange rows are left out.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from mpi4py import MPI

from autotune import parallel
from distributed_dslash import add_block_arguments, block_operator, spinors
from timing import ranks_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser, launches=300)
    parser.add_argument("--tuning", type=json.loads, help="the dslash's parameters (JSON)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    op = block_operator(comm, args, tuning=args.tuning)
    dims = tuple(args.dims)
    inp, out = spinors(op.context, op)
    transport = op.transport
    neighbours = sorted({r.dest for r in transport.routes} | {r.source for r in transport.routes})
    token, tokens_in = np.zeros(1, np.uint8), np.zeros(max(1, len(neighbours)), np.uint8)

    def requests(tag: int) -> list:
        return ([comm.Irecv(tokens_in[i:i + 1], source=n, tag=tag) for i, n in enumerate(neighbours)]
                + [comm.Isend(token, dest=n, tag=tag) for n in neighbours])

    def copies() -> None:
        transport.start(transport.send, op.queue.mark())
        transport.copies.mark().wait()

    def ship() -> None:
        transport.start(transport.send, op.queue.mark())
        transport.finish()

    interior = op.dslash_kernel(out, inp, 0, "interior")
    exterior = op.dslash_kernel(out, inp, 0, "exterior")
    steps = {"dslash (overlap)": lambda: op.dslash_parity(out, inp, 0),
             "pack": lambda: op.pack_faces(inp, 1),
             "token, parallel.wait": lambda: parallel.wait(requests(77), "the token", comm),
             "token, MPI Waitall": lambda: MPI.Request.Waitall(requests(78)),
             "copies, host waits for them": copies, "ship (copies and token)": ship,
             "exchange (pack and ship)": lambda: op.exchange(inp, 1),
             "interior kernel": interior, "exterior kernel": exterior,
             "interior + exterior": lambda: (interior(), exterior()),
             "whole-block kernel": op.dslash_kernel(out, inp, 0, "all"),
             "empty marker waited for": lambda: op.queue.mark().wait()}
    if neighbours:
        host_timeline(comm, op, inp, (interior, exterior), args.launches)
    else:
        steps = {k: v for k, v in steps.items()
                 if not k.startswith(("pack", "token", "copies", "ship"))}
    rows = ranks_rounds(comm, op.queue, steps, args.rounds, args.launches)
    if comm.rank == 0:
        print(f"{comm.size} rank(s), {dims} over {tuple(args.grid)}, {args.precision} "
              f"{args.reconstruct}, {transport.name} transport, dslash {op.template.parameters}")
        for name, values in rows.items():
            print(f"  {name:28s} " + "  ".join(f"{v:7.1f}" for v in values) + " us")


def host_timeline(comm, op, inp, kernels, launches: int) -> None:
    """The overlapped dslash's steps as the host sees them (``kernels``: its interior and
    exterior launches): each step's return, microseconds after the call began (medians over
    ``launches`` calls in a row, rank 0's), against the wall time per call. Where the last
    step's return is near the wall time per call, the host's steps set the pace, not the GPU's
    kernels. The token's peer transport's wait for its copies is a step of its own; the host
    transport waits inside ``finish``, and with the flags no step waits (their rows are then
    how long the enqueues took)."""
    interior, exterior = kernels
    transport = op.transport
    # the token's peer transport waits for its copies on the host (in finish); with the flags
    # and through the host, nothing is waited for there
    waits = getattr(transport, "signal", None) == "token"
    names = ("pack enqueued", "interior enqueued", "copies enqueued", "copies done (host wait)",
             "token exchanged", "exterior enqueued")
    stamps = []
    clock = time.perf_counter
    for i in range(launches + 10):
        t0 = clock()
        op.pack_faces(inp, 1)
        packed = op.queue.mark()
        t1 = clock()
        interior()
        t2 = clock()
        transport.start(transport.send, packed)
        t3 = clock()
        if waits:
            transport.copies.mark().wait()
        t4 = clock()
        transport.finish()
        t5 = clock()
        exterior()
        t6 = clock()
        if i == 9:
            op.queue.finish()
            comm.Barrier()
            start = clock()
        elif i > 9:
            stamps.append([t - t0 for t in (t1, t2, t3, t4, t5, t6)])
    op.queue.finish()
    comm.Barrier()
    wall = (clock() - start) / launches
    if comm.rank == 0:
        medians = np.median(np.array(stamps), axis=0) * 1e6
        print(f"host timeline of the overlapped dslash (rank 0, median of {launches} calls; "
              f"wall {wall * 1e6:.1f} us a call):")
        for name, value in zip(names, medians):
            print(f"  {name:28s} {value:7.1f} us")


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
