"""What does a key cost ``warm`` when it is given no time to search? (issue 44)

On a fresh H200, ``warm --max-minutes 1`` took 82 s (2026-12-02): 48 keys whose share of the
minute was spent (a search limit of 1 ms) still took 41.5 s, and the first Wilson dslash key of
each lattice 6-8 s. This tunes each registered key of a device as ``warm`` does at that floor
(``search_settings(max_seconds=0.001)``: the search still measures its first configuration and
the ``test=`` baseline) into a throwaway database, in a fresh process, and splits each key's
time into:

- ``before``: from the call to its first search's start (the tuning function's own work: its
  data, references, device arrays);
- ``first``: from that start to its first trial (the first candidate's build, first launch and
  check: the cold compile);
- ``rest``: from there to the end (the baseline's trial, a second search where the template
  has one, the choice, the write).

Run it on a machine nothing has run on (its kernel caches empty) to see a cold key's costs, and
again right after to see a warm one's. Prints each key and each template's totals; ``--json``
keeps the rows.

Usage: python benchmarks/warm_key_parts.py [--device SEL] [--templates NAME ...] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FLOOR_SECONDS = 0.001  # what warm gives a key whose share of --max-minutes is spent


def parts(template, context, config) -> dict:
    """One key tuned at the floor: its seconds before the first search, to the first trial, and
    after it, and how many searches it ran."""
    from autotune import tune

    marks: dict[str, float] = {}
    starts = [0]

    def observe(event: str, data: dict) -> None:
        now = time.perf_counter()
        if event == "start":
            starts[0] += 1
            marks.setdefault("start", now)
        elif event == "trial":
            marks.setdefault("trial", now)

    began = time.perf_counter()
    with tune.observing(observe), tune.search_settings(max_seconds=FLOOR_SECONDS):
        template.retune(context, config)
    ended = time.perf_counter()
    start = marks.get("start", ended)
    trial = marks.get("trial", ended)
    return {"before": start - began, "first": trial - start, "rest": ended - trial,
            "total": ended - began, "searches": starts[0]}


def main() -> int:
    from autotune import accel, tune
    from autotune.tune.encoding import encode_arguments
    from autotune.tune.registry import registered_templates

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device")
    parser.add_argument("--templates", nargs="+", help="registered names (default: every one)")
    parser.add_argument("--json")
    args = parser.parse_args()
    context = accel.create_some_context(args.device)
    print(f"device: {context.device.describe()}  date: {time.strftime('%Y-%m-%d %H:%M:%S')}")
    rows = []
    by_template: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0])
    with tempfile.TemporaryDirectory() as folder, \
            tune.use_database(str(Path(folder) / "parts.db")):
        for template in registered_templates():
            if args.templates and template.name not in args.templates:
                continue
            for config in template.configurations(context):
                key = f"{template.name} {encode_arguments(config)}"
                try:
                    row = parts(template, context, config)
                except Exception as exc:  # noqa: BLE001 - a key that fails is reported, others go on
                    print(f"{key}: failed: {type(exc).__name__}: {exc}", flush=True)
                    continue
                rows.append({"template": template.name, "arguments": encode_arguments(config), **row})
                total = by_template[template.name]
                for i, part in enumerate(("before", "first", "rest", "total")):
                    total[i] += row[part]
                total[4] += 1
                print(f"{key}: before {row['before']:.2f} s, first trial {row['first']:.2f} s, "
                      f"rest {row['rest']:.2f} s, total {row['total']:.2f} s "
                      f"({row['searches']} search{'es' if row['searches'] != 1 else ''})",
                      flush=True)
    print("\n| template | keys | before | first trial | rest | total | a key |")
    print("|---|---|---|---|---|---|---|")
    for name, (before, first, rest, total, n) in by_template.items():
        print(f"| {name} | {n} | {before:.1f} s | {first:.1f} s | {rest:.1f} s | {total:.1f} s | "
              f"{total / n:.2f} s |")
    print(f"all keys: {sum(r['total'] for r in rows):.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.describe(),
                                               "date": time.strftime("%Y-%m-%d"), "rows": rows},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
