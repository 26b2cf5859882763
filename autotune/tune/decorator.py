"""The ``@autotuner(test=...)`` decorator: tune once per key, serve every later call from the store.

A key is (function, version, device name, platform, driver version, arguments). On a call the
tuned function looks in the serving object's memo (:mod:`.serving`), then in the database
(:mod:`.lookup`: exactly, or relaxing the device part under ``AUTOTUNE_MATCH=nearest``, or the
size a template declares generalisable in ``autotune_similar`` under ``similar``), and
only then runs the tuning function (:mod:`.offline`), storing what it finds.

A stored result is served only if the one judge (:func:`.verdicts.judge`) finds it fresh: every
cell of its row well formed, its parameters in the space the template declares for this device,
and (in exact mode) tuned against the kernel sources and space the template has now: its
*fingerprint*. Anything else is logged and tuned again; the new result replaces it.
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import accel
from .collective import active as active_collective
from .calls import Call as _Call
from .encoding import encode_key_arguments, validate_test_parameters
from .lookup import Judge, lookup_or_miss
from .offline import tune_call
from .search import current_run
from .records import TuningKey
from .rendered import template_dirs
from .serving import MatchMode, serving
from .similar import request_for
from .space import Space, SpaceError
from .turns import wait_for_turn
from .store import database_url
from .verdicts import Fingerprint, TuningOutcome, Verdict, judge, make_fingerprint

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
        self._cache_lock = threading.Lock()

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
        with self._cache_lock:
            cached = self._source_cache.get(templates)
        if cached is not None and all(f.unchanged() for f in cached):
            return cached
        files: dict[str, accel.SourceFile] = {}
        for template in templates:
            for f in accel.template_sources(template):
                files[f.name] = f
        found = tuple(files[n] for n in sorted(files))
        with self._cache_lock:
            self._source_cache[templates] = found
        return found

    def declared_space(self, owner: Any, context: Any, arguments: dict[str, Any]) -> Space | None:
        """The space the template declares for ``context`` and these arguments, or None.
        Within a tuning run it is made once per (owner, device, arguments): the run's
        candidates each check theirs against it (outside a run it is made afresh: a template
        may change what it declares)."""
        declared = self._space if self._space is not None else getattr(owner, "autotune_space", None)
        if declared is None:
            return None
        if not callable(declared):
            return self._as_space(owner, declared)
        run = current_run()
        cache_key = None if run is None else _space_cache_key(self, owner, context, arguments)
        if cache_key is not None and cache_key in run.spaces:
            return run.spaces[cache_key]
        space = self._as_space(owner, declared(context, **arguments))
        if cache_key is not None:
            run.spaces[cache_key] = space
        return space

    def space_of(self, call: _Call) -> Space | None:
        """:meth:`declared_space` for ``call``'s own arguments, made once for the call (its
        fingerprint and the similar lookup's judge of trials both need it)."""
        made = getattr(call, "space", _NOT_MADE)
        if made is _NOT_MADE:
            made = call.space = self.declared_space(call.owner, call.context, call.arguments)
        return made

    def _as_space(self, owner: Any, value: Any) -> Space:
        try:
            return value if isinstance(value, Space) else Space(value)
        except SpaceError as exc:
            raise TypeError(f"{self.name(owner)}: autotune_space returned an unusable space: {exc}") from None

    def fingerprint(self, *args: Any, **kwargs: Any) -> Fingerprint:
        """What a result for this call must have been tuned against to be served (exact mode)."""
        return self.fingerprint_of(_Call(self, args, kwargs))

    def fingerprint_of(self, call: _Call) -> Fingerprint:
        """:meth:`fingerprint` of a call already read."""
        return make_fingerprint(self.sources(call.owner), self.space_of(call))

    def online_setup(self, owner: Any, context: Any, arguments: dict[str, Any]
                     ) -> tuple[TuningKey, dict[str, Any], Fingerprint]:
        """The key, ``test=`` and fingerprint an offline call on ``owner`` with these arguments
        would use: an online tuner made from them shares its results with offline tuning."""
        call = _Call(self, (owner, context) if owner is not None else (context,), arguments)
        return call.key, self.test, self.fingerprint_of(call)

    # -- calling ------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        test = serving().test
        if test.active:
            if test.force:
                return self._resolve(_Call(self, args, kwargs), force=True)
            if not test.cached:
                return self.test
        return self._resolve(_Call(self, args, kwargs), force=False)

    def key(self, *args: Any, **kwargs: Any) -> TuningKey:
        """The tuning key a call with these arguments uses (nothing is tuned)."""
        return _Call(self, args, kwargs).key

    def retune(self, *args: Any, **kwargs: Any) -> TuningOutcome:
        """Tune now, whatever the database holds, and store the result."""
        call = _Call(self, args, kwargs)
        state = serving()
        store = state.store(database_url())
        outcome = tune_call(call, self.function, self.test, self.fingerprint_of(call), state, store,
                            explicit=True)
        state.remember((store.url, state.match_mode(), call.key), outcome.parameters)
        return outcome

    def judge(self, *args: Any, **kwargs: Any) -> Verdict | None:
        """What the database holds for exactly this call's key, judged (None if nothing)."""
        call = _Call(self, args, kwargs)
        record = serving().store(database_url()).get(call.key)
        return None if record is None else self.judge_for(call)(record)

    def judge_for(self, call: _Call) -> Judge:
        """The judge of stored rows for ``call`` (:func:`.verdicts.judge` with its test=,
        fingerprint, device and template folders)."""
        fingerprint = self.fingerprint_of(call)
        name = call.key.device_name

        def dirs() -> tuple[Path, ...]:
            return template_dirs(call.owner, self.function, self.source_templates(call.owner))

        return lambda record: judge(record, self._test, fingerprint, name, dirs)

    def _resolve(self, call: _Call, *, force: bool) -> dict[str, Any]:
        together = active_collective()
        if together is None:
            return self._resolve_here(call, force=force)
        # inside tune.collective: one rank resolves the key the ranks share and tells the others
        params, here = together.resolve(call.key, lambda: self._resolve_here(call, force=force))
        if not here and not force:
            state = serving()
            state.remember((database_url(), state.match_mode(), call.key), params)
        return params

    def _resolve_here(self, call: _Call, *, force: bool) -> dict[str, Any]:
        state = serving()
        url = database_url()
        mode = state.match_mode()
        memo_key = (url, mode, call.key)
        if not force:
            hit = state.remembered(memo_key)
            if hit is not None:
                return hit
        store = state.store(url)
        wait_for_turn()  # a key tuned ahead (warm --lookahead) holds no key lock before its turn
        with state.key_lock(url, call.key):  # two threads asking for one key tune it once
            params = None
            if not force:
                params = state.remembered(memo_key)
                if params is None:
                    judge_here = self.judge_for(call)
                    similar_request = (request_for(self, call, judge_here)
                                       if mode == MatchMode.SIMILAR.value else None)
                    found = lookup_or_miss(state, store, call.key, call.device, judge_here,
                                           mode, similar_request)
                    params = found.parameters if found is not None else None
            if params is None:
                params = tune_call(call, self.function, self.test, self.fingerprint_of(call), state,
                                   store).parameters
        if not force:
            state.remember(memo_key, params)
        return dict(params)


