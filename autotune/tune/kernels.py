"""Kernel Tuner's calling convention: ``tune_kernel`` and ``tuned_kernel`` over a raw CUDA or
OpenCL source, with results kept in the tuning database like every template's.

>>> results, env = tune.tune_kernel("vector_add", source, n, [c, a, b, np.int32(n)],
...                                 {"block_size_x": [64, 128, 256]}, answer=[a + b, None, None, None])
>>> add = tune.tuned_kernel("vector_add", source, n, [c, a, b, np.int32(n)],
...                         {"block_size_x": [64, 128, 256]})
>>> c, *_ = add(c, a, b, np.int32(n))

Design. ``@tune.autotuner`` fixes ``test=`` (the schema of every stored result) when it
decorates, and tune_params differ from call to call; so each call makes its own
:class:`~.decorator.TunedFunction` over a tuning function closed over the arrays, the answer
and the verify function (data that is no part of the key). Its key is the function
``tune_kernel.<kernel_name>``, and as arguments a SHA-256 of the source and what else shapes the
compiled kernel (language, compiler options, block size names, grid divisors), the problem size
and the arguments' dtypes and shapes; the device is the key's device part. Its ``test=`` is the
first configuration of the space that the restrictions allow: what a call returns under pytest
(test mode) without tuning. Memo, database lookup, stale detection of the space, warm starts,
strategies and budgets are the tuner's own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import accel
from .closeness import Closeness, DeviceCloseness
from .decorator import TunedFunction
from .serving import get_store, serving
from .evaluation import Budget
from .encoding import InvalidParametersError, decode_parameters, validate_parameters
from .expressions import ExpressionError, parse_expression
from .kernel_source import (GRID_SIZE_NAMES, MARKER_DEFINE, ArgumentSpec, Geometry, KernelSource,
                            argument_spec, argument_specs, block_names, check_backend,
                            check_kernel_name, compiler_options, grid_divisor, problem_dims,
                            read_source, settings_digest, with_defines)
from .measurement import make_measure
from .search import AutotuneError, search
from .strategies import STRATEGIES
from .space import Space, SpaceError, limit
from .store import StoreError, database_url, display
from .validation import trial_problem

logger = logging.getLogger("autotune.tune")

#: The ``function`` column of results tuned through :func:`tune_kernel`: this, a dot, the kernel.
FUNCTION_PREFIX = "tune_kernel"


@dataclass(frozen=True)
class KernelSetup:
    """Everything a call says about the kernel, checked: what its key and its candidates are
    made of."""

    kernel_name: str
    source: KernelSource
    options: tuple[str, ...]
    geometry: Geometry
    specs: tuple[ArgumentSpec, ...]
    space: Space
    test: dict[str, Any]
    digest: str  #: :func:`~.kernel_source.settings_digest`

    def key_arguments(self) -> dict[str, Any]:
        """The arguments part of the tuning key (besides the function and the device)."""
        return {"setup": self.digest[:16], "problem_size": self.geometry.problem,
                "arguments": [s.describe() for s in self.specs]}

    def compile(self, context: accel.Context, params: dict[str, Any]) -> accel.Kernel:
        """The kernel of one configuration: the source after its ``#define`` lines."""
        source = with_defines(self.source, self.geometry.defines(params))
        return context.compile(source, self.options).get_kernel(self.kernel_name)


def _restriction(item: Any, names: Sequence[str]) -> Callable[[dict[str, Any]], Any]:
    if isinstance(item, str):
        return limit(item, parse_expression(item, names))
    if callable(item):
        return item
    raise TypeError(f"restriction {item!r} is neither a string nor a callable; pass expressions "
                    "such as 'block_size_x*tile>=32', or functions taking the parameters as a dict")


def _restriction_items(restrictions: Any) -> list[Any]:
    if restrictions is None:
        return []
    if isinstance(restrictions, str) or callable(restrictions):
        return [restrictions]
    if not isinstance(restrictions, (list, tuple)):
        raise TypeError(f"restrictions must be a list of strings or callables, got {restrictions!r}")
    return list(restrictions)


