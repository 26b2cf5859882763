"""Run by tests/test_collective.py: ``tune.collective`` on real ranks, each rank seeing its own
timings. Under MPI: ``mpiexec -n N python -m mpi4py tests/mpi_collective.py MODE OUT``; under
torch.distributed (gloo): N processes ``python tests/mpi_collective.py --torch MODE OUT`` with
``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set.

Every rank opens the device (``AUTOTUNE_DEVICE``) and tunes :func:`rank_timed`, a plain tuned
function whose candidates' times depend on the rank: rank r's fastest block is ``(r + 1) % 4``, so
ranks that tune for themselves choose differently. Each rank writes ``OUT/rank<r>.json``: per
case, the parameters it got, the candidates it measured itself, and what it raised or warned.

Modes:

- ``cases``: ``alone`` (no collective: each rank tunes for itself, into its own database
  ``OUT/alone<r>.db``), then in ``AUTOTUNE_DB``: ``same`` (every rank asks for one key, twice,
  then once more after the block), ``differ`` (even and odd ranks ask for different keys:
  each key by a rank that asked, a warning), ``differ-error`` (the same with
  ``mismatch="error"``), ``fails`` (the tuning raises on the rank that runs it).
- ``lonely``: the last rank makes one tuned call more than the others: it must give up after
  ``AUTOTUNE_MPI_TIMEOUT`` seconds naming itself and its key (and abort the run).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

from autotune import accel, parallel, tune
from autotune.tune.collective import CollectiveError, KeyMismatchWarning

BLOCKS = [0, 1, 2, 3]
measured: Counter = Counter()  #: per case, the candidates this rank measured
RANK = [0]  #: this process's rank (set in main)


@tune.autotuner(test={"block": 0}, space={"block": BLOCKS}, version=1)
def rank_timed(context, n, case):
    """Rank r finds block (r + 1) % 4 fastest: its own timings (rank 0's choice is not the
    test= block)."""
    favourite = (RANK[0] + 1) % len(BLOCKS)

    def generate(block):
        measured[case] += 1
        seconds = (1 + abs(block - favourite)) * 1e-6 * n / 64
        return lambda iterations: seconds

    return tune.autotune(generate)


@tune.autotuner(test={"block": 0}, space={"block": BLOCKS}, version=1)
def failing(context, n):
    raise RuntimeError(f"no candidate works for n={n} on purpose")


def outcome(call) -> dict:
    """What ``call()`` gave on this rank: parameters, or the error, and the warnings."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            result = {"params": call()}
        except Exception as exc:  # noqa: BLE001 - the test reads which error each rank had
            result = {"error": type(exc).__name__, "message": str(exc)}
    result["warnings"] = [str(w.message) for w in seen if issubclass(w.category,
                                                                     KeyMismatchWarning)]
    return result


def cases(comm, context, out: Path, rank: int) -> dict:
    report = {}
    with tune.use_database(f"sqlite:///{out / f'alone{rank}.db'}"):
        report["alone"] = outcome(lambda: rank_timed(context, 64, "alone"))
    tune.clear_memo()

    def same():
        with tune.collective(comm):
            first = rank_timed(context, 64, "same")
            again = rank_timed(context, 64, "same")  # the memo, on every rank
        assert again == first, (first, again)
        after = rank_timed(context, 64, "same")  # outside: what this rank remembers
        assert after == first, (first, after)
        return first

    report["same"] = outcome(same)

    def differ(mismatch):
        n = 64 if rank % 2 == 0 else 128
        with tune.collective(comm, mismatch=mismatch):
            return rank_timed(context, n, f"differ-{mismatch}")

    report["differ"] = outcome(lambda: differ("warn"))
    report["differ-error"] = outcome(lambda: differ("error"))

    def fails():
        with tune.collective(comm):
            return failing(context, 64)

    report["fails"] = outcome(fails)
    return report


def lonely(comm, context, rank: int, size: int) -> dict:
    with tune.collective(comm):
        params = rank_timed(context, 32, "lonely")
        if rank == size - 1:  # a tuned call no other rank makes
            rank_timed(context, 16, "lonely")
    return {"params": params}


def main() -> None:
    args = sys.argv[1:]
    use_torch = args[:1] == ["--torch"]
    mode, out = args[-2], Path(args[-1])
    if use_torch:
        import torch.distributed as dist

        dist.init_process_group("gloo")
        comm, rank, size = dist, dist.get_rank(), dist.get_world_size()
    else:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, size = comm.rank, comm.size
    RANK[0] = rank
    context = accel.create_some_context()
    started = time.monotonic()
    if mode == "cases":
        report = cases(comm, context, out, rank)
    elif mode == "lonely":
        report = lonely(comm, context, rank, size)
    else:
        raise ValueError(f"unknown mode {mode!r}: use cases or lonely")
    report = {"rank": rank, "size": size, "cases": report, "measured": dict(measured),
              "seconds": time.monotonic() - started}
    (out / f"rank{rank}.json").write_text(json.dumps(report))
    if use_torch:
        dist.destroy_process_group()


if __name__ == "__main__":
    if "--torch" in sys.argv:
        main()
    else:
        with parallel.abort_on_error(brief=(CollectiveError, parallel.MPITimeoutError)):
            main()
