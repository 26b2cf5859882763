"""Offline tuning of one call: run the template's tuning function inside a tuning run (the
space it declares, where to start, where its trials go), check what it returns, and record the
result with its trials."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import autotune

from .. import accel
from . import nearest
from .similar import declared_rules
from . import search as _search
from .choice import NOISY, Choice
from .encoding import InvalidParametersError, describe_arguments, encode_parameters, validate_parameters
from .records import ResultOrigin, TuningKey, TuningRecord
from .recording.seeds import interrupted_trials, size_seeds, warm_start
from .recording.trials import TrialWriter
from .rendered import RENDERED, beyond_declared
from .space import Space
from .store import ResultStore, StoreError
from .text import guard_logger
from .turns import clock
from .validation import record_problem
from .verdicts import Fingerprint, TuningOutcome

if TYPE_CHECKING:
    from .calls import Call
    from .serving import Serving

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped

#: Rough seconds per configuration, for the first-use estimate where nothing is stored yet.
SECONDS_PER_CONFIGURATION = {True: 0.1, False: 0.5}


def tune_call(call: Call, function: Callable[..., Any], test: dict[str, Any],
              fingerprint: Fingerprint, serving: Serving, store: ResultStore, *,
              explicit: bool = False) -> TuningOutcome:
    """Run the tuning ``function`` for ``call`` (against ``fingerprint``: the kernel sources
    and the space it declares; ``test=`` its baseline) and store the result; ``explicit``
    (``retune``, ``warm``): asked for, so not announced as a wait the user did not expect."""
    key = call.key
    if fingerprint.space is not None and set(test) != set(fingerprint.space.names):
        raise InvalidParametersError(f"{key.function}: {_search.names_differ(test, fingerprint.space)}")
    gpu = call.device.is_gpu is not False  # a stand-in that does not say: a thread pool
    writer = TrialWriter(serving, store, key, fingerprint.digest)
    run = _tuning_run(call, store, fingerprint, writer, test, gpu, serving)
    if explicit:
        logger.info("tuning %s on %s for %s", key.function, key.device_name, key.arguments)
    else:
        announce(serving, store, key, fingerprint.space, gpu)
    started = clock()  # a key tuned ahead counts from its turn (see .turns)
    with accel.recording() as rendered, _search.tuning_run(run):
        try:
            returned = function(*call.args, **call.kwargs)
        finally:
            writer.flush()
    check_rendered(serving, key.function, fingerprint, rendered)
    params = _checked_result(returned, test, key, fingerprint, run)
    timed = run.timed(params)
    chosen, score, test_seconds = _scores(run, params, test)
    if chosen is not None:
        warn_noisy(serving, key, chosen)
    search_info = {**run.info, "trials": len(run.trials),
                   "seconds": round(clock() - started, 3),
                   # what the winner was compared against, for reports that cannot import the
                   # template
                   "test": json.loads(encode_parameters(test)),
                   "test_seconds": test_seconds}
    if chosen is None:
        search_info.pop("choice", None)  # an earlier search's, not this result's
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
        gbps=_rate(timed, "gbps", score), gflops=_rate(timed, "gflops", score),
        ci_low=chosen.ci_low if chosen else None, ci_high=chosen.ci_high if chosen else None,
        ties=chosen.ties if chosen else None, spread=chosen.spread if chosen else None,
    )
    stored = writer.finish(record, params)
    speedup = chosen.speedup if chosen is not None else None
    return TuningOutcome(key, params, score, test_seconds, stored, len(run.trials), writer.error,
                         speedup_interval=speedup[1:] if speedup else None,
                         ties=chosen.ties if chosen else None)


def _scores(run: _search.TuningRun, params: dict[str, Any],
            test: dict[str, Any]) -> tuple[Choice | None, float, float | None]:
    """The last search's choice where the function returned its winner (else None), the
    winner's median and ``test=``'s: re-timed by the choice, else as the search timed them."""
    timed, baseline = run.timed(params), run.timed(test)
    chosen = run.choice if run.choice is not None and run.choice.winner == params else None
    score = timed.median_seconds if timed is not None else math.inf
    test_seconds = baseline.median_seconds if baseline else None
    if chosen is not None:
        score = chosen.seconds
        test_seconds = chosen.test_seconds if chosen.test_seconds is not None else test_seconds
    return chosen, score, test_seconds


def _rate(timed: _search.Trial | None, name: str, score: float) -> float | None:
    """The trial's rate at the stored score (the re-timed median, where the choice timed
    again)."""
    rate = getattr(timed, name, None) if timed is not None else None
    if rate is None or not timed.median_seconds or not math.isfinite(score) or score <= 0:
        return rate
    return rate * timed.median_seconds / score


def warn_noisy(serving: Serving, key: TuningKey, chosen: Choice) -> None:
    """One warning a process where a choice's batches spread more than the machine allows
    ranking (:data:`~.choice.NOISY`), with the figure."""
    if not chosen.noisy or not serving.first("noisy", "choice"):
        return
    logger.warning("the machine is too noisy to rank candidates: tuning %s on %s, the winner's "
                   "batches spread %.1f%% and candidates within %.1f%% of the fastest could not "
                   "be told apart (more than %.0f%%); %d were tied with it, and the winner was "
                   "chosen among them by the fixed rule (test= if tied, else the first "
                   "declared). Tune on a quieter machine for a sharper choice", key.function,
                   key.device_name, 100 * chosen.spread, 100 * chosen.resolution, 100 * NOISY,
                   chosen.ties)


def _tuning_run(call: Call, store: ResultStore, fingerprint: Fingerprint, writer: TrialWriter,
                test: dict[str, Any], gpu: bool, serving: Serving) -> _search.TuningRun:
    """The tuning run of ``call``: its trials go to ``writer``; it starts from the nearest
    devices' best (its database's, then those of ``search_settings(warm_from=)``), then this
    device's choices at the nearest sizes (where the template declares ``autotune_similar``);
    and goes on from an interrupted search of the key where asked)."""
    key = call.key
    settings = _search.search_settings_now()
    also = [serving.store(url) for url in settings.warm_from or () if url != store.url]
    seeds, prior = warm_start(store, key, fingerprint.space, also)
    if fingerprint.space is not None:  # then this device's choices at the nearest sizes
        for params in size_seeds(store, key, declared_rules(call.owner), fingerprint.space):
            if params not in seeds:
                seeds.append(params)
    resumed = interrupted_trials(store, key, fingerprint.digest) if settings.resume else []
    if resumed:
        logger.info("%s on %s: going on from an interrupted search (%d configurations "
                    "measured)", key.function, key.device_name, len(resumed))
    return _search.TuningRun(
        on_trial=writer.add,
        thread_scope=getattr(call.context, "thread_scope", None),
        parallel=gpu,
        baseline=test,
        space=fingerprint.space,
        seeds=seeds,
        prior=prior,
        resumed=resumed,
    )


def _checked_result(returned: Any, test: dict[str, Any], key: TuningKey, fingerprint: Fingerprint,
                    run: _search.TuningRun) -> dict[str, Any]:
    """What the tuning function returned, as clean parameters inside the declared space."""
    try:
        params = validate_parameters(returned, test)
    except InvalidParametersError as exc:
        raise InvalidParametersError(f"{key.function} returned unusable parameters: {exc}") from None
    if fingerprint.space is not None and run.searched:
        why = fingerprint.space.why_not(params)
        if why is not None:
            raise InvalidParametersError(f"{key.function} returned parameters outside the space "
                                         f"its template declares: {why}")
    return params


def check_rendered(serving: Serving, name: str, fingerprint: Fingerprint,
                   rendered: set[accel.SourceFile]) -> None:
    """Say once per function which rendered files its declared sources do not cover."""
    uncovered = sorted({f.name for f in rendered if fingerprint.sources.get(f.name) != f.digest})
    if not uncovered or not serving.first("sources", name):
        return
    if not fingerprint.sources:
        logger.info("%s declares no autotune_sources; the kernel files it rendered (%s) are "
                    "recorded with its results, and an edit to one expires them", name,
                    ", ".join(uncovered))
    else:
        logger.info("%s rendered %s, which its autotune_sources do not cover; it is recorded "
                    "with its results, and an edit to it expires them", name, ", ".join(uncovered))


def announce(serving: Serving, store: ResultStore, key: TuningKey, space: Space | None,
             gpu: bool) -> None:
    """The first tuning in a process says what it tunes, where, for about how long, and how to
    avoid the wait (a WARNING on the ``autotune.tune`` logger: shown on standard error unless
    logging is configured otherwise); later ones are logged at INFO."""
    if not serving.first_tuning():
        logger.info("tuning %s on %s for %s", key.function, key.device_name, key.arguments)
        return
    seconds = _earlier_seconds(store, key)
    size = len(space.configurations()) if space is not None else None
    if seconds is None and size is not None:
        seconds = size * SECONDS_PER_CONFIGURATION[gpu]
    how_long = f", about {seconds:.0f} s" if seconds is not None and seconds >= 1 else ""
    what = f" over {size} configurations" if size is not None else ""
    try:
        stored = store.get(key)
    except StoreError:
        stored = None
    when = ("for the first time" if stored is None
            else "for the first time (it was served from a similar size)"
            if stored.origin == ResultOrigin.SIMILAR.value
            else "again (its stored result is unusable)")
    logger.warning("tuning %s (%s) on %s %s%s%s; pre-tune with `python -m "
                   "autotune warm` to tune ahead of use", key.function,
                   describe_arguments(key.arguments), key.device_name, when, what, how_long)


def _earlier_seconds(store: ResultStore, key: TuningKey) -> float | None:
    """How long this function's earlier tunings (of other arguments) on this device took (the
    median), if any are stored."""
    try:
        earlier = sorted(
            s for s in (json.loads(r.search).get("seconds") for r in
                        store.records(function=key.function, device=key.device_name)
                        if r.search and not record_problem(r))
            if isinstance(s, (int, float)) and s > 0)
    except (StoreError, ValueError, AttributeError):
        return None
    return earlier[len(earlier) // 2] if earlier else None
