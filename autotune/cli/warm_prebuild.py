"""``warm``'s compiling ahead on CPU devices: a low-priority process builds the next key's
first candidates while this key is tuned, so that the device compiler's disk cache already
holds them when its turn comes.

On a CPU device the kernels being timed use every core, so nothing is built beside them in
``warm``'s own process (:mod:`.warm_lookahead` is for GPUs). But most of a CPU key's time is
not timing: its candidates' builds, and the first launch of each, where PoCL compiles the
kernel for its work-group size, run on one core while the other waits. PoCL keeps both in its
disk cache (``POCL_CACHE_DIR``), shared by every process of the machine: on the 2-core Intel
Xeon of docs/performance.md a build took 158 ms and its first launch 76 ms with an empty
cache, 36 ms and 18 ms once another process had built and launched the same kernel, and
``warm reduce`` took 19 s instead of 66 s with its kernels in the cache.

So ``warm`` on an OpenCL CPU device (by default; ``--no-prebuild`` turns it off: :func:`wanted`)
starts one helper process at the lowest CPU priority (``nice`` 19) with the keys to tune, in
order, and their search settings. The helper is stopped (``SIGSTOP``) whenever ``warm`` times
a batch and continued (``SIGCONT``) after it (:func:`autotune.accel.timing_listener`): low
priority alone did not keep its work out of the timings on two cores. It leads a process group
of its own, and the signals go to the group: PoCL links each kernel it builds with ``ld``, a
child process, which a signal to the helper alone left running beside the timings. ``warm`` tells
it each key it starts; the helper works on the keys after it, never on one ``warm`` has
reached (it drops a key it is on once ``warm`` gets there), each under
:func:`prebuild_strategy`: the search's warm-start seeds and ``test=`` (what the plans measure
first), up to the key's budget, each built and launched once, unchecked and untimed, into a
throwaway database. The helper writes nothing to the user's database, its output is
discarded, and it stops at its next candidate when ``warm`` ends (or is killed after
:data:`STOP_SECONDS`); a helper that fails costs nothing but its cache entries.
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
from collections.abc import Iterator
from typing import Any

#: Keys to tune, at least, for ``warm --prebuild`` to start the helper (its start costs about a
#: second of one core: a few keys do not pay for it).
MIN_KEYS = 16
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
    """Whether ``warm`` prebuilds: on an OpenCL device, for at least :data:`MIN_KEYS` keys,
    where asked (``--prebuild``) or by default on a CPU device (``--no-prebuild`` turns it
    off). On the 2-core Xeon of docs/performance.md, with the choice's doubt rounds, it took
    ``warm`` from about 5.5 to about 4 minutes with 71-74 of 82 keys within 2% of the best
    known, against 74-75 without it."""
    if choice is None:
        choice = not context.device.is_gpu
    return choice and context.backend == "opencl" and keys >= MIN_KEYS


class Prebuilder:
    """The helper process, seen from ``warm``: :meth:`reached` tells it the key ``warm``
    starts, :meth:`timing` holds it while a batch is timed. Does nothing where no helper
    runs."""

    def __init__(self, process: subprocess.Popen | None):
        self.process = process
        self._timing = 0  # warm's batches being timed now (threads may time at once)
        self._lock = threading.Lock()

    def timing(self, started: bool) -> None:
        """``warm``'s timing listener: the helper is stopped while any batch is timed and
        continued once none is. (Keeping it stopped for a tenth of a second after each batch,
        in case the next one follows, made warm slower and its choices no better.)"""
        if self.process is None or not CAN_HOLD:
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
        """Continue the helper whatever is being timed (before it is told to stop)."""
        if self.process is not None and CAN_HOLD:
            with self._lock:
                self._timing = 0
                self._signal(signal.SIGCONT)

    def _signal(self, number: int) -> None:
        try:
            _signal_group(self.process, number)  # type: ignore[arg-type]
        except (OSError, AttributeError):  # it has ended: warm goes on without it
            self.process = None

    def reached(self, index: int) -> None:
        """``warm`` starts its ``index``-th key to tune (0-based, in the jobs' order)."""
        if self.process is None or self.process.stdin is None:
            return
        try:
            self.process.stdin.write(f"{index}\n".encode())
            self.process.stdin.flush()
        except (OSError, ValueError):  # it has ended: warm goes on without it
            self.process = None


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
                enabled: bool) -> Iterator[Prebuilder]:
    """Within the block, a helper process prebuilds ``jobs`` ((registered template, key
    arguments, search settings), in tuning order) on the device ``selector``, ahead of the key
    the :class:`Prebuilder` says ``warm`` has reached, held while this process times a batch;
    stopped at the end of the block. No helper where not ``enabled``, or where it cannot
    start."""
    from ..accel import timing_listener

    process = _start(selector, jobs) if enabled and jobs else None
    helper = Prebuilder(process)
    try:
        with timing_listener(helper.timing) if process is not None else contextlib.nullcontext():
            yield helper
    finally:
        if process is not None:
            helper.release()
            # every key reached: it stops at its next candidate, or is killed soon after
            helper.reached(len(jobs))
            with contextlib.suppress(OSError):
                process.stdin.close()  # type: ignore[union-attr]
            try:
                process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                _kill(process)


def _start(selector: str, jobs: list[tuple[Any, dict[str, Any], dict[str, Any]]]
           ) -> subprocess.Popen | None:
    log = logging.getLogger("autotune")
    try:
        request = pickle.dumps((selector, jobs), protocol=pickle.HIGHEST_PROTOCOL)
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
    """A search strategy that builds and launches once what a search would measure first: the
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
        _launch_once(ctx.evaluator.generate, ctx.config(key))
    _check_turn()
    ctx.evaluate([ctx.config(start)])


def _launch_once(generate: Any, config: dict[str, Any]) -> None:
    """Build ``config``'s candidate and launch it once, unchecked and untimed."""
    from ..tune.measurement import Measurement

    try:
        measure = generate(**config)
        if measure is None:
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
    """The helper: read the jobs, then prebuild each key ``warm`` has not reached yet."""
    with contextlib.suppress(OSError, AttributeError):  # (no nice on Windows)
        os.nice(19)
    _end_with_parent()
    stream = sys.stdin.buffer
    (size,) = _HEADER.unpack(stream.read(_HEADER.size))
    selector, jobs = pickle.loads(stream.read(size))
    threading.Thread(target=_follow, args=(stream,), daemon=True).start()
    from .. import accel
    from ..tune import use_database
    from ..tune.search import search_settings

    logging.disable(logging.CRITICAL)
    context = accel.create_some_context(selector)
    with tempfile.TemporaryDirectory() as folder, use_database(os.path.join(folder, "p.db")):
        for index, (template, config, settings) in enumerate(jobs):
            _Progress.current = index
            if index <= _Progress.reached:
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
