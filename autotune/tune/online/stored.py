"""What online tuning reads from and writes to the tuning database: the stored result of a key,
the choices stored under other arguments (seeds), and a finished scan's result and trials,
written by the process's one writer thread. Plain functions of explicit arguments (``label``
names the tuner in the log)."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import autotune

from ..decorator import Fingerprint, get_store
from ..decorator import _TrialWriter  # hall: the recording side's trial writer
from ..decorator import _stale_reason  # hall: the serving side's judge of a stored row
from ..encoding import InvalidParametersError, decode_parameters, encode_parameters, validate_parameters
from ..records import ResultOrigin, TrialRecord, TuningKey, TuningRecord
from ..space import Space
from ..store import StoreError
from ..validation import record_problem
from .scan import Candidate, ScanResult
from .seeds import fixed_values

logger = logging.getLogger("autotune.tune")

Found = tuple[dict[str, Any], float | None]  #: stored parameters and their score, if finite


def load(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
         space: Space, label: str, comm: Any = None) -> Found | None:
    """:func:`read`; for a collective tuner (``comm``), what rank 0 read, on every rank."""
    if comm is None:
        return read(url, key, fingerprint, test, space, label)
    found = read(url, key, fingerprint, test, space, label) if comm.rank == 0 else None
    from ... import parallel

    return parallel.bcast(comm, found, f"the stored result of {label} from rank 0")


def read(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
         space: Space, label: str) -> Found | None:
    """The stored result's parameters and score for ``key``, if the row is usable (well
    formed, of ``test``'s names and kinds, inside ``space``) and fresh (of ``fingerprint``)."""
    try:
        record = get_store(url).get(key)
    except StoreError as exc:
        logger.info("online tuning %s: no stored result read (%s)", label, exc)
        return None
    if record is None:
        return None
    params, problem = parameters_of(record, test, space)
    if problem is not None:
        logger.warning("ignoring stored result for online tuner %s on %s: %s; it will be "
                       "tuned again", label, key.device_name, problem)
        return None
    if record.fingerprint != fingerprint.digest:
        logger.info("stored result for online tuner %s on %s is stale: %s; it will be "
                    "tuned again", label, key.device_name, _stale_reason(record, fingerprint))
        return None
    return params, (record.score if math.isfinite(record.score) else None)


def parameters_of(record: TuningRecord, test: dict[str, Any],
                  space: Space) -> tuple[dict[str, Any], str | None]:
    """A stored row's parameters and why they must not be used here (None if they may): a
    malformed row, parameters not of ``test``'s names and kinds, or outside ``space``."""
    problem = record_problem(record, test)
    if problem is not None:
        return {}, problem
    try:
        params = validate_parameters(decode_parameters(record.parameters), test)
    except InvalidParametersError as exc:
        return {}, str(exc)
    return params, space.why_not(params, preferences=False)  # listed values that run


def stored_seeds(url: str, key: TuningKey, fingerprint: str, test: dict[str, Any],
                 scanned: Space, space: Space, label: str) -> list[dict[str, Any]]:
    """The parameters that stored results for ``key``'s function, version and ``fingerprint``
    on its device chose under other arguments, as candidates of the ``scanned`` space (with
    its fixed values): those of the rows sharing the most argument values with ``key`` first,
    then the most often chosen, then the newest. Rows whose parameters are not usable in
    ``space`` (see :func:`parameters_of`), or whose choice lies outside the scan, count for
    nothing."""
    try:
        records = get_store(url).records(function=key.function)
    except StoreError as exc:
        logger.info("online tuning %s: no seeds read (%s)", label, exc)
        return []
    votes: dict[str, list[Any]] = {}
    mine = (key.function, key.version, key.device_name, key.device_platform)
    arguments = _argument_values(key.arguments)
    fixed = fixed_values(scanned)
    for record in records:
        theirs_key = record.key
        if (theirs_key.function, theirs_key.version, theirs_key.device_name,
                theirs_key.device_platform) != mine or theirs_key.arguments == key.arguments \
                or record.fingerprint != fingerprint:
            continue
        params, problem = parameters_of(record, test, space)
        if problem is not None:
            continue
        params = {**params, **fixed}  # as a candidate of this scan
        if scanned.why_not(params) is not None:
            continue
        theirs = _argument_values(theirs_key.arguments)
        shared = sum(1 for name, value in arguments.items() if name in theirs and theirs[name] == value)
        when = record.created_at.timestamp() if record.created_at is not None else 0.0
        entry = votes.setdefault(encode_parameters(params), [0, 0, when, params])
        entry[0] = max(entry[0], shared)
        entry[1] += 1
        entry[2] = max(entry[2], when)
    ranked = sorted(votes.values(), key=lambda e: (-e[0], -e[1], -e[2]))
    return [params for *_, params in ranked]


