"""The build pool: a tuner's ``prepare(params)`` run in background threads, so that candidates
are built ahead of their first launch while the work goes on."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Mapping

from ... import accel
from ..encoding import encode_parameters
from .scan import Candidate, Scan

logger = logging.getLogger("autotune.tune")


class BuildPool:
    """Builds a scan's candidates with ``prepare(params)`` in ``workers`` threads (started
    with the first scan's builds, stopped when a scan ends), the context's thread scope
    current, and tells the scan when each is ready. A candidate once prepared is not prepared
    again by later scans."""

    def __init__(self, context: accel.Context, label: str, scan: Scan,
                 prepare: Callable[[dict[str, Any]], Any], workers: int):
        self._context = context
        self._label = label
        self._scan = scan
        self._prepare = prepare
        self._workers = workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._prepared: set[str] = set()

    def waiting(self, params: Mapping[str, Any]) -> bool:
        """Whether a candidate of these parameters needs preparing (not prepared yet)."""
        return encode_parameters(dict(params)) not in self._prepared

    def submit(self, candidates: Iterable[Candidate]) -> None:
        """Start the threads (and the context's build helpers) if they are not running, and
        prepare ``candidates`` in them."""
        if self._pool is None:
            start = getattr(self._context, "start_build_helpers", None)
            if start is not None:  # ready before the first candidate needs them
                start()
            self._pool = concurrent.futures.ThreadPoolExecutor(
                self._workers, thread_name_prefix=f"online-{self._label}")
        for c in candidates:
            self._pool.submit(self.build, c)

    def build(self, candidate: Candidate) -> None:
        """Build one candidate's kernels (in a worker thread, the device's context current)."""
        scope = getattr(self._context, "thread_scope", None)
        failed = ""
        try:
            # builds render (and where they can, compile) in helper processes: rendering here
            # would hold the interpreter lock the launching thread needs
            with scope() if scope is not None else contextlib.nullcontext(), \
                    accel.builds_in_helpers():
                self._prepare(dict(candidate.params))
        except Exception as exc:  # noqa: BLE001 (the candidate is skipped, the error logged)
            failed = f"{type(exc).__name__}: {exc}"[:2000]
            logger.warning("online tuning %s: preparing %s failed (%s); it is skipped",
                           self._label, dict(candidate.params), failed)
        if not failed:
            self._prepared.add(encode_parameters(dict(candidate.params)))
        self._scan.prepared(candidate, failed)

    def stop(self) -> None:
        """Let the threads finish what they were given, then end (a later :meth:`submit`
        starts them again)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
