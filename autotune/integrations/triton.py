"""``autotune`` in place of ``@triton.autotune``: Triton's configurations timed once, kept in
the tuning database, and served to every later process and machine that shares it.

>>> from autotune.integrations.triton import autotune
>>> @autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (64, 128) for w in (2, 4)],
...           key=["n"])
... @triton.jit
... def add(x, y, out, n, BLOCK: tl.constexpr): ...
>>> add[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, y, out, n)

Design. This is our own :class:`triton.runtime.jit.KernelInterface` around the
``@triton.jit`` function, not a subclass of ``triton.runtime.autotuner.Autotuner``: the
Autotuner's internals (its hooks, ``do_bench`` property, disk cache and ``run``) change from
release to release, while what this uses is Triton's public surface: ``fn[grid](*args,
**config.all_kwargs())`` (``fn.run``), ``triton.Config``, ``triton.testing.do_bench`` and the
driver's current target. The choice per key is
:class:`~autotune.integrations.stored_configs.StoredChoices` (which knows nothing of Triton):

- the tuning key: function ``triton.<module>.<qualified name>`` (or ``name=``), ``version=``,
  the device (its name; ``CUDA`` or ``HIP``; ``triton <version>`` and the CUDA or HIP version
  torch was built with), and as arguments the values of ``key`` and the dtypes of the tensor
  arguments (what Triton's own cache is keyed by);
- the kernel's source digest (SHA-256 of ``fn.src`` and the sources of the ``@triton.jit``
  functions it calls by a global name): every stored timing is of one source; the result's
  fingerprint adds the configuration list. A changed list times only its new configurations;
  a changed source times them all.

Like Triton's autotuner, configurations that run out of resources or fail ptxas or a
compile-time assertion are never chosen (and recorded as failures); any other error is
raised. Values from the database are data: a stored configuration is only ever matched
against the configurations given here, by its text.
"""

from __future__ import annotations

import functools
import importlib
import logging
import pathlib
import sys
import sysconfig
import threading
from collections.abc import Callable, Sequence
from typing import Any

import platformdirs

from ..tune.records import TrialStatus
from .remembered_digest import remembered_digest
from .stored_configs import Choice, ConfigFailed, StoredChoices, Timing, check_configs, digest

#: The ``function`` column of Triton kernels' rows: this, a dot, the kernel's qualified name.
FUNCTION_PREFIX = "triton"
#: The name of the tensor dtypes in a key's arguments.
DTYPES = "dtypes"
NEEDS = "needs the triton extra: pip install -e '.[triton]'"
#: Where Triton keeps the digest of its own installation that every new process computes before
#: its first compile or cache load (module, function), newest release first.
_START_DIGESTS = (("triton.runtime.cache", "triton_key"), ("triton.compiler.compiler", "triton_key"))
#: Modules Triton imports at a process's first launch (its argument specialization), if present.
_FIRST_LAUNCH_MODULES = ("triton.experimental.gluon",)
#: The name the remembered digest's function is bound under (what tells it from Triton's own).
_REMEMBERED = "remembered_start_digest"

_log = logging.getLogger(__name__)
_start_lock = threading.Lock()
_start: threading.Thread | None = None


def _triton() -> Any:
    try:
        import triton
    except ImportError:
        raise ImportError(f"autotune.integrations.triton {NEEDS}") from None
    return triton


def start_digest_store() -> pathlib.Path:
    """The file where the digest of Triton's installation is remembered between processes."""
    return pathlib.Path(platformdirs.user_cache_dir("autotune")) / "triton_start.json"


def _remember(original: Callable[[], str], name: str) -> None:
    """Triton's installation digest from :func:`start_digest_store` while Triton's files are
    unchanged (else computed by ``original`` and stored), bound in its place in every loaded
    ``triton`` module that holds ``original`` under ``name``."""
    triton = _triton()
    root = pathlib.Path(triton.__file__).resolve().parent
    salt = f"triton {triton.__version__} {sysconfig.get_config_var('EXT_SUFFIX')} {root}"
    value, remembered = remembered_digest(root, original, start_digest_store(), salt=salt)
    if not remembered:
        return  # computed by Triton's own function, which keeps it for the process

    def remembered_start_digest() -> str:
        return value

    remembered_start_digest.__name__ = _REMEMBERED
    replacement = functools.lru_cache(maxsize=None)(remembered_start_digest)
    for module in list(sys.modules.values()):
        module_name = getattr(module, "__name__", None)
        if not isinstance(module_name, str) or not (module_name == "triton"
                                                    or module_name.startswith("triton.")):
            continue
        if getattr(module, name, None) is original:
            setattr(module, name, replacement)


