"""Store settings that tests and users may change at run time."""

from __future__ import annotations

#: How long an SQLite connection waits for another process's lock before giving up.
BUSY_TIMEOUT_SECONDS = 60.0

#: How often results that could not be written (a full disk, a server outage, a busy lock)
#: are tried again while the process runs.
RETRY_SECONDS = 5.0


def busy_timeout() -> float:
    return BUSY_TIMEOUT_SECONDS


def retry_seconds() -> float:
    return RETRY_SECONDS