def _space(tune_params: dict[str, Any], items: list[Any], geometry: Geometry,
           context: accel.Context) -> Space:
    names = list(tune_params)
    reserved = [n for n in names if n in (*GRID_SIZE_NAMES, MARKER_DEFINE)]
    if reserved:
        raise ValueError(f"tune_params {reserved} clash with the names tune_kernel defines "
                         f"({', '.join(GRID_SIZE_NAMES)}, {MARKER_DEFINE}); rename them")
    rules = [_restriction(item, names) for item in items]
    most = context.device.max_work_group_size

    def fits(params: dict[str, Any]) -> bool:
        x, y, z = geometry.block(params)
        return x * y * z <= most

    rules.append(limit(f"the work-group ({' * '.join(geometry.blocks)}) fits the device's limit "
                       f"of {most}", fits))
    try:
        return Space({name: list(values) for name, values in tune_params.items()}, rules)
    except (SpaceError, TypeError) as exc:
        raise ValueError(f"tune_params: {exc}") from None


def prepare(context: accel.Context, kernel_name: Any, kernel_source: Any, problem_size: Any,
            arguments: Any, tune_params: Any, *, restrictions: Any = None, grid_div_x: Any = None,
            grid_div_y: Any = None, grid_div_z: Any = None, block_size_names: Any = None,
            lang: Any = None, compiler_options_: Any = None) -> KernelSetup:
    """Check a call's description of the kernel and make its :class:`KernelSetup`."""
    source = read_source(kernel_source, lang)
    name = check_kernel_name(kernel_name, source)
    check_backend(source, context)
    options = compiler_options(compiler_options_)
    blocks = block_names(block_size_names)
    if not isinstance(tune_params, dict) or not tune_params:
        raise TypeError(f"tune_params must be a non-empty dict of parameter name -> list of "
                        f"values, got {tune_params!r}")
    names = list(tune_params)
    divs = (grid_div_x, grid_div_y, grid_div_z)
    divisors = tuple(grid_divisor(spec, dim, blocks, names) for dim, spec in enumerate(divs))
    geometry = Geometry(problem_dims(problem_size), blocks, divisors)  # type: ignore[arg-type]
    specs = argument_specs(arguments)
    items = _restriction_items(restrictions)
    space = _space(tune_params, items, geometry, context)
    try:
        configurations = space.configurations()
    except SpaceError as exc:
        raise ValueError(str(exc)) from None
    if not configurations:
        raise AutotuneError(f"the restrictions exclude every one of the {space.size} configurations "
                            "of tune_params; loosen them")
    return KernelSetup(name, source, options, geometry, specs, space, configurations[0],
                       settings_digest(source, options, blocks, divs, space.parameters,
                                       [r for r in items if isinstance(r, str)]))


class KernelTunedFunction(TunedFunction):
    """The tuned function of one :func:`tune_kernel` call: its rows are named
    ``tune_kernel.<kernel_name>``."""

    def __init__(self, fn: Callable, setup: KernelSetup):
        super().__init__(fn, setup.test, space=setup.space)
        self.setup = setup

    def name(self, owner: Any = None) -> str:
        return f"{FUNCTION_PREFIX}.{self.setup.kernel_name}"


@dataclass
class _TuningData:
    """What a search measures with, besides the key: the arrays, and how to check results."""

    arguments: list[Any]
    answer: list[Any] | None = None
    verify: Callable[..., Any] | None = None
    atol: float = 1e-6
    strategy: str | None = None
    max_evals: int | None = None
    max_seconds: float | None = None
    search: Any = None  #: the search's result, once one ran


