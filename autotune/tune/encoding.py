"""Canonical JSON for tuning arguments, and validation of tuned parameters.

Arguments (dtypes, enums, tuples, None, numbers, strings) become one canonical JSON text so
that equal arguments always give the same key. Parameters read back from a database are checked
against the template's ``test=`` dictionary before anything can reach kernel source.
"""

from __future__ import annotations

import enum
import pkgutil
import json
import math
import re
from typing import Any

import numpy as np

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class ArgumentEncodingError(TypeError):
    """An autotune argument has a type that cannot be part of a tuning key."""


class InvalidParametersError(ValueError):
    """Parameters (from a database or a search) are not safe to use."""


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"__enum__": f"{cls.__module__}:{cls.__qualname__}", "name": value.name}
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            raise ArgumentEncodingError(f"{where} is {value}; tuning arguments must be finite")
        return value
    if isinstance(value, np.bool_):
        return bool(value)
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


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if set(value) == {"__tuple__"}:
        return tuple(_decode(v) for v in value["__tuple__"])
    if set(value) == {"__dtype__"}:
        spec = value["__dtype__"]
        return np.dtype([tuple(d) for d in spec] if isinstance(spec, list) else spec)
    if set(value) == {"__enum__", "name"}:
        return pkgutil.resolve_name(value["__enum__"])[value["name"]]
    return {k: _decode(v) for k, v in value.items()}


def decode_arguments(text: str) -> dict[str, Any]:
    """Inverse of :func:`encode_arguments` (imports the modules of encoded enums)."""
    return _decode(json.loads(text))


def _check_value(name: str, value: Any, expected: Any) -> None:
    if isinstance(expected, bool):
        ok = isinstance(value, bool)
    elif isinstance(expected, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(expected, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and math.isfinite(value)
    elif isinstance(expected, str):
        ok = isinstance(value, str) and _IDENTIFIER.fullmatch(value) is not None
    else:
        ok = False
    if not ok:
        raise InvalidParametersError(
            f"parameter {name!r} = {value!r} is not a {type(expected).__name__} like its "
            f"test= value {expected!r}"
        )


def validate_parameters(parameters: Any, test: dict[str, Any]) -> dict[str, Any]:
    """Check tuned parameters against the ``test=`` dictionary; return a clean copy.

    The keys must be exactly those of ``test``; each value must be of the same kind as the test
    value: a boolean, an integer, a finite number, or an identifier-like string.
    """
    if not isinstance(parameters, dict):
        raise InvalidParametersError(f"parameters must be a JSON object, got {parameters!r}")
    if set(parameters) != set(test):
        raise InvalidParametersError(
            f"parameters have keys {sorted(parameters)}, the template expects {sorted(test)}"
        )
    for name, expected in test.items():
        _check_value(name, parameters[name], expected)
    return {name: parameters[name] for name in test}


def validate_test_parameters(test: dict[str, Any]) -> None:
    """The ``test=`` dictionary itself must be made of plain, safe values."""
    if not isinstance(test, dict) or not test:
        raise TypeError("autotuner(test=...) needs a non-empty dict of parameter values")
    for name, value in test.items():
        if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
            raise TypeError(f"test= parameter name {name!r} is not an identifier")
        plain = isinstance(value, (bool, int, float)) or (
            isinstance(value, str) and _IDENTIFIER.fullmatch(value))
        if not plain or (isinstance(value, float) and not math.isfinite(value)):
            raise TypeError(
                f"test= value {name}={value!r} must be a bool, an int, a finite float or an "
                "identifier-like string (these are the only values a tuning result may hold)"
            )


def encode_parameters(parameters: dict[str, Any]) -> str:
    return json.dumps(parameters, sort_keys=True, separators=(",", ":"), allow_nan=False)


def decode_parameters(text: str) -> Any:
    """Parse stored parameter JSON; malformed text raises :class:`InvalidParametersError`."""
    try:
        return json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidParametersError(f"stored parameters are not valid JSON: {exc}") from None
