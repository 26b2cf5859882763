"""What online tuning reads from and writes to the tuning database: the stored result of a key,
the choices stored under other arguments (seeds), and a finished scan's result and trials,
written by the process's one writer thread. Plain functions of explicit arguments (``label``
names the tuner in the log)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import math
import logging
import time
from collections.abc import Callable
from typing import Any

import autotune

from ..encoding import encode_parameters
from ..lookup import lookup
from ..records import ResultOrigin, TrialRecord, TuningKey, TuningRecord
from ..recording.seeds import stored_choices
from ..recording.trials import TrialWriter
from ..serving import MatchMode, serving
from ..space import Space
from ..store import StoreError
from ..verdicts import Fingerprint, Verdict, judge
from .scan import Candidate, ScanResult

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


def judge_for(key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
              space: Space) -> Callable[[TuningRecord], Verdict]:
    """The hall's judge (:func:`~autotune.tune.verdicts.judge`) for this tuner's rows: of
    ``test``'s names and kinds, inside ``space`` (the template's, where the scan covers part of
    it), tuned against ``fingerprint``'s sources and space."""
    judged = dataclasses.replace(fingerprint, space=space)
    return lambda record: judge(record, test, judged, key.device_name)


def read(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
         space: Space, label: str) -> Found | None:
    """The stored result's parameters and score for ``key``, if the hall's lookup finds its
    row fresh (exactly this device: a scan is cheaper than another device's guess); None where
    the database cannot be read (logged)."""
    try:
        verdict = lookup(serving().store(url), key, None, judge_for(key, fingerprint, test, space),
                         MatchMode.EXACT.value)
    except StoreError as exc:
        logger.info("online tuning %s: no stored result read (%s)", label, exc)
        return None
    if verdict is None or verdict.parameters is None:
        return None
    score = verdict.record.score
    return verdict.parameters, (score if math.isfinite(score) else None)


def stored_seeds(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
                 scanned: Space, space: Space) -> list[dict[str, Any]]:
    """What this device chose for ``key``'s function, version and fingerprint under other
    arguments, as candidates of the ``scanned`` space (the hall's
    :func:`~autotune.tune.recording.seeds.stored_choices`)."""
    return stored_choices(serving().store(url), key, fingerprint.digest,
                          judge_for(key, fingerprint, test, space), scanned)


def prepare_store(url: str, label: str) -> None:
    """Ready the database for a scan's write now, while nothing runs yet: a first write loads
    the SQL layer and may create the tables, a few hundred milliseconds of work that would hold
    the interpreter lock the launching thread needs; and start the writer thread now, not when
    the scan ends (a thread's start makes the starting thread wait for it)."""
    state = serving()
    try:
        state.store(url).prepare_writes()
    except StoreError as exc:  # the result is then kept in this process (see store)
        logger.info("online tuning %s: the database cannot be written (%s)", label, exc)
    state.writer.start()


def store(url: str, key: TuningKey, fingerprint: Fingerprint, test: dict[str, Any],
          result: ScanResult, *, samples: int, period: float) -> bool:
    """Write a finished scan's result and trials; whether the result was stored. (Run on the
    writer thread: scans' results are written in the order they finished.)"""
    best = result.best
    assert best is not None
    candidates, scores, shares = result.candidates, result.scores, result.shares
    state = serving()
    writer = TrialWriter(state, state.store(url), key, fingerprint.digest)
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
        origin=ResultOrigin.ONLINE.value,
        ci_low=result.interval[0] if result.interval else None,
        ci_high=result.interval[1] if result.interval else None,
        ties=result.ties, spread=result.spread)
    return writer.finish(record, dict(best.params))


def write_in_background(write: Callable[[], Any], label: str) -> concurrent.futures.Future | None:
    """Hand ``write`` to the writer thread (its future, whose failure is logged), or, where the
    interpreter is shutting down and starts no threads, run it here (None)."""
    try:
        done = serving().writer.submit(write)
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
