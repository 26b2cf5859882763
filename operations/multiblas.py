"""Multi-vector passes for Gram-Schmidt (GCR's orthogonalisation), one pass over memory each.

========== ============================================ ==============================
operation  effect                                       returns
========== ============================================ ==============================
cdots{k}   -                                            <x_i, y> for i < k
caxpys{k}  y -= sum_i b_i x_i;  w -= sum_i b_i v_i      -
========== ============================================ ==============================

for k = 1 ... :data:`MAX_VECTORS` (complex data). ``cdots{k}`` takes (y, x_0, ..., x_{k-1}) and
reads y once for all k dot products; ``caxpys{k}`` takes (y, w, x_0, ..., x_{k-1}, v_0, ...,
v_{k-1}) and scalars b_0 ... b_{k-1}. Made of the same fused pass as :mod:`.blas` (so the same
launch parameters apply); they are not tuned on their own: :func:`parameters_from` derives
theirs from a tuned single-vector pass, limiting the work-group's scratch for k reductions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fused import TEST_PARAMETERS, FusedOp, FusedTemplate, Output

#: the most vectors one pass combines (GCR's steps between restarts above it are refused)
MAX_VECTORS = 16
#: the most bytes of work-group scratch a reduction pass may take
SCRATCH_BYTES = 16384


def _ref_cdots(v, s):
    k = len(v) - 1
    return {}, tuple(np.vdot(v[f"x{i}"], v["y"]) for i in range(k))


def _ref_caxpys(v, s):
    k = (len(v) - 2) // 2
    y, w = v["y"].copy(), v["w"].copy()
    for i in range(k):
        y -= s[f"b{i}"] * v[f"x{i}"]
        w -= s[f"b{i}"] * v[f"v{i}"]
    return {"y": y, "w": w}, ()


def _sum(terms: list[str]) -> str:
    text = terms[0]
    for t in terms[1:]:
        text = f"ADD({text}, {t})"
    return text


def _ops() -> dict[str, FusedOp]:
    ops = {}
    for k in range(1, MAX_VECTORS + 1):
        xs = tuple(f"x{i}" for i in range(k))
        vs = tuple(f"v{i}" for i in range(k))
        ops[f"cdots{k}"] = FusedOp(
            f"cdots{k}", ("y",) + xs,
            outputs=tuple(Output("field", (f"CDOT_RE(x{i}, y)", f"CDOT_IM(x{i}, y)"))
                          for i in range(k)),
            complex_only=True, reference=_ref_cdots)
        ops[f"caxpys{k}"] = FusedOp(
            f"caxpys{k}", ("y", "w") + xs + vs, ("y", "w"),
            scalars=tuple((f"b{i}", "field") for i in range(k)),
            body=(f"y = SUB(y, {_sum([f'MUL(b{i}, x{i})' for i in range(k)])}); "
                  f"w = SUB(w, {_sum([f'MUL(b{i}, v{i})' for i in range(k)])});"),
            complex_only=True, reference=_ref_caxpys)
    return ops


OPS = _ops()


class MultiBlasTemplate(FusedTemplate):
    """The multi-vector passes (explicit launch parameters: :func:`parameters_from`)."""

    ops = OPS
    autotune_version = 1


def parameters_from(tuned: dict[str, Any] | None, k: int) -> dict[str, Any]:
    """Launch parameters for a k-vector pass from a tuned single-vector pass's (``None``: the
    fused passes' ``test=`` values): one chunk per work-item (k + 1 vectors in flight already),
    and a work-group small enough that 2 k double accumulators fit :data:`SCRATCH_BYTES`."""
    base = dict(tuned or TEST_PARAMETERS)
    wgs = base["wgs"]
    while wgs > 32 and wgs * 2 * k * 8 > SCRATCH_BYTES:
        wgs //= 2
    shuffle = base["shuffle"] and wgs >= 64
    return {**base, "wgs": wgs, "ipt": 1, "shuffle": shuffle}
