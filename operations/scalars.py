"""One check for every scalar a shipped operation passes to a kernel: ``alpha`` of ``scale``,
the BLAS and fused passes' coefficients, the diffusion step ``dt``, GEMM's ``alpha`` and
``beta``, the Wilson operator's ``kappa`` and the dslash's ``a``.

A scalar must be a number that the kernel's type holds finitely: ``None``, strings, arrays and
other non-numbers are a :class:`TypeError`, NaN, infinities and magnitudes beyond the kernel
type's range (``1e39`` for a float32 kernel, which would become ``inf`` on the device) a
:class:`ValueError`, each naming the operation, the scalar and the value:
``scale: alpha is nan; pass a finite number``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

#: What every message asks for, unless the caller says more (``kappa`` names its use).
FINITE = "a finite number"


def _prefix(op: str) -> str:
    return f"{op}: " if op else ""


def _scalar_type_error(op: str, what: str, value: Any, hint: str = FINITE) -> TypeError:
    if value is None:
        return TypeError(f"{_prefix(op)}{what} is None; pass {hint}")
    if isinstance(value, np.ndarray):
        return TypeError(f"{_prefix(op)}{what} is an array of shape {value.shape}, not a number; "
                         f"pass {hint}")
    return TypeError(f"{_prefix(op)}{what} is a {type(value).__name__} ({value!r}), not a number; "
                     f"pass {hint}")


def _out_of_range(op: str, what: str, value: float | complex, real: type,
                  hint: str = FINITE) -> ValueError:
    name = np.dtype(real).name
    parts = (value.real, value.imag) if isinstance(value, complex) else (value,)
    if not all(math.isfinite(part) for part in parts):
        return ValueError(f"{_prefix(op)}{what} is {value}; pass {hint}")
    return ValueError(f"{_prefix(op)}{what} = {value:g} overflows {name} (largest "
                      f"{float(np.finfo(real).max):.4g}); pass {hint} in range")


def _scalar_value(value: Any) -> Any:
    """A 0-d numpy array's element; anything else as is."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def finite_real_scalar(op: str, what: str, value: Any, real: type = np.float64,
                       dtype: Any = None, *, hint: str = FINITE) -> float:
    """``value`` as a float that ``real`` (np.float32 or np.float64, the kernel's type) holds
    finitely.

    TypeError for None, booleans, non-numbers and complex numbers (``dtype`` is the data's, for
    the message); ValueError for NaN, infinities and magnitudes beyond ``real``'s range.
    ``op`` names the operation and ``what`` the scalar in messages (``scale``, ``alpha``).
    """
    value = _scalar_value(value)
    if isinstance(value, (complex, np.complexfloating)):
        data = f" for {np.dtype(dtype)} data" if dtype is not None else ""
        raise TypeError(f"{_prefix(op)}{what} must be real{data}, got {value!r}")
    if isinstance(value, (bool, np.bool_)):
        raise _scalar_type_error(op, what, value, hint)
    if not isinstance(value, (int, float, np.integer, np.floating)):
        if isinstance(value, (str, bytes, np.ndarray)) or not hasattr(value, "__float__"):
            raise _scalar_type_error(op, what, value, hint)
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise ValueError(f"{_prefix(op)}{what} = {value} overflows {np.dtype(real).name}; pass "
                         f"{hint} in range") from None
    if not abs(number) <= float(np.finfo(real).max):
        raise _out_of_range(op, what, number, real, hint)
    return number


def finite_complex_scalar(op: str, what: str, value: Any, real: type = np.float64, *,
                          hint: str = FINITE) -> complex:
    """``value`` as a complex number whose parts ``real`` holds finitely (TypeError for None,
    booleans and non-numbers, ValueError for a NaN or infinite part, or one beyond ``real``'s
    range)."""
    value = _scalar_value(value)
    if isinstance(value, (bool, np.bool_)):
        raise _scalar_type_error(op, what, value, hint)
    if not isinstance(value, (int, float, complex, np.number)):
        if isinstance(value, (str, bytes, np.ndarray)) or not (
                hasattr(value, "__complex__") or hasattr(value, "__float__")):
            raise _scalar_type_error(op, what, value, hint)
    try:
        number = complex(value)
    except OverflowError:
        raise ValueError(f"{_prefix(op)}{what} = {value} overflows {np.dtype(real).name}; pass "
                         f"{hint} in range") from None
    limit = float(np.finfo(real).max)
    if not (abs(number.real) <= limit and abs(number.imag) <= limit):
        raise _out_of_range(op, what, number, real, hint)
    return number
