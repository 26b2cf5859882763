"""The one table from numpy dtypes to the C types kernels declare (portability header names)."""

from __future__ import annotations

from typing import Any

import numpy as np

#: numpy dtype -> C type in kernel source; ``cfloat``/``cdouble`` are the portability header's
#: complex types (two-component vectors).
C_TYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.complex64): "cfloat",
    np.dtype(np.complex128): "cdouble",
    np.dtype(np.int32): "int",
    np.dtype(np.uint32): "unsigned int",
    np.dtype(np.int16): "short",
    np.dtype(np.uint16): "unsigned short",
    np.dtype(np.int8): "char",
    np.dtype(np.uint8): "unsigned char",
}


def c_type(dtype: Any) -> str:
    """The C type of ``dtype`` in kernel source; TypeError naming the supported dtypes."""
    try:
        return C_TYPES[np.dtype(dtype)]
    except (KeyError, TypeError):
        supported = ", ".join(d.name for d in C_TYPES)
        raise TypeError(f"dtype {dtype!r} has no kernel C type; supported: {supported}") from None


def real_dtype(dtype: Any) -> np.dtype:
    """float32 for float32 and complex64, float64 for float64 and complex128."""
    dtype = np.dtype(dtype)
    return np.dtype(dtype.type(0).real.dtype) if dtype.kind == "c" else dtype
