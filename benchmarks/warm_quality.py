"""How good are ``warm``'s default plans? Warm into a fresh database, then compare each key's
result with the best known for that device.

Usage::

    python benchmarks/warm_quality.py [--device SEL] [--quick] [--max-minutes M]
        [--reference tune.db.example] [--exhaustive-db FILE] [--rounds 3] [--settle 6]
        [--warm-option '--strategy brute_force'] [--json FILE] [--keep-db FILE] [OPERATION ...]

1. ``python -m autotune warm`` (the README's main command, with ``--device`` and
   ``--max-minutes`` as given) runs into a new temporary database; its wall time and its closing
   estimate line (estimated against actual) and its time by template are kept.
2. The best known result of each key on this device is the reference database's row
   (``tune.db.example`` by default: exhaustive searches for most keys, long ones for the
   rest) for the same function, version, arguments and device name; where it has none, an
   exhaustive search (``warm --strategy brute_force``) made once into ``--exhaustive-db``
   (default ``benchmarks/data/warm_quality_<device>.db``) and reused on later runs.
3. Each key's ratio is the time of warm's configuration over the time of the best known one.
   Where they are the same configuration the ratio is 1. Where they differ, both are timed again
   now, side by side: ``--rounds`` (3) tuning runs of the key that measure just the two (in
   alternating order, each with the usual checks and timed batches), the median of each's
   times taken. Comparing stored times instead would favour warm: its result is the fastest of
   what it measured, the best known configuration included when it was among the seeds. A
   ratio up to 1.02 is within 2%. Each round's own ratio is kept too: a key whose every round
   has warm's slower by more than 2% is outside beyond the comparison's noise (on a small,
   shared CPU the rounds spread by tens of percent: more ``--rounds`` narrow it). Where the
   rounds disagree about the line (the median over 2%, a round within it), ``--settle`` (6)
   more rounds of the key are timed and the medians taken over all of them: a sequential
   comparison, more samples only where the first ones cannot tell.

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
import shutil
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


def pair_strategy(pair: list[dict], flip: bool):
    """A strategy that measures the configurations of ``pair`` that fit the space (in reverse
    order if ``flip``), or the space's first one where neither fits (a tuning function's
    earlier, narrower search)."""
    def strategy(ctx) -> None:
        fit = [c for c in pair if ctx.space.why_not(c) is None]
        ctx.evaluate((fit[::-1] if flip else fit) or ctx.configs[:1])

    return strategy


Times = tuple[list[float], list[float]]


def retime(device: str | None, pairs: dict[tuple, tuple[dict, dict]],
           rounds: int) -> dict[tuple, Times | None]:
    """For each key (function, version, arguments, device name) -> (warm's, best known): the
    two configurations' times, one a round, timed now side by side (None: the key is not
    registered here)."""
    from autotune import accel, tune
    from autotune.tune.encoding import encode_parameters
    from autotune.tune.registry import registered_templates

    spec = accel.select_devices(device or os.environ.get(accel.ENV_DEVICE))[0]
    context = spec.create_context()
    found: dict[tuple, tuple] = {}
    for template in registered_templates():
        for config in template.configurations(context):
            k = template.key(context, config)
            found[(k.function, k.version, k.arguments, k.device_name)] = (template, config)
    timed: dict[tuple, Times | None] = {}
    with tempfile.TemporaryDirectory() as folder, tune.use_database(str(Path(folder) / "pairs.db")):
        for key, (mine, best) in pairs.items():
            if key not in found:
                timed[key] = None
                continue
            template, config = found[key]
            times: dict[str, list[float]] = {encode_parameters(mine): [], encode_parameters(best): []}

            def observe(event: str, data: dict) -> None:
                trial = data.get("trial")
                if event == "trial" and trial is not None and trial.median_seconds:
                    text = encode_parameters(trial.parameters)
                    if text in times:
                        times[text].append(trial.median_seconds)

            for r in range(rounds):
                with tune.observing(observe), tune.search_settings(
                        strategy=pair_strategy([mine, best], r % 2 == 1)):
                    template.retune(context, config)
            mine_times, best_times = times.values()
            timed[key] = (mine_times, best_times)
    return timed


def compared(times: Times | None) -> tuple[float, list[float]] | None:
    """The median time of warm's configuration over the best known's, and each round's ratio
    (their spread is the comparison's own noise); None where either was not timed."""
    if times is None:
        return None
    mine, best = times
    a, b = (sorted(v)[len(v) // 2] if v else None for v in (mine, best))
    return (a / b, [x / y for x, y in zip(mine, best)]) if a and b else None


def unsettled(compared_: tuple[float, list[float]] | None) -> bool:
    """Whether a comparison's rounds disagree about the 2% line: the median over it, some
    round within it."""
    return compared_ is not None and compared_[0] > WITHIN and min(compared_[1]) <= WITHIN


def best_known(results: dict, reference_db: Path, device_sel: str | None,
               exhaustive_db: str | None) -> dict:
    """The best known row of each key of ``results``: ``reference_db``'s, else an exhaustive
    search's, made once into ``exhaustive_db`` (default ``data/warm_quality_<device>.db``)."""
    reference = rows_of(reference_db) if reference_db.is_file() else {}
    missing = {k for k in results if k not in reference}
    if not missing:
        return reference
    device = next(iter(results))[3]
    cache = Path(exhaustive_db or HERE / "data" /
                 f"warm_quality_{re.sub(r'[^A-Za-z0-9]+', '_', device)}.db")
    known = rows_of(cache) if cache.is_file() else {}
    if any(k not in known for k in missing):
        from autotune.tune.registry import registered_templates

        functions = {f for f, *_ in missing}
        ops = sorted(t.name for t in registered_templates() if t.function in functions)
        print(f"no reference for {len(missing)} keys ({', '.join(ops)}): exhaustive "
              f"searches into {cache} (once)")
        warm(cache, device_sel, ops, ["--strategy", "brute_force", "--warm-from", "none"])
        known = rows_of(cache)
    reference.update({k: v for k, v in known.items() if k in missing})
    return reference


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
    parser.add_argument("--keep-db", metavar="FILE",
                        help="keep warm's database here (its trials say how a key chose)")
    parser.add_argument("--warm-option", action="append", default=[], metavar="OPTIONS",
                        help="more options for warm, e.g. '--strategy brute_force' for the "
                             "exhaustive search to compare the plans with")
    parser.add_argument("--rounds", type=int, default=3,
                        help="side-by-side timings of warm's and the best known configuration")
    parser.add_argument("--settle", type=int, default=6,
                        help="more rounds for a key whose rounds disagree about the 2%% line "
                             "(the median over it, a round within it); 0: none")
    args = parser.parse_args()
    operations = args.operations or (QUICK if args.quick else [])
    extra = (["--max-minutes", str(args.max_minutes)] if args.max_minutes else []) + \
        [option for given in args.warm_option for option in given.split()]

    with tempfile.TemporaryDirectory() as folder:
        fresh = Path(folder) / "fresh.db"
        took, err = warm(fresh, args.device, operations, extra)
        if args.keep_db:
            shutil.copyfile(fresh, args.keep_db)
        estimate = next((line for line in err.splitlines() if line.startswith("warm: estimated")), "")
        split = next((line for line in err.splitlines() if line.startswith("warm: by template")), "")
        results = rows_of(fresh)
        reference = best_known(results, Path(args.reference), args.device, args.exhaustive_db)
        device = next(iter(results))[3] if results else "none"
    from autotune.tune.encoding import decode_parameters

    differ = {k: (decode_parameters(r.parameters), decode_parameters(reference[k].parameters))
              for k, r in results.items() if k in reference and
              json.loads(r.parameters) != json.loads(reference[k].parameters)}
    print(f"{len(differ)} of {len(results)} keys chose another configuration than the best "
          f"known: timing both again, {args.rounds} rounds")
    times = retime(args.device, differ, args.rounds)
    again = {k: differ[k] for k in differ if unsettled(compared(times.get(k)))}
    if again and args.settle:
        print(f"{len(again)} keys' rounds disagree about the 2% line: {args.settle} more "
              f"rounds each")
        for key, more in retime(args.device, again, args.settle).items():
            if more is not None and times.get(key) is not None:
                times[key] = (times[key][0] + more[0], times[key][1] + more[1])
    ratios = {k: compared(v) for k, v in times.items()}
    report = []
    for key, record in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][2])):
        best = reference.get(key)
        row = {"function": key[0].split(".")[-2], "arguments": key[2], "device": key[3],
               "parameters": record.parameters, "seconds": record.score}
        if best is None:
            report.append({**row, "best": None, "ratio": None, "reference": "none"})
            continue
        same = key not in differ
        timed = None if same else ratios.get(key)
        report.append({**row, "best_parameters": best.parameters, "best": best.score,
                       "reference": kind(best) + (", the same configuration" if same else
                                                  ", both timed again"),
                       "ratio": 1.0 if same else (timed[0] if timed else None),
                       "round_ratios": [1.0] if same else (timed[1] if timed else [])})
    print(f"\n{'operation':<24} {'arguments':<44} {'warm':>10} {'stored best':>11} {'ratio':>6} "
          f"{'rounds':>13}  reference")
    for r in report:
        ratio = f"{r['ratio']:.3f}" if r["ratio"] else "-"
        best = f"{r['best'] * 1e3:.4f}" if r["best"] else "-"
        spread = (f"{min(r['round_ratios']):.2f}-{max(r['round_ratios']):.2f}"
                  if r.get("round_ratios") else "-")
        print(f"{r['function']:<24} {r['arguments'][:44]:<44} {r['seconds'] * 1e3:>10.4f} {best:>11} "
              f"{ratio:>6} {spread:>13}  {r['reference']}")
    judged = [r for r in report if r["ratio"]]
    within = [r for r in judged if r["ratio"] <= WITHIN]
    # slower in every round: outside 2% beyond the comparison's own noise
    slower = [r for r in judged if r["round_ratios"] and min(r["round_ratios"]) > WITHIN]
    print(f"\n{len(within)} of {len(judged)} keys within 2% of the best known "
          f"({100 * len(within) / max(1, len(judged)):.0f}%); times in ms")
    print(f"{len(slower)} of {len(judged)} keys slower than 2% over the best known in every one "
          f"of the rounds (the others are within 2%, or within the rounds' own spread)")
    worst = sorted(judged, key=lambda r: -r["ratio"])[:5]
    if worst and worst[0]["ratio"] > WITHIN:
        print("outside: " + "; ".join(f"{r['function']} {r['arguments']} {r['ratio']:.3f}"
                                       for r in worst if r["ratio"] > WITHIN))
    print(f"warm took {took:.1f} s of wall time on {device}"
          + (f" (--max-minutes {args.max_minutes})" if args.max_minutes else ""))
    for line in (estimate, split):
        if line:
            print(line)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "device": device, "date": datetime.date.today().isoformat(), "wall_seconds": took,
            "max_minutes": args.max_minutes, "estimate": estimate, "by_template": split,
            "rows": report}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
