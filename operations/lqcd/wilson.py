"""``WilsonOperator``: the Wilson Dirac operator M = 1 - kappa D on a gauge field.

Host methods take and return numpy spinors of shape (T, Z, Y, X, 4, 3); device methods take
:class:`SpinorField` objects (two (12, V/2) device arrays, one per parity) for speed.
"""

from __future__ import annotations

import dataclasses
import math
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune import accel

from .. import solvers
from ..scalars import finite_real_scalar

from . import half as half_storage
from . import multi_source
from . import schwarz as schwarz_module
from .dslash import DslashTemplate, check_options, spinor_array
from .fields import SpinorField
from .gauge import nonfinite_entries, unitarity_violation
from .spinor_layout import SpinorLayoutTemplate
from .solve_steps import answer, check_solve_options, checked_rhs, system_rhs, zero_answer


def link_array(U: Any) -> np.ndarray:
    """``U`` as an array of shape (4, T, Z, Y, X, 3, 3) of complex numbers, else an error."""
    U = np.asarray(U)
    if U.ndim != 7 or U.shape[0] != 4 or U.shape[-2:] != (3, 3):
        raise ValueError(f"U must have shape (4, T, Z, Y, X, 3, 3), got {U.shape}")
    if not np.iscomplexobj(U):
        raise TypeError(f"U must be complex, got {U.dtype}")
    return U


def host_spinor(psi: Any, shape: tuple[int, ...], scope: str = "") -> np.ndarray:
    """``psi`` if it is a numeric numpy array of ``shape`` (T, Z, Y, X, 4, 3), else a TypeError
    or ValueError saying what a host spinor must be (``scope``, such as "the global ", qualifies
    the expected shape in the message)."""
    if not isinstance(psi, np.ndarray):
        raise TypeError(f"spinor must be a numpy array of shape {shape} (or a SpinorField)")
    if psi.shape != shape:
        raise ValueError(f"spinor has shape {psi.shape}, expected {scope}{shape} "
                         "(T, Z, Y, X, spin, colour)")
    if not np.issubdtype(psi.dtype, np.number):
        raise TypeError(f"spinor must be numeric, got {psi.dtype}")
    return psi


