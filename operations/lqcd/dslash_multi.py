"""The Wilson dslash on several right-hand sides in one launch (:class:`MultiDslash`).

A work-item loads each of its site's eight links once and applies it to the neighbour of every
right-hand side, so the links' traffic is shared between them: per output site and right-hand
side the least traffic is ``8 x link / nrhs`` plus the input and output spinors, which is
what lets a solve of several sources go past the one-field roofline (QUDA's multi-RHS dslash
does the same). The kernels are ``dslash.mako``'s with the render argument ``nrhs``: every
right-hand side is its own field (its own pointers), so callers keep their fields as they are.

The kernels are tuned on a key of their own (:meth:`MultiDslash.autotune`: the lattice,
precision, compression, ``nrhs`` and the links' layout the template chose), within the
dslash's space with ``dir_split`` 1 and nothing staged (the split directions' sums and the
staged neighbours would need ``nrhs`` times the local memory): ``nrhs`` fields' sums take
more registers than one field's, so one field's launch shape is not theirs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from autotune import accel, tune

from ..scalars import finite_real_scalar
from . import half as half_storage
from .dslash import (FLOPS_PER_SITE, TEMPLATE, DslashTemplate, bytes_per_site, check_options,
                    sampled_output, spinor_array, structured_search, tuning_problem,
                    zero_output)
from .dslash_links import PRECISIONS, layout_links, link_values


class MultiDslash:
    """``nrhs`` dslashes of one template in one launch:
    ``multi(outs, inps, gauge, parity, dagger=, xs=, a=)`` sets ``outs[r] = D inps[r]`` (or
    ``xs[r] + a D inps[r]``) for every right-hand side r."""

    autotune_version = 1
    autotune_sources = (TEMPLATE,)
    #: ``AUTOTUNE_MATCH=similar``: an untuned lattice takes the nearest tuned one's parameters
    autotune_similar = {"dims": "log"}

    def __init__(self, template: DslashTemplate, queue: accel.CommandQueue, nrhs: int,
                 tuning: Mapping[str, Any] | None = None):
        """``template``: a tuned or explicitly parametrised :class:`DslashTemplate` (not an
        online one), whose links' layout (``link_load``) the kernels read; ``nrhs``:
        right-hand sides a launch takes (1 to 16); ``tuning``: None, the stored result of
        this key (tuned on a miss), or explicit parameters on top of the template's (names as
        :meth:`autotune_space`'s: the template's but ``link_load``; ``dir_split`` 1 and
        ``stage`` False). A search on a miss measures the template's own parameters (with
        ``dir_split`` 1, nothing staged) among its first candidates: on an H200 the best
        several-field shapes kept the one-field row's ``carveout`` and ``project16``."""
        if isinstance(nrhs, bool) or not isinstance(nrhs, int) or not 1 <= nrhs <= MAX_RHS:
            raise ValueError(f"nrhs must be an int from 1 to {MAX_RHS}, got {nrhs!r}")
        if template.online is not None:
            raise ValueError("a multi-RHS dslash takes fixed parameters: make its template with "
                             "tuning=None (the stored result) or explicit parameters, not "
                             "'online'")
        link_load = template.parameters["link_load"]
        key = {"dims": template.lattice.dims, "precision": template.precision,
               "reconstruct": template.reconstruct, "nrhs": nrhs, "link_load": link_load}
        mine = {k: v for k, v in template.parameters.items() if k != "link_load"}
        if tuning is None:  # a search on a miss measures the one-field shape early (its carveout
            # and 16-bit projection too, which the first step holds at their test= values)
            with tune.search_settings(seeds=({**mine, "dir_split": 1, "stage": False},)):
                params = tune.tuning_for(MultiDslash, template.context, None, **key).parameters
        elif isinstance(tuning, Mapping):
            params = tune.checked_tuning(MultiDslash, template.context, {
                **mine, "dir_split": 1, "stage": False, **tuning}, **key)
        else:
            raise ValueError(f"MultiDslash: tuning must be None or a dict of parameters, got "
                             f"{tuning!r}")
        if (params["dir_split"], params["stage"]) != (1, False):
            raise ValueError(f"MultiDslash: tuning {dict(tuning or {})!r}: several right-hand "
                             "sides take dir_split 1 and stage False")
        self.template, self.queue, self.nrhs = template, queue, nrhs
        #: the parameters the kernels render with: the tuned ones and the links' layout
        self.parameters = {**params, "link_load": link_load}
        self.global_size = template.launch_size(params)
        self._launchers: dict[tuple, Any] = {}
        self._guard = threading.Lock()

    @classmethod
    def autotune_space(cls, context: accel.Context, dims: tuple[int, int, int, int],
                       precision: str, reconstruct: int, nrhs: int, link_load: int) -> tune.Space:
        """:meth:`DslashTemplate.autotune_space` with one work-item a site and nothing staged,
        less ``link_load``: the links' layout is the template's (a key argument)."""
        space = DslashTemplate.autotune_space(context, dims, precision, reconstruct)
        lists = {k: v for k, v in space.parameters.items() if k != "link_load"}
        return tune.Space({**lists, "dir_split": [1], "stage": [False]}, space.restrictions)

    @classmethod
    @tune.autotuner(test={"wgs": 64, "sites": 1, "dir_split": 1, "stage": False,
                          "fast_math": False, "half_bits": False, "project16": "none",
                          "min_blocks": 0, "carveout": -1})
    def autotune(cls, context: accel.Context, dims: tuple[int, int, int, int], precision: str,
                 reconstruct: int, nrhs: int, link_load: int) -> dict[str, Any]:
        """As :meth:`DslashTemplate.autotune` searches (:func:`.dslash.structured_search`), in
        this key's space: every valid ``wgs`` and ``min_blocks`` an online dslash scans (on
        GPUs work-groups up to 256, minimum blocks none, 2 or 4), ``fast_math`` and
        ``project16`` with one site a work-item, then an iterated local search from its best
        within :attr:`DslashTemplate.STRUCTURE_EVALS` more configurations. The right-hand sides are
        the tuning spinor times distinct phases, each output checked against the numpy
        reference times its phase (a kernel that mixed them up fails)."""
        check_options(dims, precision, reconstruct, -1)
        problem = tuning_problem(tuple(int(d) for d in dims))
        queue = context.create_tuning_command_queue()
        sites = problem.lattice.half_volume
        phases = [np.exp(0.7j * r) for r in range(nrhs)]
        gauge = context.to_device(queue, layout_links(link_values(
            problem.packed(reconstruct), precision, reconstruct), precision, reconstruct,
            link_load))
        if precision == "half":
            inps = [half_storage.to_device(context, queue, problem.spinor * p) for p in phases]
            outs = [half_storage.HalfSpinor.allocate(context, sites) for _ in phases]
        else:
            dtype = np.dtype(PRECISIONS[precision][1])
            inps = [context.to_device(queue, (problem.spinor * p).astype(dtype)) for p in phases]
            outs = [context.allocate((12, sites), dtype) for _ in phases]
        tol = {"half": 5e-3, "single": 1e-4, "double": 1e-10}[precision]
        scale = float(np.max(np.abs(problem.expected)))

        def generate(**params: Any) -> tune.Measurement:
            template = DslashTemplate(context, problem.lattice.dims, precision, reconstruct, -1,
                                      {**params, "link_load": link_load})
            multi = cls(template, queue, nrhs, tuning=params)

            def check() -> bool:
                return all(np.max(np.abs(sampled_output(queue, out, problem.sample)
                                         - phase * problem.expected)) <= tol * scale
                           for out, phase in zip(outs, phases))

            def clear() -> None:
                for out in outs:
                    zero_output(queue, out)

            return tune.make_measure(queue, lambda: multi(outs, inps, gauge, 0), check,
                                     setup=clear,
                                     bytes=nrhs * sites * bytes_per_site(precision, reconstruct),
                                     flops=nrhs * sites * FLOPS_PER_SITE)

        space = cls.autotune_space(context, problem.lattice.dims, precision, reconstruct, nrhs,
                                   link_load)
        gpu = context.device.is_gpu
        # the launch shapes an online dslash scans (work-groups up to 256 on GPUs, minimum
        # blocks none, 2 or 4): on an H200 the whole first search of a 12-field key ran past
        # three minutes, and its sweep's best shapes were among these
        online = DslashTemplate.autotune_online_space(context, problem.lattice.dims, precision,
                                                      reconstruct)
        return structured_search(generate, space, gpu, {
            "wgs": online.parameters["wgs"], "min_blocks": online.parameters["min_blocks"]})

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
            size, dtype = 12 * t.lattice.half_volume, t.dtype
            views = [[f if isinstance(f, accel.DeviceArray) and f.size == size
                      and f.dtype == dtype  # ours, as it should be: no view to make
                      else spinor_array(t, self.queue, f, f"{name}[{r}]")
                      for r, f in enumerate(fields)]
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
