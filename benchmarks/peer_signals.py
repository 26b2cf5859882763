"""The peer transport's signals between two GPUs: a stream-value ping-pong, and the exchange
alone with the MPI token against the stream-ordered flags.

Usage (a machine with two GPUs): mpiexec -n 2 python benchmarks/peer_signals.py [--faces MIB]

Rows (rank by rank): the round trip of a counter written into the other GPU's memory
(``CommandQueue.write_value``) and waited for on the device (``wait_value``), over 10 and 1000
rounds; a local counter write, enqueued and run; then, for each signal in turn (token, flags,
token, flags), the exchange alone (two faces of ``--faces`` MiB each way: ``start`` and
``finish``, 200 times, the host's time per exchange once the queue has run them), and the same
with the host waiting for its copies each time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from mpi4py import MPI

from autotune import parallel
from operations.lqcd.distributed import rank_context
from operations.lqcd.transport import PeerCopy, Route


def ping_pong(comm, context, queue) -> None:
    other = 1 - comm.rank
    flags = context.zeros(queue, 4, np.uint32)
    queue.finish()
    remote = context.open_shared(comm.allgather(context.share(flags))[other], 4, np.uint32)
    done = 0
    for rounds in (10, 1000):
        comm.Barrier()
        start = time.perf_counter()
        for i in range(done + 1, done + rounds + 1):
            if comm.rank == 0:
                queue.write_value(remote, 0, i)
                queue.wait_value(flags, 0, i)
            else:
                queue.wait_value(flags, 0, i)
                queue.write_value(remote, 0, i)
        queue.finish()
        done += rounds
        seconds = (time.perf_counter() - start) / rounds
        print(f"rank {comm.rank}: counter ping-pong, round trip {seconds * 1e6:.1f} us "
              f"({rounds} rounds)", flush=True)
    start = time.perf_counter()
    for i in range(1000):
        queue.write_value(flags, 2, i)
    queue.finish()
    print(f"rank {comm.rank}: a local counter write, enqueued and run: "
          f"{(time.perf_counter() - start) * 1e3:.1f} us", flush=True)


def exchanges(comm, context, queue, mib: float) -> None:
    other = 1 - comm.rank
    face = int(mib * 2**20) // 8  # complex64 elements
    size = 2 * face
    routes = [Route(dest=other, source=other, send=slice(0, face), recv=slice(face, size), tag=6),
              Route(dest=other, source=other, send=slice(face, size), recv=slice(0, face), tag=7)]
    for signal in ("token", "flags", "token", "flags"):
        transport = PeerCopy(comm, context, queue, size, np.complex64, routes, signal=signal)
        transport.open(comm.allgather(transport.shared_handles()))
        for host_waits in (False, True):
            for calls in (20, 200):  # the first 20 a warm-up
                queue.finish()
                comm.Barrier()
                start = time.perf_counter()
                for _ in range(calls):
                    transport.start(transport.send, queue.mark())
                    if host_waits:
                        transport.copies.mark().wait()
                    transport.finish()
                queue.finish()
                seconds = (time.perf_counter() - start) / calls
            what = "copies waited for by the host" if host_waits else "alone"
            print(f"rank {comm.rank}: exchange {what} ({signal}): {seconds * 1e6:.1f} us",
                  flush=True)
        comm.Barrier()
        transport.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faces", type=float, default=1.5, help="MiB a face (two each way)")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    if comm.size != 2:
        raise SystemExit("run on two ranks: mpiexec -n 2 python benchmarks/peer_signals.py")
    context = rank_context(comm)
    queue = context.create_command_queue()
    if not queue.stream_values:
        raise SystemExit(f"{context.device.name}: no stream memory operations (CUDA only)")
    ping_pong(comm, context, queue)
    exchanges(comm, context, queue, args.faces)


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
