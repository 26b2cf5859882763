"""``show``, ``export``, ``import`` and ``clear``: the stored results as tables and files.

Nothing named in a row is imported or resolved: arguments are shown as the stored text says.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ..tune.registry import RegisteredTemplate, registered_templates
from ..tune.serving import get_store
from ..tune import TuningRecord, results_frame
from ..tune.encoding import describe_arguments
from ..tune.frames import export_rows
from ..tune.similar import origin_text
from ..tune.store import MergePolicy, ResultStore, display, format_for, read_import, rows_text
from ..tune.validation import changed_sources, record_problem
from .formatting import (count_text, interval_text, parameters_text, printable, rate_text,
                         seconds_text, share_text, short_function, speedup_text)


def _registered() -> dict[str, RegisteredTemplate]:
    return {t.function: t for t in registered_templates()}


def status_text(record: TuningRecord, templates: dict[str, RegisteredTemplate],
                current: dict[str, dict[str, str]]) -> str:
    """``fresh``, ``stale (file, ...)``, ``invalid: why``, or ``-`` where it cannot be told
    (a function no registered template owns)."""
    template = templates.get(record.key.function)
    current_version = template.tuner.version(template.cls) if template is not None else None
    test = template.test_parameters if current_version == record.key.version else None
    problem = record_problem(record, test)
    if problem:
        return f"invalid: {problem[:60]}"
    if template is None:
        return "-"
    if record.key.version != current_version:
        return f"old version (now {current_version})"
    if not record.fingerprint:
        return "stale (no fingerprint)"
    changed = changed_sources(record, current.setdefault(record.key.function,
                                                        template.current_sources()))
    return f"stale ({', '.join(changed)})" if changed else "fresh"


def _table(records: list[TuningRecord]) -> str:
    import pandas as pd

    if not records:
        return "no results stored"
    templates = _registered()
    current: dict[str, dict[str, str]] = {}
    frame = results_frame(records=records)
    table = pd.DataFrame({
        "operation": frame.function.map(short_function),
        "v": frame.version,
        "arguments": frame.arguments.map(describe_arguments),
        "device": frame.device_name,
        "platform": frame.device_platform,
        "driver": frame.driver_version,
        "parameters": frame.parameters.map(parameters_text),
        "time": frame.score.map(seconds_text),
        "95% interval": [interval_text(lo, hi) for lo, hi in zip(frame.ci_low, frame.ci_high)],
        "ties": frame.ties.map(count_text),
        "spread": frame.spread.map(share_text),
        "vs test=": [speedup_text(s, lo, hi) for s, lo, hi in
                     zip(frame.speedup, frame.speedup_low, frame.speedup_high)],
        "GB/s": frame.gbps.map(rate_text),
        "GFLOP/s": frame.gflops.map(rate_text),
        "found": [origin_text(r) for r in records],
        "status": [status_text(r, templates, current) for r in records],
        "tuned": frame.created_at.map(lambda t: t.strftime("%Y-%m-%d %H:%M")),
    })
    for column in table.columns:  # stored text is data: no control character reaches the terminal
        table[column] = [printable(value) for value in table[column]]
    with pd.option_context("display.max_colwidth", 50, "display.width", 250):
        return table.to_string(index=False)


def run_show(args: Any, url: str) -> int:
    records = get_store(url).records(function=function_pattern(args.function), device=args.device)
    print(_table(records))
    return 0


def function_pattern(function: str | None) -> str | None:
    """What ``--function X`` selects: a pattern with ``%`` wildcards as written, else every
    function whose qualified name contains ``X`` (a whole qualified name matches itself)."""
    if function is None or "%" in function:
        return function
    return f"%{function}%"


def write_output(path: Path, text: str | bytes) -> None:
    """Write a file the user named; an unwritable place is one clear error."""
    try:
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    except OSError as exc:
        raise ValueError(f"cannot write {path}: {exc.strerror or exc}"
                         + (" (it is a directory; name a file)" if path.is_dir() else "")) from None


def run_export(args: Any, url: str) -> int:
    frame = results_frame(url, function=function_pattern(args.function), device=args.device)
    rows = export_rows(frame)
    if args.out:
        out = Path(args.out)
        write_output(out, rows_text(rows, format_for(out, args.format)))
        print(f"exported {len(rows)} results to {out}", file=sys.stderr)
    else:
        sys.stdout.write(rows_text(rows, args.format or "csv"))
    return 0


def run_import(args: Any, url: str) -> int:
    path = Path(args.file)
    source = read_import(path)
    templates = _registered()
    for i, record in enumerate(source.records):
        template = templates.get(record.key.function)
        test = template.test_parameters if (
            template is not None and template.tuner.version(template.cls) == record.key.version) else None
        problem = record_problem(record, test)
        if problem:
            raise ValueError(f"{path} row {i + 1} ({record.key.function} on "
                             f"{record.key.device_name}): {problem}; nothing imported")
    policy = MergePolicy(args.on_conflict)
    counts = ResultStore(url).merge(source.records, policy)
    print(f"imported {path} ({source.kind}, {len(source.records)} results, on conflict: "
          f"{_POLICY_TEXT[policy]}): {counts.added} added, {counts.replaced} replaced, "
          f"{counts.kept} kept")
    return 0


_POLICY_TEXT = {
    MergePolicy.KEEP: "keep ours",
    MergePolicy.REPLACE: "replace ours",
    MergePolicy.BETTER: "replace ours if the imported score is lower",
}


def run_clear(args: Any, url: str) -> int:
    store = ResultStore(url)
    function = function_pattern(args.function)
    matching = store.records(function=function, device=args.device)
    if not matching:
        print("nothing to delete")
        return 0
    if not args.yes:
        if not sys.stdin.isatty():
            raise ValueError(f"refusing to delete {len(matching)} results without --yes "
                             "(no terminal to ask)")
        answer = input(f"Delete {len(matching)} results and their trials from {display(url)}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    deleted = store.delete(function=function, device=args.device)
    print(f"deleted {deleted} results")
    return 0
