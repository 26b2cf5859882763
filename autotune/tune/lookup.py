"""The one lookup of a stored result: this key exactly, else (``AUTOTUNE_MATCH=nearest``) the
nearest device's, each row judged by :func:`~.verdicts.judge`. A database that cannot be read
for now is a miss."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import nearest
from .records import TuningKey, TuningRecord
from .serving import MatchMode
from .store import ResultStore, StoreUnavailableError
from .text import guard_logger
from .verdicts import Freshness, Verdict

if TYPE_CHECKING:
    from .serving import Serving

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped

#: Judges one stored row for the call being served.
Judge = Callable[[TuningRecord], Verdict]


def lookup(store: ResultStore, key: TuningKey, device: Any, judge: Judge,
           mode: str) -> Verdict | None:
    """The verdict on the row stored for ``key`` if it is fresh; under ``nearest`` mode else
    the nearest device's fresh result, else a stale one (logged); None: tune. ``device``: the
    calling device's summary (:func:`~.devices.device_key`; unused in exact mode). A served
    verdict's ``parameters`` are the clean parameters to use."""
    stale: Verdict | None = None
    record = store.get(key)
    if record is not None:
        verdict = judge(record)
        if verdict.freshness is Freshness.FRESH:
            return verdict
        log_unusable(verdict, re_tune=mode != MatchMode.NEAREST.value)
        if verdict.freshness is Freshness.STALE:
            stale = verdict
    if mode != MatchMode.NEAREST.value:
        return None
    for relaxed, candidate in nearest.ranked(
            store.find(key.function, key.version, key.arguments), key, device):
        verdict = judge(candidate)
        if verdict.freshness is Freshness.FRESH:
            logger.warning(
                "AUTOTUNE_MATCH=nearest: no result for %s on %s; using the one tuned on "
                "%s [%s, driver %s] (ignoring %s)", key.function, key.device_name,
                candidate.key.device_name, candidate.key.device_platform,
                candidate.key.driver_version, relaxed)
            return verdict
        logger.info("AUTOTUNE_MATCH=nearest: skipping the result of %s on %s: %s: %s",
                    key.function, candidate.key.device_name, verdict.freshness, verdict.reason)
        if stale is None and verdict.freshness is Freshness.STALE:
            stale = verdict
    if stale is not None:
        logger.warning("AUTOTUNE_MATCH=nearest: serving a stale result for %s (tuned on %s): "
                       "%s", key.function, stale.record.key.device_name, stale.reason)
        return stale
    return None


def lookup_or_miss(serving: Serving, store: ResultStore, key: TuningKey, device: Any,
                   judge: Judge, mode: str) -> Verdict | None:
    """:func:`lookup`, where a database that cannot be reached for now (a server outage, a
    disk error, a lock held long) is a miss, with one warning per database: the key is tuned,
    its result used, and stored once the database takes writes. A database that is wrong (not
    a database, a newer layout, a path that cannot be used) is an error to fix, raised."""
    try:
        return lookup(store, key, device, judge, mode)
    except StoreUnavailableError as exc:
        (logger.warning if serving.first("unreadable", store.url) else logger.info)(
            "cannot read the tuning database (%s); %s on %s is tuned as if nothing were "
            "stored, and its result is stored once the database takes writes again",
            exc, key.function, key.device_name)
        return None


def log_unusable(verdict: Verdict, *, re_tune: bool) -> None:
    """Say why a stored row is not served (a warning if it is invalid, INFO if stale)."""
    key = verdict.record.key
    then = "; it will be re-tuned" if re_tune else ""
    if verdict.freshness is Freshness.INVALID:
        logger.warning("ignoring stored tuning result for %s on %s (%s): %s%s", key.function,
                       key.device_name, key.arguments, verdict.reason, then)
    else:
        logger.info("stored tuning result for %s on %s (%s) is stale: %s%s", key.function,
                    key.device_name, key.arguments, verdict.reason, then)