def _check_answer(answer: Any, specs: Sequence[ArgumentSpec]) -> list[Any] | None:
    if answer is None:
        return None
    if isinstance(answer, (str, bytes, np.ndarray)) or not isinstance(answer, Sequence) \
            or len(answer) != len(specs):
        raise ValueError(f"answer must be a list as long as arguments ({len(specs)}), with None for "
                         "the arguments not checked")
    clean: list[Any] = []
    for i, (expected, spec) in enumerate(zip(answer, specs)):
        if expected is None:
            clean.append(None)
            continue
        if spec.shape is None:
            raise ValueError(f"answer[{i}] is given but argument {i} is a scalar; kernels cannot "
                             "write scalars: put None there")
        expected = np.asarray(expected)
        if expected.dtype != spec.dtype or expected.size != int(np.prod(spec.shape)):
            raise ValueError(f"answer[{i}] has dtype {expected.dtype} and {expected.size} elements, "
                             f"argument {i} dtype {spec.dtype} and {int(np.prod(spec.shape))}; "
                             "they must agree")
        clean.append(expected)
    return clean


def _tuning_function(prepared: KernelSetup, data: _TuningData) -> Callable[..., dict[str, Any]]:
    """The tuning function of one call: its parameters after the context are the key's
    arguments (``setup``: :meth:`KernelSetup.key_arguments`); the arrays and the checks come
    from ``data``."""

    def tune_kernel_search(context: accel.Context, setup: str, problem_size: tuple,
                           arguments: list) -> dict[str, Any]:
        queue = context.create_tuning_command_queue()
        hosts = [np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a for a in data.arguments]
        # the arguments as given stay on the device: each candidate starts from a copy there
        given = [context.to_device(queue, a) if isinstance(a, np.ndarray) else None for a in hosts]
        device_args = [context.allocate(a.shape, a.dtype) if isinstance(a, np.ndarray) else a
                       for a in hosts]
        close = None if data.answer is None or data.verify is not None else \
            [None if e is None else Closeness(e, data.atol) for e in data.answer]
        # on a GPU checked where the output is (one number back instead of the output); on a
        # CPU device the output is in host memory already, and the host checks it
        on_device = None if close is None else \
            [None if c is None or not context.device.is_gpu
             else DeviceCloseness.make(context, queue, c) for c in close]

        def upload() -> None:  # inputs and outputs as given, before each candidate's checked run
            for start, dev in zip(given, device_args):
                if start is not None:
                    dev.copy_from(queue, start)

        def check() -> bool:
            checked = data.answer
            if data.verify is not None:
                results = [dev.get(queue) if checked[i] is not None else None
                           for i, dev in enumerate(device_args)]
                return bool(data.verify(checked, results, atol=data.atol))
            return all(there(dev) if there is not None else here(dev.get(queue))
                       for dev, here, there in zip(device_args, close, on_device)
                       if here is not None)

        def generate(**params: Any) -> Any:
            kernel = prepared.compile(context, params)
            global_size, local_size = prepared.geometry.sizes(params)
            launch = queue.launcher(kernel, global_size, local_size)
            return make_measure(queue, lambda: launch(device_args),
                                check if data.answer is not None else None, setup=upload)

        kwargs = {k: v for k, v in (("strategy", data.strategy), ("max_evals", data.max_evals),
                                    ("max_seconds", data.max_seconds)) if v is not None}
        data.search = search(generate, prepared.space, **kwargs)
        return data.search.best

    return tune_kernel_search


# -- Kernel Tuner's strategy names and options -------------------------------------------------

#: Kernel Tuner's names of the strategies that have a counterpart here.
KERNEL_TUNER_STRATEGIES = {"brute_force": "brute_force", "random_sample": "random",
                           "simulated_annealing": "annealing", "genetic_algorithm": "genetic",
                           "greedy_ils": "local", "bayes_opt": "bayes"}
#: Kernel Tuner's ``strategy_options`` that have a counterpart here, and its name.
KERNEL_TUNER_OPTIONS = {"max_fevals": "max_evals", "time_limit": "max_seconds"}


