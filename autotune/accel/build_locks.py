"""Builds shared by the processes of one host: the first process to compile a program (or, on
PoCL, to generate a kernel for a work-group size) does it while the others that want the same
wait, then find it in the compiler's disk cache.

An OpenCL driver keeps what it compiled in a cache on disk that every process of the user
reads (PoCL: ``~/.cache/pocl``), and so does :mod:`.kernel_cache` for NVRTC's builds.
Processes that compile the same source at the same moment (the ranks of an MPI job, a test
suite's workers, a tuning run beside an application) each compile it in full, since none
finds it cached yet: four ranks on two cores compile four times over, and PoCL sometimes fails
one of the simultaneous builds outright (:data:`.opencl.BUILD_RETRIES`).
:func:`shared_build` serialises the processes that compile the same thing: a lock file, chosen
by a hash of what is compiled, held with ``flock`` for the compile's duration. Different
sources hash to different locks (one of :data:`STRIPES`), so unrelated builds rarely wait for
each other. Where locks cannot be had (no ``fcntl``, no writable temporary folder) builds run
unlocked, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Windows
    fcntl = None

#: lock files per user: two builds of different sources share one with probability 1/STRIPES
STRIPES = 64
_folder: Path | None = None
_unusable = False


def key(*parts: str | bytes) -> str:
    """A lock key for what ``parts`` name together (a source and its options, a device...)."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def _lock_folder() -> Path | None:
    """This user's folder of lock files (made once, private), or None where it cannot be."""
    global _folder, _unusable
    if _folder is None and not _unusable:
        uid = os.getuid() if hasattr(os, "getuid") else 0
        folder = Path(tempfile.gettempdir()) / f"autotune-build-locks-{uid}"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            if folder.is_symlink() or not os.access(folder, os.W_OK):
                raise OSError(f"{folder} is not a writable folder of this user")
            _folder = folder
        except OSError:
            _unusable = True
    return _folder


@contextlib.contextmanager
def shared_build(lock_key: str) -> Iterator[None]:
    """Hold the host-wide lock of ``lock_key`` (:func:`key`) for the block: another process
    (or thread) compiling the same waits until this one is done."""
    folder = _lock_folder() if fcntl is not None else None
    if folder is None:
        yield
        return
    stripe = int(lock_key[:8], 16) % STRIPES
    try:
        handle = os.open(folder / f"{stripe:03d}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:  # a file system without locks: build unlocked
            pass
        yield
    finally:
        os.close(handle)  # closing the descriptor releases its lock
