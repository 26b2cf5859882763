"""``AUTOTUNE_MATCH=similar`` against each size's own tuning, side by side in one process.

GEMM (float32): the anchor sizes (1024^3, 4096^3, 8192^3) are tuned into a temporary
database; for each of 20 other shapes (m, n, k between 512 and 8192, some not square) the
parameters ``similar`` serves from the anchors are timed beside that shape's own tuning (a
local search within ``--max-evals`` configurations, seed 0, into a second database, so that no
shape's own result becomes another's anchor). The anchors are tuned with the same budget.

Wilson dslash (reconstruct 12): anchors 16^4, 24^4 and 32^4; served at 20^4, 28^4 and
24^3 x 48 in single and half precision, timed beside each lattice's own tuning (the
template's own search). With ``--cross``, every anchor's result is timed at each lattice too
(which anchor would have served it best: the rule's choice against the others).

Each pair is timed in alternating rounds (their median; device time: ``queue_time``); the ratio
is similar / own (below 1: the served parameters were faster than the shape's own search
found). Targets (H200): GEMM median <= 1.05 and worst <= 1.15; dslash every lattice <= 1.05.

Usage (GPU):  python benchmarks/similar_sizes.py [--part gemm|dslash|all] [--max-evals 40]
                                                 [--shapes A:B] [--folder DIR] [--json FILE]
                                                 [--cross]
PoCL (small sizes, a few minutes): python benchmarks/similar_sizes.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune import accel, tune  # noqa: E402
from autotune.tune.lookup import wait_for_notes  # noqa: E402
from autotune.tune.serving import Serving  # noqa: E402
from autotune.tune.similar import served_a_trial, served_scaled, similar_from  # noqa: E402
from autotune.tune.store import database_url  # noqa: E402
from operations.gemm import GemmTemplate  # noqa: E402
from operations.lqcd import DslashTemplate, Lattice, gauge  # noqa: E402

from dslash_operands import on_device, random_spinor  # noqa: E402
from timing import queue_time  # noqa: E402

GEMM_ANCHORS = [(1024,) * 3, (4096,) * 3, (8192,) * 3]
GEMM_SHAPES = [(512, 512, 512), (768, 768, 768), (1000, 1000, 1000), (1536, 1536, 1536),
               (2048, 2048, 2048), (3072, 3072, 3072), (5000, 5000, 5000), (6144, 6144, 6144),
               (2048, 4096, 1024), (4096, 1024, 2048), (8192, 2048, 512), (512, 8192, 4096),
               (1024, 1024, 8192), (3000, 2000, 1000), (7000, 3000, 4096), (640, 1280, 2560),
               (2560, 2560, 640), (4096, 4096, 2048), (8192, 8192, 1024), (1280, 7168, 3584)]
DSLASH_ANCHORS = [(16,) * 4, (24,) * 4, (32,) * 4]
DSLASH_LATTICES = [(20,) * 4, (28,) * 4, (24, 24, 24, 48)]
QUICK = {"gemm_anchors": [(32,) * 3, (128,) * 3], "gemm_shapes": [(48, 48, 48), (64, 96, 32),
                                                                  (100, 80, 120)],
         "dslash_anchors": [(4,) * 4, (8,) * 4], "dslash_lattices": [(6,) * 4, (4, 4, 4, 8)],
         "precisions": ["single"]}
RECONSTRUCT = 12


def served(store_db: str, call) -> tuple[dict, str]:
    """What ``similar`` serves from ``store_db`` for ``call()``, and the size it came from
    (``... (a trial)`` where a trial of that size's search was served, ``... (scaled)`` where
    its result was scaled to this size: its result under-fills the device here). Asked of a copy of ``store_db``: where nothing fits and fills, the
    lookup misses and the size is tuned (within the search settings in force), into the copy,
    so that it never becomes an anchor; its source is then ``missed (tuned)``."""
    copy = str(Path(store_db).with_name("served.db"))
    Path(copy).unlink(missing_ok=True)
    with contextlib.closing(sqlite3.connect(store_db)) as source, \
            contextlib.closing(sqlite3.connect(copy)) as target:
        source.backup(target)  # the write-ahead log's rows too
    with tune.using_serving(Serving(match="similar")) as state, tune.use_database(copy):
        params, key = call()
        wait_for_notes()  # the similar row is written
        row = state.store(database_url(copy)).get(key)
        state.store(database_url(copy)).dispose()
    if row is None or row.origin != "similar":
        return params, "missed (tuned)"
    how = " (a trial)" if served_a_trial(row) else " (scaled)" if served_scaled(row) else ""
    return params, (similar_from(row) or "?") + how


@contextlib.contextmanager
def exact(db: str):
    """Exact matching on ``db``: a key stored there is served, a missing one tuned."""
    with tune.using_serving(Serving(match="exact")), tune.use_database(db):
        yield


def side_by_side(queue, runs: dict, rounds: int) -> dict[str, float]:
    """Median seconds of each of ``runs`` (label -> launch), timed in alternating rounds."""
    times: dict[str, list[float]] = {label: [] for label in runs}
    for _ in range(rounds):
        for label, fn in runs.items():
            times[label].append(queue_time(queue, fn, repeats=5, batches=3))
    return {label: statistics.median(v) for label, v in times.items()}


def gemm_part(context, queue, anchors_db, own_db, args, anchors, shapes) -> list[dict]:
    tuner = tune.tuner_of(GemmTemplate)
    dtype = np.dtype(np.float32)
    budget = dict(strategy="local", max_evals=args.max_evals, seed=0, batches=args.batches)
    with exact(anchors_db), tune.search_settings(**budget):
        for m, n, k in anchors:  # tuned unless --folder holds them from an earlier run
            started = time.perf_counter()
            GemmTemplate.autotune(context, dtype, m, n, k)
            print(f"gemm anchor {m}x{n}x{k} ready in {time.perf_counter() - started:.0f} s",
                  flush=True)
    rows = []
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        def call(m=m, n=n, k=k):
            return (GemmTemplate.autotune(context, dtype, m, n, k),
                    tuner.key(GemmTemplate, context, dtype, m, n, k))

        with tune.search_settings(**budget):
            similar, source = served(anchors_db, call)
        started = time.perf_counter()
        with tune.use_database(own_db), tune.search_settings(**budget):
            own = tuner.retune(GemmTemplate, context, dtype, m, n, k).parameters
        seconds = time.perf_counter() - started
        at = context.to_device(queue, rng.standard_normal((k, m), dtype=np.float32))
        b = context.to_device(queue, rng.standard_normal((k, n), dtype=np.float32))
        c = context.allocate((m, n), dtype)
        ops = {label: GemmTemplate(context, dtype, m, n, k, p).instantiate(queue)
               for label, p in (("similar", similar), ("own", own))}
        times = side_by_side(queue, {label: (lambda g=g: g(c, at, b)) for label, g in ops.items()},
                             args.rounds)
        row = {"part": "gemm", "size": f"{m}x{n}x{k}", "from": source,
               "similar_us": times["similar"] * 1e6, "own_us": times["own"] * 1e6,
               "ratio": times["similar"] / times["own"], "own_tuning_seconds": seconds,
               "similar": similar, "own": own}
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def dslash_runs(context, queue, dims, precision, links, src, out, labelled: dict) -> dict:
    """A launch of the dslash at ``dims`` for each of ``labelled``'s parameters (one that does
    not fit this lattice left out), each with its own links buffer."""
    runs = {}
    for label, params in labelled.items():
        try:
            template = DslashTemplate(context, dims, precision, RECONSTRUCT, -1, params)
        except ValueError as exc:  # another lattice's parameters that do not fit this one
            print(f"{label} at {dims}: left out ({exc})", flush=True)
            continue
        u = template.gauge_to_device(queue, links)
        dslash = template.instantiate(queue)
        runs[label] = lambda d=dslash, u=u: d(out, src, u, 0)
    return runs


def dslash_part(context, queue, anchors_db, own_db, args, anchors, lattices, precisions
                ) -> list[dict]:
    tuner = tune.tuner_of(DslashTemplate)
    anchor_params: dict[tuple, dict] = {}
    with exact(anchors_db):
        for dims in anchors:  # tuned unless --folder holds them from an earlier run
            for precision in precisions:
                started = time.perf_counter()
                anchor_params[dims, precision] = DslashTemplate.autotune(
                    context, dims, precision, RECONSTRUCT)
                print(f"dslash anchor {dims} {precision} ready in "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
    rows = []
    for dims in lattices:
        lattice = Lattice(dims)
        u = gauge.haar_field(dims, seed=1)
        psi = random_spinor(lattice)
        for precision in precisions:
            def call(dims=dims, precision=precision):
                return (DslashTemplate.autotune(context, dims, precision, RECONSTRUCT),
                        tuner.key(DslashTemplate, context, dims, precision, RECONSTRUCT))

            similar, source = served(anchors_db, call)
            started = time.perf_counter()
            with tune.use_database(own_db):
                own = tuner.retune(DslashTemplate, context, dims, precision, RECONSTRUCT).parameters
            seconds = time.perf_counter() - started
            src, out = on_device(context, queue, lattice, psi, precision)
            labelled = {"similar": similar, "own": own}
            if args.cross:  # every anchor's result timed here too
                labelled.update({"x".join(map(str, a)): p
                                 for (a, prec), p in anchor_params.items() if prec == precision})
            times = side_by_side(queue, dslash_runs(context, queue, dims, precision, u, src, out,
                                                    labelled), args.rounds)
            row = {"part": "dslash", "size": "x".join(map(str, dims)), "precision": precision,
                   "from": source, "similar_us": times.pop("similar") * 1e6,
                   "own_us": times.pop("own") * 1e6, "own_tuning_seconds": seconds,
                   "similar": similar, "own": own}
            row["ratio"] = row["similar_us"] / row["own_us"]
            if args.cross:
                row["anchors_us"] = {label: t * 1e6 for label, t in times.items()}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def summary(rows: list[dict], part: str) -> dict:
    ratios = [r["ratio"] for r in rows if r["part"] == part]
    if not ratios:
        return {}
    missed = sum(r["from"] == "missed (tuned)" for r in rows if r["part"] == part)
    trials = sum(r["from"].endswith("(a trial)") for r in rows if r["part"] == part)
    scaled = sum(r["from"].endswith("(scaled)") for r in rows if r["part"] == part)
    return {"median": statistics.median(ratios), "worst": max(ratios), "count": len(ratios),
            "missed": missed, "trials": trials, "scaled": scaled}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("gemm", "dslash", "all"), default="all")
    parser.add_argument("--quick", action="store_true", help="small sizes (PoCL)")
    parser.add_argument("--device", help="device selector (default AUTOTUNE_DEVICE or best)")
    parser.add_argument("--max-evals", type=int, default=40,
                        help="the GEMM local search's budget, anchors and own tunings alike")
    parser.add_argument("--batches", type=int, default=3, help="timed batches per candidate")
    parser.add_argument("--rounds", type=int, default=3, help="alternating timing rounds")
    parser.add_argument("--shapes", default=":", metavar="A:B",
                        help="only the GEMM shapes A to B-1 of the 20 (a command per part: "
                             "each command may run 10 minutes); with --folder the anchors "
                             "are tuned once")
    parser.add_argument("--folder", help="keep the anchors' and own databases here (default: "
                        "a new temporary folder); anchors already stored are not re-tuned")
    parser.add_argument("--precisions", nargs="+", choices=("single", "half", "double"),
                        default=["single", "half"], help="the dslash's precisions")
    parser.add_argument("--json", help="write the rows and the summary here")
    parser.add_argument("--cross", action="store_true",
                        help="also time every anchor's dslash result at each lattice")
    parser.add_argument("--combine", nargs="+", metavar="JSON",
                        help="print the table and summary of earlier runs' --json files "
                             "together (nothing is run)")
    args = parser.parse_args()
    if args.combine:
        parts = [json.loads(Path(p).read_text()) for p in args.combine]
        report({"device": parts[0]["device"], "date": parts[0]["date"],
                "rows": [r for p in parts for r in p["rows"]]})
        return
    if args.quick:
        args.max_evals = min(args.max_evals, 4)
        args.rounds = min(args.rounds, 3)
    spec = accel.select_devices(args.device)[0]
    context = spec.create_context()
    queue = context.create_tuning_command_queue()
    folder = Path(args.folder or tempfile.mkdtemp(prefix="similar-sizes-"))
    folder.mkdir(parents=True, exist_ok=True)
    start, _, stop = args.shapes.partition(":")
    chosen = slice(int(start) if start else None, int(stop) if stop else None)
    anchors_db, own_db = str(folder / "anchors.db"), str(folder / "own.db")
    rows: list[dict] = []
    if args.part in ("gemm", "all"):
        rows += gemm_part(context, queue, anchors_db, own_db, args,
                          QUICK["gemm_anchors"] if args.quick else GEMM_ANCHORS,
                          (QUICK["gemm_shapes"] if args.quick else GEMM_SHAPES)[chosen])
    if args.part in ("dslash", "all"):
        rows += dslash_part(context, queue, anchors_db, own_db, args,
                            QUICK["dslash_anchors"] if args.quick else DSLASH_ANCHORS,
                            QUICK["dslash_lattices"] if args.quick else DSLASH_LATTICES,
                            QUICK["precisions"] if args.quick else args.precisions)
    result = report({"device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
                     "max_evals": args.max_evals, "rows": rows})
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


def report(result: dict) -> dict:
    """Print the rows and the summary per part; ``result`` with the summaries added."""
    rows = result["rows"]
    result.update(gemm=summary(rows, "gemm"), dslash=summary(rows, "dslash"))
    print(f"\n{result['device']}, {result['date']}; ratio = similar-served time / the size's "
          "own tuned time")
    print("| part | size | precision | served from | similar us | own us | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['part']} | {r['size']} | {r.get('precision', 'float32')} | {r['from']} | "
              f"{r['similar_us']:.1f} | {r['own_us']:.1f} | {r['ratio']:.3f} |")
    for r in rows:
        for label, us in r.get("anchors_us", {}).items():
            print(f"| {r['part']} | {r['size']} | {r.get('precision', 'float32')} | anchor "
                  f"{label}'s result | {us:.1f} | {r['own_us']:.1f} | {us / r['own_us']:.3f} |")
    for part in ("gemm", "dslash"):
        if result[part]:
            s = result[part]
            print(f"{part}: {s['count']} sizes, median ratio {s['median']:.3f}, worst "
                  f"{s['worst']:.3f}; {s.get('scaled', 0)} served a size's result scaled and "
                  f"{s.get('trials', 0)} a trial of a size's search (its result under-fills "
                  f"the device there, or the trial is a near tie other sizes chose), "
                  f"{s.get('missed', 0)} missed (nothing filled: tuned)")
    return result


if __name__ == "__main__":
    main()
