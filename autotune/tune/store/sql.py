"""The SQLAlchemy side of the store: tables, engines, every write, and reads on servers.

Imported only when a database is written to or is not an SQLite file, so that serving a stored
result from SQLite does not pay for importing SQLAlchemy.

SQLite files are shared safely by any number of processes: writers switch the journal to WAL,
wait up to ``BUSY_TIMEOUT_SECONDS`` for a lock, and start every write transaction with
``BEGIN IMMEDIATE`` so that it takes the write lock up front (a deferred transaction that
upgrades from reading to writing fails at once with "database is locked" instead of waiting).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

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
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    delete,
    event,
    inspect,
    insert,
    select,
    text,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.exc import (ArgumentError, DBAPIError, IntegrityError, InterfaceError, NoSuchModuleError,
                            OperationalError, ProgrammingError)
from sqlalchemy.types import TypeDecorator

from ..records import TrialRecord, TuningKey, TuningRecord
from . import settings
from .location import ReadOnlyStoreError, StoreBusyError, StoreError, StoreUnavailableError, display, hint
from .rows import (
    ADDED_IN_2,
    ADDED_IN_3,
    KEY_FIELDS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    TRIAL_COLUMNS,
    key_values,
    result_from_cells,
    result_values,
    trial_from_cells,
    trial_values,
)

_WRITE_OPTION = "autotune_write"


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime.

    Databases without time zone support store it naive (so it compares and sorts correctly as
    stored); values read back get UTC attached again.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.astimezone(timezone.utc)
        return value if dialect.name == "postgresql" else value.replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
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
    Column("fingerprint", Text, nullable=False, server_default=""),
    Column("sources", Text, nullable=False, server_default=""),
    Column("search", Text, nullable=False, server_default=""),
    Column("origin", Text, nullable=False, server_default="offline"),
    Column("gbps", Float, nullable=True),
    Column("gflops", Float, nullable=True),
    Column("ci_low", Float, nullable=True),
    Column("ci_high", Float, nullable=True),
    Column("ties", Integer, nullable=True),
    Column("spread", Float, nullable=True),
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
    Column("fingerprint", Text, nullable=False, server_default=""),
    Column("gbps", Float, nullable=True),
    Column("gflops", Float, nullable=True),
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


def _configure_sqlite_connection(dbapi_connection: Any, _record: Any) -> None:
    """Take transaction control away from pysqlite and set up WAL and the busy timeout."""
    dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN itself, see below
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute(f"PRAGMA busy_timeout = {int(settings.busy_timeout() * 1000)}")
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
    deadline = time.monotonic() + settings.busy_timeout()
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


def create_sql_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite engines are set up for many concurrent writers."""
    try:
        parsed = make_url(url)
        if parsed.get_backend_name() != "sqlite":
            return create_engine(parsed, pool_pre_ping=True)
        engine = create_engine(parsed, connect_args={"timeout": settings.busy_timeout()})
    except (ArgumentError, NoSuchModuleError, ImportError) as exc:
        raise StoreError(
            f"cannot open tuning database {display(url)}: {exc}; {hint()} (and that the "
            "database driver is installed)"
        ) from exc
    event.listen(engine, "connect", _configure_sqlite_connection)
    event.listen(engine, "begin", _begin_sqlite_transaction)
    return engine


def classify_error(url: str, exc: BaseException, purpose: str) -> StoreError:
    """A :class:`StoreError` (read-only, busy, or plain) naming the real cause and the fix."""
    cause = getattr(exc, "orig", None) or exc
    message = str(cause)
    lowered = message.lower()
    if "readonly" in lowered or "read-only" in lowered or "permission denied" in lowered:
        return ReadOnlyStoreError(f"cannot {purpose} tuning database {display(url)}: it is "
                                  f"read-only ({message})")
    if "locked" in lowered or "busy" in lowered:
        return StoreBusyError(
            f"cannot {purpose} tuning database {display(url)}: another process held its write "
            f"lock for more than the busy timeout of {settings.busy_timeout():g} s ({message})")
    if "disk i/o error" in lowered or "disk is full" in lowered or "no space left" in lowered:
        return StoreUnavailableError(f"cannot {purpose} tuning database {display(url)}: "
                                     f"{message} (is its disk full, or the size of files limited?)")
    if isinstance(exc, (OperationalError, InterfaceError)) and not url.startswith("sqlite"):
        return StoreUnavailableError(f"cannot {purpose} tuning database {display(url)}: "
                                     f"{message.strip()} (is the server down?); {hint()}")
    return StoreError(f"cannot {purpose} tuning database {display(url)}: {message}; {hint()}")


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def key_filter(table: Table, key: TuningKey) -> list[ColumnElement[bool]]:
    return [table.c[name] == value for name, value in key_values(key).items()]


def selection_filter(table: Table, function: str | None, device: str | None) -> list[ColumnElement[bool]]:
    """``function``: exact name, or an SQL LIKE pattern if it contains ``%``;
    ``device``: case-insensitive substring of the device name."""
    conditions: list[ColumnElement[bool]] = []
    if function is not None:
        column = table.c.function
        conditions.append(column.like(function) if "%" in function else column == function)
    if device is not None:
        conditions.append(table.c.device_name.icontains(device, autoescape=True))
    return conditions


