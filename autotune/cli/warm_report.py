"""What ``warm`` shows: its progress while the keys are tuned (:class:`Progress`), and after
them the table of what it did with each key (:class:`WarmOutcome`), the estimates against the
time taken, and the closing summary with the exit status (:func:`report`)."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..tune.store import display
from .formatting import printable, seconds_text, speedup_text
from .warm_plan import Estimator, wall_estimate
from .warm_sharing import busy_text


#: ``warm``'s exit statuses: 0 every key tuned and stored (or already stored; results tuned
#: into a read-only database are not stored and count as done), 1 some key failed to tune,
#: 2 bad input or a database that cannot be used at all, 3 some tuned result could not be
#: written (full disk, server outage, lock held too long; 3 wins over 1), 130 interrupted.
EXIT_FAILED = 1
EXIT_NOT_STORED = 3


@dataclass(frozen=True)
class WarmOutcome:
    """What ``warm`` did with one key."""

    template: str
    device: str
    arguments: str  #: human-readable arguments
    #: ``tuned``, ``stored`` (fresh already), ``would tune``, ``failed``, ``tuned, not stored``
    #: (a read-only database), ``tuned, write failed`` (any other reason it could not be written)
    status: str
    parameters: str = ""
    score: float | None = None
    test_score: float | None = None  #: time of the template's ``test=`` parameters, if tried
    message: str = ""
    #: which device did it (host and selector): identical GPUs share a name
    where: str = ""
    #: the 95% interval of :attr:`speedup`, where the choice timed both side by side
    speedup_interval: tuple[float, float] | None = None
    plan: str = ""  #: the search the key got (see :mod:`autotune.cli.warm_plan`)
    estimate: float | None = None  #: seconds the plan expected, before the run began
    seconds: float | None = None  #: seconds the key took
    began_at: float | None = None  #: when its turn began (``time.time()``: any process's clock)

    @property
    def speedup(self) -> float | None:
        if self.score and self.test_score:
            return self.test_score / self.score
        return None


def duration(seconds: float) -> str:
    """Seconds as the progress line and the summary write them: "42 s", "3 min 05 s", "1 h 02 min"."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """Progress through the keys and through each key's candidates: rich bars on a terminal,
    else one line per key, with the time elapsed and an estimate of the time left."""

    def __init__(self, stream: Any, quiet: bool, total: int, to_tune: int, estimator: Estimator):
        self.stream = stream
        self.estimator = estimator
        self.at_tenth: tuple[float, float] | None = None  #: (elapsed, estimated left) at 10%
        self.quiet = quiet
        self.total = total
        self.to_tune = to_tune
        self.done = 0
        self.tuned = 0
        self.started = time.perf_counter()
        self.rich = None
        if not quiet and stream.isatty():
            try:
                from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                           TimeElapsedColumn, TimeRemainingColumn)

                self.rich = Progress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     TimeRemainingColumn(), transient=True)
                self.rich.start()
                self.overall = self.rich.add_task("keys", total=total)
            except ImportError:
                self.rich = None
        self.task = None
        self.label = ""
        self.current: int | None = None  #: the key being tuned (the estimator's numbering)
        self._early: dict[int, list[tuple[str, dict[str, Any]]]] = {}  #: events of keys ahead
        self._lock = threading.Lock()

    def close(self) -> None:
        if self.rich is not None:
            self.rich.stop()

    def skipped(self) -> None:
        self.done += 1
        if self.rich is not None:
            self.rich.update(self.overall, completed=self.done)

    def left(self) -> str:
        """About how long the keys still to tune will take: each key's expected time from its
        plan, corrected with the times of the keys tuned so far (:class:`Estimator`)."""
        remaining = self.to_tune - self.tuned
        if remaining <= 0:
            return ""
        return f", about {duration(self.estimator.remaining())} left"

    @contextmanager
    def key(self, label: str, index: int) -> Iterator[None]:
        self.label = label
        started = time.perf_counter()
        with self._lock:
            self.current = index
            early = self._early.pop(index, [])
        self.estimator.start(index)
        if self.rich is not None:
            self.task = self.rich.add_task(label, total=None)
        elif not self.quiet:
            elapsed = duration(time.perf_counter() - self.started)
            print(f"[{self.done + 1}/{self.total}] tuning {label} ({elapsed} elapsed{self.left()})",
                  file=self.stream, flush=True)
        for event, data in early:
            self.observe(event, data)  # what its search said while it ran ahead
        try:
            yield
        finally:
            self.estimator.finish(index, time.perf_counter() - started)
            if self.at_tenth is None:
                elapsed, left = time.perf_counter() - self.started, self.estimator.remaining()
                if elapsed >= 0.1 * (elapsed + left):
                    self.at_tenth = (elapsed, left)
            self.tuned += 1
            self.done += 1
            if self.rich is not None:
                self.rich.remove_task(self.task)
                self.rich.update(self.overall, completed=self.done,
                                 description=f"keys{self.left()}")
                self.task = None

    def observer(self, index: int) -> Any:
        """The observer of key ``index``'s search: its events are shown while it is the key
        being tuned, and kept until then while it runs ahead (``--lookahead``)."""

        def observe(event: str, data: dict[str, Any]) -> None:
            with self._lock:
                if self.current != index:
                    self._early.setdefault(index, []).append((event, data))
                    return
            self.observe(event, data)

        return observe

    def observe(self, event: str, data: dict[str, Any]) -> None:
        if self.rich is None or self.task is None:
            return
        if event == "start":
            self.rich.update(self.task, total=data["configurations"], completed=0)
        elif event == "trial":
            self.rich.update(self.task, completed=data["done"])


def say_estimates(progress: Progress, estimator: Estimator, quiet: bool) -> None:
    """The closing line of the time estimates: at the start, after a tenth of the run, and the
    time the keys took."""
    if quiet or not estimator.actual:
        return
    took = sum(estimator.actual.values())
    tenth = ""
    if progress.at_tenth is not None:
        elapsed, left = progress.at_tenth
        actual = time.perf_counter() - progress.started - elapsed
        tenth = (f", after {duration(elapsed)} (10%) {duration(left)} left against "
                 f"{duration(actual)} actual")
    print(f"warm: estimated {duration(estimator.first_estimate)} of tuning{tenth}; the keys "
          f"took {duration(took)}", file=progress.stream, flush=True)
    split = by_template(estimator)
    if split:
        print(f"warm: by template, {split}", file=progress.stream, flush=True)


def by_template(estimator: Estimator) -> str:
    """Where the keys' time went: each template's finished keys, the seconds they took and
    what the plan expected of them at the start, the longest first ("" for one template)."""
    took: dict[str, list[float]] = {}
    for index, seconds in estimator.actual.items():
        plan = estimator.plans[index]
        entry = took.setdefault(plan.template, [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += seconds
        entry[2] += plan.seconds
    if len(took) < 2:
        return ""
    return "; ".join(f"{name} {n} key{'s' * (n != 1)} {duration(actual)} (planned "
                     f"{duration(planned)})" for name, (n, actual, planned)
                     in sorted(took.items(), key=lambda item: -item[1][1]))


def wall_time(outcomes: list[WarmOutcome], workers: int, limit: float | None = None) -> float:
    """The outcomes' expected wall time: each device's keys' estimates added up, the devices
    spread over ``workers`` tuning at once (:func:`~.warm_plan.wall_estimate`), at most the
    run's time ``limit`` in seconds (``--max-minutes``: the keys share it out)."""
    per_device: dict[str, float] = {}
    for o in outcomes:
        where = o.where or o.device
        per_device[where] = per_device.get(where, 0.0) + (o.estimate or 0.0)
    estimate = wall_estimate(list(per_device.values()), workers)
    return estimate if limit is None else min(estimate, limit)


