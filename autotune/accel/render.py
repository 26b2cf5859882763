"""Render kernel sources from Mako templates, remembering where each generated line came from.

Every output line is mapped back to the ``.mako`` file and line that wrote it, so that compiler
errors and warnings can be reported against the template a person edits rather than the
generated text.
"""

from __future__ import annotations

import array
import bisect
import functools
import json
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CompileError
from .sources import PORTABILITY_HEADER, SourceFile, lookup_dirs, note_used, source_file

_lookups: dict[tuple[str, ...], Any] = {}
_lookups_lock = threading.Lock()
_line_maps: dict[str, tuple[str, list[int], list[int]]] = {}
#: (id of a code object, instruction offset) of a write in generated Mako code -> (that code
#: object, the write's template origin)
_site_origins: dict[tuple[int, int], tuple[Any, tuple[str, int]]] = {}
_SITE_ORIGINS_MAX = 1 << 17
_rendering = threading.local()  # .files: {uri: SourceFile} of the render running on this thread


@functools.lru_cache(maxsize=1)
def _recording_lookup_class() -> type:
    """A Mako lookup that notes every template a render loads (the main one and its includes),
    with the digest of the text it compiled.

    Mako notices an edited file by its modification time in whole seconds; an edit within the
    same second as the last load would be missed, so the lookup also compares contents and
    loads the file again when they differ. Mako is imported here, on the first render, not when
    autotune is imported.
    """
    from mako.lookup import TemplateLookup
    from mako.template import Template

    class RecordingLookup(TemplateLookup):
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self._compiled: dict[str, tuple[Any, str]] = {}  # uri -> (template, digest)

        def get_template(self, uri: str):
            template = super().get_template(uri)
            if not template.filename:
                return template
            name = uri.lstrip("/")
            current = source_file(name, template.filename)
            seen = self._compiled.get(uri)
            if seen is not None and seen[0] is template and seen[1] != current.digest:
                template = Template(uri=template.uri, filename=template.filename, lookup=self,
                                    **self.template_args)
                self.put_template(uri, template)
            self._compiled[uri] = (template, current.digest)
            files = getattr(_rendering, "files", None)
            if files is not None:
                files.setdefault(name, current)
            return template

    return RecordingLookup


def _lookup(directories: tuple[str, ...]) -> Any:
    with _lookups_lock:
        lookup = _lookups.get(directories)
        if lookup is None:
            lookup = _recording_lookup_class()(directories=list(directories), strict_undefined=True)
            _lookups[directories] = lookup
        return lookup


def _module_line_map(frame) -> tuple[str, list[int], list[int]] | None:
    """(template filename, module lines, template lines) for a frame of generated Mako code."""
    globs = frame.f_globals
    filename = globs.get("_template_filename")
    if filename is None:
        return None
    name = globs.get("__name__", "")
    cached = _line_maps.get(name)
    if cached is None or cached[0] != filename:
        from mako.template import ModuleInfo

        info = ModuleInfo._modules.get(name)
        if info is None:
            return None
        meta = re.search(r"__M_BEGIN_METADATA(.+?)__M_END_METADATA", info.code, re.S)
        if meta is None:
            return None
        pairs = sorted((int(k), int(v)) for k, v in json.loads(meta.group(1))["line_map"].items())
        cached = (filename, [p[0] for p in pairs], [p[1] for p in pairs])
        _line_maps[name] = cached
    return cached


def _origin(frame) -> tuple[str, int]:
    """The template (file, line) of the code that ``frame`` (generated Mako code) runs, cached
    by code object and instruction: a frame's ``f_lineno`` is worked out from the line table on
    every access, which for a large template's body cost most of a render (12 us a line). The
    key is the code object's id (hashing a code object hashes its constants, on every lookup);
    the entry holds the object, so that its id is not reused while the entry lives."""
    code = frame.f_code
    site = (id(code), frame.f_lasti)
    entry = _site_origins.get(site)
    if entry is not None and entry[0] is code:
        return entry[1]
    found = ("<unknown>", 0)
    info = _module_line_map(frame)
    if info is not None:
        filename, mod_lines, tmpl_lines = info
        i = bisect.bisect_right(mod_lines, frame.f_lineno) - 1
        if i >= 0:
            found = (filename, tmpl_lines[i])
    if len(_site_origins) >= _SITE_ORIGINS_MAX:
        _site_origins.clear()  # (entries hold code objects of templates compiled before)
    _site_origins[site] = (code, found)
    return found


@dataclass
class _MappingBuffer:
    """A Mako output buffer that records the template location of every output line."""

    parts: list[str] = field(default_factory=list)
    origins: list[tuple[str, int]] = field(default_factory=list)  # one per *started* line
    at_line_start: bool = True

    def write(self, text: str) -> None:
        if not text:
            return
        self.parts.append(text)
        if not self.at_line_start and "\n" not in text:
            return  # starts no line (most writes): no origin to note
        origin = _origin(sys._getframe(1))
        lines = text.split("\n")
        for k, piece in enumerate(lines):
            if k > 0:
                self.at_line_start = True
            if self.at_line_start and (piece or k < len(lines) - 1):
                self.origins.append((origin[0], origin[1] + k))
                self.at_line_start = False

    def getvalue(self) -> str:
        return "".join(self.parts)


