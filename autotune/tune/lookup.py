"""The one lookup of a stored result: this key exactly, else (``AUTOTUNE_MATCH=similar``) the
nearest tuned size on this device (:mod:`.similar`), else (``nearest`` and ``similar``) the
nearest device's, each row judged by :func:`~.verdicts.judge`. A database that cannot be read
for now is a miss. A key not found exactly is noted in ``AUTOTUNE_RECORD`` (:mod:`.misses`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import misses, nearest, similar
from .encoding import describe_arguments
from .records import ResultOrigin, TuningKey, TuningRecord
from .serving import MatchMode
from .serving import serving as current_serving
from .store import MergePolicy, ResultStore, StoreError, StoreUnavailableError
from .text import guard_logger
from .verdicts import Freshness, Verdict

if TYPE_CHECKING:
    from .serving import Serving

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped

#: How long a note's thread waits before it writes (the serving call returns meanwhile).
NOTE_DELAY_SECONDS = 0.05

#: Judges one stored row for the call being served.
Judge = Callable[[TuningRecord], Verdict]


def lookup(store: ResultStore, key: TuningKey, device: Any, judge: Judge,
           mode: str, similar_request: similar.Request | None = None) -> Verdict | None:
    """The verdict on the row stored for ``key`` if it is fresh; under ``similar`` mode (with
    ``similar_request``) else the nearest size's on this device that fits this call; under
    ``nearest`` and ``similar`` else the nearest device's fresh result, else a stale one
    (logged); None: tune. ``device``: the calling device's summary
    (:func:`~.devices.device_key`; unused in exact mode). A served verdict's ``parameters``
    are the clean parameters to use. A row served as similar is never the key's own."""
    stale: Verdict | None = None
    relaxed_mode = mode in (MatchMode.NEAREST.value, MatchMode.SIMILAR.value)
    record = store.get(key)
    if record is not None and record.origin != ResultOrigin.SIMILAR.value:
        verdict = judge(record)
        if verdict.freshness is Freshness.FRESH:
            return verdict
        log_unusable(verdict, re_tune=not relaxed_mode)
        if verdict.freshness is Freshness.STALE:
            stale = verdict
    if not relaxed_mode:
        return None
    if similar_request is not None and mode == MatchMode.SIMILAR.value:
        found, stale_size = _similar(store, key, similar_request)
        if found is not None:
            return found
        stale = stale or stale_size
    for relaxed, candidate in nearest.ranked(
            store.find(key.function, key.version, key.arguments), key, device):
        if candidate.origin == ResultOrigin.SIMILAR.value:
            continue
        verdict = judge(candidate)
        if verdict.freshness is Freshness.FRESH:
            logger.warning(
                "AUTOTUNE_MATCH=%s: no result for %s on %s; using the one tuned on "
                "%s [%s, driver %s] (ignoring %s)", mode, key.function, key.device_name,
                candidate.key.device_name, candidate.key.device_platform,
                candidate.key.driver_version, relaxed)
            return verdict
        logger.info("AUTOTUNE_MATCH=%s: skipping the result of %s on %s: %s: %s",
                    mode, key.function, candidate.key.device_name, verdict.freshness,
                    verdict.reason)
        if stale is None and verdict.freshness is Freshness.STALE:
            stale = verdict
    if stale is not None:
        source = stale.record.key
        size = ("" if source.arguments == key.arguments
                else f" for {describe_arguments(source.arguments)}")
        logger.warning("AUTOTUNE_MATCH=%s: serving a stale result for %s (tuned on %s%s): %s",
                       mode, key.function, source.device_name, size, stale.reason)
        return stale
    return None


