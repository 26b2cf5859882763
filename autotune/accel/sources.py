"""Which template files a kernel source is made of, and their content digests.

Two views of the same thing:

- :func:`template_sources` reads a ``.mako`` template and the files it includes (literal
  ``<%include file="..."/>``, ``<%namespace file="..."/>`` and ``<%inherit file="..."/>`` names,
  resolved as rendering resolves them) plus the portability header, without rendering anything.
  It is cheap enough to call when a cached result is served.
- :func:`recording` collects the files that renders (and build-cache hits) really used, so a
  caller can check that the static view covered everything.

Digests are SHA-256 of the file contents: the same files give the same digests wherever the
package is installed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import threading
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

#: The directory of this package, which holds ``portability.mako``.
ACCEL_DIR = Path(__file__).resolve().parent
PORTABILITY_HEADER = "portability.mako"

_INCLUDE = re.compile(r"<%\s*(?:include|namespace|inherit)\b[^>]*?\bfile\s*=\s*(['\"])(.*?)\1", re.S)


@dataclass(frozen=True)
class SourceFile:
    """One template file: the name rendering knows it by, its path, and its content digest."""

    name: str  #: e.g. ``fused.mako`` (a lookup-relative URI, the same on every installation)
    path: str
    digest: str  #: SHA-256 of the contents, hex
    mtime_ns: int
    size: int

    def unchanged(self) -> bool:
        """True if the file still has the modification time and size it was read with."""
        try:
            stat = os.stat(self.path)
        except OSError:
            return False
        return stat.st_mtime_ns == self.mtime_ns and stat.st_size == self.size


_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def source_file(name: str, path: str | Path) -> SourceFile:
    """Describe one file (its digest is cached by path, modification time and size)."""
    path = str(path)
    stat = os.stat(path)
    cache_key = (path, stat.st_mtime_ns, stat.st_size)
    with _digests_lock:
        digest = _digests.get(cache_key)
    if digest is None:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        with _digests_lock:
            _digests[cache_key] = digest
    return SourceFile(name, path, digest, stat.st_mtime_ns, stat.st_size)


def lookup_dirs(template: str | Path, extra_dirs: tuple[str | Path, ...] = ()) -> tuple[str, ...]:
    """The directories a template's includes are looked up in, in order."""
    path = Path(template).resolve()
    return tuple(str(d) for d in (path.parent, *map(Path, extra_dirs), ACCEL_DIR))


def _find(uri: str, dirs: tuple[str, ...]) -> Path | None:
    relative = uri.lstrip("/")
    for d in dirs:
        candidate = Path(d) / relative
        if candidate.is_file():
            return candidate
    return None


def template_sources(template: str | Path, extra_dirs: tuple[str | Path, ...] = ()) -> tuple[SourceFile, ...]:
    """The files rendering ``template`` reads: the portability header, the template and,
    transitively, every include named literally. Sorted by name.

    An include whose name is computed while rendering (``file="${name}"``) cannot be found this
    way; :func:`recording` shows it.
    """
    dirs = lookup_dirs(template, extra_dirs)
    path = Path(template).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"kernel template {path} does not exist")
    found: dict[str, SourceFile] = {PORTABILITY_HEADER: source_file(PORTABILITY_HEADER,
                                                                     ACCEL_DIR / PORTABILITY_HEADER)}
    todo = [(path.name, path)]
    while todo:
        name, file = todo.pop()
        if name in found:
            continue
        found[name] = source_file(name, file)
        for _, uri in _INCLUDE.findall(file.read_text(errors="replace")):
            if "${" in uri or uri in found:
                continue
            include = _find(uri, dirs)
            if include is not None:
                todo.append((uri.lstrip("/"), include))
    return tuple(found[name] for name in sorted(found))


_recording: ContextVar[set[SourceFile] | None] = ContextVar("autotune_rendered_sources", default=None)


@contextlib.contextmanager
def recording() -> Iterator[set[SourceFile]]:
    """Collect every template file rendered (or reused from the build cache) in this context.

    Work handed to other threads sees the set only if run in a copy of this context
    (``contextvars.copy_context().run``).
    """
    files: set[SourceFile] = set()
    token = _recording.set(files)
    try:
        yield files
    finally:
        _recording.reset(token)


def note_used(files: tuple[SourceFile, ...]) -> None:
    """Tell the active :func:`recording` (if any) that these files went into a kernel."""
    collected = _recording.get()
    if collected is not None:
        collected.update(files)
