"""``warm``: pre-tune every registered template's warm configurations on one or more devices."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import accel
from ..registry import RegisteredTemplate, load_template, registered_templates
from ..tune import (Freshness, describe_arguments, encode_arguments, encode_parameters, get_store,
                    match_mode, observers, use_database)
from .formatting import parameters_text, seconds_text


@dataclass(frozen=True)
class WarmOutcome:
    """What ``warm`` did with one key."""

    template: str
    device: str
    arguments: str  #: human-readable arguments
    status: str  #: ``tuned``, ``stored`` (fresh already), ``would tune``, ``failed``
    parameters: str = ""
    score: float | None = None
    test_score: float | None = None  #: time of the template's ``test=`` parameters, if tried
    message: str = ""

    @property
    def speedup(self) -> float | None:
        if self.score and self.test_score:
            return self.test_score / self.score
        return None


class _Progress:
    """Progress through one key's candidates: a rich bar when available, else plain lines."""

    def __init__(self, stream: Any, quiet: bool):
        self.stream = stream
        self.quiet = quiet
        self.rich = None
        if not quiet and stream.isatty():
            try:
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress,
                                           TextColumn, TimeRemainingColumn)

                self.rich = Progress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeRemainingColumn(),
                                     transient=True)
            except ImportError:
                self.rich = None
        self.task = None
        self.label = ""
        self.started = 0.0

    @contextmanager
    def key(self, label: str) -> Iterator[None]:
        self.label = label
        self.started = time.perf_counter()
        if self.rich is not None:
            self.rich.start()
            self.task = self.rich.add_task(label, total=None)
        observers.append(self.observe)
        try:
            yield
        finally:
            observers.remove(self.observe)
            if self.rich is not None:
                self.rich.stop()
                self.task = None

    def observe(self, event: str, data: dict[str, Any]) -> None:
        if self.quiet:
            return
        if event == "start":
            if self.rich is not None:
                self.rich.update(self.task, total=data["configurations"], completed=0)
            else:
                print(f"tuning {self.label}: {data['configurations']} candidates",
                      file=self.stream, flush=True)
        elif event == "trial" and self.rich is not None:
            self.rich.update(self.task, completed=data["done"])
        elif event == "trial" and data["done"] == data["total"]:
            print(f"  done in {time.perf_counter() - self.started:.1f} s", file=self.stream,
                  flush=True)


def _test_score(store: Any, key: Any, test: dict[str, Any]) -> float | None:
    wanted = encode_parameters(test)
    times = [t.median_seconds for t in store.trials(key)
             if t.status == "ok" and t.parameters == wanted]
    return times[-1] if times else None


def warm_device(spec: accel.DeviceSpec, templates: list[RegisteredTemplate], *, url: str,
                force: bool, dry_run: bool, quiet: bool) -> list[WarmOutcome]:
    """Warm every template's configurations on one device, into the database ``url``.

    A key whose stored result is fresh is left alone (unless ``force``); a stale or invalid one
    is tuned again, like a missing one.
    """
    context = spec.create_context()
    device = context.device.name
    store = get_store(url)
    progress = _Progress(sys.stderr, quiet)
    outcomes = []
    with use_database(url):
        for template in templates:
            for config in template.configurations(context):
                args = describe_arguments(encode_arguments(config))
                verdict = template.judge(context, config)
                if verdict is not None and verdict.freshness is Freshness.FRESH and not force:
                    record = verdict.record
                    outcomes.append(WarmOutcome(
                        template.name, device, args, "stored", parameters_text(record.parameters),
                        record.score, _test_score(store, record.key, template.test_parameters)))
                    continue
                why = "" if verdict is None else f" ({verdict.freshness}: {verdict.reason})"
                if dry_run:
                    outcomes.append(WarmOutcome(template.name, device, args, "would tune",
                                                message=why.strip(" ()")))
                    continue
                try:
                    with progress.key(f"{template.name} {args} on {device}{why}"):
                        outcome = template.retune(context, config)
                except Exception as exc:  # AutotuneError and others: reported, warm goes on
                    outcomes.append(WarmOutcome(template.name, device, args, "failed",
                                                message=f"{type(exc).__name__}: {exc}"))
                    continue
                outcomes.append(WarmOutcome(
                    template.name, device, args, "tuned" if outcome.stored else "tuned, not stored",
                    parameters_text(encode_parameters(outcome.parameters)), outcome.score,
                    outcome.test_score))
    return outcomes


def _warm_worker(job: tuple) -> list[WarmOutcome]:
    spec, extra, names, url, force, dry_run = job
    templates = _select_templates(names, extra)
    return warm_device(spec, templates, url=url, force=force, dry_run=dry_run, quiet=True)


def _select_templates(names: list[str], extra: list[str]) -> list[RegisteredTemplate]:
    templates = registered_templates() + [load_template(s) for s in extra]
    if names:
        known = {t.name: t for t in templates}
        missing = [n for n in names if n not in known]
        if missing:
            raise ValueError(
                f"unknown operation(s) {', '.join(missing)}; registered: {', '.join(sorted(known))}"
            )
        templates = [known[n] for n in names]
    return templates


def run_warm(args: Any, url: str) -> int:
    match_mode()  # a bad AUTOTUNE_MATCH is one clear error, not a failure per key
    templates = _select_templates(args.operations, args.template)
    if args.all_devices:
        specs = accel.select_devices(None)
    else:
        specs = accel.select_devices(args.device or os.environ.get(accel.ENV_DEVICE))[:1]
    jobs = max(1, min(args.jobs, len(specs)))
    if jobs > 1:
        work = [(s, args.template, args.operations, url, args.force, args.dry_run) for s in specs]
        with multiprocessing.get_context("spawn").Pool(jobs) as pool:
            outcomes = [o for part in pool.map(_warm_worker, work) for o in part]
    else:
        outcomes = []
        for spec in specs:
            outcomes += warm_device(spec, templates, url=url, force=args.force,
                                    dry_run=args.dry_run, quiet=args.quiet)
    _print_table(outcomes, dry_run=args.dry_run)
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        print(f"FAILED {o.template} {o.arguments} on {o.device}: {o.message}", file=sys.stderr)
    return 1 if failed else 0


def _print_table(outcomes: list[WarmOutcome], *, dry_run: bool) -> None:
    import pandas as pd

    if not outcomes:
        print("nothing to warm: no registered template declares warm configurations")
        return
    if dry_run:
        todo = [o for o in outcomes if o.status == "would tune"]
        print(f"{len(todo)} of {len(outcomes)} keys would be tuned:")
    rows = [{
        "operation": o.template,
        "arguments": o.arguments,
        "device": o.device,
        "status": o.status,
        "best parameters": o.parameters or "-",
        "time": seconds_text(o.score),
        "speed-up vs test=": f"{o.speedup:.2f}x" if o.speedup else "-",
    } for o in outcomes]
    with pd.option_context("display.max_colwidth", 60, "display.width", 200):
        print(pd.DataFrame(rows).to_string(index=False))
