"""MPI runs that never hang: one rank's error ends every rank, and a wait for other ranks
gives up with a message after a deadline.

- :func:`abort_on_error` wraps what a rank runs: when it raises, the rank's error is printed
  with its rank number and every rank is aborted (``MPI_Abort``), instead of the others
  waiting forever for a message it will never send.
- :func:`wait` completes non-blocking requests (``Isend``/``Irecv``/``Iallreduce``...) by
  polling them, and raises :class:`MPITimeoutError` naming what it waited for once
  ``AUTOTUNE_MPI_TIMEOUT`` seconds have passed. :func:`allreduce` is a sum over the ranks that
  waits that way.

mpi4py is imported only when these run: importing autotune never starts MPI.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

ENV_TIMEOUT = "AUTOTUNE_MPI_TIMEOUT"
#: seconds a rank waits for an exchange or a collective before it gives up
DEFAULT_TIMEOUT = 600.0
#: a wait polls without pause this long, then sleeps between polls (up to _MAX_NAP)
_SPIN = 1e-3
_MAX_NAP = 1e-3
#: a failing rank waits this long after printing its error before it aborts every rank
_FORWARD_SECONDS = 1.0


class MPITimeoutError(RuntimeError):
    """An exchange or collective did not complete within ``AUTOTUNE_MPI_TIMEOUT`` seconds."""


def timeout_seconds() -> float:
    """``AUTOTUNE_MPI_TIMEOUT`` (seconds, read now), else :data:`DEFAULT_TIMEOUT`; a value that
    is not a positive number is a ValueError that says what to write."""
    raw = os.environ.get(ENV_TIMEOUT, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds > 0: write e.g. "
                         f"{ENV_TIMEOUT}=1200, or unset it for the default {DEFAULT_TIMEOUT:g}")
    return value


def wait(requests: Sequence[Any], what: str, comm: Any = None, timeout: float | None = None,
         labels: Sequence[str] | None = None) -> None:
    """Complete ``requests`` (mpi4py requests), polling: busily for a moment (an exchange
    between GPUs takes microseconds), then with short sleeps (a waiting rank leaves the cores
    to the ranks that work). After ``timeout`` seconds (default :func:`timeout_seconds`) the
    requests still open are cancelled and :class:`MPITimeoutError` says ``what`` this rank
    (of ``comm``) waited for, and (``labels``: one per request) which parts never came."""
    from mpi4py import MPI

    requests = list(requests)
    if not requests:
        return
    limit = timeout_seconds() if timeout is None else timeout
    start = time.monotonic()
    nap = 1e-5
    while not MPI.Request.Testall(requests):
        waited = time.monotonic() - start
        if waited > limit:
            raise MPITimeoutError(_timed_out(requests, what, comm, limit, labels))
        if waited > _SPIN:
            time.sleep(nap)
            nap = min(2 * nap, _MAX_NAP)


def _timed_out(requests: list[Any], what: str, comm: Any, limit: float,
               labels: Sequence[str] | None) -> str:
    """Cancel the requests still open; the message that says what never came."""
    pending = []
    for i, request in enumerate(requests):
        if not request.Test():
            try:
                request.Cancel()
            except Exception:  # noqa: BLE001 - a collective's request cannot be cancelled
                pass
            if labels is not None:
                pending.append(labels[i])
    rank = f"rank {comm.rank} of {comm.size}" if comm is not None else "this rank"
    missing = f" (still waiting for {'; '.join(pending)})" if pending else ""
    return (f"{rank}: {what} did not complete in {limit:g} s{missing}; is that rank stuck, or "
            f"did it die without aborting the run? ({ENV_TIMEOUT} sets the wait, default "
            f"{DEFAULT_TIMEOUT:g} s)")


def allreduce(comm: Any, send: Any, recv: Any, what: str, op: Any = None) -> None:
    """``comm.Allreduce(send, recv, op)`` (default: a sum) that gives up as :func:`wait` does;
    ``what`` names the collective in the error."""
    from mpi4py import MPI

    request = comm.Iallreduce(send, recv, op=MPI.SUM if op is None else op)
    wait([request], f"{what} (an allreduce over all {comm.size} ranks)", comm)


def arrive(comm: Any, what: str) -> None:
    """Wait, as :func:`wait` does (with its deadline), until every rank of ``comm`` has reached
    this point: put ahead of a blocking object collective (``bcast``, ``allgather``), which then completes at once, so that a rank still waiting for another
    (one stuck, or tuning for longer than ``AUTOTUNE_MPI_TIMEOUT``) raises naming ``what``
    instead of waiting forever."""
    wait([comm.Ibarrier()], f"{what} (every rank of {comm.size} reaching it)", comm)


def bcast(comm: Any, obj: Any, what: str, root: int = 0) -> Any:
    """``comm.bcast(obj, root)`` once every rank has arrived (:func:`arrive`)."""
    arrive(comm, what)
    return comm.bcast(obj, root=root)


def allgather(comm: Any, obj: Any, what: str) -> list[Any]:
    """``comm.allgather(obj)`` once every rank has arrived (:func:`arrive`)."""
    arrive(comm, what)
    return comm.allgather(obj)


def _world() -> Any:
    from mpi4py import MPI

    return MPI.COMM_WORLD


@contextlib.contextmanager
def abort_on_error(comm: Any = None, brief: tuple[type[BaseException], ...] = ()
                   ) -> Iterator[None]:
    """Run the body on this rank; if it raises (or exits with a non-zero status), print the
    error to standard error, every line headed ``[rank R]``, and abort every rank of
    ``comm`` (default ``MPI.COMM_WORLD``) with exit status 1, so that no rank waits forever
    for this one. Errors of the ``brief`` classes print as their one-line message (expected
    errors, such as a bad option); others with their traceback."""
    try:
        yield
    except SystemExit as exc:
        if exc.code in (None, 0):
            raise
        _abort(comm, f"exited with status {exc.code}")
    except BaseException as exc:  # noqa: BLE001 - every error must end every rank
        said = (f"{type(exc).__name__}: {exc}" if isinstance(exc, brief)
                else traceback.format_exc().rstrip())
        _abort(comm, said)


def _abort(comm: Any, said: str) -> None:
    comm = _world() if comm is None else comm
    head = f"[rank {comm.rank}]"
    lines = [f"{head} failed; aborting all {comm.size} ranks"]
    lines += [f"{head} {line}" for line in said.splitlines()]
    sys.stdout.flush()
    sys.stderr.write("\n".join(lines) + "\n")
    sys.stderr.flush()
    # MPI_Abort tears the launcher down at once: what this rank wrote would be lost if its
    # launcher (mpiexec's proxy) had not passed it on yet
    time.sleep(_FORWARD_SECONDS)
    comm.Abort(1)
