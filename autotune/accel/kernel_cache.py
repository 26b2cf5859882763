"""Compiled CUDA kernels kept on disk, shared by every process of the user.

NVRTC takes 0.05 s for a BLAS pass and 0.3-1 s for a Wilson dslash on an H200's host, and a
process compiles every kernel it builds again: a fresh ``warm`` spent 35 s of its 77 s at
``--max-minutes 1``'s floor in first builds (docs/performance.md). CuPy, Triton and PyCUDA keep
what they compile in a folder for the next process; so does this module, for NVRTC's output
(:func:`autotune.accel.nvrtc.compile_source`), and ``warm``'s helper processes fill it ahead of
the keys ``warm`` tunes (:mod:`autotune.cli.warm_prebuild`).

An entry is named by a hash of everything the binary depends on (NVRTC's version, the target
architecture, the options, the source's name and text: :func:`.build_locks.key`, which also
names the host-wide lock that one process compiles under while the others wait for its entry)
and holds a small JSON header and the binary. The file is data: it is read only if its
header is well formed and its binary's length and SHA-256 match the header; anything else is
a miss (the file is removed and the kernel compiled again). Writes go to a temporary file
renamed into place, so a reader never
sees half an entry, and a write that fails (a full disk, a read-only folder) costs only the
entry: the kernel is still compiled and used, and one warning says so.

``AUTOTUNE_KERNEL_CACHE`` names the folder (default ``<user cache dir>/autotune/kernels``);
``off`` (or ``0``, ``no``, ``false``) turns the cache off. The folder is kept under
:data:`MAX_BYTES` by removing the entries used longest ago.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import platformdirs

#: the environment variable naming the cache's folder (or ``off``)
ENV = "AUTOTUNE_KERNEL_CACHE"
#: values of :data:`ENV` that turn the cache off
OFF = frozenset({"off", "0", "no", "false", "none"})
#: the cache's size limit: beyond it, the entries used longest ago are removed down to 3/4 of it
MAX_BYTES = 1 << 30
#: the first bytes of every entry (a format change takes a new one)
MAGIC = b"autotune-kernel-1\n"
_SUFFIX = ".kernel"
_LENGTH_BYTES = 8

logger = logging.getLogger("autotune")
_lock = threading.Lock()
_warned: set[str] = set()
_pruned: set[str] = set()


@dataclass(frozen=True)
class Entry:
    """A compiled kernel as the cache keeps it."""

    binary: bytes  #: CUBIN or PTX
    kind: str  #: ``"cubin"`` or ``"ptx"``
    arch: int  #: the architecture it was compiled for (90: sm_90)
    log: str  #: the compiler's log (its warnings)


def directory() -> Path | None:
    """The cache's folder from :data:`ENV` (read now), or None where the cache is off."""
    value = os.environ.get(ENV, "").strip()
    if value.lower() in OFF:
        return None
    if not value:
        return Path(platformdirs.user_cache_dir("autotune")) / "kernels"
    return Path(value).expanduser().absolute()


def cacheable(text: str, options: tuple[str, ...]) -> bool:
    """Whether a build can be cached by its text and options alone: not one that includes a
    file of its own (``#include "..."`` or an include path), whose contents the key would miss.
    (NVRTC's own headers come with its version, which is in the key.)"""
    if '#include "' in text or "#include\"" in text:
        return False
    return not any(o.startswith(("-I", "--include-path", "--pre-include", "-include"))
                   for o in options)


def load(name: str, folder: Path) -> Entry | None:
    """The entry ``name`` in ``folder``; None if there is none, or it is not a whole, valid
    entry (then it is removed)."""
    path = folder / (name + _SUFFIX)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    entry = _parse(data)
    if entry is None:
        logger.info("kernel cache: %s is not a valid entry; it is compiled again", path)
        _remove(path)
        return None
    try:  # used now: the last to go when the folder is trimmed
        os.utime(path)
    except OSError:
        pass
    return entry


def _parse(data: bytes) -> Entry | None:
    if not data.startswith(MAGIC):
        return None
    start = len(MAGIC) + _LENGTH_BYTES
    size = int.from_bytes(data[len(MAGIC):start], "little")
    try:
        header = json.loads(data[start:start + size].decode())
    except (UnicodeDecodeError, ValueError):
        return None
    binary = data[start + size:]
    if not isinstance(header, dict):
        return None
    kind, arch, log = header.get("kind"), header.get("arch"), header.get("log")
    if (kind not in ("cubin", "ptx") or type(arch) is not int or not isinstance(log, str)
            or header.get("bytes") != len(binary)
            or header.get("sha256") != hashlib.sha256(binary).hexdigest()):
        return None
    return Entry(binary, kind, arch, log)


def save(name: str, entry: Entry, folder: Path) -> bool:
    """Keep ``entry`` as ``name`` in ``folder``; False (and one warning per folder) where it
    cannot be written. Never raises for the folder's sake."""
    header = json.dumps({"kind": entry.kind, "arch": entry.arch, "log": entry.log,
                         "bytes": len(entry.binary),
                         "sha256": hashlib.sha256(entry.binary).hexdigest()}).encode()
    data = MAGIC + len(header).to_bytes(_LENGTH_BYTES, "little") + header + entry.binary
    temporary = folder / f".{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _trim_once(folder)
        with open(temporary, "wb") as out:
            out.write(data)
        os.replace(temporary, folder / (name + _SUFFIX))
    except OSError as exc:
        _remove(temporary)
        with _lock:
            first = str(folder) not in _warned
            _warned.add(str(folder))
        if first:
            logger.warning("cannot write the kernel cache %s (%s); kernels are compiled again in "
                           "each process (set %s to a writable folder, or to off)",
                           folder, exc.strerror or exc, ENV)
        return False
    return True


def _trim_once(folder: Path) -> None:
    """Once a process, before its first write to ``folder``: remove the entries used longest
    ago while the folder holds more than :data:`MAX_BYTES`."""
    with _lock:
        if str(folder) in _pruned:
            return
        _pruned.add(str(folder))
    trim(folder, MAX_BYTES)


def trim(folder: Path, limit: int) -> int:
    """Remove the entries of ``folder`` used longest ago until they take at most 3/4 of
    ``limit`` bytes, if they take more than ``limit``; the bytes removed."""
    entries = []
    for path in folder.glob("*" + _SUFFIX):
        try:
            stat = path.stat()
        except OSError:
            continue
        entries.append((stat.st_mtime, stat.st_size, path))
    total = sum(size for _, size, _ in entries)
    if total <= limit:
        return 0
    removed = 0
    for _, size, path in sorted(entries, key=lambda e: e[0]):
        if total - removed <= limit * 3 // 4:
            break
        if _remove(path):
            removed += size
    return removed


def _remove(path: Path) -> bool:
    try:
        path.unlink()
    except OSError:
        return False
    return True