#: :meth:`TunedFunction.space_of`'s mark of a call whose space is not made yet
_NOT_MADE = object()


def _space_cache_key(tuned: TunedFunction, owner: Any, context: Any,
                     arguments: dict[str, Any]) -> tuple | None:
    """What a declared space depends on: the tuned function and owner, the device's
    description and the arguments; None where they cannot be told apart safely (nothing is
    cached then)."""
    device = getattr(context, "device", None)
    try:
        hash(device)
        return id(tuned), owner, type(device), device, encode_key_arguments(arguments)
    except (TypeError, ValueError):
        return None


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


def tuner_of(obj: Any) -> TunedFunction:
    """The :class:`TunedFunction` of a template class (its ``autotune`` classmethod) or of a
    decorated function; TypeError saying what is missing otherwise."""
    if isinstance(obj, TunedFunction):
        return obj
    if isinstance(obj, type):
        try:
            method = inspect.getattr_static(obj, "autotune")
        except AttributeError:
            method = None
        inner = getattr(method, "__func__", None)
        if isinstance(inner, TunedFunction):
            return inner
        raise TypeError(f"{obj.__qualname__} needs an autotune classmethod decorated with "
                        "@tune.autotuner (with @classmethod above it)")
    inner = getattr(obj, "__func__", None)
    if isinstance(inner, TunedFunction):
        return inner
    raise TypeError(f"{obj!r} is not a function decorated with @tune.autotuner")
