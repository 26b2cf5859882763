"""``AUTOTUNE_RECORD=FILE``: the keys a run asked for and did not find exactly, as JSON lines,
for ``python -m autotune warm --recorded FILE`` to tune later.

Each line is one JSON object::

    {"autotune_record": 1, "function": "operations.gemm.GemmTemplate.autotune", "version": 1,
     "arguments": "{\\"dtype\\":{\\"__dtype__\\":\\"float32\\"},\\"k\\":700,...}",
     "device": {"name": "NVIDIA H200", "platform": "CUDA", "driver": "13.0"},
     "served": "similar", "time": "2026-11-26T19:00:00+00:00"}

``served`` says how the key was answered: ``missed`` (tuned then and there), ``stale`` (its
own row, tuned against other sources), ``nearest`` (another device's) or ``similar`` (another
size's). ``arguments`` is the key's canonical argument text. A process writes a key once; each
line is one ``write`` to a file opened for appending, so that processes sharing a file do not
interleave their lines. A file that cannot be written is a warning once, never an error.

A record file is data: :func:`read_records` checks every line (one :class:`RecordFileError`
naming the first bad line), and nothing it names is imported.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from .records import TuningKey
from .text import guard_logger
from .validation import arguments_problem

if TYPE_CHECKING:
    from .serving import Serving

logger = guard_logger("autotune.tune")

ENV_RECORD = "AUTOTUNE_RECORD"
#: The format version every line carries.
FORMAT = 1
#: How a key was answered, as a line says.
SERVED = ("missed", "stale", "nearest", "similar")
#: A line longer than this is refused (a key's arguments are at most 64 KiB).
MAX_LINE = 1 << 17
_FUNCTION = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_<>][A-Za-z0-9_<>]*)*")
_TEXT_LIMIT = 512


class RecordFileError(ValueError):
    """A record file that cannot be read, or a line of it that is not a record."""


@dataclass(frozen=True)
class RecordedKey:
    """One line of a record file: a key a run wanted, and how it was served."""

    key: TuningKey
    served: str
    line: int  #: its line number in the file (1-based)


def record_path() -> str | None:
    """``AUTOTUNE_RECORD`` (read now), or None where it is unset or empty."""
    return os.environ.get(ENV_RECORD) or None


def record_line(key: TuningKey, served: str) -> str:
    """The JSON line (with its newline) recording ``key``."""
    return json.dumps({
        "autotune_record": FORMAT, "function": key.function, "version": key.version,
        "arguments": key.arguments,
        "device": {"name": key.device_name, "platform": key.device_platform,
                   "driver": key.driver_version},
        "served": served, "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }, sort_keys=True, separators=(",", ":")) + "\n"


def note(serving: Serving, key: TuningKey, served: str) -> None:
    """Append ``key`` to the ``AUTOTUNE_RECORD`` file, if one is set, once per process and
    file; a file that cannot be written is a warning once."""
    path = record_path()
    if path is None or served not in SERVED or not serving.first(
            "record", f"{path}\0{key}"):
        return
    data = record_line(key, served).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)  # one write of one line to an appending file
        finally:
            os.close(fd)
    except OSError as exc:
        if serving.first("record-error", path):
            logger.warning("%s=%s cannot be written (%s); the keys this run misses are not "
                           "recorded", ENV_RECORD, path, exc.strerror or exc)


def _problem(value: object) -> tuple[TuningKey, str] | str:
    """The key and served kind of a parsed line, or what is wrong with it."""
    if not isinstance(value, dict):
        return "not a JSON object"
    if value.get("autotune_record") != FORMAT:
        return f"not an autotune record line (\"autotune_record\": {FORMAT} is missing)"
    function, version, arguments = (value.get(k) for k in ("function", "version", "arguments"))
    device, served = value.get("device"), value.get("served")
    if not isinstance(function, str) or len(function) > _TEXT_LIMIT \
            or not _FUNCTION.fullmatch(function):
        return f"function {str(function)[:60]!r} is not a qualified name"
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        return f"version {version!r} is not an int >= 0"
    if not isinstance(arguments, str):
        return "arguments are not text (the key's canonical JSON)"
    problem = arguments_problem(arguments)
    if problem:
        return f"arguments: {problem}"
    if not isinstance(device, dict) or not all(
            isinstance(device.get(k), str) and 0 < len(device[k]) <= _TEXT_LIMIT
            and not any(ord(c) < 32 for c in device[k]) for k in ("name", "platform", "driver")):
        return "device is not {\"name\", \"platform\", \"driver\"} of non-empty text"
    if served not in SERVED:
        return f"served {str(served)[:30]!r} is not one of {', '.join(SERVED)}"
    return TuningKey(function, version, device["name"], device["platform"], device["driver"],
                     arguments), served


def read_records(path: str | os.PathLike) -> list[RecordedKey]:
    """Every line of a record file, checked; :class:`RecordFileError` naming the first line
    that is not a record (blank lines are skipped)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            lines = f.read().split(b"\n")
    except OSError as exc:
        raise RecordFileError(f"cannot read the record file {path}: "
                              f"{exc.strerror or exc}") from None
    found = []
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        if len(raw) > MAX_LINE:
            raise RecordFileError(f"{path} line {number}: longer than {MAX_LINE} bytes; "
                                  "not a record file written by AUTOTUNE_RECORD")
        try:
            value = json.loads(raw.decode("utf-8"), parse_constant=_refuse)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise RecordFileError(f"{path} line {number}: not JSON ({exc}); every line must "
                                  "be a record written by AUTOTUNE_RECORD") from None
        checked = _problem(value)
        if isinstance(checked, str):
            raise RecordFileError(f"{path} line {number}: {checked}; every line must be a "
                                  "record written by AUTOTUNE_RECORD")
        found.append(RecordedKey(checked[0], checked[1], number))
    return found


def _refuse(constant: str) -> float:
    raise ValueError(f"{constant} is not a number JSON allows")
