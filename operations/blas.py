"""Fused BLAS-1 kernels for Krylov solvers, each one tuned pass over memory.

Real and complex, single and double precision. Device use::

    fn = BlasTemplate(context, np.complex64, "axpy_norm").instantiate(queue, n)
    r2 = fn(x, y, a=0.5)               # y += a x, returns |y|^2

Host use (numpy; written arrays are updated in place)::

    r2 = operations.blas.axpy_norm(0.5, x, y)

================ ======================================= =========================================
operation        effect                                   returns
================ ======================================= =========================================
axpy             y = a x + y                              -
xpay             y = x + a y                              -
axpby            y = a x + b y                            -
caxpy            y = a x + y, complex a (complex data)    -
axpy_norm        y = a x + y                              |y|^2
axpy_norm_ratio  y = a x + y, a = n / d[i] on the device  |y|^2
caxpy_norm       y = a x + y, a of the data's field       |y|^2
xmy_norm         y = x - y                                |y|^2
axpy_zpbx        x = x + a p;  p = z + b p                -
cg_update        p = r + b p;  s = w + b s;               -
                 x = x + a p;  r = r - a s
cdot_norm        -                                        <x, y>, |x|^2
cdot_norm_redot  -                                        <x, y>, |x|^2, Re <x, z>
bicgstab_xs      x = x + a p + w s;  s = s - w t          <r0, s>, |s|^2
bicgstab_p       p = r + b (p - w v)                      -
================ ======================================= =========================================

``a``/``b`` are real, except for ``caxpy``, ``caxpy_norm``, ``bicgstab_*`` whose scalars are of
the data's field (complex for complex data). ``<x, y>`` conjugates ``x``. ``axpy_norm_ratio``
takes ``a=DeviceRatio(n, d, i)``: ``a = n / d[i]`` with ``d`` a float64 device array, such as the
results of a dot product the host has not waited for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fused import DeviceRatio, FusedOp, FusedTemplate, Output
from .host import host_call

__all__ = ["BlasTemplate", "DeviceRatio", "OPS", "axpby", "axpy", "axpy_norm", "axpy_zpbx",
           "bicgstab_p", "bicgstab_xs", "caxpy", "caxpy_norm", "cdot_norm", "cdot_norm_redot",
           "cg_update", "xmy_norm", "xpay"]

_NORM_Y = Output("real", ("NORM2(y)",))


def _op(name, vectors, written, scalars, body, outputs=(), reference=None, **kw) -> FusedOp:
    return FusedOp(name, vectors, written, scalars=scalars, body=body, outputs=outputs,
                   reference=reference, **kw)


def _norm(v):
    return float(np.vdot(v, v).real)


def _ref_axpy(v, s):
    y = s["a"] * v["x"] + v["y"]
    return {"y": y}, ()


def _ref_xpay(v, s):
    return {"y": v["x"] + s["a"] * v["y"]}, ()


def _ref_axpby(v, s):
    return {"y": s["a"] * v["x"] + s["b"] * v["y"]}, ()


def _ref_axpy_norm(v, s):
    y = s["a"] * v["x"] + v["y"]
    return {"y": y}, (_norm(y),)


def _ref_xmy_norm(v, s):
    y = v["x"] - v["y"]
    return {"y": y}, (_norm(y),)


def _ref_axpy_zpbx(v, s):
    return {"x": v["x"] + s["a"] * v["p"], "p": v["z"] + s["b"] * v["p"]}, ()


def _ref_cg_update(v, s):
    p = v["r"] + s["b"] * v["p"]
    new_s = v["w"] + s["b"] * v["s"]
    return {"p": p, "s": new_s, "x": v["x"] + s["a"] * p, "r": v["r"] - s["a"] * new_s}, ()


def _ref_cdot_norm(v, s):
    return {}, (np.vdot(v["x"], v["y"]), _norm(v["x"]))


def _ref_cdot_norm_redot(v, s):
    return {}, (np.vdot(v["x"], v["y"]), _norm(v["x"]), float(np.vdot(v["x"], v["z"]).real))


def _ref_bicgstab_xs(v, s):
    x = v["x"] + s["a"] * v["p"] + s["w"] * v["s"]
    new_s = v["s"] - s["w"] * v["t"]
    return {"x": x, "s": new_s}, (np.vdot(v["r0"], new_s), _norm(new_s))


def _ref_bicgstab_p(v, s):
    return {"p": v["r"] + s["b"] * (v["p"] - s["w"] * v["v"])}, ()


OPS = {op.name: op for op in (
    _op("axpy", ("x", "y"), ("y",), (("a", "real"),), "y = ADD(RSCALE(x, a), y);",
        reference=_ref_axpy),
    _op("xpay", ("x", "y"), ("y",), (("a", "real"),), "y = ADD(x, RSCALE(y, a));",
        reference=_ref_xpay),
    _op("axpby", ("x", "y"), ("y",), (("a", "real"), ("b", "real")),
        "y = ADD(RSCALE(x, a), RSCALE(y, b));", reference=_ref_axpby),
    _op("caxpy", ("x", "y"), ("y",), (("a", "field"),), "y = ADD(MUL(a, x), y);",
        reference=_ref_axpy, complex_only=True),
    _op("axpy_norm", ("x", "y"), ("y",), (("a", "real"),), "y = ADD(RSCALE(x, a), y);",
        (_NORM_Y,), _ref_axpy_norm),
    _op("axpy_norm_ratio", ("x", "y"), ("y",), (("a", "ratio"),), "y = ADD(RSCALE(x, a), y);",
        (_NORM_Y,), _ref_axpy_norm),
    _op("caxpy_norm", ("x", "y"), ("y",), (("a", "field"),), "y = ADD(MUL(a, x), y);",
        (_NORM_Y,), _ref_axpy_norm),
    _op("xmy_norm", ("x", "y"), ("y",), (), "y = SUB(x, y);", (_NORM_Y,), _ref_xmy_norm),
    _op("axpy_zpbx", ("x", "p", "z"), ("x", "p"), (("a", "real"), ("b", "real")),
        "x = ADD(x, RSCALE(p, a)); p = ADD(z, RSCALE(p, b));", reference=_ref_axpy_zpbx),
    _op("cg_update", ("x", "p", "r", "s", "w"), ("x", "p", "r", "s"),
        (("a", "real"), ("b", "real")),
        "p = ADD(r, RSCALE(p, b)); s = ADD(w, RSCALE(s, b)); "
        "x = ADD(x, RSCALE(p, a)); r = SUB(r, RSCALE(s, a));", reference=_ref_cg_update),
    _op("cdot_norm", ("x", "y"), (), (), "",
        (Output("field", ("CDOT_RE(x, y)", "CDOT_IM(x, y)")), Output("real", ("NORM2(x)",))),
        _ref_cdot_norm),
    _op("cdot_norm_redot", ("x", "y", "z"), (), (), "",
        (Output("field", ("CDOT_RE(x, y)", "CDOT_IM(x, y)")), Output("real", ("NORM2(x)",)),
         Output("real", ("CDOT_RE(x, z)",))),
        _ref_cdot_norm_redot),
    _op("bicgstab_xs", ("x", "p", "s", "t", "r0"), ("x", "s"), (("a", "field"), ("w", "field")),
        "x = ADD(x, ADD(MUL(a, p), MUL(w, s))); s = SUB(s, MUL(w, t));",
        (Output("field", ("CDOT_RE(r0, s)", "CDOT_IM(r0, s)")), Output("real", ("NORM2(s)",))),
        _ref_bicgstab_xs),
    _op("bicgstab_p", ("p", "r", "v"), ("p",), (("b", "field"), ("w", "field")),
        "p = ADD(r, MUL(b, SUB(p, MUL(w, v))));", reference=_ref_bicgstab_p),
)}


class BlasTemplate(FusedTemplate):
    """Fused vector updates with optional reductions, tuned per operation and dtype."""

    ops = OPS
    autotune_version = 2


def _call(op: str, arrays: tuple, context: Any = None, **scalars: Any) -> Any:
    return host_call(BlasTemplate, op, arrays, scalars, context)


def axpy(a, x, y, *, context=None):
    """y = a x + y (in place)."""
    return _call("axpy", (x, y), context, a=a)


def xpay(x, a, y, *, context=None):
    """y = x + a y (in place)."""
    return _call("xpay", (x, y), context, a=a)


def axpby(a, x, b, y, *, context=None):
    """y = a x + b y (in place)."""
    return _call("axpby", (x, y), context, a=a, b=b)


def caxpy(a, x, y, *, context=None):
    """y = a x + y with complex a (complex data, in place)."""
    return _call("caxpy", (x, y), context, a=a)


def axpy_norm(a, x, y, *, context=None) -> float:
    """y = a x + y (in place); returns |y|^2."""
    return _call("axpy_norm", (x, y), context, a=a)


def caxpy_norm(a, x, y, *, context=None) -> float:
    """y = a x + y with a of the data's field (in place); returns |y|^2."""
    return _call("caxpy_norm", (x, y), context, a=a)


