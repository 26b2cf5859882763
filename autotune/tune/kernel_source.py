"""The pieces of Kernel Tuner's calling convention that are not tuning: the kernel source and
its language, the ``#define`` lines of one configuration, the launch geometry (block and grid)
and the kernel's arguments.

:mod:`.kernels` builds :func:`~.kernels.tune_kernel` and :func:`~.kernels.tuned_kernel` on them.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import accel
from ..accel.render import Origins, RenderedSource
from .expressions import Expression, ExpressionError, parse_expression

#: Kernel Tuner's default names of the work-group (thread block) dimensions.
DEFAULT_BLOCK_SIZE_NAMES = ("block_size_x", "block_size_y", "block_size_z")
#: The block size of a dimension whose name is not a tunable parameter (as Kernel Tuner).
DEFAULT_BLOCK_SIZE = (256, 1, 1)
GRID_SIZE_NAMES = ("grid_size_x", "grid_size_y", "grid_size_z")
#: Defined as 1 in every source, as Kernel Tuner does, so that ``#ifdef kernel_tuner`` works.
MARKER_DEFINE = "kernel_tuner"
LANGUAGES = {"cuda": "cuda", "opencl": "opencl"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXTENSIONS = {".cu": "cuda", ".cuh": "cuda", ".cl": "opencl"}


@dataclass(frozen=True)
class KernelSource:
    """A kernel's source text, where it came from and its language (``cuda`` or ``opencl``)."""

    text: str
    name: str  #: the file name, or ``<string>``: what compiler messages cite
    lang: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


def _looks_like_path(source: str) -> bool:
    """A string without line breaks that names a file, or ends like a kernel file's name."""
    if "\n" in source or len(source) >= 4096:
        return False
    if Path(source).suffix.lower() in (*_EXTENSIONS, ".c", ".cpp", ".h", ".txt"):
        return True
    try:
        return Path(source).is_file()
    except (OSError, ValueError):  # a one-line source too long for a file name, a NUL byte
        return False


def read_source(kernel_source: Any, lang: str | None) -> KernelSource:
    """The source text (``kernel_source`` is the text or a file path) and its language:
    ``lang`` (``"CUDA"`` or ``"OpenCL"``, any case), else detected from the file extension or
    the text (``__global__``: CUDA; ``__kernel``: OpenCL)."""
    if isinstance(kernel_source, Path) or (isinstance(kernel_source, str)
                                           and _looks_like_path(kernel_source)):
        path = Path(kernel_source)
        if not path.is_file():
            raise FileNotFoundError(f"kernel_source {str(path)!r} is not a file; pass the kernel's "
                                    "source text or the path of a file that holds it")
        text, name, suffix = path.read_text(), path.name, path.suffix.lower()
    elif isinstance(kernel_source, str):
        text, name, suffix = kernel_source, "<string>", ""
    else:
        raise TypeError(f"kernel_source must be the source text or a file path, not "
                        f"{type(kernel_source).__name__}")
    if lang is not None:
        if not isinstance(lang, str) or lang.strip().lower() not in LANGUAGES:
            raise ValueError(f"lang={lang!r} is not supported; use 'CUDA' or 'OpenCL' (or leave it "
                             "out to detect the language from the source)")
        return KernelSource(text, name, LANGUAGES[lang.strip().lower()])
    found = _EXTENSIONS.get(suffix) or _detect(text)
    if found is None:
        raise ValueError(f"cannot tell the language of kernel source {name}: it has neither "
                         "__global__ (CUDA) nor __kernel (OpenCL); pass lang='CUDA' or "
                         "lang='OpenCL'")
    return KernelSource(text, name, found)


def _detect(text: str) -> str | None:
    cuda = re.search(r"\b__global__\b", text) is not None
    opencl = re.search(r"\b__kernel\b|(?<![\w.])kernel\s+void\b", text) is not None
    if cuda and not opencl:
        return "cuda"
    if opencl and not cuda:
        return "opencl"
    return None


def check_backend(source: KernelSource, context: accel.Context) -> None:
    """A CUDA source needs a CUDA context and an OpenCL source an OpenCL one."""
    if source.lang != context.backend:
        want = {"cuda": "CUDA", "opencl": "OpenCL"}
        article = {"cuda": "a", "opencl": "an"}
        raise ValueError(
            f"kernel source {source.name} is {want[source.lang]} but the device "
            f"{context.device.name} is {article[context.backend]} {want[context.backend]} device; "
            f"open {article[source.lang]} "
            f"{want[source.lang]} context (AUTOTUNE_DEVICE={source.lang}) or pass "
            f"{want[context.backend]} source (lang= says which language it is)")


def define_value(value: Any) -> str:
    """A tunable value as C text: booleans as 1 and 0, numbers and names as written."""
    if isinstance(value, (bool, np.bool_)):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


# -- launch geometry ---------------------------------------------------------------------------


