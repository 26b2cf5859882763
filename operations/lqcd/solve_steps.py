"""The steps of a Wilson solve around its Krylov solver, shared by
:meth:`WilsonOperator.solve <operations.lqcd.wilson.WilsonOperator.solve>` and
:meth:`~operations.lqcd.wilson.WilsonOperator.solve_many`: the options and right-hand side
checked, the system the solver iterates on, and the full solution with its true residual."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from autotune import accel

from .. import krylov

from .fields import SpinorField
from .gauge import nonfinite_entries

#: the Krylov methods a Wilson solve takes
METHODS = ("cg", "bicgstab", "gcr")


def check_solve_options(op: Any, method: Any, precision: Any, sloppy: Any) -> str:
    """The solve's precision (``precision``, else the operator's) once ``method``,
    ``precision`` and ``sloppy`` are checked; a ValueError naming a bad one."""
    if method not in METHODS:
        raise ValueError(f"method must be 'cg', 'bicgstab' or 'gcr', got {method!r}")
    precision = precision or op.precision
    if precision == "half":
        raise ValueError("half precision is a sloppy precision: solve with precision='mixed', "
                         "sloppy='half' (CG or BiCGstab in half with reliable updates in double)")
    if precision not in ("double", "single", "mixed"):
        raise ValueError(f"precision must be 'double', 'single' or 'mixed', got {precision!r}")
    if sloppy not in ("single", "half"):
        raise ValueError(f"sloppy must be 'single' or 'half', got {sloppy!r}")
    return precision


def checked_rhs(op: Any, b: Any) -> tuple[np.ndarray, float]:
    """``b`` as a complex128 host spinor and its norm |b|, once its shape and finiteness are
    checked: one pass over it (the norm is finite only if every entry is; the entries are
    counted only when it is not)."""
    b = op.check_spinor(b).astype(np.complex128, copy=False)  # only read: no copy needed
    flat = b.reshape(-1)
    norm = math.sqrt(max(float(np.vdot(flat, flat).real), 0.0))
    if not math.isfinite(norm):
        bad = nonfinite_entries(b)
        if bad:
            raise ValueError(f"b has {bad} non-finite entries (NaN or inf) out of {b.size}; "
                             "the right-hand side must be finite")
        raise ValueError("b's norm overflows double precision (its squares sum past 1.8e308); "
                         "scale the right-hand side down and the solution up by the same factor")
    return b, norm


def system_rhs(high: Any, b_field: SpinorField, method: str,
                even_odd: bool) -> tuple[str, accel.DeviceArray]:
    """The kind of operator the solver iterates on (:attr:`WilsonLinearOperator.KINDS`) and its
    right-hand side, on the device. Even-odd, the Schur complement M_pc x_e = b_e + kappa D_eo
    b_o (x_o follows, :func:`full_solution`); CG solves the normal equations A^dag A x =
    A^dag rhs."""
    if even_odd:
        rhs = high.context.allocate(12 * high.lattice.half_volume, high.dtype)
        high.dslash_parity(rhs, b_field.odd, 0, x=b_field.even, a=high.kappa)
    else:
        rhs = b_field.flat
    if method != "cg":
        return ("Mpc" if even_odd else "M"), rhs
    normal = high.context.allocate(rhs.size, high.dtype)
    if even_odd:
        high.apply_pc_dagger(rhs, out=normal)
        return "MpcdagMpc", normal
    high.apply_dagger(SpinorField(rhs), out=SpinorField(normal))
    return "MdagM", normal


def full_solution(high: Any, x: accel.DeviceArray, b_field: SpinorField,
                   even_odd: bool) -> SpinorField:
    """The solver's solution ``x`` as a full device field: even-odd, x holds x_e and the odd
    sites follow, x_o = b_o + kappa D_oe x_e."""
    out = high.new_field()
    if even_odd:
        out.even.copy_from(high.queue, x.view(0, x.size, out.even.shape))
        high.dslash_parity(out.odd, out.even, 1, x=b_field.odd, a=high.kappa)
    else:
        out.flat.copy_from(high.queue, x.view(0, x.size, out.flat.shape))
    return out


def zero_answer(b: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The solution of M x = 0 (x = 0) as b's host spinor: a new array, or ``out`` zeroed."""
    if out is None:
        return np.zeros_like(b)
    out[...] = 0
    return out


def answer(high: Any, x: accel.DeviceArray, b_field: SpinorField, b_norm: float,
           even_odd: bool, out: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """The solver's solution ``x`` as the full host solution (a new array, or written into the
    checked host spinor ``out``), and its true residual
    |b - M x| / |b| (``b_norm``: |b| of the host's b; 0 for b = 0), computed on the device in
    ``high``'s precision against ``b_field`` (b there, left as it is), summed over
    the ranks of a distributed operator. Only the solution comes back to the host (a 32^4
    spinor is 200 MB: M x came back too, and b - M x was summed on the host, before)."""
    full = full_solution(high, x, b_field, even_odd)
    check = high.apply(full, out=high.new_field())
    ops = krylov.vector_ops(high.linear_operator("M"))
    rr = float(ops.blas("xmy_norm", b_field.flat, check.flat))  # check = b - M x
    return high.from_device(full, out), math.sqrt(max(rr, 0.0)) / b_norm if b_norm else 0.0
