"""Reading SQLite tuning databases with the standard library's ``sqlite3``.

Serving a stored result is the product, and in a fresh process importing SQLAlchemy costs ten
times the read itself; so SQLite files are read here, with plain SQL over the same columns the
SQLAlchemy tables declare (``rows.RESULT_COLUMNS``), and written through SQLAlchemy.

Every connection is opened read-only (``mode=ro``), so reading never changes a file's journal
mode or creates tables. A store opened read-only on a file whose write-ahead log is empty reads it
as ``immutable``: no ``-wal`` or ``-shm`` files appear beside it.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..records import TrialRecord, TuningKey, TuningRecord
from . import settings
from .location import ReadOnlyStoreError, StoreError, display, hint
from .rows import KEY_FIELDS, RESULT_COLUMNS, SCHEMA_VERSION, TRIAL_COLUMNS, result_from_cells, trial_from_cells


class NeedsUpgrade(Exception):
    """The file has autotune tables of an older layout (``version``) and may be upgraded."""

    def __init__(self, version: int):
        super().__init__(version)
        self.version = version


def _escape_like(value: str) -> str:
    return value.replace("/", "//").replace("%", "/%").replace("_", "/_")


class SqliteReader:
    """Read-only access to one SQLite file; one connection per thread."""

    def __init__(self, path: Path, url: str, *, read_only: bool):
        self.path = path
        self.url = url
        self.read_only = read_only
        self._local = threading.local()
        self._schema_checked = False
        #: The columns present, per table: an older layout read without upgrading lacks some.
        self._columns: dict[str, tuple[str, ...]] = {}

    def close(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    def _open(self) -> sqlite3.Connection | None:
        if not self.path.exists():
            return None
        if self.path.is_dir():
            raise StoreError(f"tuning database {self.path} is a directory; {hint()}")
        wal = self.path.with_name(self.path.name + "-wal")
        immutable = self.read_only and not (wal.exists() and wal.stat().st_size > 0)
        uri = f"file:{quote(str(self.path.resolve()))}?mode=ro" + ("&immutable=1" if immutable else "")
        try:
            connection = sqlite3.connect(uri, uri=True, timeout=settings.busy_timeout(),
                                         check_same_thread=False)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open tuning database {display(self.url)}: {exc}; {hint()}") from exc
        return connection

    def _connection(self) -> sqlite3.Connection | None:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._open()  # None while the file does not exist yet
            self._local.connection = connection
        return connection

    def _query(self, sql: str, parameters: Sequence[Any] = ()) -> list[tuple]:
        connection = self._connection()
        if connection is None:
            return []
        try:
            if not self._schema_checked:
                self._check_schema(connection)
            return connection.execute(sql, tuple(parameters)).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []  # an empty file, or one whose tables another process creates now
            if "readonly" in str(exc):
                raise ReadOnlyStoreError(f"cannot read tuning database {display(self.url)}: {exc}") from exc
            raise StoreError(f"cannot read tuning database {display(self.url)}: {exc}; {hint()}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read tuning database {display(self.url)}: {exc}; {hint()}") from exc

    def _check_schema(self, connection: sqlite3.Connection) -> None:
        version = self._version(connection)
        if version is None:
            return  # no autotune tables (yet): nothing stored
        if version < SCHEMA_VERSION and not self.read_only:
            raise NeedsUpgrade(version)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"tuning database {display(self.url)} has schema version {version}, newer than "
                f"{SCHEMA_VERSION} known to this autotune; upgrade autotune (or use another "
                f"database, {hint()})")
        self._schema_checked = True

    def _version(self, connection: sqlite3.Connection) -> int | None:
        try:
            row = connection.execute("SELECT schema_version FROM autotune_schema WHERE id = 1").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        if row is None or isinstance(row[0], bool) or not isinstance(row[0], int):
            raise StoreError(f"tuning database {display(self.url)} has no valid schema version "
                             f"row (found {row!r}); it was not written by autotune, {hint()}")
        return row[0]

    def schema_version(self) -> int | None:
        """The layout version of the file, or None if it has no autotune tables (or no file)."""
        connection = self._connection()
        if connection is None:
            return None
        try:
            return self._version(connection)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read tuning database {display(self.url)}: {exc}; {hint()}") from exc

    def has_results_table(self) -> bool:
        return bool(self._query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?",
                                ("tuning_results",)))

    # -- queries ------------------------------------------------------------------------------

    def _present(self, table: str, wanted: tuple[str, ...]) -> tuple[str, ...]:
        """The ``wanted`` columns that ``table`` has (all of them in the current layout)."""
        if table not in self._columns:
            have = {row[1] for row in self._query(f"PRAGMA table_info({table})")}
            self._columns[table] = tuple(c for c in wanted if c in have) if have else wanted
        return self._columns[table]

    def results(self, where: str = "", parameters: Sequence[Any] = (),
                order: str = "function, device_name, arguments") -> list[TuningRecord]:
        columns = self._present("tuning_results", RESULT_COLUMNS)
        sql = f"SELECT {', '.join(columns)} FROM tuning_results"
        if where:
            sql += f" WHERE {where}"
        rows = self._query(f"{sql} ORDER BY {order}", parameters)
        return [result_from_cells(row, columns) for row in rows]

    def trials(self, where: str = "", parameters: Sequence[Any] = ()) -> list[TrialRecord]:
        columns = self._present("tuning_trials", TRIAL_COLUMNS)
        sql = f"SELECT {', '.join(columns)} FROM tuning_trials"
        if where:
            sql += f" WHERE {where}"
        rows = self._query(f"{sql} ORDER BY created_at, id", parameters)
        return [trial_from_cells(row, columns) for row in rows]

    def get(self, key: TuningKey) -> TuningRecord | None:
        where, parameters = key_condition(key)
        rows = self.results(where, parameters, "id")
        return rows[0] if rows else None


def key_condition(key: TuningKey) -> tuple[str, list[Any]]:
    return " AND ".join(f"{name} = ?" for name in KEY_FIELDS), [getattr(key, n) for n in KEY_FIELDS]


def selection_condition(function: str | None, device: str | None) -> tuple[str, list[Any]]:
    """The SQL of ``store.records(function=..., device=...)``'s filters."""
    parts, parameters = [], []
    if function is not None:
        parts.append("function LIKE ?" if "%" in function else "function = ?")
        parameters.append(function)
    if device is not None:
        parts.append("lower(device_name) LIKE '%' || lower(?) || '%' ESCAPE '/'")
        parameters.append(_escape_like(device))
    return " AND ".join(parts), parameters

