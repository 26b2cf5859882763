"""Several right-hand sides of one Wilson operator solved together
(:meth:`WilsonOperator.solve_many <operations.lqcd.wilson.WilsonOperator.solve_many>`): CG on
each source's even-odd normal equations, in lockstep (:func:`operations.solvers.cg_many`),
every dslash of a step one launch for all the sources (:class:`.MultiDslash`), so that each
link is read once a step for all of them. A point source is 12 right-hand sides (spin and
colour), which is why lattice codes solve them together (QUDA's multi-source inverter).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from autotune import accel

from .. import solvers
from . import half as half_storage
from .dslash_multi import MAX_RHS, MultiDslash
from .solve_steps import answer, check_solve_options, checked_rhs, system_rhs


#: the most right-hand sides one multi-RHS dslash launch takes in a solve: more sources go in
#: groups of this many (and the rest). On an H200 (2026-11-30, 32^4) four fields a launch
#: were no faster a field than two (half 12: 45.8 us against 44.1, the sweep of
#: benchmarks/wilson_dslash_multi.py), and a key of twelve fields had not finished tuning in
#: six minutes, where four took 93 s.
MOST_PER_LAUNCH = 4


@dataclasses.dataclass
class _Group:
    """Right-hand sides ``start`` to ``stop`` of a step, one multi-RHS dslash (None for one
    source: the operator's own) with its fields between the dslashes."""

    start: int
    stop: int
    multi: MultiDslash | None = None
    odd: list[Any] = dataclasses.field(default_factory=list)
    mid: list[Any] = dataclasses.field(default_factory=list)


class ManyNormalOperator:
    """M_pc^dag M_pc of one Wilson operator on ``nrhs`` even-site vectors at once
    (``apply_many(outs, inps)``: four launches of the multi-RHS dslash for each group of at
    most :data:`MOST_PER_LAUNCH` vectors), and on one (``apply(out, inp)``: the operator's
    own), as :func:`operations.solvers.cg_many` takes it. A group of one takes the operator's
    own application: its dslash is tuned on the one-field key (split directions and staging
    allowed), with no multi-RHS key to tune."""

    def __init__(self, wilson: Any, nrhs: int):
        self.wilson, self.nrhs = wilson, nrhs
        self.context, self.queue, self.dtype = wilson.context, wilson.queue, np.dtype(wilson.dtype)
        self.tuning = wilson.tuning
        self.size = 12 * wilson.lattice.half_volume
        self.groups = [self._group(start, min(nrhs, start + MOST_PER_LAUNCH))
                       for start in range(0, nrhs, MOST_PER_LAUNCH)]

    def _group(self, start: int, stop: int) -> _Group:
        wilson, n = self.wilson, stop - start
        if n == 1:
            return _Group(start, stop)
        # the odd-site vectors between the two dslashes of M_pc, and M_pc inp between the
        # two (16-bit for a half operator, as its own application keeps them)
        if wilson.precision == "half":
            sites = wilson.lattice.half_volume
            odd, mid = ([half_storage.HalfSpinor.allocate(wilson.context, sites)
                         for _ in range(n)] for _ in range(2))
        else:
            odd, mid = ([wilson.context.allocate(self.size, self.dtype) for _ in range(n)]
                        for _ in range(2))
        return _Group(start, stop, MultiDslash(wilson.template, wilson.queue, n), odd, mid)

    @classmethod
    def of(cls, wilson: Any, nrhs: int) -> ManyNormalOperator:
        """The operator for ``nrhs`` vectors of ``wilson``, made once (a sequence of solves
        allocates its fields and reads its dslash's tuning once)."""
        made = wilson.__dict__.setdefault("_many_normal", {})
        if nrhs not in made:
            made[nrhs] = cls(wilson, nrhs)
        return made[nrhs]

    def apply(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        self.wilson.apply_pc_normal(inp, out)

    def apply_many(self, outs: Sequence[accel.DeviceArray],
                   inps: Sequence[accel.DeviceArray]) -> None:
        """``outs[r] = M_pc^dag M_pc inps[r]`` for every r: M_pc = 1 - kappa^2 D_eo D_oe, its
        adjoint with D^dag, each dslash over every right-hand side of a group in one launch."""
        if len(outs) != self.nrhs or len(inps) != self.nrhs:
            raise ValueError(f"apply_many takes {self.nrhs} vectors each, got {len(outs)} "
                             f"and {len(inps)}")
        gauge, a = self.wilson.gauge, -self.wilson.kappa ** 2
        for g in self.groups:
            out, inp = list(outs[g.start:g.stop]), list(inps[g.start:g.stop])
            if g.multi is None:
                self.apply(out[0], inp[0])
                continue
            g.multi(g.odd, inp, gauge, 1)
            g.multi(g.mid, g.odd, gauge, 0, xs=inp, a=a)
            g.multi(g.odd, g.mid, gauge, 1, dagger=True)
            g.multi(out, g.odd, gauge, 0, dagger=True, xs=g.mid, a=a)


def solve_many(op: Any, bs: Sequence[Any], tol: float, maxiter: int,
               precision: str | None = None, sloppy: str = "single",
               delta: float = 0.1, out: Sequence[Any] | None = None
               ) -> list[tuple[np.ndarray, solvers.SolveInfo]]:
    """:meth:`WilsonOperator.solve_many`: the even-odd normal equations of every ``bs[r]``,
    solved by :func:`operations.solvers.cg_many` on :class:`ManyNormalOperator` (or, mixed,
    :func:`operations.solvers.cg_mixed_many` on the ``sloppy`` operator's, with reliable
    updates in double), then each full solution and its true residual |b - M x| / |b|."""
    precision = check_solve_options(op, "cg", precision, sloppy)
    if op.domain is not None or getattr(op, "comm", None) is not None:
        raise ValueError("solve_many takes a whole-lattice operator on one process (not a "
                         "Schwarz block's, not a distributed one)")
    if isinstance(bs, np.ndarray) or not isinstance(bs, Sequence) or \
            not 1 <= len(bs) <= MAX_RHS:
        raise ValueError(f"bs must be a list of 1 to {MAX_RHS} host spinors, got "
                         f"{type(bs).__name__}")
    tol, maxiter = solvers.check_stopping(tol, maxiter)
    if out is not None and (isinstance(out, np.ndarray) or not isinstance(out, Sequence)
                            or len(out) != len(bs)):
        raise ValueError(f"out must be None or a list of {len(bs)} host spinors, one for each "
                         f"right-hand side, got {type(out).__name__}")
    outs = [op.check_out(o) for o in out] if out is not None else [None] * len(bs)
    hosts, norms = zip(*(checked_rhs(op, b) for b in bs))
    start = time.perf_counter()
    high = op.with_precision("double" if precision == "mixed" else precision)
    fields = [high.to_device(b) for b in hosts]
    rhs = [system_rhs(high, field, "cg", True)[1] for field in fields]
    # the normal equations' residual bounds the true one only up to the condition number: a
    # tenth of the tolerance, as WilsonOperator.solve asks
    if precision == "mixed":
        answers = solvers.cg_mixed_many(
            high.linear_operator("MpcdagMpc"),
            ManyNormalOperator.of(op.with_precision(sloppy), len(bs)), rhs, tol * 0.1, maxiter,
            delta)
    else:
        answers = solvers.cg_many(ManyNormalOperator.of(high, len(bs)), rhs, tol * 0.1, maxiter)
    results = []
    for norm, field, into, (x, info) in zip(norms, fields, outs, answers):
        result, true = answer(high, x, field, norm, True, into)
        results.append((result, dataclasses.replace(info, true_residual=true,
                                                    seconds=time.perf_counter() - start)))
    return results


__all__ = ["MOST_PER_LAUNCH", "ManyNormalOperator", "solve_many"]