class Origins(Sequence):
    """The template ``(file, line)`` of each generated line, kept as two integer arrays and the
    file names: a rendered source travels from a helper process to the process that loads it
    (see :mod:`.helpers`), where unpickling a tuple a line held the interpreter lock for about
    half of the 0.27 ms a reply took (H100 host); arrays are copied as bytes."""

    __slots__ = ("_names", "_files", "_lines")

    def __init__(self, origins: Iterable[tuple[str, int]]):
        index: dict[str, int] = {}
        files, lines = array.array("I"), array.array("I")
        for name, line in origins:
            files.append(index.setdefault(name, len(index)))
            lines.append(line)
        self._names, self._files, self._lines = tuple(index), files, lines

    def __len__(self) -> int:
        return len(self._lines)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        return (self._names[self._files[i]], self._lines[i])

    def __iter__(self) -> Iterator[tuple[str, int]]:
        names = self._names
        return ((names[f], line) for f, line in zip(self._files, self._lines))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Origins):
            return (self._names, self._files, self._lines) == (other._names, other._files,
                                                               other._lines)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._names, self._files.tobytes(), self._lines.tobytes()))

    def __repr__(self) -> str:
        return f"<Origins of {len(self)} lines from {len(self._names)} files>"

    def __reduce__(self) -> tuple:
        return (_origins_from_arrays, (self._names, self._files, self._lines))


def _origins_from_arrays(names: tuple[str, ...], files: array.array, lines: array.array) -> Origins:
    origins = Origins.__new__(Origins)
    origins._names, origins._files, origins._lines = names, files, lines
    return origins


@dataclass(frozen=True)
class RenderedSource:
    """Kernel source text plus, for each of its lines, the template file and line it came from,
    and the template files it was rendered from."""

    text: str
    origins: Origins  #: (template file, line) of each generated line
    template: str
    files: tuple[SourceFile, ...] = ()  #: every template file the render read, by name

    def origin(self, line: int) -> tuple[str, int] | None:
        """Template (file, line) for a 1-based line of the generated source."""
        if 1 <= line <= len(self.origins):
            return self.origins[line - 1]
        return None

    def describe_line(self, line: int) -> str:
        where = self.origin(line)
        if where is None:
            return f"generated line {line}"
        return f"{where[0]}:{where[1]} (generated line {line})"

    def map_log(self, log: str) -> str:
        """Rewrite compiler messages that cite generated lines so that they cite template lines.

        Understands NVRTC/nvcc (``name(LINE): error``) and clang/OpenCL (``<src>:LINE:COL:``).
        """

        def nv(m: re.Match) -> str:
            return self.describe_line(int(m.group(2))) + ":"

        def clang(m: re.Match) -> str:
            return f"{self.describe_line(int(m.group(2)))}, column {m.group(3)}:"

        log = re.sub(r"^([^\s:()]*)\((\d+)\):", nv, log, flags=re.M)
        log = re.sub(r"(<[^>\s]*>|[^\s:]+\.cl|<source>|input):(\d+):(\d+):", clang, log)
        return log


def render(
    template: str | Path,
    backend: str,
    render_kws: dict[str, Any] | None = None,
    *,
    extra_dirs: tuple[str | Path, ...] = (),
    header_kws: dict[str, Any] | None = None,
) -> RenderedSource:
    """Render ``template`` (a ``.mako`` path) for ``backend``, after the portability header.

    ``render_kws`` become template variables; ``backend`` is always available too. Undefined
    variables are errors. Raises :class:`CompileError` for template syntax or render errors.
    """
    from mako.exceptions import MakoException
    from mako.runtime import Context

    path = Path(template).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"kernel template {path} does not exist")
    dirs = lookup_dirs(path, extra_dirs)
    lookup = _lookup(dirs)
    kws = dict(render_kws or {})
    kws.setdefault("backend", backend)
    buf = _MappingBuffer()
    header = dict(header_kws or {})
    header.setdefault("backend", backend)
    outer = getattr(_rendering, "files", None)
    _rendering.files = used = {}
    try:
        lookup.get_template(PORTABILITY_HEADER).render_context(Context(buf, **header))
        lookup.get_template(path.name).render_context(Context(buf, **kws))  # dirs[0] is its folder
    except NameError as exc:
        raise CompileError(
            f"{path.name}: {exc}; pass it in render_kws (templates render with strict "
            "undefined variables)"
        ) from exc
    except MakoException as exc:
        raise CompileError(f"{path.name}: template error: {exc}") from exc
    finally:
        _rendering.files = outer
    files = tuple(used[name] for name in sorted(used))
    note_used(files)
    text = buf.getvalue()
    origins = list(buf.origins)
    n_lines = text.count("\n") + (0 if text.endswith("\n") else 1)
    origins += [("<unknown>", 0)] * max(0, n_lines - len(origins))
    return RenderedSource(text=text, origins=Origins(origins), template=str(path), files=files)