def search_choice(strategy: Any, strategy_options: Any, max_evals: Any,
                  max_seconds: Any) -> tuple[str | None, Any, Any]:
    """(strategy, max_evals, max_seconds) from ours or Kernel Tuner's names and options."""
    if strategy is not None:
        if not isinstance(strategy, str) or (strategy not in STRATEGIES
                                             and strategy not in KERNEL_TUNER_STRATEGIES):
            raise ValueError(f"unknown strategy {strategy!r}; choose from {', '.join(STRATEGIES)} "
                             f"(or Kernel Tuner's {', '.join(KERNEL_TUNER_STRATEGIES)})")
        strategy = KERNEL_TUNER_STRATEGIES.get(strategy, strategy)
    if strategy_options is not None:
        if not isinstance(strategy_options, dict):
            raise TypeError(f"strategy_options must be a dict, got {strategy_options!r}")
        unknown = sorted(set(strategy_options) - set(KERNEL_TUNER_OPTIONS))
        if unknown:
            raise ValueError(f"strategy_options {unknown} are not supported; use "
                             f"{', '.join(KERNEL_TUNER_OPTIONS)} (or max_evals=, max_seconds=)")
        if max_evals is None:
            max_evals = strategy_options.get("max_fevals")
        if max_seconds is None:
            max_seconds = strategy_options.get("time_limit")
    Budget(max_evals, max_seconds)  # a bad budget is an error now, not when a search starts
    return strategy, max_evals, max_seconds


# -- the default context -----------------------------------------------------------------------

def default_context(lang: str) -> accel.Context:
    """The context a call without ``context=`` uses: ``AUTOTUNE_DEVICE``'s choice where it is
    set, else the best device of the source's backend; opened once per process."""
    selector = os.environ.get(accel.ENV_DEVICE, "").strip() or lang
    return serving().context(selector, accel.create_some_context)


def _context_for(context: Any, kernel_source: Any, lang: Any) -> accel.Context:
    if context is not None:
        if not isinstance(context, accel.Context):
            raise TypeError(f"context must be an accel.Context, got {type(context).__name__}")
        return context
    return default_context(read_source(kernel_source, lang).lang)


# -- results -----------------------------------------------------------------------------------


def _trial_row(parameters: dict[str, Any], status: str, median: float | None,
               message: str) -> dict[str, Any]:
    row = dict(parameters)
    row["status"] = status
    if status == "ok" and median is not None:
        row["time"] = median * 1e3
    elif message:
        row["error"] = message
    return row


def _stored_rows(tuned: KernelTunedFunction, key: Any, digest: str) -> list[dict[str, Any]]:
    """The stored trials of ``key`` from the run that found its result (those with the current
    fingerprint), as :func:`tune_kernel` rows; [] where the database cannot be read, and in
    test mode (under pytest no database is opened)."""
    if serving().test.returns_test:
        return []
    try:
        trials = get_store(database_url()).trials(key)
    except StoreError as exc:
        logger.info("tune_kernel: the trials of %s could not be read: %s", key.function, exc)
        return []
    rows = []
    for trial in trials:
        if trial.fingerprint != digest or trial_problem(trial):
            continue
        try:
            params = validate_parameters(decode_parameters(trial.parameters), tuned.test)
        except InvalidParametersError:
            continue
        rows.append(_trial_row(params, trial.status, trial.median_seconds, trial.message))
    return rows


@dataclass
class KernelTuning:
    """What :func:`tune_kernel` returns. It unpacks as Kernel Tuner's ``results, env``; the
    parameters to use are ``best``."""

    best: dict[str, Any]  #: the parameters served (tuned now, or stored earlier)
    results: list[dict[str, Any]]  #: each configuration measured: its parameters, ``time`` (ms), ``status``
    env: dict[str, Any]  #: the device, the key, the database, whether this call tuned
    tuned: bool  #: True when this call measured; False when the result was served
    key: Any = None  #: the :class:`~.records.TuningKey` of the result
    search_info: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Any]:
        yield self.results
        yield self.env


