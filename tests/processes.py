"""Start worker processes together and collect what each reports (for the concurrency tests);
find ``mpiexec`` (for the MPI tests)."""

from __future__ import annotations

import multiprocessing
import shutil
import sys
from pathlib import Path
from typing import Any, Callable


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (the test extra's MPICH wheel), else on PATH."""
    found = Path(sys.executable).with_name("mpiexec")
    if found.exists():
        return str(found)
    path = shutil.which("mpiexec")
    if path is None:
        raise RuntimeError("mpiexec not found: install the test extra (pip install -e '.[test]', "
                           "which brings mpi4py and the mpich wheel)")
    return path


def run_together(target: Callable[..., None], url: str, count: int, timeout: float = 180) -> list[Any]:
    """Run ``target(url, worker, barrier, results)`` in ``count`` spawned processes that start
    their work at one barrier; each puts ``(worker, ..., error or None)`` on ``results``.
    Fails with every worker's traceback if any failed; returns the reports."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(count)
    results = context.Queue()
    processes = [context.Process(target=target, args=(url, w, start, results)) for w in range(count)]
    for process in processes:
        process.start()
    reports = [results.get(timeout=timeout) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [f"worker {report[0]}:\n{report[-1]}" for report in reports if report[-1]]
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in processes] == [0] * count
    return reports
