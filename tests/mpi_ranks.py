"""Run by tests/test_mpi_ranks.py under ``mpiexec -n N python tests/mpi_ranks.py MODE``: how a
run's ranks choose their devices, and that a rank's failure or a stuck rank ends the run.

- ``device``: rank 0 prints one JSON list: per rank, the device its local rank is given
  (``accel.device_for_local_rank``) and the one ``rank_context`` opened.
- ``raise``: two ranks start a halo exchange (the host transport); rank 1 raises before it
  finishes, rank 0 waits for rank 1's face. The run must end at once with rank 1's error.
- ``stall``: as ``raise``, but rank 1 sleeps instead of raising (stuck, alive): rank 0's wait
  must give up after ``AUTOTUNE_MPI_TIMEOUT`` seconds, naming rank 1, and end the run.
- ``stall-peer``: as ``stall``, with the peer transport and its stream-ordered flags (CUDA):
  rank 0's queue waits on the device and its host blocks in ``queue.finish()``; the watch
  thread must name rank 1 after ``AUTOTUNE_MPI_TIMEOUT`` seconds and release the queue, and
  the next exchange raise, ending the run.
- ``slow-root``: rank 0 "tunes" (sleeps) past ``AUTOTUNE_MPI_TIMEOUT`` before it broadcasts
  its parameters: rank 1 must give up naming the broadcast it waited for.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from autotune import accel, parallel
from operations.lqcd.distributed import rank_context
from operations.lqcd.transport import HostStaged, Route, make_transport


def devices(comm) -> None:
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    spec = accel.device_for_local_rank(local.rank)
    local.Free()
    context = rank_context(comm)
    mine = {"rank": comm.rank, "selector": spec.selector,
            "opened": context.device == spec.identity}
    everyone = comm.gather(mine)
    if comm.rank == 0:
        print(json.dumps(everyone))


def exchange(comm, mode: str) -> None:
    context = accel.create_some_context()
    queue = context.create_command_queue()
    other = 1 - comm.rank
    face = slice(0, 4)
    transport = HostStaged(comm, context, queue, 4, np.float64,
                           [Route(dest=other, source=other, send=face, recv=face, tag=3)])
    send = context.to_device(queue, np.full(4, comm.rank, np.float64))
    transport.start(send, queue.mark())
    if comm.rank == 1:
        if mode == "raise":
            raise RuntimeError("rank 1 fails on purpose in the middle of a halo exchange")
        time.sleep(120)  # stuck: alive, never finishing its part
    transport.finish()


def peer_stall(comm) -> None:
    context = rank_context(comm, "cuda")
    queue = context.create_command_queue()
    other = 1 - comm.rank
    face = slice(0, 4)
    transport = make_transport("peer", comm, context, queue, 4, np.float64,
                               [Route(dest=other, source=other, send=face, recv=face, tag=3)])
    if transport.signal != "flags":
        raise RuntimeError(f"the peer transport signals by {transport.signal}, not by flags")
    send = context.to_device(queue, np.full(4, comm.rank, np.float64))
    for _ in range(2):
        transport.start(send, queue.mark())
        transport.finish()
        if comm.rank == 1:
            time.sleep(120)  # stuck after the first exchange: alive, never sending again
    queue.finish()  # rank 0: blocked until the watch gives up on rank 1
    transport.start(send, queue.mark())  # raises what the watch found


def slow_root(comm) -> None:
    if comm.rank == 0:
        time.sleep(120)  # tuning for longer than the ranks agreed to wait
    parallel.bcast(comm, {"wgs": 64} if comm.rank == 0 else None,
                   "the tuned parameters from rank 0")


def main() -> None:
    comm = MPI.COMM_WORLD
    mode = sys.argv[1]
    if mode == "device":
        devices(comm)
    elif mode == "slow-root":
        slow_root(comm)
    elif mode == "stall-peer":
        peer_stall(comm)
    elif mode in ("raise", "stall"):
        if comm.size != 2:
            raise ValueError(f"{mode} runs on 2 ranks, not {comm.size}")
        exchange(comm, mode)
    else:
        raise ValueError(f"unknown mode {mode!r}: use device, raise, stall, stall-peer or slow-root")
    sys.stdout.flush()


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