def _start_digest() -> tuple[str, Callable[[], str]] | None:
    """(name, function) of Triton's installation digest as its newest module holding it binds
    it now, or None where no known module does."""
    for module, name in _START_DIGESTS:
        try:
            return name, getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
    return None


def start_digest_remembered() -> bool:
    """Whether this process bound the remembered digest of Triton's installation in place of
    Triton's own function (:func:`warm_triton_start`), rather than hashing Triton's files."""
    found = _start_digest()
    return found is not None and getattr(found[1], "__name__", "") == _REMEMBERED


def _pay_triton_start(remember_digest: bool) -> None:
    found = _start_digest()
    if found is not None:
        name, digest_of_triton = found
        if remember_digest:
            _remember(digest_of_triton, name)
        else:
            digest_of_triton()  # cached by Triton for the rest of the process
    for module in _FIRST_LAUNCH_MODULES:
        try:
            importlib.import_module(module)
        except ImportError:
            continue


def _pay_quietly(remember_digest: bool) -> None:
    try:
        _pay_triton_start(remember_digest)
    except Exception as exc:  # the first launch pays it instead, and raises what it must
        _log.debug("warming Triton's start failed: %s", exc)


def warm_triton_start(remember_digest: bool = True) -> threading.Thread:
    """Start, once a process, a daemon thread that pays ahead of the first launch what Triton's
    first compile or compiled-cache load pays in every new process: the digest of its own
    installation (about 0.4 s with Triton 3.6) and the modules its argument specialization
    imports at first use. The first launch of an :func:`autotune` kernel waits for it, so the
    work is never done twice; any error is left for that launch to meet.

    With ``remember_digest`` (the default) the digest is computed once and remembered in
    :func:`start_digest_store` beside a signature of Triton's files (sizes, change times,
    inodes), and a later process whose Triton files have the same signature binds the
    remembered value in place of Triton's function instead of hashing them again: a file of
    Triton changed, added or replaced makes it compute the digest again."""
    global _start
    with _start_lock:
        if _start is None:
            _start = threading.Thread(target=_pay_quietly, args=(remember_digest,),
                                      name="autotune-triton-start", daemon=True)
            _start.start()
        return _start


def _wait_for_triton_start() -> None:
    started = _start
    if started is not None and started.is_alive():
        started.join()


def config_parameters(config: Any) -> dict[str, Any]:
    """A ``triton.Config`` as the plain dict stored for it: its kwargs and launch options
    (``num_warps``, ``num_stages``, ...), without those left None."""
    if hasattr(config, "all_kwargs"):
        values = dict(config.all_kwargs())
    elif hasattr(config, "kwargs"):
        values = {**config.kwargs, "num_warps": getattr(config, "num_warps", None),
                  "num_stages": getattr(config, "num_stages", None)}
    else:
        raise TypeError(f"configs must be triton.Config objects, got {type(config).__name__}")
    return {k: v for k, v in values.items() if v is not None}


def jit_function(fn: Any) -> Any:
    """The ``@triton.jit`` function under ``fn`` (through ``@triton.heuristics`` and the like);
    TypeError for anything else."""
    seen = fn
    while seen is not None and not hasattr(seen, "src"):
        seen = getattr(seen, "fn", None)
    if seen is None or not hasattr(fn, "run") or not hasattr(fn, "arg_names"):
        raise TypeError(f"autotune decorates a @triton.jit function (put it above @triton.jit), "
                        f"got {type(fn).__name__}")
    return seen