def _env(context: accel.Context, setup: KernelSetup, key: Any, tuned: bool,
         info: dict[str, Any]) -> dict[str, Any]:
    return {
        "kernel_name": setup.kernel_name, "device_name": context.device.name,
        "platform": context.device.platform, "driver_version": context.device.driver_version,
        "backend": context.backend, "lang": setup.source.lang, "source": setup.source.name,
        "source_digest": setup.digest, "problem_size": setup.geometry.problem,
        "function": key.function, "arguments": key.arguments, "database": display(database_url()),
        "tuned": tuned, "search": dict(info),
    }


def _resolve(context: accel.Context, setup: KernelSetup, data: _TuningData
             ) -> tuple[KernelTunedFunction, dict[str, Any]]:
    tuned = KernelTunedFunction(_tuning_function(setup, data), setup)
    params = tuned(context, **setup.key_arguments())
    return tuned, params


def tune_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: Sequence[Any],
                tune_params: dict[str, Sequence[Any]], *, restrictions: Any = None,
                answer: Sequence[Any] | None = None, atol: float = 1e-6,
                verify: Callable[..., Any] | None = None, grid_div_x: Any = None,
                grid_div_y: Any = None, grid_div_z: Any = None,
                block_size_names: Sequence[str] | None = None, lang: str | None = None,
                compiler_options: Sequence[str] | None = None, strategy: str | None = None,
                strategy_options: dict[str, Any] | None = None, max_evals: int | None = None,
                max_seconds: float | None = None,
                context: accel.Context | None = None) -> KernelTuning:
    """Tune a CUDA or OpenCL kernel in Kernel Tuner's calling convention, or serve the result
    stored for the same source, problem size, argument types and device.

    Tunable parameters become ``#define`` lines before the source; ``block_size_x/y/z`` (or
    ``block_size_names``) are the work-group shape; the grid is the problem size divided by the
    product of ``grid_div_x/y/z`` (default: the block size of that dimension). ``restrictions``
    are expressions over the parameters (strings, checked and evaluated without ``eval``) or
    functions of the parameters dict. ``answer`` lists the expected outputs (None where not
    checked), compared with ``numpy.allclose(..., atol=atol)`` or by ``verify(answer, result,
    atol=atol)``. Returns a :class:`KernelTuning` (``results, env = tune_kernel(...)`` works;
    ``.best`` holds the parameters).
    """
    context = _context_for(context, kernel_source, lang)
    setup = prepare(context, kernel_name, kernel_source, problem_size, arguments, tune_params,
                    restrictions=restrictions, grid_div_x=grid_div_x, grid_div_y=grid_div_y,
                    grid_div_z=grid_div_z, block_size_names=block_size_names, lang=lang,
                    compiler_options_=compiler_options)
    checked = _check_answer(answer, setup.specs)
    if verify is not None and (not callable(verify) or checked is None):
        raise ValueError("verify= needs a callable verify(answer, result, atol=...) and answer= "
                         "(the expected outputs it is given)")
    data = _TuningData(list(arguments), checked, verify, float(atol),
                       *search_choice(strategy, strategy_options, max_evals, max_seconds))
    tuned, params = _resolve(context, setup, data)
    key = tuned.key(context, **setup.key_arguments())
    if data.search is not None:
        rows = [_trial_row(t.parameters, t.status.value, t.median_seconds, t.message)
                for t in data.search.trials]
        info = dict(data.search.info)
    else:
        rows = _stored_rows(tuned, key, tuned.fingerprint(context, **setup.key_arguments()).digest)
        info = {}
    env = _env(context, setup, key, data.search is not None, info)
    return KernelTuning(params, rows, env, data.search is not None, key, info)


