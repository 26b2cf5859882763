"""Canonical JSON for tuning arguments and parameters, read back as data, never as code.

Arguments (dtypes, enums, tuples, None, numbers, strings) become one canonical JSON text so
that equal arguments always give the same key. Reading stored JSON never imports, resolves or
calls anything it names: an encoded enum comes back as a :class:`StoredEnum` unless the caller
hands over the enum classes its own arguments carry, and dtypes only from numpy's own type names.
Stored text is size- and depth-limited before it is parsed.
"""

from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
#: Stored JSON longer than this, or nested deeper, is refused before or after parsing.
MAX_JSON_CHARS = 1 << 16
MAX_JSON_DEPTH = 32
#: Integer parameters beyond this magnitude are refused (no kernel parameter is that large, and
#: doubles represent every integer up to it exactly).
MAX_PARAMETER_INT = 2**53


class ArgumentEncodingError(TypeError):
    """An autotune argument has a type that cannot be part of a tuning key."""


class InvalidParametersError(ValueError):
    """Parameters (from a database or a search) are not safe to use."""


class MalformedJSONError(ValueError):
    """Stored JSON text that is not valid, too long or too deeply nested."""


@dataclass(frozen=True)
class StoredEnum:
    """An enum member as stored: the qualified class name and the member name, as text.

    What :func:`decode_arguments` returns for an enum whose class the caller did not supply.
    """

    type_name: str  #: ``module:QualName`` as written when encoded
    member: str

    def __str__(self) -> str:
        return f"{self.type_name.rpartition(':')[2]}.{self.member}"


def plain(value: Any) -> Any:
    """``value`` with numpy scalars turned into the Python bool, int, float or str they hold."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.str_):
        return str(value)
    return value


def _encode(value: Any, where: str) -> Any:
    value = plain(value)
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ArgumentEncodingError(f"{where} is {value}; tuning arguments must be finite")
        return value
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"__enum__": f"{cls.__module__}:{cls.__qualname__}", "name": value.name}
    if isinstance(value, StoredEnum):
        return {"__enum__": value.type_name, "name": value.member}
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        dtype = np.dtype(value)
        if dtype.fields is not None:
            return {"__dtype__": [list(d) for d in dtype.descr]}
        return {"__dtype__": dtype.name}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise ArgumentEncodingError(f"{where} is a dict with non-string keys")
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    raise ArgumentEncodingError(
        f"{where} has type {type(value).__name__}, which cannot be part of a tuning key; use "
        "numbers, strings, booleans, None, numpy dtypes, enums, tuples, lists or dicts"
    )


def encode_arguments(arguments: dict[str, Any]) -> str:
    """Canonical JSON text of named arguments (sorted keys, no whitespace)."""
    encoded = {name: _encode(value, f"argument {name!r}") for name, value in arguments.items()}
    return json.dumps(encoded, sort_keys=True, separators=(",", ":"), allow_nan=False)


class ArgumentsTooLongError(ArgumentEncodingError, ValueError):
    """A tuning key's arguments encode to more than :data:`MAX_JSON_CHARS` characters: such a
    key could be stored but never read back. (Also a ValueError: the CLI reports it in one
    line, e.g. for a template whose warm configuration is too long.)"""


def encode_key_arguments(arguments: dict[str, Any]) -> str:
    """:func:`encode_arguments` for a tuning key: refused (naming the longest argument and the
    limit) where the text would be longer than stored JSON may be when it is read back."""
    text = encode_arguments(arguments)
    if len(text) <= MAX_JSON_CHARS:
        return text
    sizes = {name: len(encode_arguments({name: value})) for name, value in arguments.items()}
    longest = max(sizes, key=sizes.__getitem__)
    raise ArgumentsTooLongError(
        f"the tuning key's arguments encode to {len(text)} characters, more than the "
        f"{MAX_JSON_CHARS} a stored key may have (argument {longest!r} alone takes "
        f"{sizes[longest]}); pass the tuning function a short description instead (a shape, a "
        "size, a dtype), not the data")


def _depth(value: Any) -> int:
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            todo += [(v, depth + 1) for v in item.values()]
        elif isinstance(item, list):
            todo += [(v, depth + 1) for v in item]
    return deepest


def load_json(text: Any, what: str = "stored JSON") -> Any:
    """Parse stored JSON text within the size and depth limits; :class:`MalformedJSONError`
    says what is wrong. Non-finite numbers (``NaN``, ``Infinity``) are refused."""
    if not isinstance(text, str):
        raise MalformedJSONError(f"{what} is {type(text).__name__}, not text")
    if len(text) > MAX_JSON_CHARS:
        raise MalformedJSONError(f"{what} is {len(text)} characters long (limit {MAX_JSON_CHARS})")

    def refuse(constant: str) -> Any:
        raise ValueError(f"{constant} is not a finite number")

    try:
        value = json.loads(text, parse_constant=refuse)
    except RecursionError:
        raise MalformedJSONError(f"{what} is nested too deeply to parse") from None
    except ValueError as exc:
        raise MalformedJSONError(f"{what} is not valid JSON: {exc}") from None
    # (nested no deeper than the brackets it opens, plus one: most stored JSON, a flat
    # object, is not walked)
    if text.count("{") + text.count("[") >= MAX_JSON_DEPTH and _depth(value) > MAX_JSON_DEPTH:
        raise MalformedJSONError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    return value


_NUMPY_TYPE = re.compile(r"[a-z]+[0-9]*|[<>|=]?[a-zA-Z][0-9]+")


def _dtype(spec: Any) -> np.dtype:
    """A dtype from stored text, built only from numpy's own type names."""
    def simple(name: Any) -> str:
        if not isinstance(name, str) or not _NUMPY_TYPE.fullmatch(name) or name in ("O", "object") \
                or "O" in name:
            raise MalformedJSONError(f"{name!r} is not a plain numpy type name")
        return name

    if isinstance(spec, str):
        return np.dtype(simple(spec))
    if isinstance(spec, list) and all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str)
                                      for f in spec):
        return np.dtype([(f[0], simple(f[1])) for f in spec])
    raise MalformedJSONError(f"{spec!r} is not a stored dtype")


