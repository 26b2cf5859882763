"""A digest of an installed package's own files, computed once and remembered between processes.

Some libraries hash their own installation at the start of every process before they can use
their compiled-kernel cache (Triton hashes ``libtriton.so`` and its compiler sources, about 0.4 s
with Triton 3.6). The answer changes only when those files change, so it can be remembered the
way Python remembers a module's bytecode and git its index: beside a signature of the files'
sizes, change times and inodes, and used only while the signature is the same. A file written,
replaced, touched or added under the package gives another signature, and the digest is then
computed again by the library's own function.

This module knows nothing of Triton: a folder, a function that computes the digest and a store
file. What it reads from the store is data: an entry is used only if it is a short string of
the characters such digests are made of, and an unreadable, malformed or unwritable store costs
the computation, never an error.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import time
from collections.abc import Callable, Iterable

#: What a remembered digest may contain (versions and hexadecimal digests joined by dashes).
_DIGEST = re.compile(r"[0-9A-Za-z.+_-]{1,262144}")
_SIGNATURE = re.compile(r"[0-9a-f]{64}")
#: Signatures kept in one store (one a Python environment that uses it).
MAX_ENTRIES = 8
STORE_FORMAT = 1
#: Files written more recently than this are not remembered: a file's times advance by a clock
#: tick, so a file written again within one could keep its signature (git's "racily clean").
SETTLED_NS = 2_000_000_000


def files_signature(root: pathlib.Path, salt: str,
                    suffixes: Iterable[str] = (".py", ".so")) -> str:
    """SHA-256 of ``salt`` and of the relative path, size, modification and change times and
    inode of every file under ``root`` whose name ends with one of ``suffixes``."""
    return _signature(root, salt, tuple(suffixes))[0]


def _signature(root: pathlib.Path, salt: str, suffixes: tuple[str, ...]) -> tuple[str, int]:
    """:func:`files_signature` and the newest modification time among the files."""
    lines, newest = [salt], 0
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            if not name.endswith(suffixes):
                continue
            path = os.path.join(folder, name)
            info = os.stat(path)
            newest = max(newest, info.st_mtime_ns)
            lines.append(f"{os.path.relpath(path, root)}\0{info.st_size}\0{info.st_mtime_ns}"
                         f"\0{info.st_ctime_ns}\0{info.st_ino}")
    digest = hashlib.sha256("\n".join(lines).encode("utf-8", "surrogateescape")).hexdigest()
    return digest, newest


def _read(store: pathlib.Path) -> dict[str, str]:
    try:
        data = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != STORE_FORMAT:
        return {}
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items()
            if isinstance(k, str) and _SIGNATURE.fullmatch(k)
            and isinstance(v, str) and _DIGEST.fullmatch(v)}


def _write(store: pathlib.Path, entries: dict[str, str]) -> None:
    kept = dict(list(entries.items())[-MAX_ENTRIES:])
    temporary = store.with_name(f"{store.name}.{os.getpid()}.tmp")
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(json.dumps({"format": STORE_FORMAT, "entries": kept}),
                             encoding="utf-8")
        os.replace(temporary, store)
    except OSError:  # a full disk or a read-only home: the next process computes it again
        try:
            temporary.unlink()
        except OSError:
            pass


def remembered_digest(root: pathlib.Path, compute: Callable[[], str], store: pathlib.Path, *,
                      salt: str = "", suffixes: Iterable[str] = (".py", ".so")
                      ) -> tuple[str, bool]:
    """``compute()``'s digest of the package at ``root``, and whether it was remembered.

    The signature of the files under ``root`` (:func:`files_signature`, with ``salt``, say the
    package's version) is looked up in ``store``; if there, its digest is returned without
    calling ``compute``. Otherwise ``compute()`` is called, and its answer is stored under that
    signature if no file was written in the last :data:`SETTLED_NS` and it is a string a
    digest may be (else it is returned and not stored). Files changed while ``compute`` ran
    have another signature by then (their change times move on), so what it stored is never
    found for them."""
    suffixes = tuple(suffixes)
    try:
        signature, newest = _signature(root, salt, suffixes)
    except OSError:
        return compute(), False
    entries = _read(store)
    if signature in entries:
        return entries[signature], True
    value = compute()
    settled = time.time_ns() - newest > SETTLED_NS
    if settled and isinstance(value, str) and _DIGEST.fullmatch(value):
        entries = _read(store)
        entries.pop(signature, None)
        entries[signature] = value
        _write(store, entries)
    return value, False


__all__ = ["MAX_ENTRIES", "files_signature", "remembered_digest"]
