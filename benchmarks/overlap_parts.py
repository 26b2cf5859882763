"""Why the overlapped dslash costs more than its interior update: the overlap's parts run
side by side on the same two queues, leaving one part out at a time.

Usage (a machine with N GPUs): mpiexec -n N python benchmarks/overlap_parts.py
    --dims X Y Z T --grid PX PY PZ PT [--precision single] [--reconstruct 12]
    [--launches 200] [--rounds 3] [--json FILE]

Policy "overlap" runs the interior update on the operator's queue and, on the transport's
high-priority copies queue beside it: the packing, the copies into the neighbours' ghost zones,
the wait for the neighbours' counts and the exterior update. Each row below runs a subset of
those parts on the same queues (recorded as one CUDA graph where the device can, as the
dslash is; the rows without an exchange read the ghost zone as it stands), timed as
``distributed_dslash.py`` times: wall microseconds per call over ``--launches`` calls, every
rank synchronised around them, the median of ``--rounds`` alternating rounds. Where
"interior, then exterior" equals the dslash while "interior beside exterior" is near the
interior alone, the exterior waits for something the interior holds back (the faces' arrival,
or a queue); the rows between say which.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

from mpi4py import MPI

from autotune import parallel
from distributed_dslash import add_block_arguments, block_operator, spinors
from timing import ranks_rounds


def parts(op, out, inp) -> dict[str, Callable[[], None]]:
    """The rows: each a function that enqueues one call's parts on the operator's queue and
    the transport's copies queue, and joins them back."""
    queue, transport = op.queue, op.transport
    copies = transport.copies
    interior = op.dslash_kernel(out, inp, 0, "interior")
    exterior_here = op.dslash_kernel(out, inp, 0, "exterior")
    exterior = op.dslash_kernel(out, inp, 0, "exterior", queue=copies)

    def beside(*steps: Callable[[], None]) -> Callable[[], None]:
        def call() -> None:
            copies.wait_for_queue(queue)
            interior()
            for step in steps:
                step()
            queue.wait_for_queue(copies)
        return call

    def pack() -> None:
        op.pack_faces(inp, 1, copies)

    def ship() -> None:
        transport.start(transport.send, copies.mark())

    def arrive() -> None:
        transport.finish_on_copies()

    rows = {
        "dslash (overlap)": lambda: op.dslash_parity(out, inp, 0),
        "interior alone": interior,
        # one launch for every site, the ghost zone as it stands: the whole-block kernel (every
        # hop may cross the cut) and the fused one (its boundary groups last, nothing awaited)
        "whole-block kernel alone": op.dslash_kernel(out, inp, 0, "all"),
        "fused kernel alone": op.dslash_kernel(out, inp, 0, "fused"),
        "interior, then exterior": lambda: (interior(), exterior_here()),
        "interior beside exterior": beside(exterior),
        "interior beside pack": beside(pack),
        "interior beside pack, exterior": beside(pack, exterior),
    }
    if transport.replayable:  # the flags: nothing waits on the host
        rows["interior beside pack, ship, exterior (no wait)"] = beside(pack, ship, exterior)
        rows["interior beside pack, ship, wait (no exterior)"] = beside(pack, ship, arrive)
        rows["pack, ship, wait alone"] = lambda: (copies.wait_for_queue(queue), pack(), ship(),
                                                  arrive(), queue.wait_for_queue(copies))
    return rows


def recorded(op, name: str, enqueue: Callable[[], None]) -> Callable[[], None]:
    """``enqueue`` recorded once and launched (where the queue can record, and the row is not
    the dslash, which records itself), its value operations taking the transport's count."""
    queue, transport = op.queue, op.transport
    if name.startswith("dslash") or not queue.can_capture:
        return enqueue
    enqueue()  # built and mapped outside the recording
    queue.finish()
    with queue.capture() as captured:
        enqueue()
    work = captured.work
    ships = "ship" in name
    return lambda: work.launch(transport.advance() if ships else None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_block_arguments(parser, launches=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    op = block_operator(comm, args)
    if not op.face_elements:
        raise SystemExit("nothing is partitioned: run it with a grid that cuts the lattice")
    inp, out = spinors(op.context, op)
    rows = {name: recorded(op, name, fn) for name, fn in parts(op, out, inp).items()}
    times = ranks_rounds(comm, op.queue, rows, args.rounds, args.launches)
    if comm.rank == 0:
        print(f"{comm.size} ranks, {tuple(args.dims)} over {tuple(args.grid)}, {args.precision} "
              f"{args.reconstruct}, {op.transport.name} transport, recorded: "
              f"{op.queue.can_capture}, dslash {op.template.parameters}")
        for name, values in times.items():
            print(f"  {name:50s} {statistics.median(values):7.1f} us  ("
                  + ", ".join(f"{v:.1f}" for v in values) + ")")
        if args.json:
            args.json.write_text(json.dumps({
                "dims": args.dims, "grid": args.grid, "precision": args.precision,
                "reconstruct": args.reconstruct, "ranks": comm.size,
                "us": {name: statistics.median(v) for name, v in times.items()},
                "rounds": times}, indent=1))


if __name__ == "__main__":
    with parallel.abort_on_error():
        main()