def _decode(value: Any, enums: dict[str, type[enum.Enum]]) -> Any:
    if isinstance(value, list):
        return [_decode(v, enums) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__tuple__"} and isinstance(value["__tuple__"], list):
        return tuple(_decode(v, enums) for v in value["__tuple__"])
    if set(value) == {"__dtype__"}:
        return _dtype(value["__dtype__"])
    if set(value) == {"__enum__", "name"} and isinstance(value["__enum__"], str) \
            and isinstance(value["name"], str):
        cls = enums.get(value["__enum__"])
        if cls is not None and value["name"] in cls.__members__:
            return cls[value["name"]]
        return StoredEnum(value["__enum__"], value["name"])
    return {k: _decode(v, enums) for k, v in value.items()}


def decode_arguments(text: str, enum_types: tuple[type[enum.Enum], ...] = ()) -> dict[str, Any]:
    """Inverse of :func:`encode_arguments`, as data.

    Enums come back as members of the classes in ``enum_types`` (the classes a live call's own
    arguments carry), and as :class:`StoredEnum` otherwise; dtypes only from plain numpy type
    names. Nothing named in the text is imported. Raises :class:`MalformedJSONError`.
    """
    enums = {f"{c.__module__}:{c.__qualname__}": c for c in enum_types}
    value = load_json(text, "stored arguments")
    if not isinstance(value, dict):
        raise MalformedJSONError("stored arguments are not a JSON object")
    try:
        return _decode(value, enums)
    except TypeError as exc:  # a dtype numpy refuses
        raise MalformedJSONError(f"stored arguments: {exc}") from None


def _describe(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_describe(v) for v in value) + "]"
    if isinstance(value, dict):
        if set(value) == {"__tuple__"} and isinstance(value["__tuple__"], list):
            items = [_describe(v) for v in value["__tuple__"]]
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        if set(value) == {"__dtype__"}:
            spec = value["__dtype__"]
            return spec if isinstance(spec, str) else json.dumps(spec, separators=(",", ":"))
        if set(value) == {"__enum__", "name"}:
            return f"{str(value['__enum__']).rpartition(':')[2]}.{value['name']}"
        return "{" + ", ".join(f"{k}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, str):
        return repr(value)
    return json.dumps(value)


def describe_arguments(text: str) -> str:
    """``dtype=float32, shape=(4, 4)``: stored arguments as text for people, without decoding
    anything they name. Text that does not parse is shown as it is (shortened)."""
    try:
        value = load_json(text, "stored arguments")
    except MalformedJSONError:
        return text if len(text) <= 80 else text[:77] + "..."
    if not isinstance(value, dict):
        return _describe(value)
    return ", ".join(f"{k}={_describe(v)}" for k, v in value.items())


def check_parameter_value(name: str, value: Any, expected: Any) -> Any:
    """``value`` as a plain Python value of the kind of ``expected`` (its ``test=`` value), or
    :class:`InvalidParametersError`. Numpy scalars are accepted and converted."""
    value = plain(value)
    if isinstance(expected, bool):
        ok = isinstance(value, bool)
    elif isinstance(expected, int):
        ok = isinstance(value, int) and not isinstance(value, bool) and abs(value) <= MAX_PARAMETER_INT
    elif isinstance(expected, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    elif isinstance(expected, str):
        ok = isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None
    else:
        ok = False
    if not ok:
        kind = {bool: "a bool", int: "an int", float: "a number", str: "an identifier-like string"}
        raise InvalidParametersError(
            f"parameter {name!r} = {value!r} is not {kind[type(expected)]} like its test= value "
            f"{expected!r}" + (" (or is out of range)" if type(expected) is int else "")
        )
    return value


def validate_parameters(parameters: Any, test: dict[str, Any]) -> dict[str, Any]:
    """Check tuned parameters against the ``test=`` dictionary; return a clean copy.

    The keys must be exactly those of ``test``; each value must be of the same kind as the test
    value: a boolean, an integer (at most 2^53 in magnitude), a finite number, or an
    identifier-like string. Numpy scalars count as the Python values they hold. Any other
    mapping (the read-only one an online tuner's ``measure`` enters to) counts as a dict.
    """
    if isinstance(parameters, Mapping) and not isinstance(parameters, dict):
        parameters = dict(parameters)
    if not isinstance(parameters, dict):
        raise InvalidParametersError(f"parameters must be a JSON object, got {parameters!r}")
    if set(parameters) != set(test):
        raise InvalidParametersError(
            f"parameters have keys {sorted(map(str, parameters))}, the template expects {sorted(test)}"
        )
    return {name: check_parameter_value(name, parameters[name], expected)
            for name, expected in test.items()}


def is_plain_parameter(value: Any) -> bool:
    """True for the values a tuning result may hold: bool, bounded int, finite float, identifier."""
    value = plain(value)
    if isinstance(value, bool):
        return True
    if isinstance(value, int):
        return abs(value) <= MAX_PARAMETER_INT
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None


def validate_test_parameters(test: dict[str, Any]) -> dict[str, Any]:
    """The ``test=`` dictionary itself must be made of plain, safe values; returns a clean copy."""
    if not isinstance(test, dict) or not test:
        raise TypeError("autotuner(test=...) needs a non-empty dict of parameter values")
    clean = {}
    for name, value in test.items():
        if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
            raise TypeError(f"test= parameter name {name!r} is not an identifier")
        if not is_plain_parameter(value):
            raise TypeError(
                f"test= value {name}={value!r} must be a bool, an int, a finite float or an "
                "identifier-like string (these are the only values a tuning result may hold)"
            )
        clean[name] = plain(value)
    return clean


def encode_parameters(parameters: dict[str, Any]) -> str:
    return json.dumps({k: plain(v) for k, v in parameters.items()}, sort_keys=True,
                      separators=(",", ":"), allow_nan=False)


def decode_parameters(text: Any) -> Any:
    """Parse stored parameter JSON; malformed text raises :class:`InvalidParametersError`."""
    try:
        return load_json(text, "stored parameters")
    except MalformedJSONError as exc:
        raise InvalidParametersError(str(exc)) from None


def is_identifier(text: Any) -> bool:
    return isinstance(text, str) and _IDENTIFIER.fullmatch(text) is not None
