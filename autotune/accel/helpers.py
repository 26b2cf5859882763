"""Helper processes that render kernel templates (and compile CUDA with NVRTC) for a thread
that must not hold this process's interpreter lock while it builds.

Rendering a large template is Python work: tens of milliseconds with the interpreter lock held.
Online tuning builds its candidates in background threads while the computation it tunes runs
in the main thread, which needs the lock for every launch; a few seconds of rendering there
would stall the computation for as long. Builds inside :func:`builds_in_helpers` go to one of a
few helper processes instead (see :meth:`Context.build`); the calling thread waits on a pipe,
without the lock.

The helpers run ``python -m autotune.accel.helper_process``; requests and replies
are pickled over their standard input and output (both ends are this code). A helper that
cannot do a request answers None and the build runs in-process, where it reports its own error.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

#: Most helper processes at once (each holds one build at a time).
MAX_HELPERS = max(1, min(8, (os.cpu_count() or 2) - 1))
#: Helpers run at this lower CPU priority: their builds are background work, and the thread
#: that launches the computation must keep its core while several of them compile.
HELPER_NICENESS = 10
_HEADER = struct.Struct("<Q")

_mode = threading.local()
_idle: queue.SimpleQueue[_Helper] = queue.SimpleQueue()
_started: list[_Helper] = []
_lock = threading.Lock()


@contextlib.contextmanager
def builds_in_helpers() -> Iterator[None]:
    """Within this block, this thread's :meth:`Context.build` calls render (and, for CUDA with
    NVRTC, compile) in helper processes, so that the process's other threads keep running."""
    previous = getattr(_mode, "on", False)
    _mode.on = True
    try:
        yield
    finally:
        _mode.on = previous


def active() -> bool:
    """Whether this thread builds in helper processes."""
    return getattr(_mode, "on", False)


def _write(stream: BinaryIO, obj: Any) -> None:
    _send(stream, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def _send(stream: BinaryIO, data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError("helper pipe closed")
    (size,) = _HEADER.unpack(header)
    data = stream.read(size)
    if len(data) < size:
        raise EOFError("helper pipe closed")
    return pickle.loads(data)


class _Helper:
    def __init__(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "autotune.accel.helper_process"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, env=env)

    def call(self, request: bytes) -> Any:
        """Send a pickled request; the unpickled reply."""
        assert self.process.stdin is not None and self.process.stdout is not None
        _send(self.process.stdin, request)
        return _read(self.process.stdout)

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _take() -> _Helper:
    try:
        return _idle.get_nowait()
    except queue.Empty:
        pass
    with _lock:
        if len(_started) < MAX_HELPERS:
            helper = _Helper()
            _started.append(helper)
            return helper
    return _idle.get()


def start(nvrtc_target: tuple[tuple[int, int], tuple[str, ...]] | None = None) -> None:
    """Start the helper processes now, without waiting for them. Each readies itself in the
    background (Python, this package and, given ``nvrtc_target``, NVRTC: its first compile
    loads the library), so that the first builds neither wait for that nor run it beside the
    work they build for. Helpers already started are kept; at most :data:`MAX_HELPERS`."""
    with _lock:
        new = [_Helper() for _ in range(MAX_HELPERS - len(_started))]
        _started.extend(new)
    for helper in new:
        threading.Thread(target=_warm, args=(helper, nvrtc_target), daemon=True,
                         name="autotune-helper-start").start()


def _warm(helper: _Helper, nvrtc_target: Any) -> None:
    try:
        helper.call(pickle.dumps(("warm", nvrtc_target), protocol=pickle.HIGHEST_PROTOCOL))
    except (OSError, EOFError, pickle.PickleError):
        with _lock:
            if helper in _started:
                _started.remove(helper)
        helper.close()
        return
    _idle.put(helper)


def run(request: tuple) -> Any:
    """Send ``request`` to a helper and return its reply; None if no helper could answer."""
    try:
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 (render arguments that cannot travel: build here)
        return None
    helper = _take()
    try:
        reply = helper.call(data)
    except (OSError, EOFError, pickle.PickleError):
        with _lock:
            if helper in _started:
                _started.remove(helper)
        helper.close()
        return None
    _idle.put(helper)
    return reply


@atexit.register
def _close_all() -> None:
    with _lock:
        helpers, _started[:] = list(_started), []
    for helper in helpers:
        helper.close()


# -- the helper's side ----------------------------------------------------------------------


def _render(template: str, backend: str, render_kws: dict[str, Any], extra_dirs: tuple[str, ...],
            nvrtc_target: tuple[tuple[int, int], tuple[str, ...]] | None) -> Any:
    """(rendered source, NVRTC output or None, seconds compiling), or None if this fails."""
    from .nvrtc import NvrtcError, compile_source
    from .render import render

    try:
        source = render(Path(template), backend, render_kws, extra_dirs=extra_dirs,
                        header_kws={"backend": backend})
    except Exception:  # noqa: BLE001 (the in-process build reports it)
        return None
    if nvrtc_target is None:
        return source, None, 0.0
    compute_capability, options = nvrtc_target
    name = source.template.rsplit("/", 1)[-1].replace(".mako", ".cu")
    start = time.perf_counter()
    try:
        out = compile_source(source.text, name, compute_capability, options)
    except NvrtcError:
        return None
    return source, out, time.perf_counter() - start


def _warm_up(nvrtc_target: tuple[tuple[int, int], tuple[str, ...]] | None) -> bool:
    """Ready this helper: with ``nvrtc_target``, compile an empty kernel (loads NVRTC)."""
    if nvrtc_target is not None:
        from .nvrtc import NvrtcError, compile_source

        with contextlib.suppress(NvrtcError):
            compile_source('extern "C" __global__ void warm() {}', "warm.cu", *nvrtc_target)
    return True


_REQUESTS = {"render": _render, "warm": _warm_up}


def serve() -> None:
    """Answer requests from standard input until it closes (the helper process's loop)."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not reach the reply pipe
    with contextlib.suppress(OSError, AttributeError):  # not on every platform: then as is
        os.nice(HELPER_NICENESS)
    while True:
        try:
            kind, *args = _read(requests)
        except EOFError:
            return
        handler = _REQUESTS.get(kind)
        try:
            reply = handler(*args) if handler is not None else None
        except Exception:  # noqa: BLE001 (answer None: the caller builds in-process)
            reply = None
        _write(replies, reply)

