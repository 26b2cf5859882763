"""Exports (CSV, JSON) and reading them back, or another store, for ``import``.

Reading checks the cells' types (a date is a date, a score a number); what the text in them
means is for the tuner to judge (``autotune.tune.validation``) before anything is merged.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records import TuningKey, TuningRecord
from ..text import printable
from .location import StoreError
from .result_store import ResultStore
from .rows import KEY_FIELDS, RESULT_COLUMNS, parse_datetime

EXPORT_FORMATS = ("csv", "json")
_REQUIRED = (*KEY_FIELDS, "parameters", "score")
#: The largest version an SQL INTEGER column holds.
_MAX_VERSION = 2**63 - 1


class NotAnExportError(ValueError):
    """A file that is not an autotune export or database."""


def record_to_row(record: TuningRecord) -> dict[str, Any]:
    """A result as one export row (text and numbers; the timestamp in ISO 8601)."""
    row: dict[str, Any] = {name: getattr(record.key, name) for name in KEY_FIELDS}
    row.update(parameters=record.parameters, score=record.score,
               created_at=record.created_at.isoformat(), package_version=record.package_version,
               fingerprint=record.fingerprint, sources=record.sources, search=record.search,
               origin=record.origin, gbps=record.gbps, gflops=record.gflops,
               ci_low=record.ci_low, ci_high=record.ci_high, ties=record.ties,
               spread=record.spread)
    return row


def export_text(records: Sequence[TuningRecord], fmt: str) -> str:
    """The records as CSV or JSON text, columns in :data:`RESULT_COLUMNS` order."""
    return rows_text([record_to_row(r) for r in records], fmt)


def rows_text(rows: Sequence[dict[str, Any]], fmt: str) -> str:
    """Export rows (dicts with the :data:`RESULT_COLUMNS`) as CSV or JSON text.

    JSON keeps every value exact (it writes control characters as ``\\u`` escapes itself);
    CSV, read by people and spreadsheets and often printed, shows control characters in text
    cells escaped (``\\x1b``), so a cell holding one does not come back the same from CSV."""
    rows = [{name: row.get(name) for name in RESULT_COLUMNS} for row in rows]
    if fmt == "json":
        return json.dumps(rows, indent=1, allow_nan=True) + "\n"
    if fmt != "csv":
        raise ValueError(f"unknown export format {fmt!r}; use one of {', '.join(EXPORT_FORMATS)}")
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(RESULT_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for row in rows:  # text cells with control characters escaped: CSV ends up on terminals
        writer.writerow({k: ("" if v is None else printable(v) if isinstance(v, str) else v)
                         for k, v in row.items()})
    return out.getvalue()


def format_for(path: Path, fmt: str | None) -> str:
    """The export format: ``fmt`` if given, else from the file's extension, else CSV."""
    if fmt:
        return fmt
    suffix = path.suffix.lower().lstrip(".")
    return suffix if suffix in EXPORT_FORMATS else "csv"


@dataclass(frozen=True)
class ImportSource:
    """What a file to import holds: its results, and what kind of file it was."""

    records: list[TuningRecord]
    kind: str  #: ``sqlite``, ``json`` or ``csv``


def read_import(path: Path) -> ImportSource:
    """The results in an autotune SQLite database (opened read-only) or export.

    Raises :class:`FileNotFoundError`, :class:`NotAnExportError` (naming what is missing), or
    ``ValueError`` naming the first row with a cell of the wrong type.
    """
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist or is not a file")
    with open(path, "rb") as f:
        head = f.read(16)
    if head.startswith(b"SQLite format 3"):
        return ImportSource(_read_sqlite(path), "sqlite")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise NotAnExportError(f"{path} is neither an autotune database nor a CSV or JSON "
                               "export (it is not UTF-8 text)") from None
    if path.suffix.lower() == ".json" or text.lstrip().startswith(("[", "{")):
        try:
            rows = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise NotAnExportError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise NotAnExportError(f"{path} is not an autotune export: expected a JSON list of "
                                   "result objects, as `python -m autotune export --format json` writes")
        kind = "json"
    else:
        rows = _csv_rows(path, text)
        kind = "csv"
    return ImportSource([record_from_row(row, f"{path} row {i + 1}") for i, row in enumerate(rows)],
                        kind)