def _native_insert(connection: Connection) -> Any:
    """The dialect's INSERT supporting ON CONFLICT, or None where there is none."""
    return {"sqlite": sqlite.insert, "postgresql": postgresql.insert}.get(connection.dialect.name)


def _schema_version(connection: Connection) -> int | None:
    """The stored schema version, or None in a database without autotune tables."""
    if not inspect(connection).has_table(autotune_schema.name):
        return None
    return connection.execute(select(autotune_schema.c.schema_version)).scalar()


class SqlBackend:
    """Reads and writes through SQLAlchemy Core; every method is one transaction."""

    def __init__(self, url: str, *, read_only: bool = False):
        self.url = url
        self.read_only = read_only
        self.engine = create_sql_engine(url)
        self._ready = False

    def dispose(self) -> None:
        self.engine.dispose()

    @contextmanager
    def transaction(self, *, write: bool = False, purpose: str = "use") -> Iterator[Connection]:
        try:
            with self.engine.connect() as connection:
                if write:
                    connection.execution_options(**{_WRITE_OPTION: True})
                with connection.begin():
                    yield connection
        except DBAPIError as exc:
            raise classify_error(self.url, exc, purpose) from exc
        except sqlite3.Error as exc:  # raised by the connect hook (WAL switch)
            raise classify_error(self.url, exc, purpose) from exc

    # -- schema -------------------------------------------------------------------------------

    def schema_version(self) -> int | None:
        with self.transaction(purpose="open") as connection:
            return _schema_version(connection)

    def prepare(self, *, create: bool = True) -> None:
        """Create the tables if missing, upgrade an older layout, refuse a newer one."""
        if self._ready:
            return
        version = self.schema_version()
        if version is None and not create:
            raise StoreError(f"{display(self.url)} holds no autotune tables; nothing to read")
        if self.read_only and (version is None or version < SCHEMA_VERSION):
            raise StoreError(f"tuning database {display(self.url)} has the older schema version "
                             f"{version} and is open read-only; open it once with write access "
                             "to upgrade it")
        if version is None or version < SCHEMA_VERSION:
            self._create_or_upgrade()
        else:
            check_version(self.url, version)
        self._ready = True

    def _create_or_upgrade(self) -> None:
        """Create the missing tables (or add the columns of a newer layout) and the version row
        in one write transaction. On SQLite the IMMEDIATE transaction serialises concurrent
        creators; elsewhere a creator that loses the race sees "already exists" and looks again."""
        attempts = 3
        for attempt in range(attempts):
            try:
                with self.transaction(write=True, purpose="open") as connection:
                    version = _schema_version(connection)
                    if version is None:
                        metadata.create_all(connection, checkfirst=True)
                        connection.execute(insert(autotune_schema).values(
                            id=1, schema_version=SCHEMA_VERSION))
                    elif version < SCHEMA_VERSION:
                        _upgrade(connection, version)
                    else:
                        check_version(self.url, version)
                return
            except StoreError as exc:
                lost_race = isinstance(exc.__cause__, (IntegrityError, ProgrammingError))
                if not lost_race or attempt == attempts - 1:
                    raise

    # -- reads (servers; SQLite files are read by the sqlite_reader module) --------------------

    def select_results(self, *conditions: ColumnElement[bool], newest_first: bool = False) -> list[TuningRecord]:
        self.prepare(create=False)
        order = ((tuning_results.c.created_at.desc(), tuning_results.c.id.desc()) if newest_first
                 else (tuning_results.c.function, tuning_results.c.device_name,
                       tuning_results.c.arguments))
        query = select(*(tuning_results.c[n] for n in RESULT_COLUMNS)).where(*conditions).order_by(*order)
        with self.transaction() as connection:
            return [result_from_cells(tuple(row)) for row in connection.execute(query)]

    def select_trials(self, *conditions: ColumnElement[bool],
                      fastest_first: bool = False) -> list[TrialRecord]:
        """The trials meeting ``conditions``, oldest first (``fastest_first``: by median)."""
        self.prepare(create=False)
        order = ((tuning_trials.c.median_seconds, tuning_trials.c.id) if fastest_first
                 else (tuning_trials.c.created_at, tuning_trials.c.id))
        query = (select(*(tuning_trials.c[n] for n in TRIAL_COLUMNS)).where(*conditions)
                 .order_by(*order))
        with self.transaction() as connection:
            return [trial_from_cells(tuple(row)) for row in connection.execute(query)]

    # -- writes ---------------------------------------------------------------------------------

    def save(self, record: TuningRecord | None, trials: Sequence[TrialRecord]) -> None:
        """Upsert ``record`` (if given) and add ``trials``, atomically."""
        values = result_values(record) if record is not None else None
        trial_rows = [trial_values(t) for t in trials]
        self.prepare()
        with self.transaction(write=True, purpose="write to") as connection:
            if trial_rows:
                connection.execute(insert(tuning_trials), trial_rows)
            if values is not None:
                _upsert_result(connection, values)

    def merge(self, records: Sequence[TuningRecord], policy: str,
              trials: Sequence[TrialRecord] = ()) -> dict[str, int]:
        """Merge results under ``policy`` (``keep``, ``replace`` or ``better``) in one
        transaction; counts of added, replaced and kept results, true on every backend."""
        # one order of keys for every importer: rows are locked in it, so two never deadlock
        rows = sorted((result_values(r) for r in records),
                      key=lambda v: tuple(str(v[name]) for name in KEY_FIELDS))
        trial_rows = [trial_values(t) for t in trials]
        self.prepare()
        counts = {"added": 0, "replaced": 0, "kept": 0}
        with self.transaction(write=True, purpose="import into") as connection:
            for values in rows:
                condition = [tuning_results.c[name] == values[name] for name in KEY_FIELDS]
                existing = (select(tuning_results.c.id, tuning_results.c.score).where(*condition)
                            .with_for_update())
                current = connection.execute(existing).first()
                if current is None:
                    if _insert_if_absent(connection, values):
                        counts["added"] += 1
                        continue
                    # another writer added the key since the select; its row is committed now
                    current = connection.execute(existing).one()
                if policy == "replace" or (policy == "better" and values["score"] < current.score):
                    connection.execute(update(tuning_results).where(tuning_results.c.id == current.id)
                                       .values(values))
                    counts["replaced"] += 1
                else:
                    counts["kept"] += 1
            if trial_rows:
                connection.execute(insert(tuning_trials), trial_rows)
        return counts

    def delete(self, function: str | None, device: str | None) -> int:
        self.prepare()
        with self.transaction(write=True, purpose="delete from") as connection:
            doomed = connection.execute(
                select(tuning_results.c.id).where(*selection_filter(tuning_results, function, device))
            ).all()
            connection.execute(delete(tuning_results).where(
                *selection_filter(tuning_results, function, device)))
            connection.execute(delete(tuning_trials).where(
                *selection_filter(tuning_trials, function, device)))
        return len(doomed)


