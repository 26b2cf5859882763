"""The ``@autotuner(test=...)`` decorator: tune once per key, serve every later call from the store.

A key is (function, version, device name, platform, driver version, arguments). On a call the
tuned function looks in an in-process memo, then in the database (exactly, or relaxing the
device part under ``AUTOTUNE_MATCH=nearest``), and only then runs the tuning function, storing
what it finds.

A stored result is served only if every cell of its row is well formed, its parameters lie in
the space the template declares for this device, and (in exact mode) it was tuned against the
kernel sources and space the template has now: its *fingerprint*. Anything else is logged and
tuned again; the new result replaces it.
"""

from __future__ import annotations

import enum
import functools
import inspect
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import autotune

from .. import accel
from . import nearest
from . import search as _search
from .calls import Call as _Call
from .encoding import (
    InvalidParametersError,
    decode_parameters,
    describe_arguments,
    encode_parameters,
    validate_parameters,
    validate_test_parameters,
)
from .rendered import RENDERED, beyond_declared, rendered_changes, template_dirs
from .records import ResultOrigin, TrialRecord, TuningKey, TuningRecord
from .space import Space, SpaceError
from .store import (ReadOnlyStoreError, ResultStore, StoreError, StoreUnavailableError, database_url,
                    display, pending)
from .store import settings as store_settings
from .text import guard_logger
from .validation import record_problem, trial_problem
from .verdicts import (
    Fingerprint,
    Freshness,
    TuningOutcome,
    Verdict,
    _stale_reason,
    make_fingerprint,
)

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped

ENV_MATCH = "AUTOTUNE_MATCH"


class MatchMode(str, enum.Enum):
    """How a stored result is matched to this device (``AUTOTUNE_MATCH``)."""

    EXACT = "exact"  #: this device, platform and driver only
    NEAREST = "nearest"  #: else the same device on another driver, platform, then any device

    def __str__(self) -> str:
        return self.value


MATCH_MODES = tuple(m.value for m in MatchMode)


class ConfigurationError(ValueError):
    """An environment variable or setting has a value autotune does not accept."""


@dataclass
class _TestMode:
    """Set by the pytest plugin. Active: return ``test=`` instead of tuning, unless ``force``
    (always run the tuning function, no caching) or ``cached`` (tune on a miss and serve
    hits, as outside tests)."""

    active: bool = False
    force: bool = False
    cached: bool = False


test_mode = _TestMode()
_memo: dict[tuple[str, str, TuningKey], dict[str, Any]] = {}
_memo_lock = threading.Lock()
_stores: dict[str, ResultStore] = {}
_stores_lock = threading.Lock()
_key_locks: dict[tuple[str, TuningKey], threading.Lock] = {}
_warned_lock = threading.Lock()
_warned_read_only: set[str] = set()
_warned_unreadable: set[str] = set()
_warned_sources: set[str] = set()


def match_mode(value: str | None = None) -> str:
    """``AUTOTUNE_MATCH`` (read now): ``exact`` (default) or ``nearest``."""
    if value is None:
        value = os.environ.get(ENV_MATCH, "")
    mode = value.strip().lower() or MatchMode.EXACT.value
    if mode not in MATCH_MODES:
        raise ConfigurationError(
            f"{ENV_MATCH}={value!r} is not understood; use 'exact' (the default) or 'nearest'"
        )
    return mode


def get_store(url: str) -> ResultStore:
    """The store for ``url``, opened once per process."""
    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            # a server is not connected to yet: one that is down fails the first read, which
            # the tuner survives, not the opening
            store = _stores[url] = ResultStore(url, connect=False)
        return store


def clear_memo() -> None:
    """Forget results cached in this process (the database is untouched)."""
    with _memo_lock:
        _memo.clear()


def function_name(fn: Callable, owner: Any = None) -> str:
    """The ``function`` column for a tuning function called on ``owner`` (a class, or None).

    The owner class names it, not where the method is defined: a subclass that inherits
    ``autotune`` may build different kernels, so it gets keys of its own.
    """
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{fn.__name__}"
    return f"{fn.__module__}.{fn.__qualname__}"


