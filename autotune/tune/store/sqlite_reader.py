"""Reading SQLite tuning databases with the standard library's ``sqlite3``.

Serving a stored result is the product, and in a fresh process importing SQLAlchemy costs ten
times the read itself; so SQLite files are read here, with plain SQL over the same columns the
SQLAlchemy tables declare (``rows.RESULT_COLUMNS``), and written through SQLAlchemy.

Every connection is opened read-only (``mode=ro``), so reading never changes a file's journal
mode or creates tables. A store opened read-only on a file whose write-ahead log is empty reads it
as ``immutable``: no ``-wal`` or ``-shm`` files appear beside it.

Where a read fails because SQLite cannot create or grow a file beside the database (a full
disk, a file-size limit: WAL readers need a ``-shm`` file), the file is read again
``immutable``, which needs nothing beside it, with one warning: results are served from a full
disk. (An immutable read does not see the writes still in a ``-wal`` file.)
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from ..records import TrialRecord, TuningKey, TuningRecord
from . import settings
from .location import (ReadOnlyStoreError, StoreError, StorePathError, StoreUnavailableError, display,
                       hint, path_problem)
from .rows import KEY_FIELDS, RESULT_COLUMNS, SCHEMA_VERSION, TRIAL_COLUMNS, result_from_cells, trial_from_cells


logger = logging.getLogger("autotune.tune")

#: SQLite's errors for "cannot create, open or grow a file": an immutable read may still work.
_IO_ERRORS = ("SQLITE_IOERR", "SQLITE_FULL", "SQLITE_CANTOPEN")




def _io_error(exc: sqlite3.Error) -> bool:
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(_IO_ERRORS) or any(
        text in str(exc) for text in ("disk I/O error", "disk is full", "unable to open"))


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
        self.warned_immutable = False  #: read immutably once already (one warning)
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

    def _open(self, *, immutable: bool = False) -> sqlite3.Connection | None:
        try:
            if not self.path.exists():
                return None
            if self.path.is_dir():
                raise StoreError(f"tuning database {self.path} is a directory; {hint()}")
            wal = self.path.with_name(self.path.name + "-wal")
            immutable = immutable or (self.read_only and not (wal.exists() and wal.stat().st_size > 0))
            resolved = self.path.resolve()
        except OSError as exc:
            raise StorePathError(path_problem(self.path, exc)) from None
        uri = f"file:{quote(str(resolved))}?mode=ro" + ("&immutable=1" if immutable else "")
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
            return self._execute(connection, sql, parameters)
        except sqlite3.OperationalError as exc:
            if _io_error(exc):
                return self._query_immutable(sql, parameters, exc)
            return self._refuse(exc)
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read tuning database {display(self.url)}: {exc}; {hint()}") from exc

    def _execute(self, connection: sqlite3.Connection, sql: str, parameters: Sequence[Any]) -> list[tuple]:
        if not self._schema_checked:
            self._check_schema(connection)
        return connection.execute(sql, tuple(parameters)).fetchall()

    def _query_immutable(self, sql: str, parameters: Sequence[Any], cause: sqlite3.Error) -> list[tuple]:
        """The query on an immutable connection, for a file SQLite cannot open as usual
        (nothing can be created beside it); closed at once, so that the next read tries the
        usual way again."""
        connection = self._open(immutable=True)
        if connection is None:
            return []
        try:
            rows = self._execute(connection, sql, parameters)
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise StoreUnavailableError(f"cannot read tuning database {display(self.url)}: "
                                        f"{cause}, and read as immutable: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot read tuning database {display(self.url)}: {exc}; {hint()}") from exc
        finally:
            connection.close()
        if not self.warned_immutable:
            self.warned_immutable = True
            logger.warning("tuning database %s cannot be opened as usual (%s: is its disk full?); "
                           "it is read as immutable, without its -wal file's latest writes",
                           display(self.url), cause)
        return rows

    def _refuse(self, exc: sqlite3.OperationalError) -> list[tuple]:
        """An empty answer for missing tables; else the error, as a StoreError."""
        if "no such table" in str(exc):
            return []  # an empty file, or one whose tables another process creates now
        if "readonly" in str(exc):
            raise ReadOnlyStoreError(f"cannot read tuning database {display(self.url)}: {exc}") from exc
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreUnavailableError(f"cannot read tuning database {display(self.url)}: "
                                        f"another process held it locked ({exc})") from exc
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
        return list(self.trials_lazily(where, parameters))

    def trials_lazily(self, where: str = "", parameters: Sequence[Any] = (),
                      order: str = "created_at, id") -> Iterator[TrialRecord]:
        """:meth:`trials`, each row made a record only when it is taken (the rows are read at
        once: a caller that stops early saves the parsing)."""
        columns = self._present("tuning_trials", TRIAL_COLUMNS)
        sql = f"SELECT {', '.join(columns)} FROM tuning_trials"
        if where:
            sql += f" WHERE {where}"
        rows = self._query(f"{sql} ORDER BY {order}", parameters)
        return (trial_from_cells(row, columns) for row in rows)

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

