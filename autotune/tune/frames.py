"""Stored results and trials as pandas DataFrames.

>>> results = tune.results_frame("tune.db.example")
>>> results[results.device_name.str.contains("H200")][["function", "arg.dtype", "param.wgs", "gbps"]]

One row per stored result (or trial); one column per key field, the arguments and parameters
decoded into ``arg.NAME`` and ``param.NAME`` columns (as data: dtypes and enums as their names,
nothing imported), the score with the statistics of its choice (``ci_low``/``ci_high``: the 95%
interval of the winner's median, ``ties``, ``spread``; ``speedup`` over ``test=`` with
``speedup_low``/``speedup_high``; empty where the choice did not time again), the rates, whether
the row is well formed (``valid``, with the
``problem`` otherwise), whether it is ``stale`` against the kernel sources of the template that
owns it (None where no registered template does), how it was found (``origin``; for a row
served from another size under ``AUTOTUNE_MATCH=similar``, ``similar_from`` names that size,
``similar_trial`` says whether a trial of its search was served, not its result, and
``similar_scaled`` whether its result's parameters were derived for this size), and the
timestamps.
"""

from __future__ import annotations

import enum
import json
import os
from typing import Any

import numpy as np

from .encoding import MalformedJSONError, StoredEnum, decode_arguments, load_json
from .records import ResultOrigin, TrialRecord, TuningRecord
from .registry import registered_templates
from .similar import served_a_trial, served_scaled, similar_from
from .store import ResultStore
from .store.rows import KEY_FIELDS
from .validation import changed_sources, record_problem, recorded_speedup, trial_problem


def _plain(value: Any) -> Any:
    """A decoded argument as a table cell: dtypes and enums by name, containers as text."""
    if isinstance(value, np.dtype):
        return value.name if value.fields is None else str(value)
    if isinstance(value, (StoredEnum, enum.Enum)):
        return str(value) if isinstance(value, StoredEnum) else f"{type(value).__name__}.{value.name}"
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)
    return value


def _arguments(text: str) -> dict[str, Any]:
    try:
        return {f"arg.{k}": _plain(v) for k, v in decode_arguments(text).items()}
    except (MalformedJSONError, TypeError, ValueError):
        return {}


def _parameters(text: str) -> dict[str, Any]:
    try:
        value = load_json(text, "parameters")
    except MalformedJSONError:
        return {}
    return {f"param.{k}": v for k, v in value.items()} if isinstance(value, dict) else {}


def _current_sources() -> dict[str, dict[str, str]]:
    """function -> {file: digest} of every registered template's kernel sources now."""
    return {t.function: t.current_sources() for t in registered_templates()}


def _stale(record: TuningRecord, current: dict[str, dict[str, str]]) -> bool | None:
    now = current.get(record.key.function)
    if now is None:
        return None
    return not record.fingerprint or bool(changed_sources(record, now))


def _open(db: str | os.PathLike | ResultStore | None) -> ResultStore:
    return db if isinstance(db, ResultStore) else ResultStore.open(db)


def results_frame(db: str | os.PathLike | ResultStore | None = None, *, function: str | None = None,
                  device: str | None = None, records: list[TuningRecord] | None = None) -> Any:
    """The stored results of ``db`` (a path, an URL or a store; default the configured
    database), optionally filtered as ``ResultStore.records`` filters, as a DataFrame."""
    import pandas as pd

    if records is None:
        records = _open(db).records(function=function, device=device)
    current = _current_sources()
    rows = []
    for r in records:
        problem = record_problem(r)
        speedup = recorded_speedup(r) if problem is None else None
        rows.append({
            **{name: getattr(r.key, name) for name in KEY_FIELDS},
            **_arguments(r.key.arguments), **_parameters(r.parameters),
            "parameters": r.parameters, "score": r.score, "ci_low": r.ci_low,
            "ci_high": r.ci_high, "ties": r.ties, "spread": r.spread,
            "speedup": speedup[0] if speedup else None,
            "speedup_low": speedup[1] if speedup else None,
            "speedup_high": speedup[2] if speedup else None,
            "gbps": r.gbps, "gflops": r.gflops,
            "valid": problem is None, "problem": problem or "",
            "stale": _stale(r, current) if problem is None else None,
            "origin": r.origin, "similar_from": similar_from(r),
            "similar_trial": served_a_trial(r) if r.origin == ResultOrigin.SIMILAR.value else None,
            "similar_scaled": served_scaled(r) if r.origin == ResultOrigin.SIMILAR.value
            else None,
            "created_at": r.created_at, "package_version": r.package_version,
            "fingerprint": r.fingerprint, "sources": r.sources, "search": r.search,
        })
    return pd.DataFrame(rows, columns=_columns(rows, [*KEY_FIELDS, "parameters", "score"]))


def trials_frame(db: str | os.PathLike | ResultStore | None = None, *, function: str | None = None,
                 trials: list[TrialRecord] | None = None) -> Any:
    """The stored trials of ``db`` (of ``function``, exact or a ``%`` pattern), as a DataFrame."""
    import pandas as pd

    if trials is None:
        trials = _open(db).trials(function=function)
    rows = []
    for t in trials:
        problem = trial_problem(t)
        rows.append({
            **{name: getattr(t.key, name) for name in KEY_FIELDS},
            **_arguments(t.key.arguments), **_parameters(t.parameters),
            "parameters": t.parameters, "status": t.status, "message": t.message,
            "min_seconds": t.min_seconds, "median_seconds": t.median_seconds,
            "max_seconds": t.max_seconds, "gbps": t.gbps, "gflops": t.gflops,
            "valid": problem is None, "problem": problem or "", "created_at": t.created_at,
            "fingerprint": t.fingerprint,
        })
    return pd.DataFrame(rows, columns=_columns(rows, [*KEY_FIELDS, "parameters", "status"]))


def export_rows(frame: Any) -> list[dict[str, Any]]:
    """A results frame's rows as export rows: the stored columns, missing values as None and
    timestamps in ISO 8601."""
    from .store.rows import RESULT_COLUMNS

    rows = []
    for row in frame.to_dict("records"):
        out = {}
        for name in RESULT_COLUMNS:
            value = row.get(name)
            if hasattr(value, "isoformat"):
                value = value.isoformat()
            elif isinstance(value, float) and value != value:  # NaN: a missing rate
                value = None
            elif isinstance(value, np.generic):
                value = value.item()
            out[name] = value
        rows.append(out)
    return rows


def _columns(rows: list[dict[str, Any]], first: list[str]) -> list[str]:
    """Every column that occurs, the given ones first, decoded ones after them, sorted."""
    seen: dict[str, None] = {}
    for row in rows:
        seen.update(dict.fromkeys(row))
    decoded = sorted(c for c in seen if c.startswith(("arg.", "param.")))
    rest = [c for c in seen if c not in first and c not in decoded]
    return [*first, *decoded, *rest] if rows else first