def print_table(outcomes: list[WarmOutcome], *, dry_run: bool, workers: int = 1,
                limit: float | None = None) -> None:
    """The table of what warm did (``dry_run``: would do, with each key's search and estimate)
    with every key; ``limit``: the run's time limit in seconds, which bounds the estimate."""
    import pandas as pd

    if not outcomes:
        print("nothing to warm: no registered template declares warm configurations, or "
              "the record file lists no key for this device")
        return
    if dry_run:
        todo = [o for o in outcomes if o.status == "would tune"]
        estimated = wall_time(todo, workers, limit)
        print(f"{len(todo)} of {len(outcomes)} keys would be tuned, in about "
              f"{duration(estimated)}:")
    rows = [{key: printable(value) for key, value in row.items()} for row in [{
        "operation": o.template,
        "arguments": o.arguments,
        "device": o.device,
        "status": o.status,
        **({"search": o.plan or "-", "estimate": duration(o.estimate) if o.estimate else "-"}
           if dry_run else {
            "best parameters": o.parameters or "-",
            "time": seconds_text(o.score),
            "speed-up vs test=": speedup_text(o.speedup, *(o.speedup_interval or (None, None)))}),
    } for o in outcomes]]
    with pd.option_context("display.max_colwidth", 100, "display.width", 250):
        print(pd.DataFrame(rows).to_string(index=False))


def report(outcomes: list[WarmOutcome], *, dry_run: bool, workers: int, started: float,
           started_at: float, url: str, limit: float | None = None) -> int:
    """After the keys: the table, each failed or unwritten key's line, the closing summary
    (``started``: the run's start, ``time.perf_counter``; ``started_at``: the same,
    ``time.time``; ``workers``: devices tuned at once; ``limit``: ``--max-minutes`` in
    seconds), and the exit status."""
    print_table(outcomes, dry_run=dry_run, workers=workers, limit=limit)
    failed = [o for o in outcomes if o.status == "failed"]
    for o in failed:
        print(printable(f"FAILED {o.template} {o.arguments} on {o.device}: {o.message}"),
              file=sys.stderr)
    unstored = [o for o in outcomes if o.status == "tuned, write failed"]
    for o in unstored:
        print(printable(f"NOT STORED {o.template} {o.arguments} on {o.device}: {o.message}"),
              file=sys.stderr)
    if not dry_run:
        counts = Counter(o.status for o in outcomes)
        parts = ", ".join(f"{counts[s]} {s}" for s in ("tuned", "tuned, not stored",
                                                        "tuned, write failed", "stored", "failed")
                          if counts[s] or s in ("tuned", "stored", "failed"))
        devices = len({o.where or o.device for o in outcomes})
        keys = f"{len(outcomes)} key{'s' if len(outcomes) != 1 else ''}"
        estimated = wall_time(outcomes, workers, limit)
        print(f"warm: {keys} on {devices} device{'s' if devices != 1 else ''}: {parts} "
              f"in {duration(time.perf_counter() - started)}"
              + (f" (estimated {duration(estimated)})" if estimated else "")
              + busy_text(outcomes, duration, started_at) + f"; database {display(url)}")
    if unstored:
        print(f"warm: {len(unstored)} tuned result(s) could not be written to {display(url)} "
              f"(first: {unstored[0].message}); warm tries once more as it exits, then they "
              f"are lost: free the disk or bring the database back and run warm again (exit "
              f"status {EXIT_NOT_STORED})",
              file=sys.stderr)
        return EXIT_NOT_STORED
    return EXIT_FAILED if failed else 0
