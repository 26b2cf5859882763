"""Online tuning of whole solves: even-odd CG on a lattice with no stored results.

Usage (GPU machine): python benchmarks/online_solver.py [--dims 24 24 24 48] [--solves 300]
    [--iterations 30] [--rounds 3] [--offline-db FILE] [--online-db FILE] [--json FILE]
    [--keep DIR] [--diagnose] [--budget SECONDS]

Each round runs three fresh processes, one after another, each timing ``solves`` CG solves of ``iterations``
iterations on M_pc^dag M_pc (single precision, 12-parameter links, a Haar-random gauge field,
kappa 0.12), on one timed queue:

1. ``offline``: a copy of ``--offline-db`` (default ``tune.db.example``); the dslash key is
   tuned offline when the operator is made and the vector passes on their first solve, before
   the timed solves, which then run tuned;
2. ``online``: an empty database (or a copy of ``--online-db``, which must hold no dslash
   result for this lattice: say ``tune.db.example``, whose other lattice sizes then seed the
   dslash's scan and whose vector-pass rows, keyed by type and operation only, serve the
   passes) and ``WilsonOperator(..., tuning="online")``: the solves start at once and the
   dslash and the vector passes are tuned while they run (candidates built in helper
   processes, scanned, locked, stored);
3. ``stored``: the database the online run wrote: every tuner should start locked, scanning
   nothing.

Each run first does one 1-iteration solve (untimed: it builds the kernels the first iteration
launches, tuned ones or ``test=``), then times the solves. Reported per run: the timed seconds,
and for the online runs each tuner's scans, choice and device time spent beyond the chosen
parameters' (the off-optimal time) as a share of the timed run, the launching thread's time off
its CPU over the timed solves (CUDA's waits for the device spin, so on CUDA this is time blocked
on a lock, mostly the interpreter's while other threads run Python: the online tuners' builds
and database writes), and the operator alone, applied back to back after the solves (the GPU's
own speed in that process). The rounds interleave the
three (the GPU's speed drifts by a few percent between processes); the summary gives medians,
and for the online runs also each round's ratio to its own offline run and their median.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
KAPPA = 0.12


def pin_main_thread() -> tuple[set[int], set[int]]:
    """Keep one core (its SMT siblings too) for this thread and every other thread and process
    started from here off it: returns (the core's CPUs, the others), or two empty sets where
    this cannot be done."""
    allowed = os.sched_getaffinity(0)
    first = min(allowed)
    try:
        text = Path(f"/sys/devices/system/cpu/cpu{first}/topology/thread_siblings_list").read_text()
    except OSError:
        return set(), set()
    core: set[int] = set()
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        core.update(range(int(low), int(high or low) + 1))
    others = allowed - core
    if not others:
        return set(), set()
    return core & allowed, others


class Diagnostics:
    """Where an online run's extra time goes (``--diagnose``): wraps the online tuner's launch
    bookkeeping (on the launching thread), its candidate preparation (CPU time of the build
    threads, which hold the interpreter lock the launching thread needs while they run Python)
    and the context's allocations, over the timed solves (the scan's ``begin`` and ``end``, the
    build pool's ``build``), wrapped from outside: it adds a little host time to what it
    measures, in every run alike."""

    def __init__(self) -> None:
        from autotune.tune.online.builds import BuildPool
        from autotune.tune.online.scan import Scan

        self.totals: dict[str, list[float]] = {}
        self._wrap(Scan, "begin", "tuner_begin_launch", time.perf_counter)
        self._wrap(Scan, "end", "tuner_end_launch", time.perf_counter)
        self._wrap(BuildPool, "build", "build_thread_cpu", time.thread_time)

    def _wrap(self, owner: type, name: str, key: str, clock) -> None:
        original = getattr(owner, name)
        entry = self.totals.setdefault(key, [0, 0.0])

        def timed(*args, **kwargs):
            start = clock()
            try:
                return original(*args, **kwargs)
            finally:
                entry[0] += 1
                entry[1] += clock() - start

        setattr(owner, name, timed)

    def allocations(self, context) -> None:
        self._wrap(type(context), "allocate", "device_allocations", time.perf_counter)

    def reset(self) -> None:
        """Count from now on (the timed solves), not the setup."""
        for entry in self.totals.values():
            entry[:] = [0, 0.0]

    def report(self) -> dict:
        return {key: {"calls": int(n), "seconds": seconds} for key, (n, seconds) in self.totals.items()}


def child(mode: str, dims: tuple[int, ...], solves: int, iterations: int, pin: bool = False,
          diagnose: bool = False, budget: float | None = None) -> dict:
    """One run, in a process of its own; ``budget``: the online tuners' scan budget (None:
    every candidate)."""
    from autotune.tune import online

    with online.template_budget(budget):
        return timed_run(mode, dims, solves, iterations, pin, diagnose)


def timed_run(mode: str, dims: tuple[int, ...], solves: int, iterations: int, pin: bool,
              diagnose: bool) -> dict:
    from autotune import accel
    from operations import solvers
    from operations.lqcd import WilsonOperator, haar_field

    core, others = pin_main_thread() if pin else (set(), set())
    if others:  # threads and helper processes started from here on inherit this
        os.sched_setaffinity(0, others)
    context = accel.create_some_context()
    diagnostics = Diagnostics() if diagnose else None
    if diagnostics is not None:
        diagnostics.allocations(context)
    u = haar_field(dims, seed=7)
    made = time.perf_counter()
    op = WilsonOperator(context, u, KAPPA, "single", 12, check=False,
                        tuning="online" if mode != "offline" else None,
                        queue=context.create_command_queue(timed=True))
    if core:
        os.sched_setaffinity(0, core)  # this thread only: the one that launches the solves
    A = op.linear_operator("MpcdagMpc")
    rng = np.random.default_rng(3)
    b = context.to_device(op.queue, (rng.standard_normal(A.size)
                                     + 1j * rng.standard_normal(A.size)).astype(np.complex64))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a tolerance no solve reaches
        solvers.cg(A, b, 1e-300, 1)
        op.queue.finish()
        ready = time.perf_counter()
        epoch, cpu = time.time(), time.thread_time()
        if diagnostics is not None:
            diagnostics.reset()
        residuals, marks = [], [ready]
        for _ in range(solves):
            _, info = solvers.cg(A, b, 1e-300, iterations)
            residuals.append(info.residual)
            marks.append(time.perf_counter())
        op.queue.finish()
        done = time.perf_counter()
        cpu = time.thread_time() - cpu
        # the operator alone, back to back (bound by the GPU, not the host): the device's own
        # speed in this process, beside the solves' (which wait for it twice an iteration)
        y = solvers.vector_ops(A).new()
        applies = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(40):
                A.apply(y, b)
            op.queue.finish()
            applies.append((time.perf_counter() - start) / 40)
    passes = solvers.vector_ops(A)._passes  # the solves' passes, kept per queue
    tuners = []
    if op.template.online is not None:
        tuners.append(("dslash", op.template.online))
        tuners += [(f"{family}.{name}", inst.tuner) for (family, name), inst in passes.items()]
    for _, tuner in tuners:
        tuner.finish_scan()
    used = {"dslash": op.template.tuning or (op.template.online.best if op.template.online else None)}
    for (family, name), inst in passes.items():
        used[f"{family}.{name}"] = inst.template.tuning if op.tuning is None else inst.tuner.best
    seconds = done - ready
    return {
        "mode": mode, "device": context.device.describe(), "dims": list(dims),
        "solves": solves, "iterations": iterations, "seconds": seconds,
        "setup_seconds": ready - made, "final_residual": residuals[-1], "parameters": used,
        "pinned": sorted(core),
        "solve_seconds": list(np.diff(marks)),
        # when the timed solves started (seconds since the epoch: to match outside logs, such
        # as the GPU's clocks) and the launching thread's CPU time over them (work, not waits)
        "timed_from": epoch, "launching_thread_cpu_seconds": cpu,
        "apply_seconds": statistics.median(applies),
        "tuners": [{"name": name, "best": t.best, "scans": t.scans, "scanning": t.scanning,
                    "stored": t.stored, "best_seconds": t.best_seconds, "seeds": t.seeds,
                    "scan_seconds": t.scan_seconds, "left_out": t.left_out,
                    "off_best_seconds": t.off_best_seconds,
                    "off_best_share": t.off_best_seconds / seconds} for name, t in tuners],
        "diagnostics": diagnostics.report() if diagnostics is not None else None,
    }


def report(runs: dict, round_index: int) -> None:
    base = runs["offline"]["seconds"]
    online = runs["online"]
    print(f"round {round_index + 1}, {online['device']}: {online['solves']} even-odd CG solves x "
          f"{online['iterations']} iterations, {'x'.join(map(str, online['dims']))}, single, "
          "12-parameter links")
    for mode, run in runs.items():
        off = sum(t["off_best_seconds"] for t in run["tuners"])
        print(f"  {mode:8s} {run['seconds']:8.3f} s  ({run['seconds'] / base:.4f} of offline)  "
              f"off-optimal {off * 1e3:.2f} ms ({100 * off / run['seconds']:.3f}%)  "
              f"setup {run['setup_seconds']:.2f} s")
        blocked = run["seconds"] - run["launching_thread_cpu_seconds"]
        print(f"      launching thread off its CPU {blocked * 1e3:.1f} ms (blocked on a lock, "
              f"the interpreter's included, or on the device where waits block; CUDA's spin), "
              f"operator alone {run['apply_seconds'] * 1e6:.1f} us an application")
        per = run["solve_seconds"]
        tenth = max(1, len(per) // 10)
        print(f"      first {tenth} solves {sum(per[:tenth]):.3f} s, the median solve after them "
              f"{1e3 * float(np.median(per[tenth:] or per)):.3f} ms")
        if run.get("diagnostics"):
            print("      " + ", ".join(f"{key} {d['calls']} x, {d['seconds'] * 1e3:.1f} ms"
                                       for key, d in run["diagnostics"].items()))
        if not run["tuners"]:
            for name, params in run["parameters"].items():
                print(f"      {name:32s} {params}")
        for t in run["tuners"]:
            took = f"{t['scan_seconds']:.2f} s" if t["scan_seconds"] is not None else "-"
            seeds = f" seeds {len(t['seeds'])}" if t.get("seeds") else ""
            seeds += f" left out {t['left_out']}" if t.get("left_out") else ""
            print(f"      {t['name']:32s} scans {t['scans']} (last took {took}) best {t['best']} "
                  f"off {t['off_best_seconds'] * 1e3:.3f} ms{seeds}")


def refuse_this_lattice(db: str, dims: tuple[int, ...]) -> None:
    """Exit if ``db`` holds a dslash result for ``dims``: the online run must tune it."""
    from autotune.tune.encoding import describe_arguments
    from autotune.tune.store import ResultStore

    store = ResultStore(f"sqlite:///{Path(db).resolve()}")
    wanted = str(tuple(dims))
    found = [r for r in store.records(function="%DslashTemplate%")
             if wanted in describe_arguments(r.key.arguments)]
    store.dispose()
    if found:
        sys.exit(f"--online-db {db} already holds {len(found)} dslash results for "
                 f"{'x'.join(map(str, dims))}: give a database without them")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", type=int, nargs=4, default=[24, 24, 24, 48], help="X Y Z T")
    parser.add_argument("--solves", type=int, default=300)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--offline-db", default=str(HERE.parent / "tune.db.example"))
    parser.add_argument("--online-db", help="the online run's starting database (copied; "
                        "default: empty); it must hold no dslash result for --dims")
    parser.add_argument("--child", choices=["offline", "online", "stored"], help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--pin", action="store_true", help="in every run, keep one CPU core "
                        "(with its SMT siblings) for the thread that launches the solves, and "
                        "every other thread and helper process off it")
    parser.add_argument("--diagnose", action="store_true", help="time the online tuners' "
                        "launch bookkeeping, the build threads' CPU and the device allocations "
                        "in every run (wraps internal methods: a little overhead)")
    parser.add_argument("--budget", type=float, help="the online tuners' scan budget in "
                        "seconds (OnlineTuner budget=; default: none, every candidate scanned)")
    parser.add_argument("--keep", help="keep the runs' databases in this folder (made if "
                        "missing; default: a temporary folder, removed at the end)")
    args = parser.parse_args()
    dims = tuple(args.dims)
    if args.child:
        print(json.dumps(child(args.child, dims, args.solves, args.iterations, args.pin,
                               args.diagnose, args.budget)))
        return
    if args.online_db:
        refuse_this_lattice(args.online_db, dims)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="online-solver-"))
    work.mkdir(parents=True, exist_ok=True)
    offline_db = work / "offline.db"
    shutil.copy(args.offline_db, offline_db)
    rounds = []
    for r in range(args.rounds):  # interleaved: the GPU's state drifts between processes
        online_db = work / f"online{r}.db"
        if args.online_db:
            shutil.copy(args.online_db, online_db)
        runs = {}
        for mode, db in (("offline", offline_db), ("online", online_db), ("stored", online_db)):
            env = dict(os.environ, AUTOTUNE_DB=str(db), PYTHONPATH=os.pathsep.join(
                [str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
            out = subprocess.run([sys.executable, __file__, "--child", mode, "--dims",
                                  *map(str, dims), "--solves", str(args.solves),
                                  "--iterations", str(args.iterations),
                                  *(["--pin"] if args.pin else []),
                                  *(["--diagnose"] if args.diagnose else []),
                                  *(["--budget", str(args.budget)] if args.budget else [])],
                                 capture_output=True, text=True, env=env, check=False)
            if out.returncode != 0:
                sys.exit(f"{mode} run failed:\n{out.stderr[-4000:]}")
            runs[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        rounds.append(runs)
        report(runs, r)
    print(f"\nmedians over {len(rounds)} rounds:")
    base = statistics.median(r["offline"]["seconds"] for r in rounds)
    for mode in ("offline", "online", "stored"):
        seconds = statistics.median(r[mode]["seconds"] for r in rounds)
        off = statistics.median(sum(t["off_best_seconds"] for t in r[mode]["tuners"]) / r[mode]["seconds"]
                                for r in rounds)
        first = statistics.median(sum(r[mode]["solve_seconds"][:args.solves // 10]) for r in rounds)
        blocked = statistics.median(r[mode]["seconds"] - r[mode]["launching_thread_cpu_seconds"]
                                    for r in rounds)
        print(f"  {mode:8s} {seconds:8.3f} s  {seconds / base:.4f} of offline  off-optimal share "
              f"{100 * off:.3f}%  first tenth of the solves {first:.3f} s  launching thread off "
              f"its CPU {blocked * 1e3:.1f} ms")
        if mode != "offline":  # each round against its own offline run: the drift between rounds cancels
            ratios = [r[mode]["seconds"] / r["offline"]["seconds"] for r in rounds]
            totals = sum(r[mode]["seconds"] for r in rounds) / sum(r["offline"]["seconds"] for r in rounds)
            # the scans' cost shows in the first solves; a process's steady state varies by itself
            third = args.solves // 3
            beyond = statistics.median(sum(r[mode]["solve_seconds"][:third])
                                       - sum(r["offline"]["solve_seconds"][:third]) for r in rounds)
            print(f"           per round {', '.join(f'{x:.3f}' for x in ratios)}: median "
                  f"{statistics.median(ratios):.4f}; by totals {totals:.4f}; the first {third} "
                  f"solves {beyond:+.3f} s beyond offline's (median)")
    if args.json:
        Path(args.json).write_text(json.dumps(rounds, indent=1))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
