"""Timing helpers shared by the benchmarks: CUDA-event medians for our queues and for CuPy,
the wall time of a call across MPI ranks, and the range a profiler (Nsight Compute started
with ``--profile-from-start off``) records."""

from __future__ import annotations

import contextlib
import ctypes
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any


def queue_time(queue: Any, fn: Callable[[], Any], repeats: int = 20, batches: int = 7) -> float:
    """Median seconds per call of ``fn`` (which enqueues on our tuning ``queue``), after a
    warm-up: the device's time, not Python's launch time (``CommandQueue.start_tuning``)."""
    fn()
    queue.finish()
    samples = []
    for _ in range(batches):
        queue.start_tuning()
        for _ in range(repeats):
            fn()
        samples.append(queue.stop_tuning() / repeats)
    return statistics.median(samples)


def cupy_time(cupy: Any, fn: Callable[[], Any], repeats: int = 20, batches: int = 7) -> float:
    """Median seconds per call of ``fn`` on CuPy's current stream, timed with CUDA events."""
    fn()
    cupy.cuda.Device().synchronize()
    start, stop = cupy.cuda.Event(), cupy.cuda.Event()
    samples = []
    for _ in range(batches):
        start.record()
        for _ in range(repeats):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) * 1e-3 / repeats)
    return statistics.median(samples)


def ranks_time(comm: Any, queue: Any, fn: Callable[[], Any], launches: int = 1,
               warmup: int = 0) -> float:
    """Wall seconds per call of ``fn`` on every rank of ``comm`` (its work enqueued on
    ``queue``): after ``warmup`` calls, from a barrier with the queue drained to the same again
    after ``launches`` calls, so the slowest rank sets the time."""
    for _ in range(warmup):
        fn()
    queue.finish()
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(launches):
        fn()
    queue.finish()
    comm.Barrier()
    return (time.perf_counter() - start) / launches


def ranks_rounds(comm: Any, queue: Any, rows: dict[str, Callable[[], Any]], rounds: int,
                 launches: int, warmup: int = 10) -> dict[str, list[float]]:
    """Microseconds per call of each of ``rows``' functions (:func:`ranks_time`, every rank of
    ``comm`` together), in ``rounds`` alternating rounds (each row once a round, in order), so
    that a drift of the machine falls on every row alike: each row's list of rounds."""
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            times[name].append(ranks_time(comm, queue, fn, launches, warmup=warmup) * 1e6)
    return times


@contextlib.contextmanager
def profiled(queue: Any) -> Iterator[None]:
    """The body's device work is what a CUDA profiler started with ``--profile-from-start
    off`` records (``cuProfilerStart``/``cuProfilerStop`` around it, the queue drained first
    and last, so no work from before or after falls inside); elsewhere the body alone."""
    if getattr(getattr(queue, "context", None), "backend", None) != "cuda":
        yield
        return
    driver = ctypes.CDLL("libcuda.so.1")

    def call(name: str) -> None:
        with queue.context.thread_scope():  # the driver applies it to the current context
            status = getattr(driver, name)()
        if status != 0:
            raise RuntimeError(f"{name} failed: CUDA error {status}")

    queue.finish()
    call("cuProfilerStart")
    try:
        yield
    finally:
        queue.finish()
        call("cuProfilerStop")