def host_out(out: Any, shape: tuple[int, ...]) -> np.ndarray | None:
    """``out`` if it is None or a host array a spinor of ``shape`` can be written into in place
    (a writeable, C-contiguous complex128 numpy array of that shape), else a TypeError or
    ValueError saying what it must be."""
    if out is None:
        return None
    make = f"make one with numpy.empty({shape}, complex) and pass it again"
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array of shape {shape} or None, not "
                        f"{type(out).__name__}; {make}")
    if out.shape != shape or out.dtype != np.complex128:
        raise ValueError(f"out has shape {out.shape} and dtype {out.dtype}, expected {shape} "
                         f"complex128 (T, Z, Y, X, spin, colour); {make}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError(f"out must be writeable and C-contiguous (the answer is copied into it "
                         f"as it lies in memory); {make}")
    return out


def check_links(U: np.ndarray, kappa: Any, reconstruct: int, check: bool, unitarity_tol: Any) -> None:
    """``kappa`` and, when ``check``, the links' values (see :class:`WilsonOperator`);
    ValueError or TypeError naming the problem."""
    finite_real_scalar("", "kappa", kappa, hint="a finite hopping parameter (such as 0.12)")
    if check:
        if isinstance(unitarity_tol, bool) or not isinstance(
                unitarity_tol, (int, float, np.integer, np.floating)):
            raise TypeError(f"unitarity_tol must be a real number, not "
                            f"{type(unitarity_tol).__name__} {unitarity_tol!r}")
        if not (math.isfinite(unitarity_tol) and unitarity_tol >= 0):
            raise ValueError(f"unitarity_tol must be a finite number >= 0, got {unitarity_tol!r}")
        bad = nonfinite_entries(U)
        if bad:
            raise ValueError(f"U has {bad} non-finite entries (NaN or inf) out of {U.size}; "
                             "links must be finite unitary matrices: check how U was made or read")
        unitary, det = unitarity_violation(U)
        # not (x <= tol): a NaN deviation fails too
        if not unitary <= unitarity_tol:
            raise ValueError(f"links are not unitary (max |U^dag U - 1| = {unitary:.2e} > "
                             f"{unitarity_tol:.0e}); reunitarize them or pass check=False")
        if reconstruct != 18 and not det <= unitarity_tol:
            raise ValueError(f"reconstruct={reconstruct} needs SU(3) links, but max |det U - 1| "
                             f"= {det:.2e}; use reconstruct=18 for U(3) links")


#: device arrays the even-site operations take as they are: ours, and (a half operator's
#: block systems, :mod:`.schwarz`) 16-bit half precision fields
_OURS = (accel.DeviceArray, half_storage.HalfSpinor)


class WilsonOperator:
    """M = 1 - kappa D, with D the Wilson hopping term of ``U`` (DeGrand-Rossi gammas).

    ``precision`` is "double", "single" or "half" (links and the fields between the dslashes of
    one application in 16-bit fixed point, :mod:`.half`, arithmetic in single precision: its
    device fields, what solvers and BLAS work on, are single precision, read by an
    application's first dslash and written by its last; the sloppy operator of
    ``solve(..., sloppy="half")``); ``reconstruct`` 18, 12 or 8 chooses how links are stored on
    the device; ``t_boundary`` is -1 (antiperiodic in time, the default) or +1.
    Links must be unitary (and, for 12 and 8, of determinant 1) to within ``unitarity_tol``
    when ``check`` is true. ``tuning``: the dslash's parameters, None (the stored result, tuned
    at once on a miss) or ``"online"``: the dslash and the solvers' vector passes are tuned
    while they run, and their results stored (an untuned lattice or a new GPU then costs no
    wait; the queue, if given, must be timed). ``domain``: (bx, by, bz, bt), Schwarz blocks
    (each extent dividing the lattice's): the operator then drops every hop that leaves a
    block, the block system of a Schwarz preconditioner (:meth:`with_domain`);
    ``dirichlet_edges`` (4 flags, with ``domain``): directions in which the lattice's own edges
    are Dirichlet too (a block as long as the lattice then does not wrap around).
    """

    def __init__(self, context: accel.Context, U: np.ndarray, kappa: float,
                 precision: str = "double", reconstruct: int = 18, t_boundary: int = -1, *,
                 check: bool = True, unitarity_tol: float = 1e-8, queue: Any = None,
                 tuning: dict[str, Any] | str | None = None,
                 domain: tuple[int, int, int, int] | None = None,
                 dirichlet_edges: tuple[bool, bool, bool, bool] | None = None):
        U = link_array(U)
        t, z, y, x = U.shape[1:5]
        self.lattice = check_options((x, y, z, t), precision, reconstruct, t_boundary)
        check_links(U, kappa, reconstruct, check, unitarity_tol)
        self.context = context
        self.tuning = "online" if tuning == "online" else None  #: how solvers tune their passes
        self._explicit = dict(tuning) if isinstance(tuning, dict) else None
        self.queue = queue or context.create_command_queue(timed=self.tuning == "online")
        self._viewed = accel.LastViews()  #: other libraries' spinors last passed, viewed
        self.kappa = float(kappa)
        self.precision = precision
        self.reconstruct = reconstruct
        self.t_boundary = t_boundary
        self.template = DslashTemplate(context, self.lattice.dims, precision, reconstruct,
                                       t_boundary, tuning, domain=domain,
                                       dirichlet_edges=dirichlet_edges)
        self.domain = self.template.domain  #: Schwarz blocks, or None
        self.dtype = self.template.dtype
        self._dslash = self.template.instantiate(self.queue)
        self._links = U.astype(np.complex128)
        self.gauge = self.template.gauge_to_device(self.queue, self._links)
        self._tmp: SpinorField | None = None
        # A half operator's fields between two dslashes of one application: 16-bit (its
        # kernels read and write single or 16-bit storage per argument, so the single
        # precision fields it takes and returns need no conversion pass)
        self._between: list[half_storage.HalfSpinor] | None = (
            [half_storage.HalfSpinor.allocate(context, self.lattice.half_volume) for _ in range(2)]
            if precision == "half" else None)

    # Device fields -------------------------------------------------------------------------
    def new_field(self) -> SpinorField:
        """A new device field of this operator's dtype (contents undefined)."""
        return SpinorField(self.context.allocate((2, 12, self.lattice.half_volume), self.dtype))

    def to_device(self, psi: np.ndarray) -> SpinorField:
        """The host spinor ``psi`` as a new device field (copied as it is, reordered and
        converted on the device: :mod:`.spinor_layout`)."""
        return self._field_of(self.check_spinor(psi))

    def _field_of(self, psi: np.ndarray) -> SpinorField:
        """A new device field of the checked host spinor ``psi`` (of this operator's lattice)."""
        lat = self.lattice
        layout = self._layout()
        if layout is None:  # no double precision on the device: reordered here
            halves = np.stack([lat.spinor_to_device(psi, p, self.dtype) for p in (0, 1)])
            return SpinorField(self.context.to_device(self.queue, halves))
        staging = self._staging_with(np.ascontiguousarray(psi, dtype=np.complex128))
        field = self.new_field()
        layout.to_checkerboard(field.flat, staging, lat)
        return field

    def from_device(self, field: SpinorField, out: np.ndarray | None = None) -> np.ndarray:
        """The device field ``field`` as a host spinor (complex128): a new array, or ``out``
        (:meth:`check_out`), written in place and returned. A new array's pages are first
        touched by the copy itself (on an H200 a 192 MiB copy back took 58 ms, the copy the
        other way from memory written before 23 ms): pass ``out`` to reuse an array."""
        block = self.lattice.shape + (4, 3)  # (a distributed operator's: this rank's block)
        out = host_out(out, block)
        layout = self._layout()
        if layout is None:
            host = self.lattice.spinor_from_device((field.even.get(self.queue),
                                                    field.odd.get(self.queue)))
            if out is None:
                return host
            out[...] = host
            return out
        staging = self._staging_with(None)
        layout.from_checkerboard(staging, field.flat, self.lattice)
        if out is None:
            return staging.get(self.queue).reshape(block)
        staging.get(self.queue, out.reshape(-1))
        return out

    def host_shape(self) -> tuple[int, ...]:
        """The shape of the host spinors this operator takes and gives: (T, Z, Y, X, 4, 3)."""
        return self.lattice.shape + (4, 3)

    def check_out(self, out: Any) -> np.ndarray | None:
        """``out`` if it is None or a host spinor an answer can be written into in place (a
        writeable, C-contiguous complex128 array of :meth:`host_shape`), else a TypeError or
        ValueError saying what it must be."""
        return host_out(out, self.host_shape())

    def _layout(self) -> Any:
        """The device's reorders between host spinors and this operator's fields (made on
        first use), or None where the device has no double precision."""
        if not hasattr(self, "_layouts"):
            self._layouts = (SpinorLayoutTemplate(self.context, self.dtype, self._layout_tuning())
                             .instantiate(self.queue)
                             if self.context.device.double_precision else None)
        return self._layouts

    def _layout_tuning(self) -> dict[str, Any] | None:
        """The reorders' tuning: None, the stored result (tuned on a miss)."""
        return None

    def _staging_with(self, host: np.ndarray | None) -> accel.DeviceArray:
        """The device array of a host spinor's layout (12 V complex128; one an operator, reused:
        its queue is in order), holding ``host`` if given."""
        staging = getattr(self, "_staging", None)
        if staging is None:
            staging = self._staging = self.context.allocate(12 * self.lattice.volume,
                                                            np.complex128)
        if host is not None:
            staging.set(self.queue, host.reshape(-1))
        return staging

    def check_spinor(self, psi: Any) -> np.ndarray:
        """``psi`` if it is a host spinor this operator takes (numeric, of shape (T, Z, Y, X, 4,
        3)), else a TypeError or ValueError saying why (:func:`host_spinor`)."""
        return host_spinor(psi, self.lattice.shape + (4, 3))

    def _scratch(self) -> SpinorField:
        if self._tmp is None:
            self._tmp = self.new_field()
        return self._tmp

    # Device-array operations -----------------------------------------------------------------
    def dslash_parity(self, out: accel.DeviceArray, inp: accel.DeviceArray, parity: int, *,
                      dagger: bool = False, x: accel.DeviceArray | None = None, a: float = 0.0) -> None:
        """out = D_{parity,1-parity} inp (x + a D inp with ``x``): D_eo for parity 0, D_oe for 1."""
        self._dslash(out, inp, self.gauge, parity, dagger=dagger, x=x, a=a)

    def apply_full(self, out: SpinorField, inp: SpinorField, *, dagger: bool = False,
                   xpay: bool = True) -> None:
        """out = M inp = inp - kappa D inp on device fields (both parities), or D inp without
        ``xpay``; M^dag (D^dag) with ``dagger``. Enqueued; ``out`` must not be ``inp``."""
        if out is inp:
            raise ValueError("apply_full needs a distinct out= SpinorField")
        for p in (0, 1):
            self.dslash_parity(out.parity(p), inp.parity(1 - p), p, dagger=dagger,
                               x=inp.parity(p) if xpay else None, a=-self.kappa if xpay else 0.0)

    def _pc(self, out: accel.DeviceArray, inp: accel.DeviceArray, dagger: bool) -> None:
        """out = M_pc inp (M_pc^dag with ``dagger``) on even-site arrays, through scratch."""
        tmp = self._scratch().odd if self._between is None else self._between[0]
        self.dslash_parity(tmp, inp, 1, dagger=dagger)
        self.dslash_parity(out, tmp, 0, dagger=dagger, x=inp, a=-self.kappa ** 2)

    def _pc_normal(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        """out = M_pc^dag M_pc inp on even-site arrays (M_pc inp kept in the scratch field's
        even half, which :meth:`_pc` leaves alone, or in 16 bits for a half operator)."""
        mid = self._scratch().even if self._between is None else self._between[1]
        self._pc(mid, inp, False)
        self._pc(out, mid, True)

    def _even_arrays(self, psi: Any, out: Any) -> tuple[Any, Any]:
        """Device ``psi`` and ``out`` of an even-site operation as our arrays (ours as they
        are, a half operator's 16-bit ones too; another library's viewed in place), or a
        ValueError: ``out`` must be given and distinct."""
        if out is None or out is psi:
            raise ValueError("device operations need a distinct out= array")
        if isinstance(psi, _OURS) and isinstance(out, _OURS):
            return psi, out
        views = self._viewed.get((psi, out), self.queue)  # the same objects: ordered again
        if views is None:
            views = tuple(v if isinstance(v, _OURS) else
                          spinor_array(self.template, self.queue, v, name)
                          for v, name in ((psi, "psi"), (out, "out")))
            self._viewed.keep((psi, out), views)
        return views[0], views[1]

    def _on_even_sites(self, psi: np.ndarray, device_op: Callable[[accel.DeviceArray,
                                                                   accel.DeviceArray], None]
                       ) -> np.ndarray:
        """The host forms of ``apply_pc`` and ``apply_pc_normal``: ``device_op(out, inp)`` on
        the even sites of the host spinor ``psi`` (a distributed operator's: this rank's block
        of the global one), moved as :meth:`to_device` and :meth:`from_device` move fields; a
        host spinor with the result on the even sites and zeros on the odd ones."""
        field = self.to_device(psi)
        result = self.new_field()
        result.odd.zero(self.queue)
        device_op(result.even, field.even)
        return self.from_device(result)

    # Public operations: numpy in and out, or SpinorField / DeviceArray with ``out=`` -----------
    def _dispatch(self, psi: Any, out: Any, device_op) -> Any:
        given = out  # returned as passed: another library's array, not our view of it
        if not isinstance(psi, (SpinorField, np.ndarray)):  # another library's device array
            field = SpinorField(spinor_array(self.template, self.queue, psi, "psi", 2))
            if out is None or out is psi:
                raise ValueError("device operations need a distinct out= array")
            psi = field
            if not isinstance(out, SpinorField):
                out = SpinorField(spinor_array(self.template, self.queue, out, "out", 2))
        if isinstance(psi, SpinorField):
            if out is None or out is psi:
                raise ValueError("device operations need a distinct out= SpinorField")
            device_op(out, psi)
            return given
        field = self.to_device(psi)
        result = self.new_field()
        device_op(result, field)
        return self.from_device(result)

    def dslash(self, psi: Any, out: SpinorField | None = None) -> Any:
        """D psi."""
        return self._dispatch(psi, out, lambda o, i: self.apply_full(o, i, xpay=False))

    def apply(self, psi: Any, out: SpinorField | None = None) -> Any:
        """M psi = psi - kappa D psi."""
        return self._dispatch(psi, out, self.apply_full)

    def apply_dagger(self, psi: Any, out: SpinorField | None = None) -> Any:
        """M^dag psi = gamma_5 M gamma_5 psi."""
        return self._dispatch(psi, out, lambda o, i: self.apply_full(o, i, dagger=True))

    def apply_pc(self, psi: Any, out: accel.DeviceArray | None = None, *, dagger: bool = False) -> Any:
        """M_pc psi_e = psi_e - kappa^2 D_eo D_oe psi_e on the even sites.

        On host arrays, ``psi`` is a full spinor whose even sites are used; the result has the
        even sites of M_pc psi and zeros on the odd sites. On the device, ``psi`` and ``out``
        are (12, V/2) even-parity arrays (ours, or another library's of 12 V/2 elements in the
        operator's dtype), ``out`` distinct from ``psi``; the work is enqueued and ``out``
        returned. M_pc^dag with ``dagger``.
        """
        if isinstance(psi, np.ndarray):
            return self._on_even_sites(psi, lambda o, i: self._pc(o, i, dagger))
        src, dst = self._even_arrays(psi, out)
        self._pc(dst, src, dagger)
        return out  # the caller's object (another library's array as passed, not our view)

    def apply_pc_dagger(self, psi: Any, out: accel.DeviceArray | None = None) -> Any:
        """M_pc^dag on the even sites."""
        return self.apply_pc(psi, out, dagger=True)

    def apply_pc_normal(self, psi: Any, out: accel.DeviceArray | None = None) -> Any:
        """M_pc^dag M_pc psi_e on the even sites: what CG iterates on for the even-odd system.

        Host and device forms as for :meth:`apply_pc` (a host result has zeros on the odd
        sites). M_pc psi_e lives in the operator's own scratch between the two applications.
        """
        if isinstance(psi, np.ndarray):
            return self._on_even_sites(psi, self._pc_normal)
        src, dst = self._even_arrays(psi, out)
        self._pc_normal(dst, src)
        return out

    def linear_operator(self, kind: str) -> WilsonLinearOperator:
        """This operator as a solver sees it (:class:`WilsonLinearOperator`): ``kind`` "M",
        "MdagM" (both parities) or "Mpc", "MpcdagMpc" (the even sites)."""
        return WilsonLinearOperator(self, kind)

    def with_precision(self, precision: str) -> WilsonOperator:
        """This operator in another precision (same links, kappa, boundary and compression)."""
        if precision == self.precision:
            return self
        cached = getattr(self, "_other_precisions", {})
        if precision not in cached:
            cached[precision] = self._in_precision(precision)
            self._other_precisions = cached
        return cached[precision]

    def _in_precision(self, precision: str) -> WilsonOperator:
        return WilsonOperator(self.context, self._links, self.kappa, precision, self.reconstruct,
                              self.t_boundary, check=False, queue=self.queue, tuning=self.tuning)

    def with_domain(self, block: tuple[int, int, int, int], precision: str) -> WilsonOperator:
        """The block system of a Schwarz preconditioner: this operator with every hop that
        leaves a ``block`` dropped, in ``precision`` (same links, kappa, boundary and
        compression, on this operator's queue; made once per block and precision)."""
        key = (tuple(int(b) for b in block), precision)
        cached = getattr(self, "_domains", {})
        if key not in cached:
            cached[key] = self._in_domain(*key)
            self._domains = cached
        return cached[key]

    def _in_domain(self, block: tuple[int, ...], precision: str) -> WilsonOperator:
        # explicit dslash parameters carry over (the space is the same in every precision)
        return WilsonOperator(self.context, self._links, self.kappa, precision, self.reconstruct,
                              self.t_boundary, check=False, queue=self.queue,
                              tuning=self._explicit or self.tuning, domain=block)

    def solve(self, b: np.ndarray, method: str = "cg", tol: float = 1e-10, even_odd: bool = True,
              precision: str | None = None, maxiter: int = 10000, *,
              sloppy: str = "single", preconditioner: str | None = None,
              block: tuple[int, int, int, int] | None = None, inner_iterations: int = 10,
              inner_precision: str = "half", nkrylov: int = 16, delta: float = 0.1,
              cg_recurrence: str | None = None,
              out: np.ndarray | None = None) -> tuple[np.ndarray, solvers.SolveInfo]:
        """Solve M x = b (host arrays in and out); returns ``(x, info)``, x a new array or
        ``out`` (a complex128 host spinor to write it into, reused from solve to solve: a
        new array's first touch costs more than the copy, :meth:`from_device`).

        ``method``: "cg" (on the normal equations), "bicgstab" or "gcr" (flexible, restarted
        every ``nkrylov`` steps; both directly). ``even_odd`` solves the even-site Schur
        complement and reconstructs the odd sites. ``precision``: "double", "single" or
        "mixed" (CG, BiCGstab or GCR in the ``sloppy`` precision, "single" or "half", with
        reliable updates in double whenever the iterated residual has fallen by ``delta``
        since the last); default the operator's own. ``preconditioner="schwarz"`` (GCR,
        even-odd): additive Schwarz with Dirichlet ``block`` (bx, by, bz, bt), each step
        ``inner_iterations`` MR steps on the block system in ``inner_precision`` ("half",
        "single" or "double"; :mod:`.schwarz`). ``info.true_residual`` is |b - M x| / |b| for
        the returned x, computed in double precision; with the preconditioner,
        ``info.inner_iterations`` and ``info.preconditioner_seconds`` (the rest of
        ``info.seconds`` is the outer solver's). ``cg_recurrence`` (CG only): one of
        :data:`operations.solvers.CG_RECURRENCES` ("pipelined": the step's operator
        application runs while the host waits for its one sum); None: "single_reduction" on an
        operator over several ranks (one global sum a step), else "classic".
        """
        if cg_recurrence is not None and method != "cg":
            raise ValueError(f"cg_recurrence is CG's option; method {method!r} takes none")
        schwarz = _schwarz_options(method, even_odd, preconditioner, block, inner_iterations,
                                   inner_precision)
        return _solve(self, b, method, tol, even_odd, precision, maxiter, sloppy, schwarz, nkrylov,
                      delta, cg_recurrence, out)

    def solve_many(self, bs: Sequence[np.ndarray], tol: float = 1e-10, maxiter: int = 10000,
                   precision: str | None = None, *, sloppy: str = "single",
                   delta: float = 0.1,
                   out: Sequence[np.ndarray] | None = None
                   ) -> list[tuple[np.ndarray, solvers.SolveInfo]]:
        """Solve M x_r = b_r for several host right-hand sides ``bs`` (1 to 16) together: CG on
        each one's even-odd normal equations, in lockstep, each dslash of a step one launch
        for all of them (:mod:`.multi_source`). ``precision``, ``sloppy`` and ``delta`` as
        :meth:`solve`'s ("mixed": CG in ``sloppy``, "single" or "half", with reliable updates
        in double). Returns ``(x, info)`` per right-hand side, as :meth:`solve` does for one;
        ``out``: one host spinor per right-hand side to write its x into (as :meth:`solve`'s)."""
        return multi_source.solve_many(self, bs, tol, maxiter, precision, sloppy, delta, out)


class WilsonLinearOperator:
    """A Wilson operator as a solver sees it: ``apply(out, inp)`` on flat device vectors
    (:class:`operations.solvers.LinearOperator`; made by :meth:`WilsonOperator.linear_operator`).

    ``kind``: ``"M"``, ``"MdagM"`` (full lattice, vectors of 24 V/2 elements) or ``"Mpc"``,
    ``"MpcdagMpc"`` (even sites, 12 V/2 elements).
    """

    KINDS = ("M", "MdagM", "Mpc", "MpcdagMpc")

    def __init__(self, wilson: WilsonOperator, kind: str):
        if kind not in self.KINDS:
            raise ValueError(f"kind must be one of {', '.join(self.KINDS)}, got {kind!r}")
        self.wilson, self.kind = wilson, kind
        self.context, self.queue, self.dtype = wilson.context, wilson.queue, np.dtype(wilson.dtype)
        self.tuning = wilson.tuning
        self.comm = getattr(wilson, "comm", None)  #: a distributed operator's ranks
        half = 12 * wilson.lattice.half_volume
        self.size = half if kind.startswith("Mpc") else 2 * half
        #: M^dag M's M x, between its two applications
        self._tmp = wilson.context.allocate(self.size, self.dtype) if kind == "MdagM" else None
        self._fields: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._apply: Callable[[accel.DeviceArray, accel.DeviceArray], None] = {
            "M": self._m, "MdagM": self._mdagm, "Mpc": self._mpc,
            "MpcdagMpc": self._mpcdagmpc}[kind]

    def _field(self, flat: accel.DeviceArray) -> SpinorField:
        field = self._fields.get(flat)
        if field is None:
            field = self._fields[flat] = SpinorField(flat)
        return field

    def apply(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        """Enqueue out = A inp (A the operator of :attr:`kind`)."""
        self._apply(out, inp)

    def _mpc(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        self.wilson.apply_pc(inp, out)

    def _mpcdagmpc(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        self.wilson.apply_pc_normal(inp, out)

    def _m(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        self.wilson.apply_full(self._field(out), self._field(inp))

    def _mdagm(self, out: accel.DeviceArray, inp: accel.DeviceArray) -> None:
        tmp = self._field(self._tmp)
        self.wilson.apply_full(tmp, self._field(inp))
        self.wilson.apply_full(self._field(out), tmp, dagger=True)


def _schwarz_options(method: str, even_odd: bool, preconditioner: Any, block: Any,
                     inner_iterations: Any, inner_precision: Any) -> tuple | None:
    """(block, inner_iterations, inner_precision) checked, or None without a preconditioner."""
    if preconditioner is None:
        return None
    if preconditioner != "schwarz":
        raise ValueError(f"preconditioner must be None or 'schwarz', got {preconditioner!r}")
    if method != "gcr":
        raise ValueError(f"the Schwarz preconditioner is GCR's: use method='gcr', not {method!r}")
    if not even_odd:
        raise ValueError("the Schwarz preconditioner works on the even-odd system: drop "
                         "even_odd=False")
    block = schwarz_module.check_schwarz(block, inner_iterations, inner_precision)
    return block, int(inner_iterations), inner_precision


def _solve(op: WilsonOperator, b: np.ndarray, method: str, tol: float, even_odd: bool,
           precision: str | None, maxiter: int, sloppy: str = "single", schwarz: tuple | None = None,
           nkrylov: int = 16, delta: float = 0.1, cg_recurrence: str | None = None,
           out: np.ndarray | None = None) -> tuple[np.ndarray, solvers.SolveInfo]:
    """:meth:`WilsonOperator.solve` (``schwarz``: :func:`_schwarz_options`'s): the right-hand
    side, the solver of ``(method, precision)`` (:data:`_SOLVERS`), the full solution."""
    precision = check_solve_options(op, method, precision, sloppy)
    tol, maxiter = solvers.check_stopping(tol, maxiter)
    out = op.check_out(out)
    b, b_norm = checked_rhs(op, b)
    if b_norm == 0:  # M x = 0: x = 0 exactly, with no residual (and nothing to iterate)
        return zero_answer(b, out), solvers.SolveInfo(True, 0, 0, 0.0, 0.0, [0.0],
                                                      message="b = 0")
    high = op.with_precision("double" if precision == "mixed" else precision)
    low = op.with_precision(sloppy) if precision == "mixed" else None
    b_field = high.to_device(b)
    start = time.perf_counter()
    kind, rhs = system_rhs(high, b_field, method, even_odd)
    A = high.linear_operator(kind)
    A_low = low.linear_operator(kind) if low is not None else None
    recurrence = solvers.check_recurrence(A, cg_recurrence)
    # GCR's Schwarz preconditioner acts on the vectors GCR iterates on (mixed: the sloppy ones)
    K = _schwarz_preconditioner(high, A if A_low is None else A_low, schwarz)
    # The normal equations' residual bounds the true one only up to the condition number:
    # CG asks for a tenth of the tolerance, and the true residual of M x = b is checked below.
    system = _System(A, A_low, rhs, tol * 0.1 if method == "cg" else tol, maxiter, nkrylov, K,
                     delta, recurrence)
    x, info = _SOLVERS[method, precision](system)
    result, true = answer(high, x, b_field, b_norm, even_odd, out)
    outer = {} if K is None else {"inner_iterations": K.inner_iterations,
                                  "preconditioner_seconds": K.seconds}
    return result, dataclasses.replace(info, true_residual=true,
                                       seconds=time.perf_counter() - start, **outer)


def _schwarz_preconditioner(high: WilsonOperator, outer: WilsonLinearOperator,
                            schwarz: tuple | None) -> schwarz_module.SchwarzPreconditioner | None:
    """The Schwarz preconditioner of ``schwarz`` (block, inner iterations, inner precision) for
    GCR iterating on ``outer``, or None without one."""
    if schwarz is None:
        return None
    block, iterations, inner = schwarz
    blocks = high.with_domain(block, inner).linear_operator("Mpc")
    return schwarz_module.SchwarzPreconditioner(outer, blocks, iterations)


@dataclass(frozen=True)
class _System:
    """What a solver of :data:`_SOLVERS` is given: the operator ``A`` (and the sloppy
    ``A_low`` of a mixed solve), the right-hand side, the tolerance the iteration aims for,
    and the options of the methods that take them."""

    A: WilsonLinearOperator
    A_low: WilsonLinearOperator | None
    rhs: accel.DeviceArray
    tol: float
    maxiter: int
    nkrylov: int
    preconditioner: schwarz_module.SchwarzPreconditioner | None
    delta: float
    recurrence: str  #: CG's (solvers.CG_RECURRENCES)


_Solver = Callable[[_System], tuple[accel.DeviceArray, solvers.SolveInfo]]
_PLAIN: dict[str, _Solver] = {
    "cg": lambda s: solvers.cg(s.A, s.rhs, s.tol, s.maxiter, recurrence=s.recurrence),
    "bicgstab": lambda s: solvers.bicgstab(s.A, s.rhs, s.tol, s.maxiter),
    "gcr": lambda s: solvers.gcr(s.A, s.rhs, s.tol, s.maxiter, nkrylov=s.nkrylov,
                                 preconditioner=s.preconditioner),
}
_MIXED: dict[str, _Solver] = {
    "cg": lambda s: solvers.cg_mixed(s.A, s.A_low, s.rhs, s.tol, s.maxiter, delta=s.delta,
                                     recurrence=s.recurrence),
    "bicgstab": lambda s: solvers.bicgstab_mixed(s.A, s.A_low, s.rhs, s.tol, s.maxiter,
                                                 delta=s.delta),
    "gcr": lambda s: solvers.gcr_mixed(s.A, s.A_low, s.rhs, s.tol, s.maxiter, nkrylov=s.nkrylov,
                                       preconditioner=s.preconditioner, delta=s.delta),
}
#: (method, precision) -> the solver :meth:`WilsonOperator.solve` calls: "double" and "single"
#: iterate in that precision, "mixed" in the sloppy one with reliable updates in double
_SOLVERS: dict[tuple[str, str], _Solver] = {
    **{(method, precision): solve for method, solve in _PLAIN.items()
       for precision in ("double", "single")},
    **{(method, "mixed"): solve for method, solve in _MIXED.items()},
}
