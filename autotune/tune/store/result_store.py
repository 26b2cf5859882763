"""``ResultStore``: tuning results and trials in one SQL database."""

from __future__ import annotations

import enum
import errno
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records import TrialRecord, TrialStatus, TuningKey, TuningRecord
from .location import (ReadOnlyStoreError, StoreError, StorePathError, database_url, display, hint,
                       path_problem, sqlite_file)
from .rows import KEY_FIELDS
from .sqlite_reader import NeedsUpgrade, SqliteReader, key_condition, selection_condition


class MergePolicy(str, enum.Enum):
    """What :meth:`ResultStore.merge` does when a key already has a result."""

    KEEP = "keep"  #: keep ours (timings from elsewhere are not comparable with ours)
    REPLACE = "replace"  #: take theirs
    BETTER = "better"  #: take theirs if its score is strictly lower

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class MergeCounts:
    """What a merge did, per result."""

    policy: MergePolicy
    added: int
    replaced: int
    kept: int
    trials: int = 0


def _writable(path: Path) -> bool:
    """Whether this process can write the SQLite file ``path`` (and its journal beside it).
    A path that cannot even be looked at (a folder it may not search, a name too long) counts
    as writable: the first read or write then says what is wrong with it."""
    try:
        folder = path.parent
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent  # the folder that would be created, judged by its first existing parent
        if not folder.is_dir():
            return True  # a file where a folder should be: the first write says so
        if not os.access(folder, os.W_OK | os.X_OK):
            return False
        return not path.exists() or os.access(path, os.W_OK)
    except OSError:
        return True


