"""``warm``'s compiling ahead: helper processes build the next keys' first candidates while
this key is tuned, so that the device compiler's disk cache already holds them when their turn
comes.

Most of a key's time at a small budget is not timing. On a CPU device it is its candidates'
builds and the first launch of each, where PoCL compiles the kernel for its work-group size,
on one core while the other waits. PoCL keeps both in its disk cache (``POCL_CACHE_DIR``),
shared by every process of the machine: on the 2-core Intel Xeon of docs/performance.md a build
took 158 ms and its first launch 76 ms with an empty cache, 36 ms and 18 ms once another process
had built and launched the same kernel, and ``warm reduce`` took 19 s instead of 66 s with its
kernels in the cache. On a CUDA GPU it is NVRTC's builds (0.05 s for a BLAS pass, 0.3-1 s for a
Wilson dslash on an H200's host: 35 s of the 77 s that a fresh H200's keys took at the floor of
``--max-minutes 1``), which :mod:`autotune.accel.kernel_cache` keeps on disk.

So ``warm`` (by default on an OpenCL CPU device, and on a CUDA device where the kernel cache is
on; ``--no-prebuild`` turns it off: :func:`wanted`) starts helper processes at the lowest CPU
priority (``nice`` 19) with the keys to tune, in order, and their search settings: one on a
CPU device (its two cores are warm's), :func:`helpers_for` on a GPU's host, each taking every
n-th key. The helpers are stopped (``SIGSTOP``) whenever ``warm`` times a batch and continued
(``SIGCONT``) after it (:func:`autotune.accel.timing_listener`): low priority alone did not
keep their work out of the timings on two cores. Each leads a process group of its own, and the
signals go to the group: PoCL links each kernel it builds with ``ld``, a child process, which a
signal to the helper alone left running beside the timings. ``warm`` tells them each key it
starts; a helper works on the keys after it, never on one ``warm`` has reached (it drops a key
it is on once ``warm`` gets there), each under :func:`prebuild_strategy`: the search's
warm-start seeds and ``test=`` (what the plans measure first), up to the key's budget, each
built (and, on a CPU device, launched) once, unchecked and untimed, into a throwaway database.
The helpers write nothing to the user's database, their output is discarded, and they stop at
their next candidate when ``warm`` ends (or are killed after :data:`STOP_SECONDS`); a helper
that fails costs nothing but its cache entries.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

#: Keys to tune, at least, for ``warm --prebuild`` to start the helper (its start costs about a
#: second of one core: a few keys do not pay for it).
MIN_KEYS = 16
#: Most helper processes on a GPU's host (each its own device context and copy of a key's data).
MAX_HELPERS = 4
#: Device memory for each helper on a GPU: four on an 80 GB GPU, one on a 16 GB one
MEMORY_PER_HELPER = 12 << 30
#: Configurations a search's prebuild takes where its budget is not known.
DEFAULT_EVALS = 8
#: Seconds the helper is given to stop at its next candidate when ``warm`` ends, before it is
#: killed (which is safe: PoCL writes each cache file under a temporary name and renames it).
STOP_SECONDS = 0.5
#: Whether a process can be stopped and continued here (POSIX signals).
CAN_HOLD = hasattr(signal, "SIGSTOP") and hasattr(signal, "SIGCONT")
_HEADER = struct.Struct("<Q")


class _Stop(Exception):
    """``warm`` has reached the key the helper is on."""


def wanted(context: Any, keys: int, choice: bool | None) -> bool:
    """Whether ``warm`` prebuilds, for at least :data:`MIN_KEYS` keys: where the device's
    compiler keeps a disk cache (OpenCL, whose drivers do; CUDA with NVRTC and the kernel cache
    on), where asked (``--prebuild``) or by default on an OpenCL CPU device and a CUDA device
    (``--no-prebuild`` turns it off). On the 2-core Xeon of docs/performance.md, with the
    choice's doubt rounds, it took ``warm`` from about 5.5 to about 4 minutes with 71-74 of 82
    keys within 2% of the best known, against 74-75 without it."""
    from ..accel import kernel_cache

    cuda = (context.backend == "cuda" and getattr(context, "compiler", "") == "nvrtc"
            and kernel_cache.directory() is not None)
    if choice is None:
        choice = cuda or not context.device.is_gpu
    return bool(choice) and (context.backend == "opencl" or cuda) and keys >= MIN_KEYS


def helpers_for(context: Any, workers: int = 1) -> int:
    """How many helper processes prebuild: one on a CPU device (the cores are the timed
    kernels'); on a GPU one for each four of the host's cores (shared by the ``workers`` that
    warm at once: ``--jobs``, MPI ranks, the devices of a class) and each
    :data:`MEMORY_PER_HELPER` of the device's memory (a helper holds a key's data, as ``warm``
    does: up to a quarter of the memory of a small GPU for a BLAS key), at least one and at
    most :data:`MAX_HELPERS`."""
    if not context.device.is_gpu:
        return 1
    memory = getattr(context.device, "global_memory", 0) or 0
    cores = (os.cpu_count() or 1) // max(1, workers)
    return max(1, min(MAX_HELPERS, cores // 4, memory // MEMORY_PER_HELPER))


class Prebuilder:
    """The helper processes, seen from ``warm``: :meth:`reached` tells them the key ``warm``
    starts, :meth:`timing` holds them while a batch is timed. Does nothing where no helper
    runs."""

    def __init__(self, processes: subprocess.Popen | list[subprocess.Popen] | None):
        if processes is None:
            processes = []
        self.processes: list[subprocess.Popen] = (
            [processes] if isinstance(processes, subprocess.Popen) else list(processes))
        self._timing = 0  # warm's batches being timed now (threads may time at once)
        self._lock = threading.Lock()

    @property
    def process(self) -> subprocess.Popen | None:
        """The first helper still running (None: none is)."""
        return self.processes[0] if self.processes else None

    def timing(self, started: bool) -> None:
        """``warm``'s timing listener: the helpers are stopped while any batch is timed and
        continued once none is. (Keeping them stopped for a tenth of a second after each
        batch, in case the next one follows, made warm slower and its choices no better.)"""
        if not self.processes or not CAN_HOLD:
            return
        with self._lock:
            if started:
                self._timing += 1
                if self._timing == 1:
                    self._signal(signal.SIGSTOP)
            elif self._timing > 0:
                self._timing -= 1
                if self._timing == 0:
                    self._signal(signal.SIGCONT)

    def release(self) -> None:
        """Continue the helpers whatever is being timed (before they are told to stop)."""
        if self.processes and CAN_HOLD:
            with self._lock:
                self._timing = 0
                self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        for process in list(self.processes):
            try:
                _signal_group(process, number)
            except (OSError, AttributeError):  # it has ended: warm goes on without it
                self.processes.remove(process)

    def reached(self, index: int) -> None:
        """``warm`` starts its ``index``-th key to tune (0-based, in the jobs' order)."""
        for process in list(self.processes):
            try:
                assert process.stdin is not None
                process.stdin.write(f"{index}\n".encode())
                process.stdin.flush()
            except (OSError, ValueError, AssertionError):  # it has ended: warm goes on
                self.processes.remove(process)


def _signal_group(process: subprocess.Popen, number: int) -> None:
    """Signal the helper and every process it started (its process group, which it leads:
    :func:`_spawn`): the device compiler's linker runs as a child of it (PoCL runs ``ld`` for
    each kernel it builds), and a linker left running while a batch is timed disturbed the
    timing. Where process groups do not exist, the helper alone."""
    if hasattr(os, "killpg") and os.getpgid(process.pid) == process.pid:
        os.killpg(process.pid, number)
    else:
        os.kill(process.pid, number)


def _spawn(arguments: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start a helper leading a process group of its own (POSIX), so that :func:`_signal_group`
    holds and ends whatever it starts with it."""
    return subprocess.Popen(arguments, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env,
                            start_new_session=hasattr(os, "killpg"))


def _kill(process: subprocess.Popen) -> None:
    """End the helper and whatever it started, and reap it."""
    with contextlib.suppress(OSError):  # (it has ended already)
        if hasattr(os, "killpg"):
            _signal_group(process, signal.SIGKILL)
        else:
            process.kill()
    process.wait()


@contextlib.contextmanager
def prebuilding(selector: str, jobs: list[tuple[Any, dict[str, Any], dict[str, Any]]],
                enabled: bool, helpers: int = 1) -> Iterator[Prebuilder]:
    """Within the block, ``helpers`` processes prebuild ``jobs`` ((registered template, key
    arguments, search settings), in tuning order; helper ``i`` takes every ``helpers``-th key
    from the ``i``-th) on the device ``selector``, ahead of the key the :class:`Prebuilder`
    says ``warm`` has reached, held while this process times a batch; stopped at the end of
    the block. No helper where not ``enabled``, or where none can start."""
    from ..accel import timing_listener

    processes = [p for p in (_start(selector, jobs, i, helpers) for i in range(max(1, helpers)))
                 if p is not None] if enabled and jobs else []
    helper = Prebuilder(processes)
    try:
        with timing_listener(helper.timing) if processes else contextlib.nullcontext():
            yield helper
    finally:
        if processes:
            helper.release()
            # every key reached: they stop at their next candidate, or are killed soon after
            helper.reached(len(jobs))
            for process in processes:
                with contextlib.suppress(OSError):
                    process.stdin.close()  # type: ignore[union-attr]
            deadline = time.monotonic() + STOP_SECONDS
            for process in processes:
                try:
                    process.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    _kill(process)


def _start(selector: str, jobs: list[tuple[Any, dict[str, Any], dict[str, Any]]],
           part: int = 0, parts: int = 1) -> subprocess.Popen | None:
    log = logging.getLogger("autotune")
    try:
        request = pickle.dumps((selector, jobs, part, parts), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - a template that cannot travel: no prebuild
        log.info("warm: no compiling ahead (%s)", exc)
        return None
    # (not recording misses into the user's AUTOTUNE_RECORD file: its keys are warm's)
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_RECORD"}
    try:
        process = _spawn([sys.executable, "-m", "autotune.cli.warm_prebuild"], env)
    except OSError as exc:  # it could not start: warm goes on without it
        log.info("warm: no compiling ahead (%s)", exc)
        return None
    try:
        assert process.stdin is not None
        process.stdin.write(_HEADER.pack(len(request)) + request)
        process.stdin.flush()
    except OSError as exc:  # it died at once
        log.info("warm: no compiling ahead (%s)", exc)
        _kill(process)
        return None
    return process


def prebuild_strategy(ctx: Any) -> None:
    """A search strategy that builds (and launches once, where the device compiles at the
    first launch: :attr:`_Progress.launch`) what a search would measure first: the
    warm-start seeds and ``test=`` (or, without seeds, the first configuration and its
    neighbours), up to the budget; then measures the first of them, so that the search has a
    result (a template's next search starts from it). Stops once ``warm`` reaches the key."""
    from ..tune.search import current_run

    budget = ctx.evaluator.budget.max_evals or DEFAULT_EVALS
    run = current_run()
    first = [*ctx.seeds, *([run.baseline] if run is not None and run.baseline else [])]
    keys = list(dict.fromkeys(ctx.key(c) for c in first if set(c) == set(ctx.names)))
    start = next((k for k in keys if k in ctx.valid), ctx.key(ctx.configs[0]))
    if not ctx.seeds:
        keys += [k for k in [start, *ctx.neighbours(start)] if k not in keys]
    for key in keys[:max(budget, len(ctx.seeds) + 1)]:
        _check_turn()
        _launch_once(ctx.evaluator.generate, ctx.config(key), _Progress.launch)
    _check_turn()
    ctx.evaluate([ctx.config(start)])


def _launch_once(generate: Any, config: dict[str, Any], launch: bool = True) -> None:
    """Build ``config``'s candidate and (``launch``) launch it once, unchecked and untimed."""
    from ..tune.measurement import Measurement

    try:
        measure = generate(**config)
        if measure is None:
            return
        if not launch:
            if isinstance(measure, Measurement):
                measure.finish()
            return
        if isinstance(measure, Measurement):
            try:
                if measure.setup is not None:
                    measure.setup()
                measure.run()
                measure.queue.finish()
            finally:
                measure.finish()
        else:
            measure(1)
    except Exception:  # noqa: BLE001 - a candidate that fails here fails in warm too, and says so
        pass


class _Progress:
    """In the helper: the key ``warm`` has reached (read from standard input by a thread) and
    the key the helper is on."""

    reached = -1
    current = -1
    #: whether a candidate is launched once after its build: on CPU devices, where PoCL
    #: compiles a kernel for its work-group size at its first launch (a GPU's build is whole)
    launch = True


def _check_turn() -> None:
    """Stop the key the helper is on once ``warm`` has reached it (outside a helper: never)."""
    if 0 <= _Progress.current <= _Progress.reached:
        raise _Stop


def _follow(stream: Any) -> None:
    for line in stream:
        with contextlib.suppress(ValueError):
            _Progress.reached = max(_Progress.reached, int(line))
    _Progress.reached = 1 << 62  # warm has closed the pipe: it is done, or gone


def _end_with_parent() -> None:
    """On Linux, the helper is killed when ``warm``'s process ends, however it ends (a helper
    stopped by :meth:`Prebuilder.timing` would otherwise wait forever once ``warm`` is killed)."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # warm ended before that took effect
        os._exit(0)


def serve() -> None:
    """The helper: read the jobs and its part of them, then prebuild each key of its part
    that ``warm`` has not reached yet."""
    with contextlib.suppress(OSError, AttributeError):  # (no nice on Windows)
        os.nice(19)
    _end_with_parent()
    stream = sys.stdin.buffer
    (size,) = _HEADER.unpack(stream.read(_HEADER.size))
    selector, jobs, part, parts = pickle.loads(stream.read(size))
    threading.Thread(target=_follow, args=(stream,), daemon=True).start()
    from .. import accel
    from ..tune import use_database
    from ..tune.search import search_settings

    logging.disable(logging.CRITICAL)
    context = accel.create_some_context(selector)
    _Progress.launch = not context.device.is_gpu
    with tempfile.TemporaryDirectory() as folder, use_database(os.path.join(folder, "p.db")):
        for index, (template, config, settings) in enumerate(jobs):
            _Progress.current = index
            if index <= _Progress.reached or index % parts != part:
                continue
            # (no time limit and no resuming: a setting left None keeps the default)
            chosen = {**{k: v for k, v in settings.items() if k not in ("max_seconds", "resume")},
                      "strategy": prebuild_strategy, "settle": 0}
            try:
                with search_settings(**chosen):
                    template.retune(context, config)
            except Exception:  # noqa: BLE001 - the key is warm's to tune and report (_Stop too)
                continue


if __name__ == "__main__":
    serve()
