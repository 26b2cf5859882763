"""Rows as cells and back: the column order both read paths use, and a careful reading of
cells that may not hold what their column says (a shared file can hold anything)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from ..records import TrialRecord, TuningKey, TuningRecord

#: Version of the table layout written by this package, kept in the ``autotune_schema`` table.
SCHEMA_VERSION = 3

#: The columns of a TuningKey, in its field order.
KEY_FIELDS = ("function", "version", "device_name", "device_platform", "driver_version", "arguments")
RESULT_COLUMNS = (*KEY_FIELDS, "parameters", "score", "created_at", "package_version",
                  "fingerprint", "sources", "search", "origin", "gbps", "gflops",
                  "ci_low", "ci_high", "ties", "spread")
TRIAL_COLUMNS = (*KEY_FIELDS, "parameters", "status", "message", "min_seconds", "median_seconds",
                 "max_seconds", "created_at", "fingerprint", "gbps", "gflops")
#: Columns added by schema version 2: (table, column, SQL type, default).
ADDED_IN_2 = (
    ("tuning_results", "fingerprint", "TEXT", "''"),
    ("tuning_results", "sources", "TEXT", "''"),
    ("tuning_results", "search", "TEXT", "''"),
    ("tuning_results", "origin", "TEXT", "'offline'"),
    ("tuning_results", "gbps", "FLOAT", None),
    ("tuning_results", "gflops", "FLOAT", None),
    ("tuning_trials", "fingerprint", "TEXT", "''"),
    ("tuning_trials", "gbps", "FLOAT", None),
    ("tuning_trials", "gflops", "FLOAT", None),
)
#: Columns added by schema version 3 (the statistics of a choice), all nullable.
ADDED_IN_3 = (
    ("tuning_results", "ci_low", "FLOAT", None),
    ("tuning_results", "ci_high", "FLOAT", None),
    ("tuning_results", "ties", "INTEGER", None),
    ("tuning_results", "spread", "FLOAT", None),
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def as_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"created_at must be timezone-aware (e.g. in UTC), got naive {value!r}")
    return value.astimezone(timezone.utc)


def parse_datetime(value: Any) -> datetime:
    """A stored or exported timestamp as an aware UTC datetime; naive ones are taken as UTC.
    ValueError for anything else."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str) and len(value) <= 64:
        parsed = datetime.fromisoformat(value.strip())
    else:
        raise ValueError(f"{value!r} is not a timestamp")
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


class _Cells:
    """Reads one row's cells by name, collecting what is wrong instead of raising."""

    def __init__(self, columns: Sequence[str], cells: Sequence[Any]):
        self.values = dict(zip(columns, cells))
        self.problems: list[str] = []

    def text(self, name: str, default: str = "") -> str:
        value = self.values.get(name, default)
        if value is None:
            return default
        if not isinstance(value, str):
            self.problems.append(f"{name} is {type(value).__name__}, not text")
            return str(value)
        return value

    def integer(self, name: str) -> int:
        value = self.values.get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            self.problems.append(f"{name} {value!r} is not an integer")
            return -1
        return value

    def number(self, name: str, *, optional: bool) -> float | None:
        value = self.values.get(name)
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.problems.append(f"{name} {value!r} is not a number")
            return math.nan
        return float(value)

    def count(self, name: str) -> int | None:
        """An optional integer >= 0 (None where absent)."""
        value = self.values.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.problems.append(f"{name} {value!r} is not a count")
            return None
        return value

    def timestamp(self, name: str) -> datetime:
        value = self.values.get(name)
        try:
            return parse_datetime(value)
        except (TypeError, ValueError, OverflowError):
            self.problems.append(f"{name} {value!r} is not a timestamp")
            return _EPOCH

    def key(self) -> TuningKey:
        return TuningKey(
            function=self.text("function"), version=self.integer("version"),
            device_name=self.text("device_name"), device_platform=self.text("device_platform"),
            driver_version=self.text("driver_version"), arguments=self.text("arguments"))


def result_from_cells(cells: Sequence[Any], columns: Sequence[str] = RESULT_COLUMNS) -> TuningRecord:
    """A result from its cells; what does not fit its column is described in ``malformed``."""
    c = _Cells(columns, cells)
    record = TuningRecord(
        key=c.key(), parameters=c.text("parameters"), score=c.number("score", optional=False),
        package_version=c.text("package_version"), created_at=c.timestamp("created_at"),
        fingerprint=c.text("fingerprint"), sources=c.text("sources"), search=c.text("search"),
        origin=c.text("origin", "offline"), gbps=c.number("gbps", optional=True),
        gflops=c.number("gflops", optional=True), ci_low=c.number("ci_low", optional=True),
        ci_high=c.number("ci_high", optional=True), ties=c.count("ties"),
        spread=c.number("spread", optional=True), malformed="",
    )
    return _with_problems(record, c.problems)


def trial_from_cells(cells: Sequence[Any], columns: Sequence[str] = TRIAL_COLUMNS) -> TrialRecord:
    c = _Cells(columns, cells)
    record = TrialRecord(
        key=c.key(), parameters=c.text("parameters"), status=c.text("status"),
        message=c.text("message"), min_seconds=c.number("min_seconds", optional=True),
        median_seconds=c.number("median_seconds", optional=True),
        max_seconds=c.number("max_seconds", optional=True), created_at=c.timestamp("created_at"),
        fingerprint=c.text("fingerprint"), gbps=c.number("gbps", optional=True),
        gflops=c.number("gflops", optional=True),
    )
    return _with_problems(record, c.problems)


def _with_problems(record: Any, problems: list[str]) -> Any:
    if not problems:
        return record
    from dataclasses import replace

    return replace(record, malformed="; ".join(problems))


def key_values(key: TuningKey) -> dict[str, Any]:
    return {name: getattr(key, name) for name in KEY_FIELDS}


def result_values(record: TuningRecord) -> dict[str, Any]:
    """The cells to write for a result (its timestamp in UTC)."""
    return {
        **key_values(record.key),
        "parameters": record.parameters,
        "score": float(record.score),
        "created_at": as_utc(record.created_at),
        "package_version": record.package_version,
        "fingerprint": record.fingerprint,
        "sources": record.sources,
        "search": record.search,
        "origin": record.origin,
        "gbps": record.gbps,
        "gflops": record.gflops,
        "ci_low": record.ci_low,
        "ci_high": record.ci_high,
        "ties": record.ties,
        "spread": record.spread,
    }


def trial_values(trial: TrialRecord) -> dict[str, Any]:
    from ..records import TrialStatus

    status = TrialStatus.parse(trial.status)
    return {
        **key_values(trial.key),
        "parameters": trial.parameters,
        "status": status.value,
        "message": trial.message,
        "min_seconds": trial.min_seconds,
        "median_seconds": trial.median_seconds,
        "max_seconds": trial.max_seconds,
        "created_at": as_utc(trial.created_at),
        "fingerprint": trial.fingerprint,
        "gbps": trial.gbps,
        "gflops": trial.gflops,
    }