def _csv_rows(path: Path, text: str) -> list[dict[str, Any]]:
    """The rows of a CSV export; NotAnExportError for a file the csv module cannot read (a
    field longer than its limit, a NUL) or without the key columns."""
    reader = csv.DictReader(io.StringIO(text))
    try:
        missing = [f for f in _REQUIRED if f not in (reader.fieldnames or [])]
        if missing:
            raise NotAnExportError(f"{path} is not an autotune export: its first line has no "
                                   f"column(s) {', '.join(missing)}")
        return list(reader)
    except csv.Error as exc:
        if "field limit" in str(exc):
            raise NotAnExportError(
                f"{path} line {reader.line_num}: a field is longer than {csv.field_size_limit()} "
                "characters, longer than any cell of an autotune export can be; nothing "
                "imported") from None
        raise NotAnExportError(f"{path} line {reader.line_num} is not valid CSV ({exc}); "
                               "nothing imported") from None


def _read_sqlite(path: Path) -> list[TuningRecord]:
    source = ResultStore(f"sqlite:///{path.resolve()}", read_only=True)
    try:
        if not source.is_autotune_database():
            raise NotAnExportError(f"{path} is an SQLite database but not an autotune one "
                                   "(no autotune_schema table); nothing imported")
        return source.records()
    except StoreError as exc:
        raise NotAnExportError(f"{path}: {exc}") from None
    finally:
        source.dispose()


def _text(value: Any) -> str:
    """A text cell that every database can store: no NUL, nothing that is not UTF-8."""
    if not isinstance(value, str):
        raise ValueError(f"{str(value)[:40]!r} is not text")
    if "\x00" in value:
        raise ValueError("holds a NUL character, which databases do not store in text")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("holds a lone surrogate, which is not UTF-8 text") from None
    return value


def _number(value: Any, name: str) -> float | None:
    if value in ("", None):
        return None
    if isinstance(value, bool):
        raise ValueError(f"{name} {value!r} is not a number")
    return float(value)


def _count(value: Any, name: str) -> int | None:
    """An optional count (an integer >= 0, as a number or as text)."""
    if value in ("", None):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{name} {value!r} is not a count")
    number = float(value)
    if not (number.is_integer() and 0 <= number <= _MAX_VERSION):
        raise ValueError(f"{name} {str(value)[:40]!r} is not a count")
    return int(number)


def record_from_row(row: dict[str, Any], where: str) -> TuningRecord:
    """One export row as a record; ValueError naming ``where`` and the field for a bad cell."""
    missing = [f for f in _REQUIRED if f not in row]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}; nothing imported")
    field = ""
    try:
        values = {}
        for field in KEY_FIELDS:
            value = row[field]
            if field == "version":
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    raise ValueError(f"{value!r} is not an integer")
                values[field] = int(value)
                if not 0 <= values[field] <= _MAX_VERSION:
                    raise ValueError(f"{str(value)[:40]} is out of range (0 to 2**63 - 1)")
            else:
                values[field] = _text(value)
        key = TuningKey(**values)
        field = "parameters"
        parameters = row["parameters"]
        if not isinstance(parameters, str):
            raise ValueError("must be JSON text")
        parameters = _text(parameters)
        field = "score"
        score = _number(row["score"], "score")
        score = math.inf if score is None else score  # never timed: any measurement beats it
        field = "created_at"
        created = row.get("created_at")
        created_at = parse_datetime(created) if created not in ("", None) else None
        field = "gbps"
        gbps = _number(row.get("gbps"), "gbps")
        field = "gflops"
        gflops = _number(row.get("gflops"), "gflops")
        stats: dict[str, Any] = {}
        for field in ("ci_low", "ci_high", "spread"):
            stats[field] = _number(row.get(field), field)
        field = "ties"
        stats["ties"] = _count(row.get("ties"), "ties")
        texts = {}
        for field in ("package_version", "fingerprint", "sources", "search", "origin"):
            value = row.get(field)
            texts[field] = "" if value is None else _text(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"{where}: {field}: {exc}; nothing imported") from None
    record = TuningRecord(key=key, parameters=parameters, score=score,
                          package_version=texts["package_version"] or "unknown",
                          fingerprint=texts["fingerprint"], sources=texts["sources"],
                          search=texts["search"], origin=texts["origin"] or "offline",
                          gbps=gbps, gflops=gflops, **stats)
    if created_at is not None:
        from dataclasses import replace

        record = replace(record, created_at=created_at)
    return record
