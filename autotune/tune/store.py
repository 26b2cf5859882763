"""The SQL store of tuning results and trials.

The store keeps :class:`~autotune.tune.records.TuningRecord` and
:class:`~autotune.tune.records.TrialRecord` values as rows of two tables and knows nothing about
kernels or devices; JSON fields are opaque text. Any SQLAlchemy database works; SQLite files
(the default) and PostgreSQL get native upserts.

SQLite files are shared safely by any number of processes: the journal is in WAL mode, every
connection waits up to :data:`BUSY_TIMEOUT_SECONDS` for a lock, and every write transaction starts
with ``BEGIN IMMEDIATE`` so that it takes the write lock up front (a deferred transaction that
upgrades from reading to writing fails at once with "database is locked" instead of waiting).
"""

from __future__ import annotations

import functools
import os
import pathlib
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Literal

import platformdirs
from sqlalchemy import (
    Column,
    ColumnElement,
    Connection,
    DateTime,
    Dialect,
    Engine,
    Float,
    Index,
    Integer,
    MetaData,
    Row,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    inspect,
    insert,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, IntegrityError, NoSuchModuleError, ProgrammingError
from sqlalchemy.types import TypeDecorator

from .records import TRIAL_STATUSES, TrialRecord, TuningKey, TuningRecord

__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "DEFAULT_DB_ENV",
    "SCHEMA_VERSION",
    "ResultStore",
    "StoreError",
    "database_url",
    "default_database_path",
]

#: Environment variable naming the tuning database (a file path or an SQLAlchemy URL).
DEFAULT_DB_ENV = "AUTOTUNE_DB"

#: Version of the table layout written by this module, kept in the ``autotune_schema`` table.
SCHEMA_VERSION = 1

#: How long a SQLite connection waits for another process's lock before giving up.
BUSY_TIMEOUT_SECONDS = 60.0

#: Result of :meth:`ResultStore.put_if_better`.
MergeOutcome = Literal["added", "replaced", "kept"]

#: The columns of a TuningKey, in its field order.
KEY_FIELDS = ("function", "version", "device_name", "device_platform", "driver_version", "arguments")
_WRITE_OPTION = "autotune_write"


class StoreError(RuntimeError):
    """The tuning database cannot be opened or used; the message names the problem and the fix."""


# --------------------------------------------------------------------------------------------
# Locating the database
# --------------------------------------------------------------------------------------------


def default_database_path() -> pathlib.Path:
    """``<user cache dir>/autotune/tuning.db``, used when neither ``--db`` nor ``AUTOTUNE_DB`` is set."""
    return pathlib.Path(platformdirs.user_cache_dir("autotune")) / "tuning.db"


def database_url(value: str | None = None) -> str:
    """The SQLAlchemy URL of the tuning database named by ``value``.

    ``value`` None reads :data:`DEFAULT_DB_ENV` now; unset or empty means
    :func:`default_database_path`. A value containing ``://`` is an SQLAlchemy URL used as is;
    anything else is a file path, made absolute and turned into a ``sqlite:///`` URL. (The
    parent directory of a SQLite file is created when a :class:`ResultStore` opens it.)
    """
    if value is None:
        value = os.environ.get(DEFAULT_DB_ENV, "")
    # Called on every tuned construction: resolving a path costs more than the memo hit itself.
    if not value:  # the default follows platformdirs, which reads these
        context = tuple(os.environ.get(v, "") for v in ("XDG_CACHE_HOME", "HOME", "LOCALAPPDATA"))
    elif "://" not in value:
        context = (os.getcwd(), os.environ.get("HOME", ""))  # "~" expands against HOME
    else:
        context = ()
    return _resolve_url(value, context)


@functools.lru_cache(maxsize=64)
def _resolve_url(value: str, context: tuple[str, ...]) -> str:
    if not value:
        return _sqlite_url(default_database_path())
    if "://" in value:
        return value
    return _sqlite_url((pathlib.Path(context[0]) / pathlib.Path(value).expanduser()).resolve())


def _sqlite_url(path: pathlib.Path) -> str:
    return f"sqlite:///{path}"


