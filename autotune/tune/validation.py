"""Is a stored row fit to use? The checks shared by serving a result and importing one.

A database is shared data: every cell of a row is checked before any of it is used, and a row
that fails is never used (served, merged or compiled). What a row's parameters must satisfy for
one template on one device (its declared space and the device's limits) is checked by the
decorator on top of these.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .encoding import (
    InvalidParametersError,
    MalformedJSONError,
    decode_arguments,
    decode_parameters,
    encode_arguments,
    is_identifier,
    is_plain_parameter,
    load_json,
    validate_parameters,
)
from .records import ResultOrigin, TrialRecord, TrialStatus, TuningRecord

_HEX = re.compile(r"[0-9a-f]{64}")
_MAX_TEXT = 512


def score_problem(score: Any) -> str | None:
    """Scores are seconds per call: finite and positive, or ``inf`` for parameters chosen
    without timing (they never win a comparison)."""
    if isinstance(score, bool) or not isinstance(score, (int, float)) or math.isnan(score) \
            or score <= 0:
        return f"score {score!r} is not a positive number of seconds"
    return None


def parameters_problem(text: Any, test: dict[str, Any] | None = None) -> str | None:
    """Why stored parameter text is unusable (for a template whose ``test=`` is ``test``)."""
    try:
        parameters = decode_parameters(text)
        if not isinstance(parameters, dict) or not parameters:
            return f"parameters {str(text)[:60]!r} are not a non-empty JSON object"
        for name, value in parameters.items():
            if not is_identifier(name) or not is_plain_parameter(value):
                return (f"parameter {name!r} = {value!r} is not a plain value (bool, int, finite "
                        "float or identifier-like string)")
        if test is not None:
            validate_parameters(parameters, test)
    except InvalidParametersError as exc:
        return str(exc)
    return None


def arguments_problem(text: Any) -> str | None:
    """Stored arguments must be canonical JSON, as :func:`encode_arguments` writes them."""
    try:
        decoded = decode_arguments(text)
        if encode_arguments(decoded) != text:
            return "arguments are not in canonical form (sorted keys, no spaces)"
    except (MalformedJSONError, TypeError, ValueError) as exc:
        return str(exc)
    return None


def _text_problem(name: str, value: Any, *, empty: bool = False) -> str | None:
    if not isinstance(value, str) or (not value and not empty):
        return f"{name} {value!r} is not {'text' if empty else 'non-empty text'}"
    if len(value) > _MAX_TEXT or any(ord(c) < 32 for c in value):
        return f"{name} is longer than {_MAX_TEXT} characters or holds control characters"
    return None


def _rate_problem(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value < 0:
        return f"{name} {value!r} is not a finite rate"
    return None


def statistics_problem(record: TuningRecord) -> str | None:
    """Why a result's statistics of its choice (``ci_low``, ``ci_high``, ``ties``, ``spread``)
    cannot be right, or None (each may be absent)."""
    for name in ("ci_low", "ci_high"):
        value = getattr(record, name)
        if value is not None and (score_problem(value) or not math.isfinite(value)):
            return f"{name} {value!r} is not a positive number of seconds"
    if record.ci_low is not None and record.ci_high is not None and record.ci_low > record.ci_high:
        return f"ci_low {record.ci_low!r} is above ci_high {record.ci_high!r}"
    if record.ties is not None and (isinstance(record.ties, bool) or not isinstance(record.ties, int)
                                    or record.ties < 0):
        return f"ties {record.ties!r} is not a count"
    spread = record.spread
    if spread is not None and (isinstance(spread, bool) or not isinstance(spread, (int, float))
                               or not math.isfinite(spread) or spread < 0):
        return f"spread {spread!r} is not a finite number >= 0"
    return None


def _key_problem(record: TuningRecord | TrialRecord) -> str | None:
    key = record.key
    for name in ("function", "device_name", "device_platform", "driver_version"):
        problem = _text_problem(name, getattr(key, name), empty=name == "driver_version")
        if problem:
            return problem
    if isinstance(key.version, bool) or not isinstance(key.version, int) or key.version < 0:
        return f"version {key.version!r} is not an integer >= 0"
    return arguments_problem(key.arguments)


def record_problem(record: TuningRecord, test: dict[str, Any] | None = None) -> str | None:
    """Why a stored result must not be used, or None if every cell is well formed.

    ``test`` (the template's ``test=``) also checks the parameter names and kinds.
    """
    if record.malformed:
        return record.malformed
    problem = (score_problem(record.score) or _key_problem(record)
               or parameters_problem(record.parameters, test)
               or _text_problem("package_version", record.package_version, empty=True)
               or _rate_problem("gbps", record.gbps) or _rate_problem("gflops", record.gflops)
               or statistics_problem(record))
    if problem:
        return problem
    if record.fingerprint and not _HEX.fullmatch(record.fingerprint):
        return f"fingerprint {record.fingerprint[:70]!r} is not a SHA-256 digest"
    if record.origin not in {o.value for o in ResultOrigin}:
        return f"origin {record.origin[:30]!r} is not one of {', '.join(o.value for o in ResultOrigin)}"
    for name in ("sources", "search"):
        text = getattr(record, name)
        if text:
            try:
                value = load_json(text, name)
            except MalformedJSONError as exc:
                return str(exc)
            if not isinstance(value, dict):
                return f"{name} is not a JSON object"
    return None


def recorded_test(record: TuningRecord) -> dict[str, Any] | None:
    """The ``test=`` parameters a result was compared against, as its search summary records
    them; None where the row does not say (rows of autotune before 0.2) or says it badly."""
    if record_problem(record) or not record.search:
        return None
    test = load_json(record.search, "search").get("test")
    if not isinstance(test, dict) or parameters_problem(json.dumps(test)):
        return None
    return test


def recorded_speedup(record: TuningRecord) -> tuple[float, float, float] | None:
    """The speed-up over ``test=`` and its 95% interval (estimate, low, high) as the result's
    search summary records them (``choice.speedup``); None where it does not say or says it
    badly (results chosen without re-timing, rows of autotune before 0.3)."""
    if record_problem(record) or not record.search:
        return None
    choice = load_json(record.search, "search").get("choice")
    found = choice.get("speedup") if isinstance(choice, dict) else None
    if not (isinstance(found, list) and len(found) == 3 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            for v in found)):
        return None
    estimate, low, high = (float(v) for v in found)
    return (estimate, low, high) if low <= estimate <= high else None


def trial_problem(trial: TrialRecord) -> str | None:
    """Why a stored trial must not be used (for replays, warm starts and imports)."""
    if trial.malformed:
        return trial.malformed
    try:
        TrialStatus.parse(trial.status)
    except ValueError as exc:
        return str(exc)
    problem = _key_problem(trial) or parameters_problem(trial.parameters)
    if problem:
        return problem
    for name in ("min_seconds", "median_seconds", "max_seconds"):
        value = getattr(trial, name)
        if value is not None and score_problem(value):
            return f"{name} {value!r} is not a positive number of seconds"
    return _rate_problem("gbps", trial.gbps) or _rate_problem("gflops", trial.gflops)


def changed_sources(record: TuningRecord, current: dict[str, str]) -> list[str]:
    """The template files whose digests differ between what ``record`` was tuned against (its
    stored ``sources``) and ``current`` (file name -> digest), sorted; ``[]`` when it was tuned
    against exactly these. A stored list that cannot be read counts as tuned against none."""
    try:
        stored = json.loads(record.sources) if record.sources else {}
    except ValueError:
        stored = {}
    if not isinstance(stored, dict):
        stored = {}
    return sorted(name for name in set(stored) | set(current) if stored.get(name) != current.get(name))
