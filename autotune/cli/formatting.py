"""Turning keys, parameters and timings into short text for tables.

Arguments are shown with :func:`autotune.tune.describe_arguments`: as stored, never decoded.
"""

from __future__ import annotations

import json
import math

from ..tune.text import printable

__all__ = ["count_text", "interval_text", "parameters_text", "printable", "rate_text",
           "seconds_text", "share_text", "short_function", "speedup_text"]


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


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value > 0


def interval_text(low: float | None, high: float | None) -> str:
    """A time's 95% interval in one unit (``3.11-3.20 us``), or ``-`` where not known."""
    if not (_positive(low) and _positive(high)):
        return "-"
    for scale, unit in ((1e-6, "us"), (1e-3, "ms"), (1.0, "s")):
        if high < 1000 * scale or unit == "s":
            return f"{low / scale:.3g}-{high / scale:.3g} {unit}"
    return "-"  # (not reached)


def count_text(value: object) -> str:
    """A count, or ``-`` where not known (a missing value in a frame is NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return str(int(value))


def share_text(value: float | None) -> str:
    """A relative figure (0.021) as a percentage (``2.1%``), or ``-``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) \
            or value < 0:
        return "-"
    return f"{100 * value:.1f}%"


def speedup_text(speedup: float | None, low: float | None = None, high: float | None = None) -> str:
    """``24.8x`` or, with its interval, ``24.8x (23.9-25.6)``; ``-`` where not known."""
    if not _positive(speedup):
        return "-"
    if _positive(low) and _positive(high):
        return f"{speedup:.2f}x ({low:.2f}-{high:.2f})"
    return f"{speedup:.2f}x"


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
