"""``report``: a static HTML page of the stored results, with pictures beside it.

Per tuned function: a table of its results per device and arguments (with the speed-up over the
``test=`` parameters where both were timed), a picture per key (the distribution of its trials'
times and how the time depends on the parameters), and, for arguments tuned on several devices,
the parameters each device chose side by side. Everything from the database is escaped: the page
shows stored text, it never runs it.
"""

from __future__ import annotations

import html
import json
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..tune.registry import registered_templates
from ..tune import TuningKey, TuningRecord
from ..tune.encoding import describe_arguments
from ..tune.records import TrialRecord
from ..tune.similar import origin_text
from ..tune.store import ResultStore, display
from ..tune.validation import (parameters_problem, recorded_speedup, recorded_test, record_problem,
                               trial_problem)
from .figures import KeyTrials, write_figures
from .formatting import (count_text, interval_text, parameters_text, rate_text, seconds_text,
                         share_text, short_function, speedup_text)
from .results import function_pattern, status_text, write_output

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.3em 0 1.2em; }
h2 { border-bottom: 2px solid #8da0cb; padding-bottom: 0.2em; margin-top: 2em; }
.note { color: #555; font-size: 0.9em; }
td.differs { background: #fff3cd; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def key_label(key: TuningKey) -> str:
    return f"{short_function(key.function)} ({describe_arguments(key.arguments)}) on {key.device_name}"


def key_trials(key: TuningKey, trials: list[TrialRecord], winner: str | None,
               test: dict[str, Any] | None) -> KeyTrials:
    """The successful, well-formed trials of ``key`` (the last of each configuration)."""
    latest: dict[str, float] = {}
    for t in trials:
        if t.status == "ok" and not trial_problem(t) and t.median_seconds:
            latest[t.parameters] = t.median_seconds
    found = KeyTrials(key_label(key), test=test)
    for text, seconds in latest.items():
        found.parameters.append(json.loads(text))
        found.seconds.append(seconds)
    found.winner = json.loads(winner) if winner and not parameters_problem(winner) else None
    return found


def _speedup(record: TuningRecord, keyed: KeyTrials) -> tuple[float, float | None, float | None] | None:
    """The speed-up over ``test=`` with its 95% interval where the choice recorded them, else
    from the trials' medians (no interval)."""
    found = recorded_speedup(record)
    if found is not None:
        return found
    test = keyed.time_of(keyed.test)
    if test is None or not record.score or record.score == float("inf") or record_problem(record):
        return None
    return test / record.score, None, None


def _speedup_cell(record: TuningRecord, keyed: KeyTrials) -> str:
    found = _speedup(record, keyed)
    text = speedup_text(*found) if found is not None else "-"
    if found is not None and found[0] < 1:
        # test= lies outside the searched space here and beat everything in it
        return (f"<td class='num differs' title='the test= parameters, outside the space searched "
                f"on this device, were faster: the space may miss good configurations'>{_e(text)}"
                "</td>")
    return f"<td class='num'>{_e(text)}</td>"


def run_report(args: Any, url: str) -> int:
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file; name a folder for the report")
    try:
        (out / "img").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create {out}: {exc.strerror or exc}") from None
    store = ResultStore(url)
    pattern = function_pattern(args.function)
    records = store.records(function=pattern)
    if not records:
        raise ValueError("no results stored" + (f" for {args.function!r}" if args.function else "")
                         + "; see `python -m autotune show`")
    trials_by_key: dict[TuningKey, list[TrialRecord]] = defaultdict(list)
    for t in store.trials(function=pattern):
        trials_by_key[t.key].append(t)
    templates = {t.function: t for t in registered_templates()}
    current: dict[str, dict[str, str]] = {}
    by_function: dict[str, list[TuningRecord]] = defaultdict(list)
    for r in records:
        by_function[r.key.function].append(r)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>autotune report</title>"
             f"<style>{_STYLE}</style></head><body>",
             "<h1>Tuning results</h1>",
             f"<p class='note'>Database {_e(display(url))}; {len(records)} results of "
             f"{len(by_function)} functions; made {_e(time.strftime('%Y-%m-%d %H:%M'))} by "
             "<code>python -m autotune report</code>. Times are medians per call, with the 95% "
             "interval of the winner's median where the leaders and <code>test=</code> were timed "
             "again side by side; <i>ties</i> counts the candidates that could not be told apart "
             "from the fastest (the winner among them is <code>test=</code> if tied, else the "
             "first declared), <i>spread</i> how much one timed batch varies. The speed-up is "
             "over the template's <code>test=</code> parameters where both were timed, with its "
             "95% interval in brackets; one below "
             "1 (marked) means <code>test=</code> lies outside the space searched on that device "
             "and beat it.</p>",
             "<ul>" + "".join(f"<li><a href='#f{i}'>{_e(short_function(f))}</a> "
                              f"({len(by_function[f])} results)</li>"
                              for i, f in enumerate(sorted(by_function))) + "</ul>"]
    pictures: list[tuple[KeyTrials, Path]] = []
    for i, function in enumerate(sorted(by_function)):
        rows = sorted(by_function[function], key=lambda r: (r.key.device_name, r.key.arguments))
        template = templates.get(function)
        test = template.test_parameters if template else None
        parts.append(f"<h2 id='f{i}'>{_e(short_function(function))}</h2>"
                     f"<p class='note'><code>{_e(function)}</code></p>")
        keyed = {r.key: key_trials(r.key, trials_by_key.get(r.key, []), r.parameters,
                                   recorded_test(r) or test) for r in rows}
        parts.append("<table><tr><th>device</th><th>arguments</th><th>parameters</th><th>time</th>"
                     "<th>95% interval</th><th>ties</th><th>spread</th><th>GB/s</th><th>GFLOP/s</th>"
                     "<th>speed-up vs test=</th><th>status</th><th>found</th><th>tuned</th></tr>")
        for r in rows:
            parts.append(
                f"<tr><td>{_e(r.key.device_name)}</td><td>{_e(describe_arguments(r.key.arguments))}</td>"
                f"<td>{_e(parameters_text(r.parameters))}</td><td class='num'>{_e(seconds_text(r.score))}</td>"
                f"<td class='num'>{_e(interval_text(r.ci_low, r.ci_high))}</td>"
                f"<td class='num'>{_e(count_text(r.ties))}</td>"
                f"<td class='num'>{_e(share_text(r.spread))}</td>"
                f"<td class='num'>{_e(rate_text(r.gbps))}</td><td class='num'>{_e(rate_text(r.gflops))}</td>"
                f"{_speedup_cell(r, keyed[r.key])}"
                f"<td>{_e(status_text(r, templates, current))}</td><td>{_e(origin_text(r))}</td>"
                f"<td>{_e(r.created_at.strftime('%Y-%m-%d'))}</td></tr>")
        parts.append("</table>")
        parts += _device_comparison(rows)
        for r in rows:
            trials = keyed[r.key]
            if len(trials.seconds) < 2:
                continue
            name = f"img/key{len(pictures) + 1:04d}.png"
            pictures.append((trials, out / name))
            parts.append(f"<h3>{_e(trials.label)}</h3><img src='{name}' alt='trials of "
                         f"{_e(trials.label)}'>")
    parts.append("</body></html>")
    for old in (out / "img").glob("key[0-9][0-9][0-9][0-9].png"):  # an earlier report's
        old.unlink()
    write_figures(pictures)
    write_output(out / "index.html", "\n".join(parts))
    print(f"wrote {out / 'index.html'}: {len(records)} results, {len(pictures)} pictures")
    return 0


def _device_comparison(rows: list[TuningRecord]) -> list[str]:
    """For arguments tuned on several devices, the parameters each chose, side by side."""
    by_arguments: dict[tuple, list[TuningRecord]] = defaultdict(list)
    for r in rows:
        if not record_problem(r):
            by_arguments[(r.key.version, r.key.arguments)].append(r)
    parts = []
    for (_, arguments), group in sorted(by_arguments.items()):
        devices = sorted({r.key.device_name for r in group})
        if len(devices) < 2:
            continue
        chosen = {r.key.device_name: json.loads(r.parameters) for r in group}
        names = sorted({n for p in chosen.values() for n in p})
        parts.append(f"<p>Parameters chosen for <b>{_e(describe_arguments(arguments))}</b>:</p><table>"
                     "<tr><th>parameter</th>" + "".join(f"<th>{_e(d)}</th>" for d in devices) + "</tr>")
        for n in names:
            values = [chosen[d].get(n, "-") for d in devices]
            cell = "<td>" if len({json.dumps(v) for v in values}) == 1 else "<td class='differs'>"
            parts.append(f"<tr><td>{_e(n)}</td>" + "".join(f"{cell}{_e(v)}</td>" for v in values)
                         + "</tr>")
        parts.append("</table>")
    return parts
