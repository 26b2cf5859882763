"""What a stored result is worth for one call: its fingerprint (the kernel sources and space
it was tuned against), the verdict on a stored row (:func:`judge`, the one judge both doors of
the tuner use), and what a re-tune did."""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import accel
from .encoding import InvalidParametersError, decode_parameters, validate_parameters
from .records import TuningKey, TuningRecord
from .rendered import RENDERED, rendered_changes
from .space import Space
from .store import StoreError
from .validation import changed_sources, record_problem


class Freshness(str, enum.Enum):
    """What a stored result is worth here."""

    FRESH = "fresh"  #: well formed, fits, tuned against the current sources and space
    STALE = "stale"  #: well formed and fits, but tuned against other sources or another space
    INVALID = "invalid"  #: malformed, or its parameters are not valid here: never used

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verdict:
    """A stored result judged for one call: its freshness, why, and its clean parameters."""

    record: TuningRecord
    freshness: Freshness
    reason: str = ""
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True)
class Fingerprint:
    """What a result is tuned against: the kernel sources and the declared space."""

    digest: str
    sources: dict[str, str]  #: template file name -> SHA-256 of its contents
    space: Space | None

    @property
    def sources_json(self) -> str:
        return json.dumps(self.sources, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class TuningOutcome:
    """What :meth:`TunedFunction.retune` did."""

    key: TuningKey
    parameters: dict[str, Any]
    score: float  #: median seconds per call of the winner (``inf`` if not timed)
    test_score: float | None  #: the ``test=`` parameters' median, if timed
    stored: bool  #: False if the database could not take it (kept in this process)
    trials: int
    #: why it was not stored (a ReadOnlyStoreError: never will be; else it is kept and retried)
    store_error: StoreError | None = None
    #: the 95% interval of :attr:`speedup`, where the choice timed both again
    speedup_interval: tuple[float, float] | None = None
    ties: int | None = None  #: candidates that could not be told apart from the fastest

    @property
    def speedup(self) -> float | None:
        """How much faster the result is than ``test=``, if both were timed."""
        if self.test_score and math.isfinite(self.score) and self.score > 0:
            return self.test_score / self.score
        return None


def make_fingerprint(files: Iterable[accel.SourceFile], space: Space | None) -> Fingerprint:
    """What a result is tuned against: the digests of its kernel template files and of the
    space searched (offline and online tuning compute it alike)."""
    sources = {f.name: f.digest for f in files}
    text = json.dumps({"sources": sources, "space": space.digest() if space else ""},
                      sort_keys=True, separators=(",", ":"))
    return Fingerprint(hashlib.sha256(text.encode()).hexdigest(), sources, space)


def stale_reason(record: TuningRecord, fingerprint: Fingerprint) -> str:
    """Why ``record`` was not tuned against ``fingerprint`` (the sources or the space changed)."""
    if not record.fingerprint:
        return "it was stored without a fingerprint (tuned by an older autotune)"
    changed = changed_sources(record, fingerprint.sources)
    if changed:
        return f"its kernel sources changed since it was tuned ({', '.join(changed)})"
    return "the space it searched changed since it was tuned"


def judge(record: TuningRecord, test: dict[str, Any], fingerprint: Fingerprint, device_name: str,
          template_dirs: Callable[[], Sequence[Path]] | None = None) -> Verdict:
    """The one judge of a stored row for a call (offline) or a tuner (online).

    INVALID: a malformed row, parameters not of ``test=``'s names and kinds, or outside the
    fingerprint's space (its listed values and limits; a preference a row breaks is no reason
    to refuse it). STALE: well formed and valid here, but tuned against other sources or
    another space, or a file it rendered beyond the declared sources changed since
    (``template_dirs()`` says where the template's files are; None skips that look). FRESH
    otherwise, with the clean parameters.
    """
    problem = record_problem(record, test)
    if problem:
        return Verdict(record, Freshness.INVALID, problem)
    try:
        params = validate_parameters(decode_parameters(record.parameters), test)
    except InvalidParametersError as exc:
        return Verdict(record, Freshness.INVALID, str(exc))
    if fingerprint.space is not None:  # listed values that run (preferences aside)
        why = fingerprint.space.why_not(params, preferences=False)
        if why is not None:
            return Verdict(record, Freshness.INVALID, f"not valid on {device_name}: {why}")
    if record.fingerprint != fingerprint.digest:
        return Verdict(record, Freshness.STALE, stale_reason(record, fingerprint), params)
    if template_dirs is not None and RENDERED in record.search:
        changed = rendered_changes(record.search, fingerprint.sources, template_dirs())
        if changed:
            return Verdict(record, Freshness.STALE, "its kernel sources changed since it was "
                           f"tuned ({', '.join(changed)})", params)
    return Verdict(record, Freshness.FRESH, "", params)
