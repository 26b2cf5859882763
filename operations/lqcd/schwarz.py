"""The Schwarz preconditioner of GCR (the QUDA seed's scalable solver): additive,
non-overlapping blocks with Dirichlet boundaries, a few minimal-residual steps on the even-odd
block system in a low precision.

``K r`` approximates ``M_pc^-1 r`` by ``M_pc`` restricted to blocks: the hops that leave a
block are dropped (``DslashTemplate(..., domain=block)``), so the blocks decouple and, on many
GPUs with blocks inside each GPU's part, the preconditioner communicates nothing. Its inner
solver is MR, ``iterations`` steps from z = 0: ``A r`` with the block operator, ``alpha = <A r,
r> / |A r|^2``, ``z += alpha r``, ``r -= alpha A r``. Its dot products are taken over this
process's vectors (a GPU's blocks together: "communication switched off"), so on one GPU with
several blocks each step uses one alpha for all of them, which keeps K a fixed polynomial of
the block operator per outer step, as flexible GCR allows.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from autotune import accel
from operations import solvers

#: inner precisions the preconditioner runs in
INNER_PRECISIONS = ("half", "single", "double")


def check_schwarz(block: Any, inner_iterations: Any, inner_precision: Any) -> tuple[int, ...]:
    """The preconditioner's arguments, checked: ``block`` four positive ints (that they divide
    the lattice is checked by the operator), ``inner_iterations`` an int >= 1,
    ``inner_precision`` one of :data:`INNER_PRECISIONS`."""
    if block is None:
        raise ValueError("preconditioner='schwarz' needs block=(bx, by, bz, bt): the extents "
                         "of the Schwarz blocks, each dividing the lattice's (or each GPU's part)")
    try:
        block = tuple(int(b) for b in block)
    except (TypeError, ValueError):
        raise TypeError(f"block must be four ints (bx, by, bz, bt), got {block!r}") from None
    if len(block) != 4 or min(block) < 1:
        raise ValueError(f"block must be four positive extents (bx, by, bz, bt), got {block}")
    if (isinstance(inner_iterations, bool) or not isinstance(inner_iterations, (int, np.integer))
            or inner_iterations < 1):
        raise ValueError(f"inner_iterations must be an int of at least 1, got {inner_iterations!r}")
    if inner_precision not in INNER_PRECISIONS:
        raise ValueError(f"inner_precision must be one of {', '.join(INNER_PRECISIONS)}, "
                         f"got {inner_precision!r}")
    return block


class SchwarzPreconditioner:
    """``K(out, inp)``: out = K inp for flexible GCR (:func:`operations.solvers.gcr`).

    ``outer``: the outer solver's linear operator (a :class:`~.wilson.WilsonLinearOperator` of
    kind "Mpc"); ``local``: the block operator, a :class:`~.wilson.WilsonOperator` with
    ``domain=block`` in the inner precision, acting on this process's sites. Counts the inner
    steps (:attr:`inner_iterations`) and the wall time spent (:attr:`seconds`, each call
    waiting for its work: GCR waits once per step anyway).
    """

    def __init__(self, outer: Any, local: Any, iterations: int):
        from .wilson import WilsonLinearOperator

        self.iterations = int(iterations)
        self.A = WilsonLinearOperator(local, "Mpc")
        if self.A.size != outer.size:
            raise ValueError("the block operator acts on vectors of another length than the "
                             "outer operator's")
        self.queue = outer.queue
        self.ops = solvers.VectorOps(local.context, local.queue, self.A.dtype, self.A.size)
        self.ops.prepare(blas=("caxpy", "cdot_norm"))
        hi = solvers.vector_ops(outer)
        same = np.dtype(outer.dtype) == np.dtype(self.A.dtype)
        self._down = None if same else self.ops.converter(outer.dtype)
        self._up = None if same else hi.converter(self.A.dtype)
        self.r, self.z, self.ar = self.ops.new(), self.ops.new(), self.ops.new()
        self.inner_iterations = 0
        self.seconds = 0.0

    def __call__(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        started = time.perf_counter()
        q = self.queue
        if self._down is None:
            self.r.copy_from(q, inp)
        else:
            self._down(self.r, inp)
        self.z.zero(q)
        for _ in range(self.iterations):
            self.A.apply(self.ar, self.r)
            ar_r, ar_ar = self.ops.blas("cdot_norm", self.ar, self.r)
            self.inner_iterations += 1
            if not ar_ar > 0:  # r = 0: the block systems are solved
                break
            alpha = ar_r / ar_ar
            self.ops.blas("caxpy", self.r, self.z, a=alpha)  # z += alpha r
            self.ops.blas("caxpy", self.ar, self.r, a=-alpha)  # r -= alpha A r
        if self._up is None:
            out.copy_from(q, self.z)
        else:
            self._up(out, self.z)
        q.finish()
        self.seconds += time.perf_counter() - started
