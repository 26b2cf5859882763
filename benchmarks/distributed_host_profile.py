"""Where the host's time goes in the distributed dslash: rank 0 prints the functions that took
most of it (cProfile, by their own time) over ``--launches`` calls.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/distributed_host_profile.py
    --dims X Y Z T --grid PX PY PZ PT [--policy overlap] [--launches 2000]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats

from mpi4py import MPI

from autotune import parallel
from distributed_dslash import add_block_arguments, block_operator, spinors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser, launches=2000)
    parser.add_argument("--policy", default="overlap")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    op = block_operator(comm, args, policy=args.policy)
    inp, out = spinors(op.context, op)
    for _ in range(20):  # builds, tuning, warm-up
        op.dslash_parity(out, inp, 0)
    op.queue.finish()
    comm.Barrier()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(args.launches):
        op.dslash_parity(out, inp, 0)
    profile.disable()
    op.queue.finish()
    comm.Barrier()
    if comm.rank == 0:
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("tottime").print_stats(28)
        print(text.getvalue(), flush=True)


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
