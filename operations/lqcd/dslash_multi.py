"""The Wilson dslash on several right-hand sides in one launch (:class:`MultiDslash`).

A work-item loads each of its site's eight links once and applies it to the neighbour of every
right-hand side, so the links' traffic is shared between them: per output site and right-hand
side the least traffic is ``8 x link / nrhs`` plus the input and output spinors, which is
what lets a solve of several sources go past the one-field roofline (QUDA's multi-RHS dslash
does the same). The kernels are ``dslash.mako``'s with the render argument ``nrhs``: every
right-hand side is its own field (its own pointers), so callers keep their fields as they are.

The kernels take the template's tuned parameters with ``dir_split`` 1 and nothing staged (the
split directions' sums and the staged neighbours would need ``nrhs`` times the local memory),
or explicit ones; a key of their own for the tuner is not made yet.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from autotune import accel, tune

from ..scalars import finite_real_scalar
from . import half as half_storage
from .dslash import TEMPLATE, DslashTemplate, spinor_array


class MultiDslash:
    """``nrhs`` dslashes of one template in one launch:
    ``multi(outs, inps, gauge, parity, dagger=, xs=, a=)`` sets ``outs[r] = D inps[r]`` (or
    ``xs[r] + a D inps[r]``) for every right-hand side r."""

    def __init__(self, template: DslashTemplate, queue: accel.CommandQueue, nrhs: int,
                 tuning: dict[str, Any] | None = None):
        """``template``: a tuned or explicitly parametrised :class:`DslashTemplate` (not an
        online one); ``nrhs``: right-hand sides a launch takes (1 to 16); ``tuning``:
        parameters to use instead of the template's (names as its space's), ``dir_split`` and
        ``stage`` at 1 and False."""
        if isinstance(nrhs, bool) or not isinstance(nrhs, int) or not 1 <= nrhs <= MAX_RHS:
            raise ValueError(f"nrhs must be an int from 1 to {MAX_RHS}, got {nrhs!r}")
        if template.online is not None:
            raise ValueError("a multi-RHS dslash takes fixed parameters: make its template with "
                             "tuning=None (the stored result) or explicit parameters, not "
                             "'online'")
        params = {**template.parameters, "dir_split": 1, "stage": False, **(tuning or {})}
        test = tune.tuner_of(DslashTemplate).test
        try:
            params = tune.encoding.validate_parameters(params, test)
        except tune.InvalidParametersError as exc:
            raise ValueError(f"MultiDslash: tuning {tuning!r}: {exc}") from None
        if (params["dir_split"], params["stage"]) != (1, False):
            raise ValueError(f"MultiDslash: tuning {tuning!r}: several right-hand sides take "
                             "dir_split 1 and stage False")
        self.template, self.queue, self.nrhs = template, queue, nrhs
        self.parameters = params
        self.global_size = template.launch_size(params)
        self._launchers: dict[tuple, Any] = {}
        self._guard = threading.Lock()

    def kernel(self, parity: int, dagger: bool, xpay: bool, storage: str = "hhh") -> accel.Kernel:
        """One variant's kernel (built on first use; half precision: ``storage`` as
        :meth:`DslashTemplate.kernel` takes it, the same for every right-hand side)."""
        t = self.template
        variant: tuple = (parity, bool(dagger), bool(xpay)) + ((storage,) if t.half else ())
        program = t.context.build(TEMPLATE, {**t.render_arguments(self.parameters),
                                             "variants": [variant], "nrhs": self.nrhs})
        name = (f"dslash_p{parity}{'_dag' if dagger else ''}{'_xpay' if xpay else ''}"
                f"{'_' + storage if t.half else ''}{f'_rhs{self.nrhs}' if self.nrhs > 1 else ''}")
        kernel = program.get_kernel(name)
        kernel.set_carveout(self.parameters["carveout"])
        return kernel

    def __call__(self, outs: Sequence[Any], inps: Sequence[Any], gauge: accel.DeviceArray,
                 parity: int, *, dagger: bool = False, xs: Sequence[Any] | None = None,
                 a: float = 0.0) -> None:
        """``outs[r] = D_{parity, 1-parity} inps[r]`` for each right-hand side, or
        ``xs[r] + a D inps[r]`` when ``xs`` is given (D^dag if asked). Each field is what
        :class:`~operations.lqcd.dslash.Dslash` takes: half precision a
        :class:`.half.HalfSpinor` or a complex64 array (the same kind for every right-hand
        side of one argument), else a device spinor of the template's dtype."""
        for name, fields in (("outs", outs), ("inps", inps)) + ((("xs", xs),) if xs is not None else ()):
            if isinstance(fields, (str, bytes)) or not isinstance(fields, Sequence) \
                    or len(fields) != self.nrhs:
                raise ValueError(f"{name} must be a sequence of {self.nrhs} fields (one a "
                                 f"right-hand side), got {type(fields).__name__}"
                                 f"{f' of {len(fields)}' if isinstance(fields, Sequence) else ''}")
        t = self.template
        a = finite_real_scalar("multi dslash", "a", a, t.real_dtype.type)
        xs_or = xs if xs is not None else inps
        key: tuple = (parity, bool(dagger), xs is not None)
        if t.half:
            sites = t.lattice.half_volume
            roles = []
            for name, fields in (("outs", outs), ("inps", inps), ("xs", xs_or)):
                codes, parts = zip(*(half_storage.kernel_args(f, sites) for f in fields))
                if len(set(codes)) != 1:
                    raise ValueError(f"{name}: every right-hand side must be stored alike "
                                     "(all HalfSpinor or all complex64)")
                roles.append((codes[0], [p for part in parts for p in part]))
            key += ("".join(code for code, _ in roles),)
            args = [*roles[0][1], *roles[1][1], gauge, *roles[2][1]]
        else:
            views = [[spinor_array(t, self.queue, f, f"{name}[{r}]") for r, f in enumerate(fields)]
                     for name, fields in (("outs", outs), ("inps", inps), ("xs", xs_or))]
            args = [*views[0], *views[1], gauge, *views[2]]
        launch = self._launchers.get(key)
        if launch is None:
            with self._guard:
                launch = self._launchers.get(key)
                if launch is None:
                    launch = self._launchers[key] = self.queue.launcher(
                        self.kernel(*key[:3], storage=key[3] if t.half else "hhh"),
                        self.global_size, self.parameters["wgs"])
        launch(args + [t.real_dtype.type(a)])


#: the most right-hand sides a launch takes (each adds 12 complex sums a work-item)
MAX_RHS = 16
