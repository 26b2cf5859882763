"""Where the tuning database is: ``use_database``, ``AUTOTUNE_DB``, or the user cache directory."""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import pathlib
from collections.abc import Iterator
from contextvars import ContextVar
from urllib.parse import unquote

import platformdirs

#: Environment variable naming the tuning database (a file path or an SQLAlchemy URL).
DEFAULT_DB_ENV = "AUTOTUNE_DB"


class StoreError(RuntimeError):
    """The tuning database cannot be opened or used; the message names the problem and the fix."""


class StoreUnavailableError(StoreError):
    """The database cannot be reached or written for now (a server outage, a full disk, a lock
    held long): a tuned call goes on without it, and what it could not write is written later."""


class StorePathError(StoreError):
    """The database's file path cannot be used (a folder that may not be searched, a name too
    long, a file where a folder should be)."""


class ReadOnlyStoreError(StoreError):
    """A write to a database that can only be read (a read-only file, folder or server role)."""


class StoreBusyError(StoreUnavailableError):
    """Another process held the database's write lock for longer than the busy timeout."""


_override: ContextVar[str | None] = ContextVar("autotune_database", default=None)


@contextlib.contextmanager
def use_database(value: str | os.PathLike | None) -> Iterator[str]:
    """Within the block, tuned functions (in this thread or task) use the database ``value``
    (a path or an SQLAlchemy URL) instead of ``AUTOTUNE_DB``. ``None`` changes nothing."""
    if value is None:
        yield database_url()
        return
    url = database_url(os.fspath(value))
    token = _override.set(url)
    try:
        yield url
    finally:
        _override.reset(token)


def default_database_path() -> pathlib.Path:
    """``<user cache dir>/autotune/tuning.db``, used when neither ``--db`` nor ``AUTOTUNE_DB`` is set."""
    return pathlib.Path(platformdirs.user_cache_dir("autotune")) / "tuning.db"


def database_url(value: str | None = None) -> str:
    """The SQLAlchemy URL of the tuning database named by ``value``.

    ``value`` None means the database chosen with :func:`use_database`, else
    :data:`DEFAULT_DB_ENV` read now; unset or empty means :func:`default_database_path`. A value
    containing ``://`` is an SQLAlchemy URL used as is; anything else is a file path, made
    absolute and turned into a ``sqlite:///`` URL.
    """
    if value is None:
        chosen = _override.get()
        if chosen is not None:
            return chosen
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


def backend_name(url: str) -> str:
    """``sqlite``, ``postgresql``, ...: the part of the URL before ``+`` or ``://``."""
    scheme = url.split("://", 1)[0] if "://" in url else ""
    return scheme.split("+", 1)[0].lower()


def sqlite_file(url: str) -> pathlib.Path | None:
    """The file of an SQLite database URL; None for other databases, in-memory ones and SQLite
    URI filenames (which SQLite interprets itself)."""
    if backend_name(url) != "sqlite":
        return None
    rest = url.split("://", 1)[1]
    if not rest.startswith("/"):
        return None
    database, _, query = rest[1:].partition("?")
    database = unquote(database)
    if not database or database == ":memory:" or database.startswith("file:") or "uri=" in query:
        return None
    return pathlib.Path(database).expanduser()


def display(url: str) -> str:
    """The URL with any password hidden."""
    if "://" not in url or "@" not in url.split("://", 1)[1].split("/", 1)[0]:
        return url
    scheme, rest = url.split("://", 1)
    credentials, _, host = rest.partition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url


_PATH_PROBLEMS = {
    errno.EACCES: "a folder on the way may not be searched (or the file read) by this user",
    errno.EPERM: "the operation is not permitted here",
    errno.ENAMETOOLONG: "a name in it is longer than the file system allows (usually 255 bytes)",
    errno.ENOTDIR: "a part of it is a file, not a folder",
    errno.ELOOP: "it has too many symbolic links",
}


def path_problem(path: os.PathLike | str, exc: OSError) -> str:
    """One line saying why the database file ``path`` cannot be used, and the fix."""
    why = _PATH_PROBLEMS.get(exc.errno or 0, exc.strerror or str(exc))
    return (f"cannot use the tuning database path {str(path)[:300]}: {why} "
            f"({exc.strerror or exc}); use another path, {hint()}")


def hint() -> str:
    return f"check {DEFAULT_DB_ENV} or --db"