def problem_dims(problem_size: Any) -> tuple[int, int, int]:
    """``problem_size`` (an int, or a tuple of 1 to 3 ints) as three extents."""
    sizes = (problem_size,) if isinstance(problem_size, (int, np.integer)) else problem_size
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence) or not 1 <= len(sizes) <= 3:
        raise TypeError(f"problem_size must be an int or a tuple of 1 to 3 ints, got {problem_size!r}")
    dims = []
    for size in sizes:
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)) or size < 1:
            raise ValueError(f"problem_size {problem_size!r}: every extent must be an int >= 1, "
                             f"got {size!r}")
        dims.append(int(size))
    return tuple(dims + [1] * (3 - len(dims)))  # type: ignore[return-value]


def block_names(block_size_names: Sequence[str] | None) -> tuple[str, str, str]:
    """The names of the block dimensions x, y, z (Kernel Tuner's defaults where not given)."""
    if block_size_names is None:
        return DEFAULT_BLOCK_SIZE_NAMES
    names = list(block_size_names)
    if isinstance(block_size_names, str) or not 1 <= len(names) <= 3 or not all(
            isinstance(n, str) and _IDENTIFIER.fullmatch(n) for n in names):
        raise ValueError(f"block_size_names must be a list of 1 to 3 identifiers, got "
                         f"{block_size_names!r}")
    return tuple(names + list(DEFAULT_BLOCK_SIZE_NAMES[len(names):]))  # type: ignore[return-value]


@dataclass(frozen=True)
class Divisor:
    """What divides the problem size in one dimension: the product of its terms."""

    terms: tuple[Expression | int, ...]

    def __call__(self, params: Mapping[str, Any]) -> float:
        product = 1.0
        for term in self.terms:
            product *= term if isinstance(term, int) else term(params)
        return product


def grid_divisor(spec: Any, dim: int, blocks: tuple[str, str, str],
                 names: Sequence[str]) -> Divisor:
    """``grid_div_x`` (etc.): a list of parameter names or expressions over them, or ints;
    Kernel Tuner's default is the block size name of the dimension if it is tunable, else 1."""
    axis = "xyz"[dim]
    if spec is None:
        spec = [blocks[dim]] if blocks[dim] in names else []
    if isinstance(spec, (str, int)) and not isinstance(spec, bool):
        spec = [spec]
    if callable(spec) or not isinstance(spec, (list, tuple)):
        raise TypeError(f"grid_div_{axis} must be a list of parameter names or expressions "
                        f"(strings) or ints, got {spec!r}")
    terms: list[Expression | int] = []
    for term in spec:
        if isinstance(term, (int, np.integer)) and not isinstance(term, bool) and term >= 1:
            terms.append(int(term))
        else:
            terms.append(parse_expression(term, names, f"grid_div_{axis} entry"))
    return Divisor(tuple(terms))


@dataclass(frozen=True)
class Geometry:
    """How the problem size maps onto work-groups for a configuration."""

    problem: tuple[int, int, int]
    blocks: tuple[str, str, str]
    divisors: tuple[Divisor, Divisor, Divisor]

    def block(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        sizes = []
        for name, default in zip(self.blocks, DEFAULT_BLOCK_SIZE):
            value = params.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"block size {name}={value!r} must be an int >= 1")
            sizes.append(value)
        return tuple(sizes)  # type: ignore[return-value]

    def grid(self, params: Mapping[str, Any]) -> tuple[int, int, int]:
        """Work-groups per dimension: ceil(problem size / the divisor's product)."""
        grid = []
        for size, divisor, axis in zip(self.problem, self.divisors, "xyz"):
            try:
                by = divisor(params)
            except (ExpressionError, ArithmeticError, TypeError) as exc:
                raise ValueError(f"grid_div_{axis} cannot be computed for {dict(params)}: {exc}") from None
            if not (isinstance(by, (int, float)) and math.isfinite(by) and by > 0):
                raise ValueError(f"grid_div_{axis} is {by!r} for {dict(params)}; it must be > 0")
            grid.append(max(1, math.ceil(size / by)))
        return tuple(grid)  # type: ignore[return-value]

    def sizes(self, params: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(global size in work-items, local size) of the launch."""
        block, grid = self.block(params), self.grid(params)
        return tuple(g * b for g, b in zip(grid, block)), block

    def defines(self, params: Mapping[str, Any]) -> dict[str, str]:
        """The ``#define`` names and values of a configuration (as Kernel Tuner writes them):
        the grid and block sizes, every tunable parameter, and ``kernel_tuner``."""
        found: dict[str, str] = {}
        for name, size in zip(GRID_SIZE_NAMES, self.grid(params)):
            found[name] = str(size)
        for name, size in zip(self.blocks, self.block(params)):
            found[name] = str(size)
        for name, value in params.items():
            found[name] = define_value(value)
        found[MARKER_DEFINE] = "1"
        return found


def with_defines(source: KernelSource, defines: Mapping[str, str]) -> RenderedSource:
    """The source to compile: ``#define`` lines, then the source (on CUDA inside ``extern "C"``
    unless it says ``extern "C"`` itself, so that kernels keep their names), with every line
    mapped back to the user's source for compiler messages."""
    head = [f"#define {name} {value}" for name, value in defines.items()]
    origins = [("<defines>", i + 1) for i in range(len(head))]
    body = source.text.split("\n")
    wrap = source.lang == "cuda" and 'extern "C"' not in source.text
    if wrap:
        head.append('extern "C" {')
        origins.append(("<defines>", len(head)))
    origins += [(source.name, i + 1) for i in range(len(body))]
    lines = head + body
    if wrap:
        lines.append("}")
        origins.append(("<defines>", len(lines)))
    return RenderedSource(text="\n".join(lines) + "\n", origins=Origins(origins),
                          template=source.name)


