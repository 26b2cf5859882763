"""How much where the buffers land moves a ranking (issue 41): the winners a
``choice_stability.py`` run stored, timed side by side again and again in one process, the
template's buffers built afresh each time (with a buffer of another size held in between, so
that they land elsewhere in device memory).

It answers whether one side-by-side measurement is a good enough reference to judge "within
1% of the fastest" by: on an H200 the dslash's four winners ranked differently from placement
to placement, by 0.2% to 2.8% (docs/performance.md, "Statistics of a choice").

Usage:
  python benchmarks/placement_spread.py --from CHOICE_STABILITY.json [--key dslash|gemm]
                                        [--placements 14] [--rounds 24] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from choice_stability import remeasure_placements  # noqa: E402


def label(config: dict[str, Any], keys: list[str]) -> str:
    """The values of the parameters in which the configurations differ."""
    return "/".join(f"{k}={config[k]}" for k in keys) or "all"


def spread_of(per_placement: list[list[list[float]]]) -> list[list[float]]:
    """Per placement: each winner's median over the fastest's, minus 1."""
    rows = []
    for samples in per_placement:
        medians = [statistics.median(s) for s in samples]
        rows.append([m / min(medians) - 1 for m in medians])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", required=True,
                        help="a JSON report of choice_stability.py (its winners are timed)")
    parser.add_argument("--key", choices=["dslash", "gemm"], default="dslash")
    parser.add_argument("--placements", type=int, default=14)
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--device", default=None)
    parser.add_argument("--quick", action="store_true", help="the small sizes of --quick runs")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    report = json.loads(Path(args.source).read_text())
    if args.key not in report or not report[args.key].get("winners"):
        raise SystemExit(f"placement_spread.py: {args.source} has no winners for {args.key}; "
                         "give a JSON report written by choice_stability.py --json")
    winners = report[args.key]["winners"]
    differing = [k for k in winners[0] if len({json.dumps(w[k]) for w in winners}) > 1]
    rows = spread_of(remeasure_placements(args.key, args.quick, args.device, winners,
                                          args.rounds, args.placements))
    print(f"| placement | {' | '.join(label(w, differing) for w in winners)} |\n"
          f"|---|{'---|' * len(winners)}")
    for i, row in enumerate(rows):
        print(f"| {i} | {' | '.join(f'{100 * v:+.2f}%' for v in row)} |")
    widths = [max(row) for row in rows]
    fastest = [sum(row[i] == 0 for row in rows) for i in range(len(winners))]
    print(f"spread between the winners: {100 * min(widths):.2f}% to {100 * max(widths):.2f}%; "
          f"times each was the fastest: {fastest}")
    if args.json:
        Path(args.json).write_text(json.dumps({"key": args.key, "winners": winners,
                                               "rows": rows, "fastest": fastest}, indent=1))


if __name__ == "__main__":
    main()