def xmy_norm(x, y, *, context=None) -> float:
    """y = x - y (in place); returns |y|^2."""
    return _call("xmy_norm", (x, y), context)


def axpy_zpbx(a, p, x, z, b, *, context=None):
    """x = x + a p; p = z + b p (both in place)."""
    return _call("axpy_zpbx", (x, p, z), context, a=a, b=b)


def cg_update(a, b, x, p, r, s, w, *, context=None):
    """The single-reduction CG step: p = r + b p, s = w + b s, x += a p, r -= a s."""
    return _call("cg_update", (x, p, r, s, w), context, a=a, b=b)


def cdot_norm(x, y, *, context=None):
    """(<x, y>, |x|^2) in one pass."""
    return _call("cdot_norm", (x, y), context)


def cdot_norm_redot(x, y, z, *, context=None):
    """(<x, y>, |x|^2, Re <x, z>) in one pass: a single-reduction CG step's sums, the third
    for its <p, A p> without assuming the residuals orthogonal (``operations.solvers``)."""
    return _call("cdot_norm_redot", (x, y, z), context)


def bicgstab_xs(a, p, w, s, t, x, r0, *, context=None):
    """x = x + a p + w s; s = s - w t (in place); returns (<r0, s>, |s|^2)."""
    return _call("bicgstab_xs", (x, p, s, t, r0), context, a=a, w=w)


def bicgstab_p(p, r, b, w, v, *, context=None):
    """p = r + b (p - w v) (in place)."""
    return _call("bicgstab_p", (p, r, v), context, b=b, w=w)
