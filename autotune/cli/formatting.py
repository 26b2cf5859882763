"""Turning keys, parameters and timings into short text for tables.

Arguments are shown with :func:`autotune.tune.describe_arguments`: as stored, never decoded.
"""

from __future__ import annotations

import json
import math

from ..tune.text import printable

__all__ = ["parameters_text", "printable", "rate_text", "seconds_text", "short_function"]


def parameters_text(parameters_json: str) -> str:
    try:
        parameters = json.loads(parameters_json)
    except (ValueError, RecursionError):
        return parameters_json[:60]
    if not isinstance(parameters, dict):
        return parameters_json[:60]
    return ", ".join(f"{k}={v}" for k, v in parameters.items())


def seconds_text(seconds: float | None) -> str:
    if not isinstance(seconds, (int, float)) or seconds != seconds or seconds <= 0:
        return "-"
    if math.isinf(seconds):
        return "untimed"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def rate_text(rate: float | None) -> str:
    """GB/s or GFLOP/s, or ``-`` where not known."""
    if not isinstance(rate, (int, float)) or not math.isfinite(rate) or rate <= 0:
        return "-"
    return f"{rate:.0f}" if rate >= 100 else f"{rate:.3g}"


def short_function(function: str) -> str:
    """``operations.scale.ScaleTemplate.autotune`` -> ``ScaleTemplate``."""
    parts = function.split(".")
    if len(parts) >= 2 and parts[-1] == "autotune":
        return parts[-2]
    return function