def source_digest(jit: Any) -> str:
    """SHA-256 of the kernel's source and of the ``@triton.jit`` functions it calls through a
    global name, recursively (each once)."""
    parts: list[str] = []
    todo, seen = [jit], set()
    while todo:
        item = todo.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        parts.append(f"{getattr(item, '__qualname__', '')}\n{item.src}")
        python = getattr(item, "fn", None)
        names = getattr(getattr(python, "__code__", None), "co_names", ())
        scope = getattr(item, "__globals__", {}) or {}
        todo += [scope[n] for n in sorted(names) if hasattr(scope.get(n), "src")]
    return digest("\n\x00".join(parts))


def device_identity() -> tuple[str, str, str]:
    """(name, platform, driver and compiler) of the current device, as stored in the key."""
    triton = _triton()
    target = triton.runtime.driver.active.get_current_target()
    backend = str(target.backend)
    name, toolkit = f"{backend} {target.arch}", ""
    try:
        import torch

        name = torch.cuda.get_device_name(torch.cuda.current_device())
        toolkit = torch.version.hip if backend == "hip" else torch.version.cuda
    except Exception:  # no torch, or no device it knows: the target names the device
        pass
    platform = "HIP" if backend == "hip" else backend.upper()
    driver = f"triton {triton.__version__}" + (f", {platform} {toolkit}" if toolkit else "")
    return name, platform, driver