# -- arguments ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgumentSpec:
    """One kernel argument: an array (its shape and dtype) or a scalar (its dtype)."""

    dtype: np.dtype
    shape: tuple[int, ...] | None  #: None for a scalar

    def describe(self) -> str:
        if self.shape is None:
            return self.dtype.name
        return f"{self.dtype.name}[{','.join(map(str, self.shape))}]"


def argument_specs(arguments: Any, what: str = "arguments") -> tuple[ArgumentSpec, ...]:
    """The signature of Kernel Tuner's ``arguments`` list: numpy arrays (copied to the device)
    and numpy scalars (passed by value)."""
    if isinstance(arguments, (str, bytes, np.ndarray)) or not isinstance(arguments, Sequence):
        raise TypeError(f"{what} must be a list of numpy arrays and numpy scalars, got "
                        f"{type(arguments).__name__}")
    specs = []
    for i, arg in enumerate(arguments):
        specs.append(argument_spec(arg, i))
    return tuple(specs)


def argument_spec(arg: Any, i: int) -> ArgumentSpec:
    if isinstance(arg, accel.DeviceArray):
        return ArgumentSpec(np.dtype(arg.dtype), tuple(arg.shape))
    if isinstance(arg, np.ndarray):
        if arg.ndim == 0:
            raise TypeError(f"argument {i} is a 0-d array; pass a numpy scalar such as "
                            f"np.{arg.dtype.name}(x) instead")
        if arg.dtype.hasobject or arg.dtype.fields is not None:
            raise TypeError(f"argument {i} has dtype {arg.dtype}; kernel arguments must be arrays "
                            "of plain numbers")
        return ArgumentSpec(arg.dtype, tuple(arg.shape))
    if isinstance(arg, np.generic) and not isinstance(arg, (np.str_, np.bytes_, np.object_)):
        return ArgumentSpec(arg.dtype, None)
    raise TypeError(f"argument {i} is {type(arg).__name__}; pass numpy arrays and numpy scalars "
                    "such as np.int32(n) or np.float32(x) (a Python number's C type would be a "
                    "guess)")


def settings_digest(source: KernelSource, options: Sequence[str], blocks: Sequence[str],
                    grid_divs: Sequence[Any], tune_params: Mapping[str, Sequence[Any]],
                    restrictions: Sequence[str]) -> str:
    """SHA-256 of what a call's kernels and search are made of besides the problem and the
    arguments: the source text, its language, the compiler options, the block size names, the
    grid divisors, the tunable values and the restriction strings (restriction functions are
    code, and are left out)."""
    text = json.dumps({"source": source.text, "lang": source.lang, "options": list(options),
                       "blocks": list(blocks), "grid_div": [_plain_div(d) for d in grid_divs],
                       "tune_params": {k: [repr(v) for v in vs] for k, vs in tune_params.items()},
                       "restrictions": list(restrictions)},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain_div(spec: Any) -> Any:
    if spec is None:
        return None
    if isinstance(spec, (list, tuple)):
        return [str(t) for t in spec]
    return str(spec)


def compiler_options(options: Any) -> tuple[str, ...]:
    """``compiler_options``: None or a list of strings."""
    if options is None:
        return ()
    if isinstance(options, str) or not isinstance(options, Sequence) or not all(
            isinstance(o, str) for o in options):
        raise TypeError(f"compiler_options must be a list of strings, got {options!r}")
    return tuple(options)


def check_kernel_name(kernel_name: Any, source: KernelSource) -> str:
    """``kernel_name`` if it is an identifier that the source names."""
    if not isinstance(kernel_name, str) or not _IDENTIFIER.fullmatch(kernel_name) \
            or len(kernel_name) > 200:
        raise ValueError(f"kernel_name must be the kernel function's name (a C identifier), got "
                         f"{kernel_name!r}")
    if re.search(rf"\b{kernel_name}\b", source.text) is None:
        raise ValueError(f"kernel_name {kernel_name!r} does not appear in kernel source "
                         f"{source.name}; pass the name of a kernel it defines")
    return kernel_name


Restriction = Callable[[dict[str, Any]], Any]
