"""How good are ``warm``'s default plans? Warm into a fresh database, then compare each key's
result with the best known for that device.

Usage::

    python benchmarks/warm_quality.py [--device SEL] [--quick] [--max-minutes M]
        [--reference tune.db.example] [--exhaustive-db FILE] [--json FILE] [OPERATION ...]

1. ``python -m autotune warm`` (the README's main command, with ``--device`` and
   ``--max-minutes`` as given) runs into a new temporary database; its wall time and its closing
   estimate line (estimated against actual) are kept.
2. The best known result of each key on this device is the reference database's row
   (``tune.db.example`` by default: exhaustive searches for most keys, long ones for the
   rest) for the same function, version, arguments and device name; where it has none, an
   exhaustive search (``warm --strategy brute_force``) made once into ``--exhaustive-db``
   (default ``benchmarks/data/warm_quality_<device>.db``) and reused on later runs.
3. Each key's ratio is its warm time over the best known configuration's time. Where the warm
   run measured the best known configuration itself (it is among the seeds of its warm start),
   that measurement is used: the same run, the same machine state; else the reference's stored
   time. A ratio up to 1.02 is within 2%.

It prints one row per key, the share within 2%, the wall time, and warm's estimate line;
``--json`` writes the rows. ``--quick``: scale, convert, diffusion and reduce only (for the
CPU device: a few minutes).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICK = ["scale", "convert", "diffusion", "reduce"]
WITHIN = 1.02


def warm(db: Path, device: str | None, operations: list[str], extra: list[str]) -> tuple[float, str]:
    """Run ``warm`` into ``db``; (wall seconds, its standard error)."""
    command = [sys.executable, "-m", "autotune", "warm", "--db", str(db), *operations, *extra]
    if device:
        command += ["--device", device]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"warm failed ({done.returncode}):\n{done.stderr[-2000:]}")
    print(done.stdout.strip().splitlines()[-1])
    return took, done.stderr


def rows_of(path: Path) -> dict[tuple, object]:
    from autotune.tune.store import ResultStore

    store = ResultStore.open(path)
    return {(r.key.function, r.key.version, r.key.arguments, r.key.device_name): r
            for r in store.records() if not r.malformed}


def kind(record: object) -> str:
    try:
        search = json.loads(record.search or "{}")
    except ValueError:
        return "?"
    if search.get("strategy") == "brute_force" and search.get("max_evals") is None:
        return "exhaustive"
    return f"{search.get('strategy')} ({search.get('trials')} trials)"


def same_run_time(path: Path, record: object, parameters: str) -> float | None:
    """The warm run's own measurement of ``parameters`` for the key of ``record``."""
    from autotune.tune.store import ResultStore

    times = [t.median_seconds for t in ResultStore.open(path).trials(record.key)
             if t.status == "ok" and t.parameters == parameters and t.median_seconds]
    return min(times) if times else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("operations", nargs="*")
    parser.add_argument("--device")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    parser.add_argument("--max-minutes", type=float)
    parser.add_argument("--reference", default=str(ROOT / "tune.db.example"))
    parser.add_argument("--exhaustive-db", help="where the exhaustive searches for keys the "
                                                "reference lacks are kept")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    operations = args.operations or (QUICK if args.quick else [])
    extra = ["--max-minutes", str(args.max_minutes)] if args.max_minutes else []

    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / "fresh.db"
        took, err = warm(fresh, args.device, operations, extra)
        estimate = next((line for line in err.splitlines() if line.startswith("warm: estimated")), "")
        results = rows_of(fresh)
        reference = rows_of(Path(args.reference)) if Path(args.reference).is_file() else {}
        missing = {k for k in results if k not in reference}
        device = next(iter(results))[3] if results else "none"
        if missing:
            cache = Path(args.exhaustive_db or HERE / "data" /
                         f"warm_quality_{re.sub(r'[^A-Za-z0-9]+', '_', device)}.db")
            known = rows_of(cache) if cache.is_file() else {}
            if any(k not in known for k in missing):
                names = sorted({f for f, *_ in missing})
                print(f"no reference for {len(missing)} keys ({', '.join(names)}): exhaustive "
                      f"searches into {cache} (once)")
                ops = operations or []
                warm(cache, args.device, ops, ["--strategy", "brute_force", "--warm-from", "none"])
                known = rows_of(cache)
            reference.update({k: v for k, v in known.items() if k in missing})
        report = []
        for key, record in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2])):
            best = reference.get(key)
            row = {"function": key[0].split(".")[-2], "arguments": key[2], "device": key[3],
                   "parameters": record.parameters, "seconds": record.score}
            if best is None:
                report.append({**row, "best": None, "ratio": None, "reference": "none"})
                continue
            now = same_run_time(fresh, record, best.parameters)
            against = now if now is not None else best.score
            report.append({**row, "best_parameters": best.parameters, "best": against,
                           "reference": kind(best) + (", timed in this run" if now else ", stored"),
                           "ratio": record.score / against if against else None})
    print(f"\n{'operation':<24} {'arguments':<44} {'warm':>10} {'best known':>10} {'ratio':>6}  reference")
    for r in report:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        best = f"{r['best'] * 1e3:.4f}" if r["best"] else "-"
        print(f"{r['function']:<24} {r['arguments'][:44]:<44} {r['seconds'] * 1e3:>10.4f} {best:>10} "
              f"{ratio:>6}  {r['reference']}")
    judged = [r for r in report if r["ratio"]]
    within = [r for r in judged if r["ratio"] <= WITHIN]
    print(f"\n{len(within)} of {len(judged)} keys within 2% of the best known "
          f"({100 * len(within) / max(1, len(judged)):.0f}%); times in ms")
    worst = sorted(judged, key=lambda r: -r["ratio"])[:5]
    if worst and worst[0]["ratio"] > WITHIN:
        print("outside: " + "; ".join(f"{r['function']} {r['arguments']} {r['ratio']:.3f}"
                                       for r in worst if r["ratio"] > WITHIN))
    print(f"warm took {took:.1f} s of wall time on {device}"
          + (f" (--max-minutes {args.max_minutes})" if args.max_minutes else ""))
    if estimate:
        print(estimate)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": device, "date": datetime.date.today().isoformat(), "wall_seconds": took,
            "max_minutes": args.max_minutes, "estimate": estimate, "rows": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