def lookup_or_miss(serving: Serving, store: ResultStore, key: TuningKey, device: Any,
                   judge: Judge, mode: str, similar_request: similar.Request | None = None
                   ) -> Verdict | None:
    """:func:`lookup`, where a database that cannot be reached for now (a server outage, a
    disk error, a lock held long) is a miss, with one warning per database: the key is tuned,
    its result used, and stored once the database takes writes. A database that is wrong (not
    a database, a newer layout, a path that cannot be used) is an error to fix, raised. A key
    served from another size is recorded as such in the store (by a thread of its own); a key
    not found exactly is noted in ``AUTOTUNE_RECORD``."""
    try:
        found = lookup(store, key, device, judge, mode, similar_request)
    except StoreUnavailableError as exc:
        (logger.warning if serving.first("unreadable", store.url) else logger.info)(
            "cannot read the tuning database (%s); %s on %s is tuned as if nothing were "
            "stored, and its result is stored once the database takes writes again",
            exc, key.function, key.device_name)
        found = None
    served = similar.served_as(found, key)
    if served == "similar" and found is not None and similar_request is not None \
            and serving.first("similar-note", f"{store.url}\0{key}\0{found.record.key}"):
        _keep_similar(serving, store, key, found, device, similar_request.rules)
    if served != "exact":
        misses.note(serving, key, served)
    return found


def _similar(store: ResultStore, key: TuningKey, request: similar.Request
             ) -> tuple[Verdict | None, Verdict | None]:
    """The nearest size's fresh verdict that fits this call and fills the device here
    (logged); where the nearest size's result is fresh but under-fills, the fastest of the
    configurations that size's search tried that fits and fills instead; and the first stale
    one that fills, among this device's rows of the key's function and version."""
    stale: Verdict | None = None
    rows = store.find(key.function, key.version, None, device_name=key.device_name,
                      device_platform=key.device_platform, driver_version=key.driver_version)
    sizes = similar.ranked(rows, key, request.rules)
    for far, candidate in sizes:
        verdict = request.judge(candidate)
        source = describe_arguments(candidate.key.arguments)
        why = verdict.reason
        if verdict.freshness is not Freshness.INVALID:
            under = request.under_fills(verdict)
            if under is None and verdict.freshness is Freshness.FRESH:
                agreed = _chosen_elsewhere(store, verdict, request, sizes, far)
                if agreed is not None:
                    served, voters = agreed
                    logger.warning("AUTOTUNE_MATCH=similar: no result for %s (%s) on %s; using "
                                   "a configuration tried for %s, within %.0f%% of its result "
                                   "there and chosen at %d other tuned size%s (%s) (similar, "
                                   "log distance %.3g)", key.function,
                                   describe_arguments(key.arguments), key.device_name, source,
                                   100 * similar.NEAR_TIE, len(voters),
                                   "" if len(voters) == 1 else "s",
                                   "; ".join(describe_arguments(v.key.arguments)
                                             for v in voters), far)
                    return served, stale
                logger.warning("AUTOTUNE_MATCH=similar: no result for %s (%s) on %s; using the "
                               "one tuned for %s (similar, log distance %.3g)", key.function,
                               describe_arguments(key.arguments), key.device_name, source, far)
                return verdict, stale
            if under is not None:
                why = under
                if verdict.freshness is Freshness.FRESH:
                    replaced = _in_its_place(store, verdict, request, source)
                    if replaced is not None:
                        served, what, why_so = replaced
                        logger.warning("AUTOTUNE_MATCH=similar: no result for %s (%s) on %s; "
                                       "using %s (similar, log distance %.3g; %s%s)",
                                       key.function, describe_arguments(key.arguments),
                                       key.device_name, what, far, why_so, under)
                        return served, stale
            elif stale is None:
                stale = verdict
        logger.info("AUTOTUNE_MATCH=similar: skipping the result of %s for %s: %s: %s",
                    key.function, source, verdict.freshness, why)
    return None, stale


def _chosen_elsewhere(store: ResultStore, anchor: Verdict, request: similar.Request,
                      sizes: list[tuple[float, TuningRecord]], far: float
                      ) -> tuple[Verdict, list[TuningRecord]] | None:
    """Of the configurations the search of ``anchor``'s size (``far`` from this call's)
    measured within :data:`~.similar.NEAR_TIE` of its result there, the one that the most
    other tuned ``sizes`` within :data:`~.similar.VOTE_REACH` times ``far`` chose, where more
    chose it than chose the result (fastest first among equals), judged for this call, with
    the sizes that chose it; None where the result is as often chosen (or nothing near it is
    valid here). A result a search ended on by a hair is served only where no other size
    about as near agrees with a configuration just as fast."""
    votes = similar.chosen_elsewhere(sizes, anchor.record, similar.VOTE_REACH * far)
    own = len(votes.get(similar.canonical(anchor.record.parameters) or "", ()))
    if request.trial is None or not votes or max(map(len, votes.values())) <= own:
        return None
    record = anchor.record
    ran = store.trials_that_ran(record.key, record.fingerprint)  # fastest first, parsed lazily
    best: tuple[Verdict, list[TuningRecord]] | None = None
    for row in similar.near_ties(record, similar.trial_rows(record, ran)):
        voters = votes.get(similar.canonical(row.parameters) or "", [])
        if len(voters) > (own if best is None else len(best[1])):
            verdict = request.trial(anchor, row)
            if verdict is not None:
                best = verdict, voters
    return best


