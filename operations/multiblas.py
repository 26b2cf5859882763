"""Multi-vector passes for Gram-Schmidt (GCR's orthogonalisation), one pass over memory each.

=================== ================================== ==============================
operation           effect                             returns
=================== ================================== ==============================
cdots{k}            -                                  <x_i, y> for i < k
csubs_dot_norm{k}   y -= sum_i b_i x_i                 <y, r>, |y|^2 (after the update)
caxpy_sums{k}       y += sum_i a_i x_i                 -
=================== ================================== ==============================

for k = 1 ... :data:`MAX_VECTORS` (complex data). ``cdots{k}`` takes (y, x_0, ..., x_{k-1}) and
reads y once for all k dot products; ``csubs_dot_norm{k}`` takes (y, r, x_0, ..., x_{k-1}) and
scalars b_0 ... b_{k-1}: the orthogonalised direction and what the step length needs, in the
same pass; ``caxpy_sums{k}`` takes (y, x_0, ..., x_{k-1}) and scalars a_0 ... a_{k-1} (GCR's
deferred solution update). Made of the same fused pass as :mod:`.blas` (so the same launch
parameters apply); they are not tuned on their own: :func:`parameters_from` derives theirs from
a tuned single-vector pass, limiting the work-group's scratch for k reductions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .fused import TEST_PARAMETERS, FusedOp, FusedTemplate, Output

#: the most vectors one pass combines (GCR's steps between restarts above it are refused)
MAX_VECTORS = 16
#: the most bytes of work-group scratch a reduction pass may take
SCRATCH_BYTES = 16384
#: the widths a pass takes where few programs matter more than few passes (:func:`blocks`)
POWER_WIDTHS = tuple(1 << i for i in range(MAX_VECTORS.bit_length() - 1, -1, -1))


def blocks(k: int, every_width: bool) -> list[range]:
    """The consecutive blocks in which k vectors are combined, one pass each.

    ``every_width`` (GPUs): as few passes as :data:`MAX_VECTORS` allows, one program per width
    (a GCR basis of 16 builds 46: NVRTC takes about a second each, once, and the kernel cache
    keeps them). Otherwise (CPU devices, where PoCL generates each kernel's code for about 0.6 s
    at its first launch), widths of :data:`POWER_WIDTHS` only, largest first: 15 programs for
    the same basis, at the price of reading the combined vector once more per extra block (for
    13 vectors, blocks of 8, 4 and 1)."""
    if k < 0:
        raise ValueError(f"k must be at least 0, got {k}")
    out, first = [], 0
    while first < k:
        left = k - first
        width = min(left, MAX_VECTORS) if every_width else next(
            w for w in POWER_WIDTHS if w <= left)
        out.append(range(first, first + width))
        first += width
    return out


def _ref_cdots(v, s):
    k = len(v) - 1
    return {}, tuple(np.vdot(v[f"x{i}"], v["y"]) for i in range(k))


def _ref_csubs_dot_norm(v, s):
    k = len(v) - 2
    y = v["y"].copy()
    for i in range(k):
        y -= s[f"b{i}"] * v[f"x{i}"]
    return {"y": y}, (np.vdot(y, v["r"]), np.vdot(y, y).real)


def _ref_caxpy_sums(v, s):
    k = len(v) - 1
    y = v["y"].copy()
    for i in range(k):
        y += s[f"a{i}"] * v[f"x{i}"]
    return {"y": y}, ()


def _sum(terms: list[str]) -> str:
    text = terms[0]
    for t in terms[1:]:
        text = f"ADD({text}, {t})"
    return text


def _ops() -> dict[str, FusedOp]:
    ops = {}
    for k in range(1, MAX_VECTORS + 1):
        xs = tuple(f"x{i}" for i in range(k))
        ops[f"cdots{k}"] = FusedOp(
            f"cdots{k}", ("y",) + xs,
            outputs=tuple(Output("field", (f"CDOT_RE(x{i}, y)", f"CDOT_IM(x{i}, y)"))
                          for i in range(k)),
            complex_only=True, reference=_ref_cdots)
        ops[f"csubs_dot_norm{k}"] = FusedOp(
            f"csubs_dot_norm{k}", ("y", "r") + xs, ("y",),
            scalars=tuple((f"b{i}", "field") for i in range(k)),
            body=f"y = SUB(y, {_sum([f'MUL(b{i}, x{i})' for i in range(k)])});",
            outputs=(Output("field", ("CDOT_RE(y, r)", "CDOT_IM(y, r)")),
                     Output("real", ("NORM2(y)",))),
            complex_only=True, reference=_ref_csubs_dot_norm)
        ops[f"caxpy_sums{k}"] = FusedOp(
            f"caxpy_sums{k}", ("y",) + xs, ("y",),
            scalars=tuple((f"a{i}", "field") for i in range(k)),
            body=f"y = ADD(y, {_sum([f'MUL(a{i}, x{i})' for i in range(k)])});",
            complex_only=True, reference=_ref_caxpy_sums)
    return ops


OPS = _ops()


class MultiBlasTemplate(FusedTemplate):
    """The multi-vector passes (explicit launch parameters: :func:`parameters_from`)."""

    ops = OPS
    autotune_version = 1


def parameters_from(tuned: dict[str, Any] | None, sums: int) -> dict[str, Any]:
    """Launch parameters for a multi-vector pass that reduces ``sums`` complex values (k for
    ``cdots{k}``) from a tuned single-vector pass's (``None``: the fused passes' ``test=``
    values): one chunk per work-item (several vectors in flight already), and a work-group small
    enough that 2 ``sums`` double accumulators fit :data:`SCRATCH_BYTES`."""
    base = dict(tuned or TEST_PARAMETERS)
    wgs = base["wgs"]
    while wgs > 32 and wgs * 2 * sums * 8 > SCRATCH_BYTES:
        wgs //= 2
    shuffle = base["shuffle"] and wgs >= 64
    return {**base, "wgs": wgs, "ipt": 1, "shuffle": shuffle}