class ResultStore:
    """Tuning results and trials in one SQL database.

    Every method runs in its own transaction and commits before returning, so any number of
    threads and processes may share one database. SQLite files are read with ``sqlite3`` and
    written through SQLAlchemy; other databases go through SQLAlchemy for both.

    ``read_only`` None (the default) opens an SQLite file read-only when this process cannot
    write it or its folder; True never writes (and never creates files beside it); False
    always tries to write. Writes to a read-only store raise :class:`ReadOnlyStoreError`.
    ``connect`` False opens a server database without connecting (the first use connects and
    creates the tables), so that a server that is down fails the first read, not the opening.
    """

    def __init__(self, url: str, *, read_only: bool | None = None, connect: bool = True):
        self._url = url
        self._path = sqlite_file(url)
        if read_only is None:
            read_only = self._path is not None and not _writable(self._path)
        self._read_only = bool(read_only)
        self._reader = (SqliteReader(self._path, url, read_only=self._read_only)
                        if self._path is not None else None)
        self._sql: Any = None
        self._sql_lock = threading.Lock()
        if self._reader is None and not self._read_only:
            backend = self._backend()  # a server: a bad URL fails here
            if connect:  # and, unless asked not to (the tuner, during an outage), connect now
                backend.prepare()

    @classmethod
    def open(cls, value: str | os.PathLike | None = None, *, read_only: bool | None = None) -> ResultStore:
        """The store named by ``value`` (a path or URL; None: ``AUTOTUNE_DB`` or the default)."""
        return cls(database_url(None if value is None else os.fspath(value)), read_only=read_only)

    @property
    def url(self) -> str:
        """The SQLAlchemy URL this store was opened with."""
        return self._url

    @property
    def read_only(self) -> bool:
        return self._read_only

    @property
    def sqlite_path(self) -> Path | None:
        """The file of an SQLite store, else None."""
        return self._path

    def __repr__(self) -> str:
        return f"ResultStore({display(self._url)!r}{', read-only' if self._read_only else ''})"

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.dispose()

    def dispose(self) -> None:
        """Close every connection of this store. It reconnects if used again."""
        if self._reader is not None:
            self._reader.close()
        if self._sql is not None:
            self._sql.dispose()

    def _backend(self) -> Any:
        with self._sql_lock:
            if self._sql is None:
                from .sql import SqlBackend  # SQLAlchemy: only once it is needed

                self._sql = SqlBackend(self._url, read_only=self._read_only)
            return self._sql

    def _writer(self) -> Any:
        if self._read_only:
            raise ReadOnlyStoreError(f"tuning database {display(self._url)} is open read-only")
        if self._path is not None:
            self._make_folder(self._path)
        return self._backend()

    def _make_folder(self, path: Path) -> None:
        """Create the SQLite file's folder; a path that cannot be used is a StorePathError."""
        try:
            path.stat()
        except FileNotFoundError:
            pass  # created by the first write
        except OSError as exc:  # a name too long, a folder that may not be searched
            raise StorePathError(path_problem(path, exc)) from None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a folder should be
            raise StorePathError(path_problem(path, NotADirectoryError(
                errno.ENOTDIR, os.strerror(errno.ENOTDIR)))) from None
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.ENAMETOOLONG, errno.ENOTDIR, errno.ELOOP):
                raise StorePathError(path_problem(path, exc)) from None
            raise StoreError(f"cannot create directory {path.parent} for tuning database "
                             f"{display(self._url)}: {exc.strerror or exc}; {hint()}") from exc

    def _read(self, sqlite_call: Any, server_call: Any) -> Any:
        if self._reader is None:
            backend = self._backend()
            if not self._read_only:
                backend.prepare()  # once: a store opened without connecting creates its tables
            return server_call(backend)
        try:
            return sqlite_call(self._reader)
        except NeedsUpgrade:  # an older layout in a file we may write: upgrade it, read again
            self._backend().prepare()
            self._reader.close()
            self._reader = SqliteReader(self._path, self._url, read_only=False)
            return sqlite_call(self._reader)

    # -- results -------------------------------------------------------------------------------

    def get(self, key: TuningKey) -> TuningRecord | None:
        """The result stored for exactly ``key``, or None."""
        def server(sql: Any) -> TuningRecord | None:
            from .sql import key_filter, tuning_results

            rows = sql.select_results(*key_filter(tuning_results, key))
            return rows[0] if rows else None

        return self._read(lambda reader: reader.get(key), server)

    def find(self, function: str, version: int, arguments: str | None, *,
             device_name: str | None = None, device_platform: str | None = None,
             driver_version: str | None = None) -> list[TuningRecord]:
        """Results for ``function``/``version``/``arguments`` on any matching device, newest first.

        ``arguments`` or a device field left None matches any value (``arguments=None`` with
        the device given: one device's results of a function under every argument).
        """
        fields = {"function": function, "version": version, "arguments": arguments,
                  "device_name": device_name, "device_platform": device_platform,
                  "driver_version": driver_version}
        fields = {k: v for k, v in fields.items() if v is not None}

        def server(sql: Any) -> list[TuningRecord]:
            from .sql import tuning_results

            return sql.select_results(*(tuning_results.c[k] == v for k, v in fields.items()),
                                      newest_first=True)

        where = " AND ".join(f"{k} = ?" for k in fields)
        return self._read(lambda r: r.results(where, list(fields.values()), "created_at DESC, id DESC"),
                          server)

    def records(self, *, function: str | None = None, device: str | None = None) -> list[TuningRecord]:
        """All results, or those matching the filters, by function, device name and arguments.

        ``function`` is an exact name, or an SQL LIKE pattern if it contains ``%``; ``device`` is a
        case-insensitive substring of the device name.
        """
        def server(sql: Any) -> list[TuningRecord]:
            from .sql import selection_filter, tuning_results

            return sql.select_results(*selection_filter(tuning_results, function, device))

        where, parameters = selection_condition(function, device)
        return self._read(lambda r: r.results(where, parameters), server)

    def trials(self, key: TuningKey | None = None, *, function: str | None = None,
               version: int | None = None, arguments: str | None = None) -> list[TrialRecord]:
        """Trials of ``key`` and/or ``function`` (exact, or LIKE if it contains ``%``), of one
        ``version`` and ``arguments`` if given (on any device), oldest first."""
        exact = {"version": version, "arguments": arguments}
        exact = {k: v for k, v in exact.items() if v is not None}

        def server(sql: Any) -> list[TrialRecord]:
            from .sql import key_filter, selection_filter, tuning_trials

            conditions = selection_filter(tuning_trials, function, None)
            if key is not None:
                conditions += key_filter(tuning_trials, key)
            conditions += [tuning_trials.c[k] == v for k, v in exact.items()]
            return sql.select_trials(*conditions)

        def local(reader: SqliteReader) -> list[TrialRecord]:
            where, parameters = selection_condition(function, None)
            parts = [where] if where else []
            if key is not None:
                key_where, key_parameters = key_condition(key)
                parts.append(key_where)
                parameters += key_parameters
            for k, v in exact.items():
                parts.append(f"{k} = ?")
                parameters.append(v)
            return reader.trials(" AND ".join(parts), parameters)

        return self._read(local, server)

    def trials_that_ran(self, key: TuningKey, fingerprint: str) -> Iterator[TrialRecord]:
        """The trials of exactly ``key`` that ran (status ``ok``, a median above 0) with this
        ``fingerprint``, the fastest median first. From SQLite each row is made a record as it
        is taken (a caller that stops at the first that suits it parses no more); a server's
        rows are all made records at once."""
        ok = TrialStatus.OK.value

        def server(sql: Any) -> Iterator[TrialRecord]:
            from .sql import key_filter, tuning_trials

            return iter(sql.select_trials(
                *key_filter(tuning_trials, key), tuning_trials.c.status == ok,
                tuning_trials.c.fingerprint == fingerprint, tuning_trials.c.median_seconds > 0,
                fastest_first=True))

        def local(reader: SqliteReader) -> Iterator[TrialRecord]:
            where, parameters = key_condition(key)
            return reader.trials_lazily(
                f"{where} AND status = ? AND fingerprint = ? AND median_seconds > 0",
                [*parameters, ok, fingerprint], order="median_seconds, id")

        return self._read(local, server)

    def is_autotune_database(self) -> bool:
        """True if the database holds autotune's tables (of any layout version)."""
        if self._reader is None:
            return self._backend().schema_version() is not None
        return self._reader.schema_version() is not None

    # -- writes ---------------------------------------------------------------------------------

    def prepare_writes(self) -> None:
        """Do now what the first write would otherwise do (load the SQL layer, create or
        upgrade the tables), for a caller whose first write must be quick. StoreError (a
        read-only store: ReadOnlyStoreError) if this store cannot be written."""
        self._writer().prepare()

    def put(self, record: TuningRecord) -> None:
        """Store ``record``, replacing any result for the same key (one atomic upsert)."""
        self._writer().save(record, ())

    def save(self, record: TuningRecord | None, trials: Sequence[TrialRecord] = ()) -> None:
        """Store a result (replacing the key's previous one) and trials in one transaction."""
        self._writer().save(record, trials)

    def add_trial(self, trial: TrialRecord) -> None:
        """Record one tried configuration, committed at once. Raises ValueError for a bad status."""
        self._writer().save(None, (trial,))

    def add_trials(self, trials: Sequence[TrialRecord]) -> None:
        """Record tried configurations in one transaction."""
        if trials:
            self._writer().save(None, trials)

    def merge(self, records: Sequence[TuningRecord], policy: MergePolicy | str = MergePolicy.KEEP,
              trials: Sequence[TrialRecord] = ()) -> MergeCounts:
        """Merge ``records`` (and add ``trials``) in one transaction: all or nothing.

        A key we lack is added; a key we have is kept, replaced, or replaced if the new score is
        strictly lower, as ``policy`` says. Two records with the same key are refused.
        """
        policy = MergePolicy(policy)
        seen: set[tuple] = set()
        for record in records:
            key = tuple(getattr(record.key, f) for f in KEY_FIELDS)
            if key in seen:
                raise ValueError(f"two results for one key ({record.key.function} on "
                                 f"{record.key.device_name}, {record.key.arguments}); nothing merged")
            seen.add(key)
        counts = self._writer().merge(list(records), policy.value, list(trials))
        return MergeCounts(policy, counts["added"], counts["replaced"], counts["kept"], len(trials))

    def delete(self, *, function: str | None = None, device: str | None = None) -> int:
        """Delete the results that :meth:`records` would return with the same filters, and the
        trials of the same keys (trials are matched by the same filters, so this also removes
        trials of interrupted tunings that never stored a result). Returns the number of results
        deleted.
        """
        return self._writer().delete(function, device)