def _in_its_place(store: ResultStore, anchor: Verdict, request: similar.Request, source: str
                  ) -> tuple[Verdict, str, str] | None:
    """What is served in place of ``anchor``, a size's result that under-fills the device
    here: its parameters scaled to this size, else a trial of its search (judged; None where
    neither fits and fills), with how the log says so."""
    scaled = _scaled(anchor, request)
    if scaled is not None:
        return scaled, f"the one tuned for {source} scaled to this size", "scaled because "
    trial = _filling_trial(store, anchor, request)
    if trial is not None:
        return (trial, f"a configuration tried for {source}",
                "a trial of that search, not its result: ")
    return None


def _scaled(anchor: Verdict, request: similar.Request) -> Verdict | None:
    """The first configuration the template derives from ``anchor``'s result for this call
    (``autotune_scaled``) that is valid for it and fills the device here, judged (None: none
    does, or the template derives none)."""
    if request.scaled is None or request.trial is None:
        return None
    for row in request.scaled(anchor):
        verdict = request.trial(anchor, row)
        if verdict is not None:
            return verdict
    return None


def _filling_trial(store: ResultStore, anchor: Verdict, request: similar.Request
                   ) -> Verdict | None:
    """The fastest configuration the search of ``anchor``'s size tried there that is valid
    for this call and fills the device here, judged (None: none does)."""
    if request.trial is None:
        return None
    record = anchor.record
    ran = store.trials_that_ran(record.key, record.fingerprint)  # fastest first, parsed lazily
    for row in similar.trial_rows(record, ran):
        verdict = request.trial(anchor, row)
        if verdict is not None:
            return verdict
    return None


def _keep_similar(serving: Serving, store: ResultStore, key: TuningKey, verdict: Verdict,
                  device: Any, rules: dict[str, str]) -> None:
    """Record a similar serve as the key's row (origin ``similar``), on a short-lived thread
    (the call does not wait for the write): added where the key has no row, replacing an
    older similar row that names another source, never a tuned result. A store that cannot
    take it loses nothing but the note."""
    if store.read_only:
        return
    try:
        summary = nearest.summary(device) if device is not None else None
    except AttributeError:
        summary = None

    def write() -> None:
        # Let the serving call return first: this thread would otherwise hold the interpreter
        # for a switch interval (reading autotune's version, loading the SQL layer).
        time.sleep(NOTE_DELAY_SECONDS)
        far = similar.distance(json.loads(key.arguments),
                               json.loads(verdict.record.key.arguments), rules) or 0.0
        row = similar.similar_row(key, verdict, far, summary)
        try:
            current = store.get(key)
            if current is None:
                store.merge([row], MergePolicy.KEEP)
            elif current.origin == ResultOrigin.SIMILAR.value and (
                    similar.source_arguments(current) != verdict.record.key.arguments
                    or current.parameters != row.parameters):
                store.put(row)
        except Exception as exc:  # noqa: BLE001 - a note that cannot be written is only lost
            level = logging.INFO if isinstance(exc, StoreError) else logging.WARNING
            logger.log(level, "the similar serve of %s is not recorded in the database: %s",
                       key.function, exc)

    serving.notes.start(write)  # a thread of its own (the writer's pool costs its import)


def wait_for_notes(timeout: float | None = 30.0) -> None:
    """Wait until the similar serves noted through the current serving object (the
    process's, or :func:`~.serving.using_serving`'s) are written to their databases (what
    ``show`` or ``results_frame`` in this process then reads), at most ``timeout`` seconds."""
    current_serving().notes.wait(timeout)


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