def sqlite_file(url: str) -> pathlib.Path | None:
    """The file of an SQLite database URL; None for other databases, in-memory ones and SQLite
    URI filenames (which SQLite interprets itself)."""
    parsed = _parse_url(url)
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if parsed.query.get("uri") or database.startswith("file:"):
        return None
    return pathlib.Path(database).expanduser()


def _create_sqlite_parent(url: str) -> None:
    """Create the directory that will hold the SQLite file of ``url``, if it is one."""
    path = sqlite_file(url)
    if path is None:
        return
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(
            f"cannot create directory {parent} for tuning database {url}: {exc.strerror or exc}; "
            f"check {DEFAULT_DB_ENV} or --db"
        ) from exc


def _parse_url(url: str) -> URL:
    try:
        return make_url(url)
    except ArgumentError as exc:
        raise StoreError(f"invalid tuning database URL {url!r}: {exc}; check {DEFAULT_DB_ENV} or --db") from exc


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime.

    Values are converted to UTC; databases without time zone support store them naive (so they
    compare and sort correctly as stored) and read back values get UTC attached again.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = _as_utc(value)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


def _as_utc(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"created_at must be timezone-aware (e.g. in UTC), got naive {value!r}")
    return value.astimezone(timezone.utc)


def _key_columns() -> list[Column[Any]]:
    return [
        Column("function", Text, nullable=False),
        Column("version", Integer, nullable=False),
        Column("device_name", Text, nullable=False),
        Column("device_platform", Text, nullable=False),
        Column("driver_version", Text, nullable=False),
        Column("arguments", Text, nullable=False),
    ]


metadata = MetaData()

tuning_results = Table(
    "tuning_results",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_key_columns(),
    Column("parameters", Text, nullable=False),
    Column("score", Float, nullable=False),
    Column("created_at", UTCDateTime, nullable=False),
    Column("package_version", Text, nullable=False),
    UniqueConstraint(*KEY_FIELDS, name="uq_tuning_results_key"),
    Index("ix_tuning_results_function", "function"),
)

