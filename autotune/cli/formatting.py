"""Turning keys, arguments and timings into short text for tables."""

from __future__ import annotations

import enum
import json
from typing import Any

import numpy as np

from ..tune import decode_arguments


def _value(value: Any) -> str:
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, tuple):
        return "(" + ", ".join(_value(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    return repr(value) if isinstance(value, str) else str(value)


def arguments_text(arguments_json: str) -> str:
    """``dtype=float32, shape=(4, 4)`` from a key's canonical arguments JSON."""
    try:
        arguments = decode_arguments(arguments_json)
    except Exception:  # unknown enum module, or text from elsewhere: show it raw
        return arguments_json
    return ", ".join(f"{k}={_value(v)}" for k, v in arguments.items())


def parameters_text(parameters_json: str) -> str:
    try:
        parameters = json.loads(parameters_json)
    except ValueError:
        return parameters_json
    if not isinstance(parameters, dict):
        return parameters_json
    return ", ".join(f"{k}={v}" for k, v in parameters.items())


def seconds_text(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def short_function(function: str) -> str:
    """``operations.scale.ScaleTemplate.autotune`` -> ``ScaleTemplate``."""
    parts = function.split(".")
    if len(parts) >= 2 and parts[-1] == "autotune":
        return parts[-2]
    return function