class TunedFunction:
    """A tuning function under ``@tune.autotuner``: calling it returns the parameters to use,
    tuned once per key and served from the database afterwards.

    Read by the command line and by operations, never pinned on a wrapper:

    - :attr:`test`: the ``test=`` parameters (tests use them; every stored result must have
      their names and kinds);
    - :meth:`key`, :meth:`retune`, :meth:`judge` take the same arguments as a call;
    - :meth:`name`, :meth:`version`, :meth:`sources` describe it for an owner class.

    A template class declares, beside ``autotune_version``, ``autotune_sources`` (the ``.mako``
    files its kernels are rendered from) and ``autotune_space(context, **arguments)`` (the
    :class:`Space` searched on that device); a plain function passes them to the decorator.
    """

    def __init__(self, fn: Callable, test: dict[str, Any], *, space: Any = None,
                 sources: Iterable[str | Path] | None = None, version: int | None = None):
        functools.update_wrapper(self, fn)
        self.function = fn
        self.signature = inspect.signature(fn)
        self._test = test
        self._space = space
        self._sources = None if sources is None else tuple(Path(s) for s in sources)
        self._version = version
        self._source_cache: dict[Any, tuple[accel.SourceFile, ...]] = {}
        self._source_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"<TunedFunction {self.function.__module__}.{self.function.__qualname__}>"

    @property
    def test(self) -> dict[str, Any]:
        """A copy of the ``test=`` parameters."""
        return dict(self._test)

    # -- describing ---------------------------------------------------------------------------

    def name(self, owner: Any = None) -> str:
        """The ``function`` column of its rows when called on ``owner``."""
        return function_name(self.function, owner)

    def version(self, owner: Any = None) -> int:
        """``autotune_version`` of the owner class (or the decorator's ``version=``; else 0)."""
        version = self._version if self._version is not None else getattr(owner, "autotune_version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise TypeError(f"{self.name(owner)}: autotune_version must be an int >= 0, got {version!r}")
        return version

    def source_templates(self, owner: Any = None) -> tuple[Path, ...] | None:
        """The declared kernel templates (``autotune_sources``), or None if none are declared."""
        declared = self._sources if self._sources is not None else getattr(owner, "autotune_sources", None)
        if declared is None:
            return None
        if isinstance(declared, (str, Path)):
            declared = (declared,)
        return tuple(Path(p) for p in declared)

    def sources(self, owner: Any = None) -> tuple[accel.SourceFile, ...]:
        """Every template file the declared templates are made of (includes and the
        portability header too), with their digests; () if none are declared."""
        templates = self.source_templates(owner)
        if not templates:
            return ()
        with self._source_lock:
            cached = self._source_cache.get(templates)
        if cached is not None and all(f.unchanged() for f in cached):
            return cached
        files: dict[str, accel.SourceFile] = {}
        for template in templates:
            for f in accel.template_sources(template):
                files[f.name] = f
        found = tuple(files[n] for n in sorted(files))
        with self._source_lock:
            self._source_cache[templates] = found
        return found

    def declared_space(self, owner: Any, context: Any, arguments: dict[str, Any]) -> Space | None:
        """The space the template declares for ``context`` and these arguments, or None."""
        declared = self._space if self._space is not None else getattr(owner, "autotune_space", None)
        if declared is None:
            return None
        value = declared(context, **arguments) if callable(declared) else declared
        try:
            return value if isinstance(value, Space) else Space(value)
        except SpaceError as exc:
            raise TypeError(f"{self.name(owner)}: autotune_space returned an unusable space: {exc}") from None

    def fingerprint(self, *args: Any, **kwargs: Any) -> Fingerprint:
        """What a result for this call must have been tuned against to be served (exact mode)."""
        return self._fingerprint(_Call(self, args, kwargs))

    def _fingerprint(self, call: _Call) -> Fingerprint:
        return make_fingerprint(self.sources(call.owner),
                                self.declared_space(call.owner, call.context, call.arguments))

    def online_setup(self, owner: Any, context: Any, arguments: dict[str, Any]
                     ) -> tuple[TuningKey, dict[str, Any], Fingerprint]:
        """The key, ``test=`` and fingerprint an offline call on ``owner`` with these arguments
        would use: an online tuner made from them shares its results with offline tuning."""
        call = _Call(self, (owner, context) if owner is not None else (context,), arguments)
        return call.key, self.test, self._fingerprint(call)

    # -- calling ------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if test_mode.active:
            if test_mode.force:
                return self._resolve(_Call(self, args, kwargs), force=True)
            if not test_mode.cached:
                return self.test
        return self._resolve(_Call(self, args, kwargs), force=False)

    def key(self, *args: Any, **kwargs: Any) -> TuningKey:
        """The tuning key a call with these arguments uses (nothing is tuned)."""
        return _Call(self, args, kwargs).key

    def retune(self, *args: Any, **kwargs: Any) -> TuningOutcome:
        """Tune now, whatever the database holds, and store the result."""
        call = _Call(self, args, kwargs)
        store = get_store(database_url())
        outcome = self._tune(call, store, explicit=True)
        with _memo_lock:
            _memo[(store.url, match_mode(), call.key)] = dict(outcome.parameters)
        return outcome

    def judge(self, *args: Any, **kwargs: Any) -> Verdict | None:
        """What the database holds for exactly this call's key, judged (None if nothing)."""
        call = _Call(self, args, kwargs)
        record = get_store(database_url()).get(call.key)
        return None if record is None else self._judge(record, call, self._fingerprint(call))

    def _resolve(self, call: _Call, *, force: bool) -> dict[str, Any]:
        url = database_url()
        mode = match_mode()
        memo_key = (url, mode, call.key)
        if not force:
            with _memo_lock:
                hit = _memo.get(memo_key)
            if hit is not None:
                return dict(hit)
        store = get_store(url)
        with _memo_lock:
            key_lock = _key_locks.setdefault((url, call.key), threading.Lock())
        with key_lock:  # two threads asking for one key tune it once
            params = None
            if not force:
                with _memo_lock:
                    params = _memo.get(memo_key)
                if params is None:
                    params = self._lookup_or_miss(store, call, mode)
            if params is None:
                params = self._tune(call, store).parameters
        if not force:
            with _memo_lock:
                _memo[memo_key] = params
        return dict(params)

    # -- judging stored rows ------------------------------------------------------------------

    def _judge(self, record: TuningRecord, call: _Call, fingerprint: Fingerprint) -> Verdict:
        problem = record_problem(record, self._test)
        if problem:
            return Verdict(record, Freshness.INVALID, problem)
        params = validate_parameters(decode_parameters(record.parameters), self._test)
        if fingerprint.space is not None:  # listed values that run (preferences aside)
            why = fingerprint.space.why_not(params, preferences=False)
            if why is not None:
                return Verdict(record, Freshness.INVALID,
                               f"not valid on {call.key.device_name}: {why}")
        if record.fingerprint != fingerprint.digest:
            return Verdict(record, Freshness.STALE, _stale_reason(record, fingerprint), params)
        changed = rendered_changes(record.search, fingerprint.sources, template_dirs(
            call.owner, self.function, self.source_templates(call.owner))) \
            if RENDERED in record.search else []
        if changed:
            return Verdict(record, Freshness.STALE, "its kernel sources changed since it was "
                           f"tuned ({', '.join(changed)})", params)
        return Verdict(record, Freshness.FRESH, "", params)

    def _lookup_or_miss(self, store: ResultStore, call: _Call, mode: str) -> dict[str, Any] | None:
        """What the database holds for the call; a database that cannot be reached for now (a
        server outage, a disk error, a lock held long) is a miss, with one warning per
        database: the key is tuned, its result used, and stored once the database takes writes.
        A database that is wrong (not a database, a newer layout, a path that cannot be used)
        is an error to fix, raised as before."""
        try:
            return self._lookup(store, call, mode)
        except StoreUnavailableError as exc:
            with _warned_lock:
                first = store.url not in _warned_unreadable
                _warned_unreadable.add(store.url)
            (logger.warning if first else logger.info)(
                "cannot read the tuning database (%s); %s on %s is tuned as if nothing were "
                "stored, and its result is stored once the database takes writes again",
                exc, call.key.function, call.key.device_name)
            return None

    def _lookup(self, store: ResultStore, call: _Call, mode: str) -> dict[str, Any] | None:
        key = call.key
        fingerprint = self._fingerprint(call)
        stale: Verdict | None = None
        record = store.get(key)
        if record is not None:
            verdict = self._judge(record, call, fingerprint)
            if verdict.freshness is Freshness.FRESH:
                return verdict.parameters
            _log_unusable(verdict, re_tune=mode != MatchMode.NEAREST.value)
            if verdict.freshness is Freshness.STALE:
                stale = verdict
        if mode != MatchMode.NEAREST.value:
            return None
        for relaxed, candidate in nearest.ranked(
                store.find(key.function, key.version, key.arguments), key, call.device):
            verdict = self._judge(candidate, call, fingerprint)
            if verdict.freshness is Freshness.FRESH:
                logger.warning(
                    "AUTOTUNE_MATCH=nearest: no result for %s on %s; using the one tuned on "
                    "%s [%s, driver %s] (ignoring %s)", key.function, key.device_name,
                    candidate.key.device_name, candidate.key.device_platform,
                    candidate.key.driver_version, relaxed)
                return verdict.parameters
            logger.info("AUTOTUNE_MATCH=nearest: skipping the result of %s on %s: %s: %s",
                        key.function, candidate.key.device_name, verdict.freshness, verdict.reason)
            if stale is None and verdict.freshness is Freshness.STALE:
                stale = verdict
        if stale is not None:
            logger.warning("AUTOTUNE_MATCH=nearest: serving a stale result for %s (tuned on %s): "
                           "%s", key.function, stale.record.key.device_name, stale.reason)
            return stale.parameters
        return None

    # -- tuning -------------------------------------------------------------------------------

    def _tune(self, call: _Call, store: ResultStore, *, explicit: bool = False) -> TuningOutcome:
        """Tune ``call``'s key and store the result; ``explicit`` (``retune``, ``warm``): asked
        for, so not announced as a wait the user did not expect."""
        key = call.key
        fingerprint = self._fingerprint(call)
        if fingerprint.space is not None and set(self._test) != set(fingerprint.space.names):
            raise InvalidParametersError(
                f"{key.function}: {_search.names_differ(self._test, fingerprint.space)}")
        gpu = call.device.is_gpu is not False  # a stand-in that does not say: a thread pool
        writer = _TrialWriter(store, key, fingerprint.digest)
        seeds, prior = warm_start(store, key, fingerprint.space)
        resumed = (interrupted_trials(store, key, fingerprint.digest)
                   if _search.search_settings_now().resume else [])
        if resumed:
            logger.info("%s on %s: going on from an interrupted search (%d configurations "
                        "measured)", key.function, key.device_name, len(resumed))
        run = _search.TuningRun(
            on_trial=writer.add,
            thread_scope=getattr(call.context, "thread_scope", None),
            parallel=gpu,
            baseline=self.test,
            space=fingerprint.space,
            seeds=seeds,
            prior=prior,
            resumed=resumed,
        )
        if explicit:
            logger.info("tuning %s on %s for %s", key.function, key.device_name, key.arguments)
        else:
            _announce(store, key, fingerprint.space, gpu)
        started = time.perf_counter()
        with accel.recording() as rendered, _search.tuning_run(run):
            try:
                returned = self.function(*call.args, **call.kwargs)
            finally:
                writer.flush(final=False)
        self._check_rendered(call.owner, fingerprint, rendered)
        try:
            params = validate_parameters(returned, self._test)
        except InvalidParametersError as exc:
            raise InvalidParametersError(f"{key.function} returned unusable parameters: {exc}") from None
        if fingerprint.space is not None and run.searched:
            why = fingerprint.space.why_not(params)
            if why is not None:
                raise InvalidParametersError(f"{key.function} returned parameters outside the space "
                                             f"its template declares: {why}")
        timed = run.timed(params)
        baseline = run.timed(self.test)
        score = timed.median_seconds if timed is not None else math.inf
        search_info = {**run.info, "trials": len(run.trials),
                       "seconds": round(time.perf_counter() - started, 3),
                       # what the winner was compared against, for reports that cannot import
                       # the template
                       "test": json.loads(encode_parameters(self.test)),
                       "test_seconds": baseline.median_seconds if baseline else None}
        search_info[nearest.DEVICE] = nearest.summary(call.device)
        built = beyond_declared(rendered, fingerprint.sources)
        if built:  # what the declared sources miss: an edit to it expires the result too
            search_info[RENDERED] = built
        record = TuningRecord(
            key=key, parameters=encode_parameters(params), score=score,
            package_version=autotune.__version__, fingerprint=fingerprint.digest,
            sources=fingerprint.sources_json,
            search=json.dumps(search_info, sort_keys=True, separators=(",", ":")),
            origin=ResultOrigin.OFFLINE.value,
            gbps=timed.gbps if timed is not None else None,
            gflops=timed.gflops if timed is not None else None,
        )
        stored = writer.finish(record, params)
        return TuningOutcome(key, params, score, baseline.median_seconds if baseline else None,
                             stored, len(run.trials), writer.error)

    def _check_rendered(self, owner: Any, fingerprint: Fingerprint,
                        rendered: set[accel.SourceFile]) -> None:
        uncovered = sorted({f.name for f in rendered if fingerprint.sources.get(f.name) != f.digest})
        name = self.name(owner)
        if not uncovered or name in _warned_sources:
            return
        _warned_sources.add(name)
        if not fingerprint.sources:
            logger.info("%s declares no autotune_sources; the kernel files it rendered (%s) are "
                        "recorded with its results, and an edit to one expires them", name,
                        ", ".join(uncovered))
        else:
            logger.info("%s rendered %s, which its autotune_sources do not cover; it is recorded "
                        "with its results, and an edit to it expires them", name,
                        ", ".join(uncovered))


#: How many of the nearest devices' best configurations a search measures first.
WARM_START_SEEDS = 8


def warm_start(store: ResultStore, key: TuningKey,
               space: Space | None) -> tuple[list[dict[str, Any]], list[tuple[dict[str, Any], float]]]:
    """Where a search for ``key`` should start: stored trials of the same function, version and
    arguments on the nearest devices (this device's own earlier trials first, then the same
    device name on another platform or driver, then any other device).

    Returns the best configurations of those devices, nearest first (measured first by every
    strategy), and the nearest device's trials as (configuration, time / its best) for
    model-based strategies. Only well-formed trials inside ``space`` count.
    """
    if space is None:
        return [], []
    try:
        trials = store.trials(function=key.function, version=key.version, arguments=key.arguments)
    except StoreError as exc:
        logger.info("no warm start for %s: %s", key.function, exc)
        return [], []
    by_device: dict[tuple[str, str, str], dict[tuple, tuple[dict[str, Any], float]]] = {}
    for trial in trials:
        if trial.status != "ok" or trial_problem(trial):
            continue
        params = decode_parameters(trial.parameters)
        if space.why_not(params) is not None:
            continue
        found = by_device.setdefault(trial.key.device, {})
        found[tuple(params[n] for n in space.names)] = (params, trial.median_seconds)

    def nearness(device: tuple[str, str, str]) -> tuple[int, ...]:
        name, platform, driver = device
        return (name != key.device_name, platform != key.device_platform,
                driver != key.driver_version)

    devices = sorted(by_device, key=nearness)
    seeds: list[dict[str, Any]] = []
    for device in devices:
        ranked = sorted(by_device[device].values(), key=lambda item: item[1])
        for params, _ in ranked[:3]:
            if params not in seeds:
                seeds.append(params)
    prior: list[tuple[dict[str, Any], float]] = []
    for device in devices:
        found = list(by_device[device].values())
        if len(found) >= 2:
            best = min(t for _, t in found)
            prior = [(params, t / best) for params, t in found]
            break
    return seeds[:WARM_START_SEEDS], prior


def interrupted_trials(store: ResultStore, key: TuningKey, fingerprint: str) -> list[_search.Trial]:
    """The successful trials of a search of ``key`` that stopped before storing its result:
    this very device, the same sources and space (``fingerprint``), and newer than the key's
    stored result, if any. A search that finds them goes on where that one stopped (a
    ``--force`` re-tune measures afresh: its predecessor's trials predate the stored result)."""
    try:
        record = store.get(key)
        trials = store.trials(key)
    except StoreError as exc:
        logger.info("not resuming %s: %s", key.function, exc)
        return []
    if record is not None and record.malformed:
        return []  # when it was stored is unknown: measure afresh
    since = record.created_at if record is not None else None
    found: list[_search.Trial] = []
    for trial in trials:
        if trial.fingerprint != fingerprint or trial.status != "ok" or trial_problem(trial) \
                or trial.median_seconds is None:  # store.trials(key): this key's only
            continue
        if since is not None and not trial.created_at > since:
            continue
        found.append(_search.Trial(
            decode_parameters(trial.parameters), _search.TrialStatus.OK, "", trial.min_seconds,
            trial.median_seconds, trial.max_seconds, trial.gbps, trial.gflops))
    return found


_announced = threading.Event()
#: Rough seconds per configuration, for the first-use estimate where nothing is stored yet.
_SECONDS_PER_CONFIGURATION = {True: 0.1, False: 0.5}


def _announce(store: ResultStore, key: TuningKey, space: Space | None, gpu: bool) -> None:
    """The first tuning in a process says what it tunes, where, for about how long, and how to
    avoid the wait (a WARNING on the ``autotune.tune`` logger: shown on standard error unless
    logging is configured otherwise); later ones are logged at INFO."""
    if _announced.is_set():
        logger.info("tuning %s on %s for %s", key.function, key.device_name, key.arguments)
        return
    _announced.set()
    seconds = None
    try:  # how long this function's earlier tunings (of other arguments) on this device took
        earlier = sorted(
            s for s in (json.loads(r.search).get("seconds") for r in
                        store.records(function=key.function, device=key.device_name)
                        if r.search and not record_problem(r))
            if isinstance(s, (int, float)) and s > 0)
        seconds = earlier[len(earlier) // 2] if earlier else None
    except (StoreError, ValueError, AttributeError):
        pass
    size = len(space.configurations()) if space is not None else None
    if seconds is None and size is not None:
        seconds = size * _SECONDS_PER_CONFIGURATION[gpu]
    how_long = f", about {seconds:.0f} s" if seconds is not None and seconds >= 1 else ""
    what = f" over {size} configurations" if size is not None else ""
    try:
        when = "for the first time" if store.get(key) is None else "again (its stored result is unusable)"
    except StoreError:
        when = "for the first time"
    logger.warning("tuning %s (%s) on %s %s%s%s; pre-tune with `python -m "
                   "autotune warm` to tune ahead of use", key.function,
                   describe_arguments(key.arguments), key.device_name, when, what, how_long)


def _log_unusable(verdict: Verdict, *, re_tune: bool) -> None:
    key = verdict.record.key
    then = "; it will be re-tuned" if re_tune else ""
    if verdict.freshness is Freshness.INVALID:
        logger.warning("ignoring stored tuning result for %s on %s (%s): %s%s", key.function,
                       key.device_name, key.arguments, verdict.reason, then)
    else:
        logger.info("stored tuning result for %s on %s (%s) is stale: %s%s", key.function,
                    key.device_name, key.arguments, verdict.reason, then)


class _TrialWriter:
    """Buffers a run's trials and writes them in batches; a database that cannot take them
    (read-only, busy) costs a warning, never the tuning."""

    FLUSH_SECONDS = 5.0

    def __init__(self, store: ResultStore, key: TuningKey, fingerprint: str):
        self.store = store
        self.key = key
        self.fingerprint = fingerprint
        self.buffer: list[TrialRecord] = []
        self.last_flush = time.monotonic()
        self.failed: StoreError | None = None
        self.error: StoreError | None = None  #: why the result was not stored

    def add(self, trial: _search.Trial) -> None:
        self.buffer.append(TrialRecord(
            key=self.key, parameters=encode_parameters(trial.parameters), status=trial.status.value,
            message=trial.message[:2000], min_seconds=trial.min_seconds,
            median_seconds=trial.median_seconds, max_seconds=trial.max_seconds,
            fingerprint=self.fingerprint, gbps=trial.gbps, gflops=trial.gflops))
        if time.monotonic() - self.last_flush > self.FLUSH_SECONDS:
            self.flush(final=False)

    def flush(self, *, final: bool) -> None:
        self.last_flush = time.monotonic()
        if not self.buffer or self.failed is not None or self.store.read_only:
            return
        try:
            self.store.add_trials(self.buffer)
            self.buffer = []
        except StoreError as exc:  # keep them for the final write
            self.failed = exc

    def finish(self, record: TuningRecord, params: dict[str, Any]) -> bool:
        """Write the result with the remaining trials; False (and one warning) if it could not
        be stored. Results that earlier calls could not store are written first; one that
        cannot be written now (a full disk, a server outage, a busy lock) is kept and written
        later (``store.pending``), unless the database is read-only."""
        url = self.store.url
        try:
            with pending.in_order():  # earlier results first, and never after this one
                pending.write_pending(self.store)
                self.store.save(record, self.buffer)
            self.buffer = []
            return True
        except ReadOnlyStoreError as exc:
            self.error = exc
            with _warned_lock:
                first = url not in _warned_read_only
                _warned_read_only.add(url)
            if first:
                logger.warning("tuning database %s is read-only: results tuned in this process "
                               "(here %s for %s on %s) are used but not stored", display(url),
                               params, self.key.function, self.key.device_name)
        except StoreError as exc:
            self.error = exc
            pending.keep(self.store, record, self.buffer)
            logger.warning("could not store the tuning result %s for %s on %s: %s; it is used in "
                           "this process and written when the database takes writes again (with "
                           "the next result tuned into it, or retried every %g s, and at exit)",
                           params, self.key.function, self.key.device_name, exc,
                           store_settings.retry_seconds())
        return False


def autotuner(test: dict[str, Any], *, space: Any = None, sources: Iterable[str | Path] | None = None,
              version: int | None = None) -> Callable[[Callable], TunedFunction]:
    """Decorate a template's tuning function ``f(cls, context, *args)`` returning parameters.

    ``test`` gives the parameters used inside test suites (and the names and kinds every stored
    result must have). Put ``@classmethod`` above this decorator. A template class declares its
    space, sources and version as ``autotune_space``, ``autotune_sources`` and
    ``autotune_version``; a plain function ``f(context, *args)`` passes them here.
    """
    try:
        test = validate_test_parameters(test)
    except TypeError:
        raise
    if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 0):
        raise TypeError(f"autotuner(version=...) must be an int >= 0, got {version!r}")

    def decorator(fn: Callable) -> TunedFunction:
        if isinstance(fn, (classmethod, staticmethod)):
            raise TypeError(
                f"@tune.autotuner is above @{type(fn).__name__}; write\n"
                "    @classmethod\n    @tune.autotuner(test=...)\n    def autotune(cls, context, ...):\n"
                "(the decorator needs the plain function, and the classmethod wraps the result)")
        if not callable(fn):
            raise TypeError(f"@tune.autotuner decorates a function, not {type(fn).__name__}")
        if not inspect.signature(fn).parameters:
            raise TypeError(f"{fn.__qualname__} must take (cls, context, ...) or (context, ...)")
        return TunedFunction(fn, test, space=space, sources=sources, version=version)

    return decorator