class TunedKernel:
    """A kernel compiled with the parameters served for it; calling it launches it.

    ``kernel(*args, queue=None)`` takes arguments of the dtypes and shapes it was tuned for:
    device arrays of its context (used in place) or numpy arrays (copied in, and back out),
    and numpy scalars. It returns a list as long as the arguments: for each numpy array the
    array the kernel left (a new array), device arrays and scalars as given. With numpy arrays
    the call waits for the kernel; with device arrays only, it only enqueues it.
    """

    def __init__(self, context: accel.Context, setup: KernelSetup, parameters: dict[str, Any]):
        self.context = context
        self.setup = setup
        self.parameters = dict(parameters)
        self.kernel = setup.compile(context, self.parameters)
        self.global_size, self.local_size = setup.geometry.sizes(self.parameters)
        self.queue = context.create_command_queue()
        self._launchers: dict[int, Callable[[Sequence[Any]], None]] = {}

    def __repr__(self) -> str:
        return f"<TunedKernel {self.setup.kernel_name} {self.parameters}>"

    def _launcher(self, queue: accel.CommandQueue) -> Callable[[Sequence[Any]], None]:
        launch = self._launchers.get(id(queue))
        if launch is None:
            launch = self._launchers[id(queue)] = queue.launcher(self.kernel, self.global_size,
                                                                 self.local_size)
        return launch

    def __call__(self, *args: Any, queue: accel.CommandQueue | None = None) -> list[Any]:
        specs = self.setup.specs
        if len(args) != len(specs):
            raise TypeError(f"{self.setup.kernel_name} takes {len(specs)} arguments "
                            f"({', '.join(s.describe() for s in specs)}), got {len(args)}")
        queue = queue or self.queue
        device_args: list[Any] = []
        for i, (arg, spec) in enumerate(zip(args, specs)):
            got = argument_spec(arg, i)
            if got != spec:
                raise TypeError(f"argument {i} is {got.describe()}, but {self.setup.kernel_name} was "
                                f"tuned for {spec.describe()}; tune it for these arguments with "
                                "another tuned_kernel")
            if isinstance(arg, np.ndarray):
                device_args.append(self.context.to_device(queue, np.ascontiguousarray(arg)))
            else:
                device_args.append(arg)
        self._launcher(queue)(device_args)
        return [dev.get(queue) if isinstance(arg, np.ndarray) else arg
                for arg, dev in zip(args, device_args)]


def tuned_kernel(kernel_name: str, kernel_source: Any, problem_size: Any, arguments: Sequence[Any],
                 tune_params: dict[str, Sequence[Any]], *, restrictions: Any = None,
                 grid_div_x: Any = None, grid_div_y: Any = None, grid_div_z: Any = None,
                 block_size_names: Sequence[str] | None = None, lang: str | None = None,
                 compiler_options: Sequence[str] | None = None, strategy: str | None = None,
                 strategy_options: dict[str, Any] | None = None, max_evals: int | None = None,
                 max_seconds: float | None = None, context: accel.Context | None = None,
                 tuning: dict[str, Any] | None = None) -> TunedKernel:
    """The kernel of :func:`tune_kernel` (the same arguments, less the answer), compiled with
    the parameters stored for it (tuned now on ``arguments`` if none are), or with ``tuning=``
    (checked: the names of tune_params, and the restrictions). Returns a :class:`TunedKernel`."""
    context = _context_for(context, kernel_source, lang)
    setup = prepare(context, kernel_name, kernel_source, problem_size, arguments, tune_params,
                    restrictions=restrictions, grid_div_x=grid_div_x, grid_div_y=grid_div_y,
                    grid_div_z=grid_div_z, block_size_names=block_size_names, lang=lang,
                    compiler_options_=compiler_options)
    if tuning is not None:
        try:
            params = validate_parameters(tuning, setup.test)
        except InvalidParametersError as exc:
            raise ValueError(f"{kernel_name}: tuning {tuning!r}: {exc}") from None
        why = setup.space.runs(params)
        if why is not None:
            raise ValueError(f"{kernel_name}: tuning {params} cannot be used: {why}")
    else:
        data = _TuningData(list(arguments), None, None, 1e-6,
                           *search_choice(strategy, strategy_options, max_evals, max_seconds))
        params = _resolve(context, setup, data)[1]
    return TunedKernel(context, setup, params)


__all__ = ["FUNCTION_PREFIX", "ExpressionError", "KernelSetup", "KernelTuning", "TunedKernel",
           "default_context", "prepare", "tune_kernel", "tuned_kernel"]