def key_value(name: str, value: Any) -> Any:
    """A kernel argument's value as part of the key: numbers, strings, booleans and None as
    they are, dtypes as their names; ValueError for anything else (a tensor)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if type(value).__name__ == "dtype" or hasattr(value, "primitive_bitwidth"):
        return str(value)
    if hasattr(value, "item") and not getattr(value, "shape", ()):
        return value.item()
    raise ValueError(f"key argument {name!r} is a {type(value).__name__}; key on numbers, "
                     "strings or dtypes (pass a tensor's size as an argument)")


def _failures() -> tuple[type[BaseException], ...]:
    """Triton's errors that make a configuration unusable here (as its autotuner treats them)."""
    found: list[type[BaseException]] = []
    for module, name in (("triton.runtime.errors", "OutOfResources"),
                         ("triton.runtime.errors", "PTXASError"),
                         ("triton.compiler.errors", "CompileTimeAssertionFailure")):
        try:
            found.append(getattr(__import__(module, fromlist=[name]), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


class TritonAutotuned:
    """A ``@triton.jit`` function whose configuration per key is chosen through the tuning
    database; launched as the function is: ``kernel[grid](*args, **kwargs)``.

    ``best_config`` is the ``triton.Config`` of the last launch; ``last_choice`` how it was
    found (:class:`~autotune.integrations.stored_configs.Choice`).
    """

    def __init__(self, fn: Any, configs: Sequence[Any], key: Sequence[str], *,
                 reset_to_zero: Sequence[str] | None = None,
                 restore_value: Sequence[str] | None = None,
                 prune_configs_by: dict[str, Any] | None = None, warmup: int | None = None,
                 rep: int | None = None, do_bench: Callable[..., Any] | None = None,
                 name: str | None = None, version: int = 0, database: str | None = None,
                 prefetch: bool = True):
        self.fn = fn
        self.base = jit_function(fn)
        self.arg_names = list(fn.arg_names)
        self.configs = list(configs)
        self.parameters = [config_parameters(c) for c in self.configs]
        check_configs(self.parameters)
        self.keys = _names("key", key, self.arg_names)
        if DTYPES in self.keys:
            raise ValueError(f"key: {DTYPES!r} is the name the tensors' dtypes are stored under; "
                             "rename the kernel argument")
        self.reset_to_zero = _names("reset_to_zero", reset_to_zero or (), self.arg_names)
        self.restore_value = _names("restore_value", restore_value or (), self.arg_names)
        self.prune = _prune(prune_configs_by)
        self.do_bench = do_bench
        self.warmup_ms, self.rep_ms = warmup, rep
        if not isinstance(version, int) or isinstance(version, bool) or version < 0:
            raise ValueError(f"version must be a non-negative int, got {version!r}")
        self.name = name or f"{FUNCTION_PREFIX}.{self.base.__module__}.{self.base.__qualname__}"
        self.version, self.database = version, database
        #: key values -> (triton.Config, its launch keywords), in this process
        self.cache: dict[tuple, tuple[Any, dict[str, Any]]] = {}
        self.best_config: Any = None
        self.last_choice: Choice | None = None
        self._choices: StoredChoices | None = None
        self._lock = threading.Lock()
        if prefetch:
            warm_triton_start()

    def __repr__(self) -> str:
        return f"<autotune.integrations.triton {self.name} ({len(self.configs)} configs)>"

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def choices(self) -> StoredChoices:
        """The stored choices of this kernel on the current device (made at the first launch:
        it asks the driver)."""
        if self._choices is None:
            self._choices = StoredChoices(self.name, source_digest(self.base), device_identity(),
                                          self.version, self.database, self.base.__name__)
        return self._choices

    def key_arguments(self, named: dict[str, Any]) -> dict[str, Any]:
        """The arguments part of the tuning key of one launch."""
        arguments = {k: key_value(k, named.get(k)) for k in self.keys}
        arguments[DTYPES] = [str(v.dtype) for n, v in named.items()
                             if n in self.arg_names and hasattr(v, "dtype")]
        return arguments

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        """Launch with the configuration chosen for these arguments (chosen now if needed)."""
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        if warmup:  # compile every configuration, as Triton's autotuner does
            _wait_for_triton_start()
            return [self.fn.run(*args, grid=grid, warmup=True, **kwargs, **config_parameters(c))
                    for c in self.configs]
        marker = tuple(named.get(k) for k in self.keys) + tuple(
            str(v.dtype) for v in named.values() if hasattr(v, "dtype"))
        chosen = self.cache.get(marker)
        if chosen is None:
            _wait_for_triton_start()
            with self._lock:
                chosen = self._choose(marker, args, grid, kwargs, named)
        config, launch = chosen
        self.best_config = config
        if getattr(config, "pre_hook", None) is not None:
            config.pre_hook({**named, **launch})
        return self.fn.run(*args, grid=grid, warmup=False, **kwargs, **launch)

    def _choose(self, marker: tuple, args: tuple, grid: Any, kwargs: dict[str, Any],
                named: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        configs = self.configs
        if self.prune is not None:
            configs = list(self.prune(self.configs, dict(zip(self.arg_names, args)), **kwargs))
            if not configs:
                raise ValueError(f"{self.name}: early_config_prune left no configuration")
        clash = sorted(set(kwargs) & {k for c in configs for k in c.kwargs})
        if clash:
            raise ValueError(f"{self.name}: {', '.join(clash)} given at the launch and tuned by "
                             "the configurations; pass them in one place only")
        parameters = [config_parameters(c) for c in configs]
        bench = _Bench(self, configs, args, grid, kwargs, named)
        choice = self.choices().choose(self.key_arguments(named), parameters, bench)
        bench.reset()
        self.last_choice = choice
        chosen = self.cache[marker] = (configs[choice.index], parameters[choice.index])
        return chosen

    def forget(self) -> None:
        """Forget this process's choices (the database keeps them)."""
        self.cache.clear()
        if self._choices is not None:
            self._choices.forget()


class _Bench:
    """Times configuration ``i`` of one launch's arguments, restoring ``restore_value``
    tensors before each call and zeroing ``reset_to_zero`` ones."""

    def __init__(self, tuned: TritonAutotuned, configs: list[Any], args: tuple, grid: Any,
                 kwargs: dict[str, Any], named: dict[str, Any]):
        self.tuned, self.configs, self.args, self.grid = tuned, configs, args, grid
        self.kwargs, self.named = kwargs, named
        self.copies: dict[str, Any] | None = None  #: restore_value's tensors, once timing starts

    def reset(self) -> None:
        """Put the arguments back as they were given (a lookup that timed nothing changes
        nothing)."""
        if self.copies is None:
            return
        for name, copy in self.copies.items():
            self.named[name].copy_(copy)
        for name in self.tuned.reset_to_zero:
            if self.named.get(name) is not None:
                self.named[name].zero_()

    def __call__(self, index: int) -> Timing:
        if self.copies is None:
            self.copies = {n: self.named[n].clone() for n in self.tuned.restore_value
                           if self.named.get(n) is not None}
        config = self.configs[index]
        launch = {**self.kwargs, **config_parameters(config)}
        full = {**self.named, **launch}
        hook = getattr(config, "pre_hook", None)

        def call() -> None:
            self.reset()
            if hook is not None:
                hook(full)
            self.tuned.fn.run(*self.args, grid=self.grid, warmup=False, **launch)

        try:
            times = self._do_bench(call)
        except _failures() as exc:
            status = (TrialStatus.LAUNCH_ERROR if type(exc).__name__ == "OutOfResources"
                      else TrialStatus.COMPILE_ERROR)
            raise ConfigFailed(f"{type(exc).__name__}: {exc}", status) from None
        if isinstance(times, (int, float)):
            return Timing(float(times) / 1e3)
        median, low, high = (float(t) / 1e3 for t in times)
        return Timing(median, low, high)

    def _do_bench(self, call: Callable[[], None]) -> Any:
        quantiles = (0.5, 0.2, 0.8)
        if self.tuned.do_bench is not None:
            return self.tuned.do_bench(call, quantiles=quantiles)
        from triton.testing import do_bench

        options = {k: v for k, v in (("warmup", self.tuned.warmup_ms), ("rep", self.tuned.rep_ms))
                   if v is not None}
        return do_bench(call, quantiles=quantiles, **options)


def _names(what: str, names: Any, arg_names: list[str]) -> list[str]:
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{what} must be a list of argument names, got {names!r}")
    unknown = [n for n in names if n not in arg_names]
    if unknown:
        raise ValueError(f"{what}: {', '.join(unknown)} not among the kernel's arguments "
                         f"({', '.join(arg_names)})")
    return list(names)


def _prune(prune_configs_by: dict[str, Any] | None) -> Callable[..., Any] | None:
    if not prune_configs_by:
        return None
    if not isinstance(prune_configs_by, dict):
        raise TypeError(f"prune_configs_by must be a dict, got {prune_configs_by!r}")
    other = sorted(set(prune_configs_by) - {"early_config_prune"})
    if other:
        raise ValueError(f"prune_configs_by: {', '.join(other)} not supported (a performance "
                         "model chooses without timing); only early_config_prune is")
    prune = prune_configs_by["early_config_prune"]
    if not callable(prune):
        raise TypeError("prune_configs_by['early_config_prune'] must be callable")
    return prune


def autotune(configs: Sequence[Any], key: Sequence[str], *,
             reset_to_zero: Sequence[str] | None = None, restore_value: Sequence[str] | None = None,
             prune_configs_by: dict[str, Any] | None = None, warmup: int | None = None,
             rep: int | None = None, do_bench: Callable[..., Any] | None = None,
             name: str | None = None, version: int = 0, database: str | None = None,
             prefetch: bool = True) -> Callable[[Any], TritonAutotuned]:
    """Decorator for a ``@triton.jit`` function, used as ``@triton.autotune`` is (the same
    ``configs``, ``key``, ``reset_to_zero``, ``restore_value``, ``prune_configs_by`` with
    ``early_config_prune``, ``warmup``, ``rep``, ``do_bench``). Added: ``name`` (the stored
    function name, default ``triton.<module>.<qualified name>``), ``version`` (raise it to make
    stored results stale by hand), ``database`` (a path or URL; default ``AUTOTUNE_DB``),
    ``prefetch`` (default True: :func:`warm_triton_start` at decoration, so Triton's own
    per-process start overlaps what the program does before its first launch, and the digest
    of Triton's installation is remembered for later processes)."""
    _triton()
    configs = list(configs)

    def decorate(fn: Any) -> TritonAutotuned:
        return TritonAutotuned(fn, configs, key, reset_to_zero=reset_to_zero,
                               restore_value=restore_value, prune_configs_by=prune_configs_by,
                               warmup=warmup, rep=rep, do_bench=do_bench, name=name,
                               version=version, database=database, prefetch=prefetch)

    return decorate


__all__ = ["DTYPES", "FUNCTION_PREFIX", "NEEDS", "TritonAutotuned", "autotune", "config_parameters",
           "device_identity", "jit_function", "key_value", "source_digest",
           "start_digest_remembered", "start_digest_store", "warm_triton_start"]
