"""Stale by what was rendered: the template files a tuning run really built, beyond the declared
``autotune_sources``, kept with its result and compared when the result is looked up.

A result's fingerprint covers the declared templates (and what they include literally). A
template that declares none, or that renders a file its declaration does not name (an include
whose name is computed while rendering), would never go stale on an edit of those files. So the
tuner records every file a run rendered (:func:`accel.recording`) that the declared fingerprint
does not cover, as ``{name: {"digest": SHA-256, "path": absolute path}}`` under the key
``rendered`` of the result's ``search`` JSON (no new column: rows of older autotunes have no
such entry and are judged by their fingerprint alone, as before).

A stored entry is data: its name must be a plain relative template name and its digest a
SHA-256. The file is found, by that name, where the template's own files are (the owner
module's folder, the declared templates' folders, the portability header's), else at the
stored path if it is an absolute path ending in that name: it is only read and hashed, never
rendered.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .. import accel
from ..accel.sources import ACCEL_DIR, source_file

#: The ``search`` JSON key the rendered files are kept under.
RENDERED = "rendered"

_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}){0,7}")
_HEX = re.compile(r"[0-9a-f]{64}")


#: At most this many files are recorded, with paths of at most MAX_PATH characters (a longer
#: one is left out: the file is then found by name), so the row's search JSON stays within the
#: stored-JSON size limit.
MAX_FILES = 64
MAX_PATH = 512


def beyond_declared(rendered: Iterable[accel.SourceFile], declared: dict[str, str]
                    ) -> dict[str, dict[str, str]]:
    """The files a run rendered that the declared sources (name -> digest) do not cover."""
    found = {}
    for f in rendered:
        if declared.get(f.name) != f.digest and _NAME.fullmatch(f.name):
            path = str(Path(f.path).resolve())
            found[f.name] = {"digest": f.digest, "path": path if len(path) <= MAX_PATH else ""}
    return {name: found[name] for name in sorted(found)[:MAX_FILES]}


def stored_rendered(search: str) -> dict[str, dict[str, str]]:
    """The well-formed rendered-file entries of a row's ``search`` JSON ({} where none)."""
    try:
        value = json.loads(search) if search else {}
    except ValueError:
        return {}
    entries = value.get(RENDERED) if isinstance(value, dict) else None
    if not isinstance(entries, dict):
        return {}
    clean = {}
    for name, entry in entries.items():
        if not (isinstance(name, str) and _NAME.fullmatch(name) and ".." not in name.split("/")
                and isinstance(entry, dict) and isinstance(entry.get("digest"), str)
                and _HEX.fullmatch(entry["digest"])):
            continue
        path = entry.get("path")
        clean[name] = {"digest": entry["digest"], "path": path if isinstance(path, str) else ""}
    return clean


def template_dirs(owner: Any, function: Any, declared: Sequence[Path] | None) -> tuple[Path, ...]:
    """Where a template's own files are: the folder of the module defining ``owner`` (or the
    tuning ``function``), the declared templates' folders, and the portability header's."""
    dirs: list[Path] = []
    for obj in (owner, function):
        try:
            dirs.append(Path(inspect.getfile(obj)).resolve().parent)
        except (TypeError, OSError):
            pass
    dirs.extend(Path(p).resolve().parent for p in declared or ())
    dirs.append(ACCEL_DIR)
    return tuple(dict.fromkeys(dirs))


def _locate(name: str, stored_path: str, dirs: Sequence[Path]) -> Path | None:
    stored = Path(stored_path) if stored_path else None
    if stored is not None and stored.is_absolute() and stored_path.endswith("/" + name) \
            and stored.is_file():
        return stored
    for d in dirs:
        candidate = d / name
        if candidate.is_file():
            return candidate
    return None


def rendered_changes(search: str, declared: dict[str, str], dirs: Sequence[Path]) -> list[str]:
    """The rendered files, outside the declared sources, that changed since the run that
    stored ``search`` rendered them (or that cannot be found here), sorted."""
    changed = []
    for name, entry in stored_rendered(search).items():
        if name in declared:
            continue  # the fingerprint covers it
        path = _locate(name, entry["path"], dirs)
        try:
            digest = source_file(name, path).digest if path is not None else None
        except OSError:
            digest = None
        if digest != entry["digest"]:
            changed.append(name)
    return sorted(changed)
