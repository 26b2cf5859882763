"""Whether the host or the GPUs set the pace of the overlapped distributed dslash: per call, the
host's time to enqueue a run of calls against the time until its queue has run them.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_host.py
    --dims X Y Z T --grid PX PY PZ PT [--precision single] [--reconstruct 12]
    [--launches 200] [--repeats 6] [--policy overlap]

Each rank prints, for each of ``--repeats`` runs of ``--launches`` calls (after 5): microseconds
per call until its host had enqueued them, until its queue had run them, and until every rank's
had (a barrier). Where a rank's enqueue time equals the whole, its host is the bottleneck.
"""

from __future__ import annotations

import argparse
import time

from mpi4py import MPI

from autotune import parallel
from distributed_dslash import add_block_arguments, block_operator, spinors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser, launches=200)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--policy", default="overlap",
                        help="how a dslash meets its exchange (DistributedWilsonOperator.POLICIES)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    op = block_operator(comm, args, policy=args.policy)
    inp, out = spinors(op.context, op)
    rows = []
    for _ in range(args.repeats):
        for _ in range(5):
            op.dslash_parity(out, inp, 0)
        op.queue.finish()
        comm.Barrier()
        start = time.perf_counter()
        for _ in range(args.launches):
            op.dslash_parity(out, inp, 0)
        enqueued = time.perf_counter()
        op.queue.finish()
        ran = time.perf_counter()
        comm.Barrier()
        everyone = time.perf_counter()
        rows.append([(t - start) / args.launches * 1e6 for t in (enqueued, ran, everyone)])
    print(f"rank {comm.rank} ({op.transport.name}: {op.transport.description}; policy "
          f"{args.policy}): us a call, "
          "host enqueued / queue ran / every rank: "
          + "; ".join(f"{a:.1f} / {b:.1f} / {c:.1f}" for a, b, c in rows), flush=True)


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
