"""``plot``: the pictures of one function's keys (the distribution of the trials' times, and how
the time depends on the parameters), one PNG per key."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from ..tune.registry import registered_templates
from ..tune import TuningKey
from ..tune.records import TrialRecord
from ..tune.store import ResultStore
from .figures import write_figures
from .report import key_trials
from .results import function_pattern


def run_plot(args: Any, url: str) -> int:
    out = Path(args.out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {out}: name a .png file (several keys get -1, -2, ... before "
                         "the suffix)")
    store = ResultStore(url)
    pattern = function_pattern(args.function)
    by_key: dict[TuningKey, list[TrialRecord]] = defaultdict(list)
    for t in store.trials(function=pattern):
        if args.device is None or args.device.lower() in t.key.device_name.lower():
            by_key[t.key].append(t)
    keys = sorted(by_key, key=lambda k: (k.function, k.device_name, k.arguments))
    tests = {t.function: t.test_parameters for t in registered_templates()}
    results = {r.key: r.parameters for r in store.records(function=pattern)}
    drawn = []
    for key in keys:
        trials = key_trials(key, by_key[key], results.get(key), tests.get(key.function))
        if len(trials.seconds) >= 1:
            drawn.append(trials)
    if not drawn:
        raise ValueError(f"no successful trials stored for {args.function!r}"
                         + (f" on a device matching {args.device!r}" if args.device else "")
                         + "; see `python -m autotune show` for what is there")
    paths = [out] if len(drawn) == 1 else [out.with_name(f"{out.stem}-{i}{out.suffix}")
                                            for i in range(1, len(drawn) + 1)]
    write_figures(list(zip(drawn, paths)))
    for trials, path in zip(drawn, paths):
        print(f"wrote {path}: {trials.label}, {len(trials.seconds)} configurations")
    return 0
