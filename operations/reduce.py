"""Tuned reductions: sum, min, max, sum of squares and dot products.

Device use::

    fn = ReduceTemplate(context, np.float32, "sum").instantiate(queue, n)
    total = fn(x)                      # x: a DeviceArray, or CuPy/PyTorch on CUDA

Host use (numpy in, number out; a default context is made on first use)::

    operations.reduce.sum(x)

Sums, sums of squares and dot products of single-precision data accumulate in double precision
and return Python floats/complex; ``min``/``max`` return the data's own type, NaN wins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fused import FusedOp, FusedTemplate, Output
from .host import host_call

_SUM = Output("field", ("RE(x)", "IM(x)"))


def _ref_sum(v, s):
    return {}, (v["x"].sum(),)


def _ref_min(v, s):
    return {}, (v["x"].min(),)


def _ref_max(v, s):
    return {}, (v["x"].max(),)


def _ref_sumsq(v, s):
    return {}, (float(np.vdot(v["x"], v["x"]).real),)


def _ref_dot(v, s):
    return {}, (np.vdot(v["x"], v["y"]),)


OPS = {op.name: op for op in (
    FusedOp("sum", ("x",), outputs=(_SUM,), reference=_ref_sum),
    FusedOp("min", ("x",), outputs=(Output("real", ("x",)),), combine="min", real_only=True,
            reference=_ref_min),
    FusedOp("max", ("x",), outputs=(Output("real", ("x",)),), combine="max", real_only=True,
            reference=_ref_max),
    FusedOp("sumsq", ("x",), outputs=(Output("real", ("NORM2(x)",)),), reference=_ref_sumsq),
    FusedOp("dot", ("x", "y"), outputs=(Output("field", ("CDOT_RE(x, y)", "CDOT_IM(x, y)")),),
            reference=_ref_dot),
)}


class ReduceTemplate(FusedTemplate):
    """Reductions over one vector (``dot``: two), tuned per operation and dtype."""

    ops = OPS
    autotune_version = 2


def _reduce(op: str, *arrays: np.ndarray, context: Any = None) -> Any:
    return host_call(ReduceTemplate, op, arrays, {}, context)


def sum(x: np.ndarray, *, context: Any = None) -> Any:  # noqa: A001 - mirrors numpy
    """Sum of a numpy array's elements on the device (double accumulation)."""
    return _reduce("sum", x, context=context)


def min(x: np.ndarray, *, context: Any = None) -> Any:  # noqa: A001
    """Smallest element (NaN if any element is NaN, as numpy)."""
    return _reduce("min", x, context=context)


def max(x: np.ndarray, *, context: Any = None) -> Any:  # noqa: A001
    """Largest element (NaN if any element is NaN, as numpy)."""
    return _reduce("max", x, context=context)


def sumsq(x: np.ndarray, *, context: Any = None) -> float:
    """Squared 2-norm, sum of |x_i|^2."""
    return _reduce("sumsq", x, context=context)


def dot(x: np.ndarray, y: np.ndarray, *, context: Any = None) -> Any:
    """<x, y> = sum conj(x_i) y_i (no conjugation for real data)."""
    return _reduce("dot", x, y, context=context)