def _insert_if_absent(connection: Connection, values: Mapping[str, Any]) -> bool:
    """Insert a result unless its key exists; whether it was inserted. ``SELECT ... FOR UPDATE``
    cannot lock a row that does not exist yet, so on servers two importers can both find a key
    missing: ``ON CONFLICT DO NOTHING`` makes the second wait for the first and insert nothing.
    (Other servers keep the plain insert, and a lost race is an error, not a wrong count.)"""
    if connection.dialect.name != "postgresql":  # SQLite: the write transaction serialises
        connection.execute(insert(tuning_results).values(values))
        return True
    statement = postgresql.insert(tuning_results).values(values)
    statement = statement.on_conflict_do_nothing(index_elements=list(KEY_FIELDS))
    # RETURNING, not rowcount: drivers do not all report rowcount for ON CONFLICT
    return connection.execute(statement.returning(tuning_results.c.id)).first() is not None


def _upsert_result(connection: Connection, values: Mapping[str, Any]) -> None:
    """Insert a result or overwrite the one with the same key, atomically."""
    insert_for_dialect = _native_insert(connection)
    if insert_for_dialect is not None:
        statement = insert_for_dialect(tuning_results).values(values)
        replaced = {name: statement.excluded[name] for name in values if name not in KEY_FIELDS}
        connection.execute(statement.on_conflict_do_update(index_elements=list(KEY_FIELDS), set_=replaced))
        return
    condition = [tuning_results.c[name] == values[name] for name in KEY_FIELDS]
    existing = connection.execute(select(tuning_results.c.id).where(*condition).with_for_update()).first()
    if existing is None:
        connection.execute(insert(tuning_results).values(values))
    else:
        connection.execute(update(tuning_results).where(tuning_results.c.id == existing.id).values(values))


def _upgrade(connection: Connection, version: int) -> None:
    """Bring an older layout up to :data:`SCHEMA_VERSION` (inside the caller's transaction)."""
    if version < 1:
        raise StoreError(f"unsupported schema version {version}")
    present = {table: {c["name"] for c in inspect(connection).get_columns(table)}
               for table in ("tuning_results", "tuning_trials")}
    for table, column, kind, default in (*ADDED_IN_2, *ADDED_IN_3):
        if column in present[table]:
            continue
        clause = f" NOT NULL DEFAULT {default}" if default is not None else ""
        connection.execute(text(f"ALTER TABLE {table} ADD COLUMN {column} {kind}{clause}"))
    connection.execute(update(autotune_schema).where(autotune_schema.c.id == 1)
                       .values(schema_version=SCHEMA_VERSION))


def check_version(url: str, version: int) -> None:
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"tuning database {display(url)} has schema version {version}, newer than "
            f"{SCHEMA_VERSION} known to this autotune; upgrade autotune (or use another database "
            f"via {hint()[6:]})"
        )
    if version < 1:
        raise StoreError(f"tuning database {display(url)} has unsupported schema version {version}; "
                         f"delete it or use another database ({hint()})")
