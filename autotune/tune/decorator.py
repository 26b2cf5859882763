"""The ``@autotuner(test=...)`` decorator: tune once per key, serve every later call from the store.

A key is (function, version, device name, platform, driver version, arguments). On a call the
decorator looks in an in-process memo, then in the database (exactly, or relaxing the device
part under ``AUTOTUNE_MATCH=nearest``), and only then runs the tuning function, storing what it
finds.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import autotune

from . import search as _search
from .encoding import (
    InvalidParametersError,
    decode_parameters,
    encode_arguments,
    encode_parameters,
    validate_parameters,
    validate_test_parameters,
)
from .records import TrialRecord, TuningKey, TuningRecord
from .store import ResultStore, database_url

logger = logging.getLogger("autotune.tune")

ENV_MATCH = "AUTOTUNE_MATCH"
MATCH_MODES = ("exact", "nearest")


class ConfigurationError(ValueError):
    """An environment variable or setting has a value autotune does not accept."""


@dataclass
class _TestMode:
    """Set by the pytest plugin: return ``test=`` instead of tuning, unless forced."""

    active: bool = False
    force: bool = False


test_mode = _TestMode()
_memo: dict[tuple[str, str, TuningKey], dict[str, Any]] = {}
_memo_lock = threading.Lock()
_stores: dict[str, ResultStore] = {}
_stores_lock = threading.Lock()
_key_locks: dict[tuple[str, TuningKey], threading.Lock] = {}


def match_mode(value: str | None = None) -> str:
    """``AUTOTUNE_MATCH`` (read now): ``exact`` (default) or ``nearest``."""
    if value is None:
        value = os.environ.get(ENV_MATCH, "")
    mode = value.strip().lower() or "exact"
    if mode not in MATCH_MODES:
        raise ConfigurationError(
            f"{ENV_MATCH}={value!r} is not understood; use 'exact' (the default) or 'nearest'"
        )
    return mode


def get_store(url: str) -> ResultStore:
    with _stores_lock:
        store = _stores.get(url)
        if store is None:
            store = _stores[url] = ResultStore(url)
        return store


def clear_memo() -> None:
    """Forget results cached in this process (the database is untouched)."""
    with _memo_lock:
        _memo.clear()


def _function_name(fn: Callable) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def function_name(fn: Callable, owner: Any = None) -> str:
    """The ``function`` column for a tuning function called on ``owner`` (a class, or None).

    The owner class names it, not where the method is defined: a subclass that inherits
    ``autotune`` may build different kernels, so it gets keys of its own.
    """
    if isinstance(owner, type):
        return f"{owner.__module__}.{owner.__qualname__}.{fn.__name__}"
    return _function_name(fn)


def _nearest_steps(key: TuningKey) -> list[tuple[str, dict[str, str | None]]]:
    return [
        ("driver version", {"device_name": key.device_name, "device_platform": key.device_platform}),
        ("platform", {"device_name": key.device_name}),
        ("device", {}),
    ]


def _usable(record: TuningRecord, test: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return validate_parameters(decode_parameters(record.parameters), test)
    except InvalidParametersError as exc:
        logger.warning(
            "ignoring stored tuning result for %s on %s (%s): %s; it will be re-tuned",
            record.key.function, record.key.device_name, record.key.arguments, exc,
        )
        return None


def _lookup(store: ResultStore, key: TuningKey, mode: str, test: dict[str, Any]) -> dict | None:
    record = store.get(key)
    if record is not None:
        params = _usable(record, test)
        if params is not None:
            return params
    if mode != "nearest":
        return None
    for relaxed, device_filter in _nearest_steps(key):
        for candidate in store.find(key.function, key.version, key.arguments, **device_filter):
            params = _usable(candidate, test)
            if params is not None:
                logger.warning(
                    "AUTOTUNE_MATCH=nearest: no result for %s on %s; using the one tuned on "
                    "%s [%s, driver %s] (ignoring %s)",
                    key.function, key.device_name, candidate.key.device_name,
                    candidate.key.device_platform, candidate.key.driver_version, relaxed,
                )
                return params
    return None


class _Bound:
    """What the decorator learns from one call: the key and the context."""

    def __init__(self, sig: inspect.Signature, has_cls: bool, fn: Callable,
                 args: tuple, kwargs: dict):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        items = list(bound.arguments.items())
        owner = items[0][1] if has_cls else None
        self.context = items[1 if has_cls else 0][1]
        rest = dict(items[2 if has_cls else 1:])
        for name, param in sig.parameters.items():
            if param.kind is inspect.Parameter.VAR_KEYWORD and name in rest:
                rest.update(rest.pop(name))
        version = getattr(owner, "autotune_version", getattr(fn, "autotune_version", 0))
        device = self.context.device
        self.key = TuningKey(
            function=function_name(fn, owner),
            version=int(version),
            device_name=device.name,
            device_platform=device.platform,
            driver_version=device.driver_version,
            arguments=encode_arguments(rest),
        )


def autotuner(test: dict[str, Any]) -> Callable[[Callable], Callable]:
    """Decorate a template's tuning function ``f(cls, context, *args)`` returning parameters.

    ``test`` gives the parameters used inside test suites (and the schema every stored result
    must match). Put ``@classmethod`` above this decorator.
    """
    validate_test_parameters(test)
    test = dict(test)

    def decorator(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        names = list(sig.parameters)
        has_cls = bool(names) and names[0] in ("cls", "self")
        if len(names) < (2 if has_cls else 1):
            raise TypeError(f"{_function_name(fn)} must take (cls, context, ...) or (context, ...)")

        def resolve(args: tuple, kwargs: dict, force: bool) -> dict[str, Any]:
            call = _Bound(sig, has_cls, fn, args, kwargs)
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
                params = None if force else _lookup(store, call.key, mode, test)
                if params is None:
                    params = _tune(fn, args, kwargs, call, store, test)
            with _memo_lock:
                _memo[memo_key] = params
            return dict(params)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> dict[str, Any]:
            if test_mode.active and not test_mode.force:
                return dict(test)
            return resolve(args, kwargs, force=False)

        def key(*args: Any, **kwargs: Any) -> TuningKey:
            """The tuning key a call with these arguments uses (nothing is tuned)."""
            return _Bound(sig, has_cls, fn, args, kwargs).key

        def retune(*args: Any, **kwargs: Any) -> dict[str, Any]:
            """Tune now, whatever the database holds, and store the result."""
            return resolve(args, kwargs, force=True)

        wrapper.autotune_test = dict(test)  # type: ignore[attr-defined]
        wrapper.autotune_function = lambda owner=None: function_name(fn, owner)  # type: ignore[attr-defined]
        wrapper.key = key  # type: ignore[attr-defined]
        wrapper.retune = retune  # type: ignore[attr-defined]
        return wrapper

    return decorator


def _tune(fn: Callable, args: tuple, kwargs: dict, call: _Bound, store: ResultStore,
          test: dict[str, Any]) -> dict[str, Any]:
    key = call.key

    def on_trial(trial: _search.Trial) -> None:
        store.add_trial(TrialRecord(
            key=key, parameters=encode_parameters(trial.parameters), status=trial.status,
            message=trial.message[:2000], min_seconds=trial.min_seconds,
            median_seconds=trial.median_seconds, max_seconds=trial.max_seconds,
        ))

    context = call.context
    sess = _search.Session(
        on_trial=on_trial,
        thread_scope=getattr(context, "thread_scope", None),
        parallel=bool(getattr(context.device, "is_gpu", True)),
        baseline=dict(test),
    )
    logger.info("tuning %s on %s for %s", key.function, key.device_name, key.arguments)
    with _search.session(sess):
        returned = fn(*args, **kwargs)
    try:
        params = validate_parameters(returned, test)
    except InvalidParametersError as exc:
        raise InvalidParametersError(f"{key.function} returned unusable parameters: {exc}") from None
    # The median of these parameters if a search timed them; a tuning function that picks
    # parameters without timing them stores an infinite score (any measured result beats it).
    score = math.inf
    for result in reversed(sess.results):
        timed = [t.median_seconds for t in result.trials if t.status == "ok" and t.parameters == params]
        if timed:
            score = timed[-1]
            break
    store.put(TuningRecord(
        key=key, parameters=encode_parameters(params), score=score,
        package_version=autotune.__version__,
    ))
    return params