def prepare_store(url: str, label: str) -> None:
    """Ready the database for a scan's write now, while nothing runs yet: a first write loads
    the SQL layer and may create the tables, a few hundred milliseconds of work that would hold
    the interpreter lock the launching thread needs; and start the writer thread now, not when
    the scan ends (a thread's start makes the starting thread wait for it)."""
    try:
        get_store(url).prepare_writes()
    except StoreError as exc:  # the result is then kept in this process (see store)
        logger.info("online tuning %s: the database cannot be written (%s)", label, exc)
    with contextlib.suppress(RuntimeError):  # (at interpreter shutdown: written in place)
        results_writer().submit(_nothing)


def store(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
          result: ScanResult, *, samples: int, period: float) -> bool:
    """Write a finished scan's result and trials; whether the result was stored. (Run on the
    writer thread: scans' results are written in the order they finished.)"""
    best = result.best
    assert best is not None
    candidates, scores, shares = result.candidates, result.scores, result.shares
    writer = _TrialWriter(get_store(url), key, fingerprint.digest)
    tested = next((c for c in candidates if dict(c.params) == test), None)

    def total(c: Candidate, pick: Callable[[list[float]], float]) -> float | None:
        if c.failed or not all(c.samples.get(p) for p in shares):
            return None
        return sum(share * pick(c.samples[p]) for p, share in shares.items())

    writer.buffer = [TrialRecord(
        key=key, parameters=encode_parameters(dict(c.params)), status=c.status.value,
        message=c.failed, min_seconds=total(c, min), median_seconds=scores.get(id(c)),
        max_seconds=total(c, max), fingerprint=fingerprint.digest)
        for c in candidates if c.samples or c.failed]
    search = {"strategy": "online", "samples": samples, "period": period,
              "refined": result.refined, "left_out": result.left_out,
              "configurations": len(candidates), "measured": len(scores),
              "parts": len(shares),
              "test": test, "test_seconds": scores.get(id(tested)) if tested else None,
              "seconds": round(time.monotonic() - result.started, 3)}
    record = TuningRecord(
        key=key, parameters=encode_parameters(dict(best.params)), score=scores[id(best)],
        package_version=autotune.__version__, fingerprint=fingerprint.digest,
        sources=fingerprint.sources_json,
        search=json.dumps(search, sort_keys=True, separators=(",", ":")),
        origin=ResultOrigin.ONLINE.value)
    return writer.finish(record, dict(best.params))


def write_in_background(write: Callable[[], Any], label: str) -> concurrent.futures.Future | None:
    """Hand ``write`` to the writer thread (its future, whose failure is logged), or, where the
    interpreter is shutting down and starts no threads, run it here (None)."""
    try:
        done = results_writer().submit(write)
    except RuntimeError:  # the interpreter is shutting down: no new threads, write here
        write()
        return None

    def report(done: concurrent.futures.Future) -> None:
        error = done.exception()
        if error is not None:  # (a database error is the writer's warning; this is a bug)
            logger.error("online tuning %s: writing the result failed (%s: %s); it is used in "
                         "this process only", label, type(error).__name__, error)

    done.add_done_callback(report)
    return done


def _nothing() -> None:
    """A task that does nothing: handing it to the writer starts the writer's thread."""


# hall: the process's one writer thread belongs to the recording side (module-level state until
# the hall holds it)
_writer_lock = threading.Lock()
_writer: tuple[int, concurrent.futures.ThreadPoolExecutor] | None = None


def results_writer() -> concurrent.futures.ThreadPoolExecutor:
    """The one thread of this process that writes online tuners' results, in the order their
    scans finish; at exit, it finishes the writes handed to it. A forked child makes its own
    (the parent's thread is not in it)."""
    global _writer
    with _writer_lock:
        if _writer is None or _writer[0] != os.getpid():
            _writer = (os.getpid(), concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix="autotune-online-store"))
        return _writer[1]


def _argument_values(arguments: str) -> dict[str, Any]:
    """An encoded argument set as a dict of JSON values (nothing in them is decoded into
    objects), {} if it is not one."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
