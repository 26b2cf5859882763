"""``show``, ``export``, ``import`` and ``clear``: the stored results as tables and files."""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..tune import TuningKey, TuningRecord
from ..tune.store import KEY_FIELDS, ResultStore
from .formatting import arguments_text, parameters_text, seconds_text, short_function

_EXPORT_FIELDS = (*KEY_FIELDS, "parameters", "score", "created_at", "package_version")
_REQUIRED_FIELDS = (*KEY_FIELDS, "parameters", "score")


def record_to_dict(record: TuningRecord) -> dict[str, Any]:
    return {**dataclasses.asdict(record.key), "parameters": record.parameters,
            "score": record.score, "created_at": record.created_at.isoformat(),
            "package_version": record.package_version}


def record_from_dict(row: dict[str, Any], where: str) -> TuningRecord:
    """Validate one imported row; raises ValueError naming the row and the field."""
    missing = [f for f in _REQUIRED_FIELDS if f not in row]
    if missing:
        raise ValueError(f"{where}: missing field(s) {', '.join(missing)}")
    try:
        key = TuningKey(**{f: (int if f == "version" else str)(row[f]) for f in KEY_FIELDS})
        parameters = str(row["parameters"])
        if not isinstance(json.loads(parameters), dict) or not isinstance(json.loads(key.arguments), dict):
            raise ValueError("parameters and arguments must be JSON objects")
        # No score means never timed: infinitely slow, so any measured result replaces it.
        score = float(row["score"]) if row["score"] not in ("", None) else float("inf")
        created = row.get("created_at") or None
        created_at = datetime.fromisoformat(str(created)) if created else datetime.now(timezone.utc)
        if created_at.tzinfo is None:
            created_at = created_at.replace(tzinfo=timezone.utc)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    return TuningRecord(key=key, parameters=parameters, score=score,
                        package_version=str(row.get("package_version") or "unknown"),
                        created_at=created_at)


def _table(records: list[TuningRecord]) -> str:
    import pandas as pd

    if not records:
        return "no results stored"
    rows = [{
        "operation": short_function(r.key.function),
        "v": r.key.version,
        "arguments": arguments_text(r.key.arguments),
        "device": r.key.device_name,
        "platform": r.key.device_platform,
        "driver": r.key.driver_version,
        "parameters": parameters_text(r.parameters),
        "time": seconds_text(r.score),
        "tuned": r.created_at.strftime("%Y-%m-%d %H:%M"),
    } for r in records]
    with pd.option_context("display.max_colwidth", 50, "display.width", 250):
        return pd.DataFrame(rows).to_string(index=False)


def run_show(args: Any, url: str) -> int:
    records = ResultStore(url).records(function=args.function, device=args.device)
    print(_table(records))
    return 0


def run_export(args: Any, url: str) -> int:
    import pandas as pd

    rows = [record_to_dict(r) for r in ResultStore(url).records(function=args.function,
                                                           device=args.device)]
    if args.format == "json":
        text = json.dumps(rows, indent=1)
    else:
        text = pd.DataFrame(rows, columns=list(_EXPORT_FIELDS)).to_csv(index=False)
    if args.out:
        Path(args.out).write_text(text)
        print(f"exported {len(rows)} results to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _read_import(path: Path) -> list[TuningRecord]:
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    head = path.read_bytes()[:16]
    if head.startswith(b"SQLite format 3"):
        _require_autotune_tables(path)
        source = ResultStore(f"sqlite:///{path.resolve()}")
        try:
            return source.records()
        finally:
            source.dispose()
    text = path.read_text()
    if path.suffix == ".json" or text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{path} is not valid JSON: {exc}") from None
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of results")
    else:
        import csv

        rows = list(csv.DictReader(text.splitlines()))
    return [record_from_dict(row if isinstance(row, dict) else {}, f"{path} row {i + 1}")
            for i, row in enumerate(rows)]


def _require_autotune_tables(path: Path) -> None:
    """Opening a store creates missing tables: never do that to someone else's database."""
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///file:{path.resolve()}?mode=ro&uri=true")
    try:
        tables = set(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()
    if "tuning_results" not in tables:
        raise ValueError(f"{path} is an SQLite database but not an autotune one "
                         "(no tuning_results table); nothing imported")


def run_import(args: Any, url: str) -> int:
    records = _read_import(Path(args.file))
    store = ResultStore(url)
    counts = {"added": 0, "replaced": 0, "kept": 0}
    for record in records:
        counts[store.put_if_better(record)] += 1
    print(f"imported {args.file}: {counts['added']} added, {counts['replaced']} replaced by a "
          f"better score, {counts['kept']} kept (ours was as good or better)")
    return 0


def run_clear(args: Any, url: str) -> int:
    store = ResultStore(url)
    matching = store.records(function=args.function, device=args.device)
    if not matching:
        print("nothing to delete")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(f"refusing to delete {len(matching)} results without --yes "
                             "(no terminal to ask)")
        answer = input(f"Delete {len(matching)} results and their trials from {url}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    deleted = store.delete(function=args.function, device=args.device)
    print(f"deleted {deleted} results")
    return 0