tuning_trials = Table(
    "tuning_trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    *_key_columns(),
    Column("parameters", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("message", Text, nullable=False),
    Column("min_seconds", Float, nullable=True),
    Column("median_seconds", Float, nullable=True),
    Column("max_seconds", Float, nullable=True),
    Column("created_at", UTCDateTime, nullable=False),
    Index("ix_tuning_trials_function_version", "function", "version"),
)

#: One row (``id`` 1) holding the schema version of the database.
autotune_schema = Table(
    "autotune_schema",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("schema_version", Integer, nullable=False),
)


# --------------------------------------------------------------------------------------------
# Engines
# --------------------------------------------------------------------------------------------


def _create_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite engines are set up for many concurrent processes."""
    parsed = _parse_url(url)
    try:
        if parsed.get_backend_name() != "sqlite":
            return create_engine(parsed, pool_pre_ping=True)
        engine = create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_SECONDS})
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(
            f"cannot open tuning database {_display(url)}: {exc}; "
            f"check {DEFAULT_DB_ENV} or --db (and that the database driver is installed)"
        ) from exc
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_sqlite_transaction)
    return engine


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    """Take transaction control away from pysqlite and set up WAL and the busy timeout."""
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself, see below
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_SECONDS * 1000)}")
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous = NORMAL")
    finally:
        cursor.close()


def _enable_wal(cursor: Any) -> None:
    """Switch the database to WAL, retrying while other processes hold it locked.

    Switching a new database to WAL upgrades a read lock to a write lock inside SQLite, which
    fails at once instead of waiting for the busy timeout when several processes open the file at
    the same moment. Once the file is in WAL mode this is a no-op.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_SECONDS
    delay = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = "locked" in str(exc) or "busy" in str(exc)
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def _begin_sqlite_transaction(connection: Connection) -> None:
    """Begin IMMEDIATE (write lock taken now, waiting if busy) for writes, DEFERRED for reads."""
    writing = connection.get_execution_options().get(_WRITE_OPTION, False)
    connection.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN DEFERRED")


def _display(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


# --------------------------------------------------------------------------------------------
# Rows <-> records
# --------------------------------------------------------------------------------------------


def _key_values(key: TuningKey) -> dict[str, Any]:
    return {name: getattr(key, name) for name in KEY_FIELDS}


def _key_filter(table: Table, key: TuningKey) -> list[ColumnElement[bool]]:
    return [table.c[name] == value for name, value in _key_values(key).items()]


def _result_values(record: TuningRecord) -> dict[str, Any]:
    return {
        **_key_values(record.key),
        "parameters": record.parameters,
        "score": record.score,
        "created_at": _as_utc(record.created_at),
        "package_version": record.package_version,
    }


def _trial_values(trial: TrialRecord) -> dict[str, Any]:
    if trial.status not in TRIAL_STATUSES:
        raise ValueError(f"invalid trial status {trial.status!r}; expected one of {', '.join(TRIAL_STATUSES)}")
    return {
        **_key_values(trial.key),
        "parameters": trial.parameters,
        "status": trial.status,
        "message": trial.message,
        "min_seconds": trial.min_seconds,
        "median_seconds": trial.median_seconds,
        "max_seconds": trial.max_seconds,
        "created_at": _as_utc(trial.created_at),
    }


def _key_from_row(row: Row[Any]) -> TuningKey:
    return TuningKey(**{name: row._mapping[name] for name in KEY_FIELDS})


def _record_from_row(row: Row[Any]) -> TuningRecord:
    return TuningRecord(
        key=_key_from_row(row),
        parameters=row.parameters,
        score=row.score,
        package_version=row.package_version,
        created_at=row.created_at,
    )


def _trial_from_row(row: Row[Any]) -> TrialRecord:
    return TrialRecord(
        key=_key_from_row(row),
        parameters=row.parameters,
        status=row.status,
        message=row.message,
        min_seconds=row.min_seconds,
        median_seconds=row.median_seconds,
        max_seconds=row.max_seconds,
        created_at=row.created_at,
    )


def _selection_filter(table: Table, function: str | None, device: str | None) -> list[ColumnElement[bool]]:
    """``function``: exact name, or an SQL LIKE pattern if it contains ``%``;
    ``device``: case-insensitive substring of the device name."""
    conditions: list[ColumnElement[bool]] = []
    if function is not None:
        column = table.c.function
        conditions.append(column.like(function) if "%" in function else column == function)
    if device is not None:
        conditions.append(table.c.device_name.icontains(device, autoescape=True))
    return conditions


# --------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------


class ResultStore:
    """Tuning results and trials in one SQL database.

    Every method runs in its own transaction and commits before returning, so any number of
    threads and processes may share one database. Writes to SQLite wait for each other (up to
    :data:`BUSY_TIMEOUT_SECONDS`) instead of failing.
    """

    def __init__(self, url: str):
        """Connect to ``url`` and create the tables if they are missing.

        Raises :class:`StoreError` if the database cannot be opened or was written by a newer
        version of autotune.
        """
        self._url = url
        _create_sqlite_parent(url)
        self._engine = _create_engine(url)
        try:
            self._initialise()
        except BaseException:
            self._engine.dispose()
            raise

    @classmethod
    def open(cls, value: str | None = None) -> ResultStore:
        """The store named by ``value`` (a path or URL; None: ``AUTOTUNE_DB`` or the default)."""
        return cls(database_url(value))

    @property
    def url(self) -> str:
        """The SQLAlchemy URL this store was opened with."""
        return self._url

    def __repr__(self) -> str:
        return f"ResultStore({_display(self._url)!r})"

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.dispose()

    def dispose(self) -> None:
        """Close every connection of this store. It reconnects if used again."""
        self._engine.dispose()

    # -- results -------------------------------------------------------------------------------

    def get(self, key: TuningKey) -> TuningRecord | None:
        """The result stored for exactly ``key``, or None."""
        query = select(tuning_results).where(*_key_filter(tuning_results, key))
        with self._transaction() as connection:
            row = connection.execute(query).first()
        return None if row is None else _record_from_row(row)

    def find(
        self,
        function: str,
        version: int,
        arguments: str,
        *,
        device_name: str | None = None,
        device_platform: str | None = None,
        driver_version: str | None = None,
    ) -> list[TuningRecord]:
        """Results for ``function``/``version``/``arguments`` on any matching device, newest first.

        A device field left None matches any value.
        """
        conditions = [
            tuning_results.c.function == function,
            tuning_results.c.version == version,
            tuning_results.c.arguments == arguments,
        ]
        device_fields = {
            "device_name": device_name,
            "device_platform": device_platform,
            "driver_version": driver_version,
        }
        conditions += [tuning_results.c[name] == value for name, value in device_fields.items() if value is not None]
        query = (
            select(tuning_results)
            .where(*conditions)
            .order_by(tuning_results.c.created_at.desc(), tuning_results.c.id.desc())
        )
        with self._transaction() as connection:
            return [_record_from_row(row) for row in connection.execute(query)]

    def put(self, record: TuningRecord) -> None:
        """Store ``record``, replacing any result for the same key (one atomic upsert)."""
        values = _result_values(record)
        with self._transaction(write=True) as connection:
            self._upsert_result(connection, values)

    def put_if_better(self, record: TuningRecord) -> MergeOutcome:
        """Store ``record`` unless a result with an equal or lower score exists for its key.

        Returns ``"added"`` (the key had no result), ``"replaced"`` (the new score is strictly
        lower) or ``"kept"``. Meant for merging databases; atomic.
        """
        values = _result_values(record)
        current_score = (
            select(tuning_results.c.score).where(*_key_filter(tuning_results, record.key)).with_for_update()
        )
        with self._transaction(write=True) as connection:
            current = connection.execute(current_score).scalar_one_or_none()
            if current is None:
                if self._insert_result_if_absent(connection, values):
                    return "added"
                current = connection.execute(current_score).scalar_one()  # inserted concurrently
            if not record.score < current:
                return "kept"
            connection.execute(
                update(tuning_results).where(*_key_filter(tuning_results, record.key)).values(values)
            )
            return "replaced"

    def records(self, *, function: str | None = None, device: str | None = None) -> list[TuningRecord]:
        """All results, or those matching the filters, by function, device name and arguments.

        ``function`` is an exact name, or an SQL LIKE pattern if it contains ``%``; ``device`` is a
        case-insensitive substring of the device name.
        """
        query = (
            select(tuning_results)
            .where(*_selection_filter(tuning_results, function, device))
            .order_by(tuning_results.c.function, tuning_results.c.device_name, tuning_results.c.arguments)
        )
        with self._transaction() as connection:
            return [_record_from_row(row) for row in connection.execute(query)]

    def delete(self, *, function: str | None = None, device: str | None = None) -> int:
        """Delete the results that :meth:`records` would return with the same filters, and the
        trials of the same keys (trials are matched by the same filters, so this also removes
        trials of interrupted tunings that never stored a result). Returns the number of results
        deleted.
        """
        with self._transaction(write=True) as connection:
            deleted = connection.execute(
                delete(tuning_results).where(*_selection_filter(tuning_results, function, device))
            ).rowcount
            connection.execute(delete(tuning_trials).where(*_selection_filter(tuning_trials, function, device)))
        return deleted

    # -- trials --------------------------------------------------------------------------------

    def add_trial(self, trial: TrialRecord) -> None:
        """Record one tried configuration, committed at once. Raises ValueError for a bad status."""
        values = _trial_values(trial)
        with self._transaction(write=True) as connection:
            connection.execute(insert(tuning_trials).values(values))

    def trials(self, key: TuningKey | None = None, *, function: str | None = None) -> list[TrialRecord]:
        """Trials of ``key`` and/or ``function`` (exact, or LIKE if it contains ``%``), oldest first."""
        conditions = _selection_filter(tuning_trials, function, None)
        if key is not None:
            conditions += _key_filter(tuning_trials, key)
        query = (
            select(tuning_trials)
            .where(*conditions)
            .order_by(tuning_trials.c.created_at, tuning_trials.c.id)
        )
        with self._transaction() as connection:
            return [_trial_from_row(row) for row in connection.execute(query)]

    # -- internals -----------------------------------------------------------------------------

    @contextmanager
    def _transaction(self, *, write: bool = False, purpose: str = "use") -> Iterator[Connection]:
        """A connection in a transaction committed on success; SQLite writes begin IMMEDIATE.

        Database errors become :class:`StoreError` ("cannot <purpose> tuning database ...").
        """
        try:
            with self._engine.connect() as connection:
                if write:
                    connection.execution_options(**{_WRITE_OPTION: True})
                with connection.begin():
                    yield connection
        except DBAPIError as exc:
            raise StoreError(
                f"cannot {purpose} tuning database {_display(self._url)}: {exc.orig}; "
                f"check {DEFAULT_DB_ENV} or --db"
            ) from exc

    def _initialise(self) -> None:
        """Check the schema version and create the tables if they are missing."""
        with self._transaction(purpose="open") as connection:
            version = _schema_version(connection)
        if version is None:
            self._create_tables()
        else:
            self._check_schema_version(version)

    def _create_tables(self) -> None:
        """Create the missing tables and the version row in one write transaction.

        On SQLite the IMMEDIATE transaction serialises concurrent creators; on other databases a
        creator that loses the race sees "already exists" and looks again.
        """
        attempts = 3
        for attempt in range(attempts):
            try:
                with self._transaction(write=True, purpose="open") as connection:
                    version = _schema_version(connection)
                    if version is None:
                        metadata.create_all(connection, checkfirst=True)
                        connection.execute(insert(autotune_schema).values(id=1, schema_version=SCHEMA_VERSION))
                        version = SCHEMA_VERSION
                self._check_schema_version(version)
                return
            except StoreError as exc:
                lost_race = isinstance(exc.__cause__, (IntegrityError, ProgrammingError))
                if not lost_race or attempt == attempts - 1:
                    raise

    def _check_schema_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"tuning database {_display(self._url)} has schema version {version}, newer than "
                f"{SCHEMA_VERSION} known to this autotune; upgrade autotune (or use another database "
                f"via {DEFAULT_DB_ENV} or --db)"
            )
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"tuning database {_display(self._url)} has unsupported schema version {version}; "
                f"delete it or use another database via {DEFAULT_DB_ENV} or --db"
            )

    @staticmethod
    def _upsert_result(connection: Connection, values: Mapping[str, Any]) -> None:
        """Insert a result or overwrite the one with the same key, atomically."""
        insert_for_dialect = _native_insert(connection)
        if insert_for_dialect is not None:
            statement = insert_for_dialect(tuning_results).values(values)
            replaced = {name: statement.excluded[name] for name in values if name not in KEY_FIELDS}
            connection.execute(statement.on_conflict_do_update(index_elements=list(KEY_FIELDS), set_=replaced))
            return
        key_filter = [tuning_results.c[name] == values[name] for name in KEY_FIELDS]
        existing = connection.execute(select(tuning_results.c.id).where(*key_filter).with_for_update()).first()
        if existing is None:
            connection.execute(insert(tuning_results).values(values))
        else:
            connection.execute(update(tuning_results).where(tuning_results.c.id == existing.id).values(values))

    @staticmethod
    def _insert_result_if_absent(connection: Connection, values: Mapping[str, Any]) -> bool:
        """Insert a result unless its key exists; True if inserted."""
        insert_for_dialect = _native_insert(connection)
        if insert_for_dialect is None:
            connection.execute(insert(tuning_results).values(values))
            return True
        statement = insert_for_dialect(tuning_results).values(values)
        result = connection.execute(statement.on_conflict_do_nothing(index_elements=list(KEY_FIELDS)))
        return result.rowcount == 1


def _native_insert(connection: Connection) -> Any:
    """The dialect's INSERT supporting ON CONFLICT, or None where there is none."""
    return {"sqlite": sqlite.insert, "postgresql": postgresql.insert}.get(connection.dialect.name)


def _schema_version(connection: Connection) -> int | None:
    """The stored schema version, or None in a database without autotune tables."""
    if not inspect(connection).has_table(autotune_schema.name):
        return None
    return connection.execute(select(autotune_schema.c.schema_version)).scalar()

