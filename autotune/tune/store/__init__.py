"""The SQL store of tuning results and trials.

The store keeps :class:`~autotune.tune.records.TuningRecord` and
:class:`~autotune.tune.records.TrialRecord` values as rows of two tables and knows nothing about
kernels or devices; JSON fields are opaque text. Any SQLAlchemy database works; SQLite files
(the default) are read with the standard library and written through SQLAlchemy, PostgreSQL
goes through SQLAlchemy for both.
"""

from .location import (
    DEFAULT_DB_ENV,
    ReadOnlyStoreError,
    StoreBusyError,
    StoreError,
    StorePathError,
    StoreUnavailableError,
    backend_name,
    database_url,
    default_database_path,
    display,
    sqlite_file,
    use_database,
)
from .result_store import MergeCounts, MergePolicy, ResultStore
from .rows import KEY_FIELDS, RESULT_COLUMNS, SCHEMA_VERSION, TRIAL_COLUMNS
from .settings import BUSY_TIMEOUT_SECONDS
from .transfer import (EXPORT_FORMATS, ImportSource, NotAnExportError, export_text, format_for,
                       read_import, rows_text)

__all__ = [
    "BUSY_TIMEOUT_SECONDS",
    "DEFAULT_DB_ENV",
    "EXPORT_FORMATS",
    "ImportSource",
    "NotAnExportError",
    "KEY_FIELDS",
    "RESULT_COLUMNS",
    "SCHEMA_VERSION",
    "TRIAL_COLUMNS",
    "MergeCounts",
    "MergePolicy",
    "ReadOnlyStoreError",
    "ResultStore",
    "StoreBusyError",
    "StoreError",
    "StorePathError",
    "StoreUnavailableError",
    "backend_name",
    "database_url",
    "default_database_path",
    "display",
    "export_text",
    "format_for",
    "read_import",
    "rows_text",
    "sqlite_file",
    "use_database",
]
