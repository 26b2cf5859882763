"""``DistributedWilsonOperator``: the Wilson operator on a lattice cut into blocks, one per MPI
rank (the QUDA seed's multi-GPU dslash).

Each rank holds its block of the links and spinors on its device, plus *ghost zones*: the faces
of its neighbours' blocks that its boundary sites hop to. A dslash of one parity packs the faces
of the input the neighbours need (``halo.mako``), exchanges them with the neighbours
(:mod:`.transport`: device to device through CUDA IPC between the GPUs of one host, else
through page-locked host buffers and MPI), and runs the dslash kernel, which reads a hop off the
block from the ghost zone. Ghost links (the backward neighbours' links that a backward
hop across the block's edge needs) never change, and every rank holds the global links, so they
are built on the host once.

Host methods take and return the global arrays (every rank passes the same ones, and gets the
same result); device methods (``dslash_parity``, ``apply_pc`` on device arrays, the solvers)
work on the rank's block. Solvers sum their reductions over the ranks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from autotune import accel, parallel, tune

from ..scalars import finite_real_scalar

from . import gauge as gauge_fields
from . import half as half_storage
from .dslash import REGIONS_TEMPLATE
from .dslash import TEMPLATE as DSLASH_TEMPLATE
from .dslash import DslashTemplate
from .halo import TEMPLATE as HALO_TEMPLATE
from .halo import HaloTemplate
from .halo import sections as halo_sections
from .lattice import Lattice
from .partition import Partition
from .recordings import DslashRecordings
from .spinor_layout import SpinorLayoutTemplate
from .transport import Route, Transport, make_transport
from .transport import check_kind as check_transport
from .wilson import SpinorField, WilsonOperator, check_links, host_spinor, link_array


def rank_context(comm: Any, selector: str | None = None) -> accel.Context:
    """A context for this rank on the device :func:`autotune.accel.device_for_local_rank`
    gives its local rank among the usable devices ``selector`` (else ``AUTOTUNE_DEVICE``)
    matches: on GPUs local rank i takes the i-th (one GPU per process, cycling where ranks
    outnumber them); on a CPU every rank of the host shares the device one process would
    choose, and their kernels are compiled once for all of them
    (``Context.shared_with_processes``). A device that fails the health check is never chosen."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        spec = accel.device_for_local_rank(local.rank, selector)
        context = spec.create_context()
        # ranks of one host on one CPU device compile the same kernels at the same moment
        context.shared_with_processes = local.size > 1 and not spec.identity.is_gpu
        return context
    finally:
        local.Free()


class DistributedWilsonOperator(WilsonOperator):
    """M = 1 - kappa D on the global lattice of ``U``, cut by the process ``grid`` (px, py, pz,
    pt) over the ranks of ``comm`` (an mpi4py communicator with px py pz pt ranks, x fastest);
    each rank's device holds its block. ``policy``: how a dslash meets its exchange
    (:attr:`POLICIES`, or "tuned"); ``transport``: how the faces travel ("peer": device to
    device, "host": through page-locked host memory, "auto": peer where every rank can have it;
    see :mod:`.transport`); ``graphs``: record each overlapped dslash once and launch it again
    with one call (:mod:`.recordings`; None, the default: where the device and transport
    allow, True: required, False: never). Other arguments as for :class:`WilsonOperator`;
    with precision="half" a 16-bit field's faces travel in 16 bits (its words and norms, as
    they are), a single precision one's in single precision, and the ghost links are kept in
    single precision, rounded as the block's 16-bit links are."""

    #: How a dslash meets its exchange: "overlap" updates the sites that need no neighbour
    #: data while the faces travel, then the boundary sites as soon as the faces are in (on the
    #: transport's queue, beside the interior update's last blocks, where that queue can wait
    #: for them on the device); "overlap_in_order" the same, but the boundary sites after the
    #: interior update on the operator's queue (two host calls fewer a dslash, for a host that
    #: sets the pace); "fused" one kernel for both, launched at once, whose groups that take the
    #: boundary sites start last and wait on the device for the faces (where the transport
    #: signals through device memory; elsewhere the faces are in before it starts); "serial"
    #: exchanges first, then updates every site in one kernel.
    POLICIES = ("overlap", "overlap_in_order", "fused", "serial")
    #: The parts of a block one dslash kernel updates (:meth:`dslash_kernel`): all its sites,
    #: those with no hop off the block, the others, and interior and others in one launch
    #: (its groups that take the boundary sites waiting for the faces: policy "fused").
    REGIONS = ("all", "interior", "exterior", "fused")
    #: the name of the collective online tuner that chooses the policy (``policy="tuned"``)
    POLICY_TUNER = "operations.lqcd.DistributedWilsonOperator.policy"
    #: the policies whose dslash can be recorded (a graph): their work differs from call to
    #: call only by the counts of their value operations ("fused" passes its count to the
    #: kernel; "serial" waits on the host where the transport does)
    RECORDED_POLICIES = ("overlap", "overlap_in_order")

    def __init__(self, comm: Any, context: accel.Context, U: np.ndarray, kappa: float,
                 grid: tuple[int, int, int, int] = (1, 1, 1, 1), precision: str = "double",
                 reconstruct: int = 18, t_boundary: int = -1, *, check: bool = True,
                 unitarity_tol: float = 1e-8, queue: Any = None,
                 tuning: dict[str, Any] | str | None = None, policy: str = "overlap",
                 transport: str = "auto", graphs: bool | None = None):
        check_transport(transport)  # before anything is built
        if graphs not in (None, True, False):
            raise ValueError(f"graphs must be None (record where possible), True or False, "
                             f"got {graphs!r}")
        if policy not in self.POLICIES + ("tuned",):
            raise ValueError(f"policy must be one of {', '.join(self.POLICIES)} or 'tuned', "
                             f"got {policy!r}")
        self.policy = policy
        if policy == "tuned" and queue is None:  # the policy tuner times the queue's work
            queue = context.create_command_queue(timed=True)
        U = link_array(U)
        t, z, y, x = U.shape[1:5]
        dims = (x, y, z, t)
        self.partition = Partition(dims, tuple(grid), comm.rank)
        if comm.size != self.partition.size:
            raise ValueError(f"grid {tuple(grid)} has {self.partition.size} blocks but the "
                             f"communicator has {comm.size} ranks; run one rank per block")
        self.global_lattice = Lattice(dims)
        check_links(U, kappa, reconstruct, check, unitarity_tol)
        self.comm = comm
        self._global_links = U
        block = self.partition.block(U, site_axis=1)
        if tuning is None:  # one rank tunes the block's dslash and tells the others (QUDA's rule)
            with tune.collective(comm):
                tuning = DslashTemplate.autotune(context, self.partition.local, precision,
                                                 reconstruct)
        super().__init__(context, block, kappa, precision, reconstruct, t_boundary, check=False,
                         queue=queue, tuning=tuning)
        self._setup_halo(transport)
        self._graphs_asked = graphs
        why = DslashRecordings.usable(self.queue, self.transport)
        if graphs and why is not None:
            raise ValueError(f"graphs=True, but the dslash cannot be recorded here: {why}; "
                             "pass graphs=None (where possible) or False")
        #: the recorded dslashes (None where not recorded: ``graphs`` False, or not possible)
        self.recordings = (DslashRecordings(self.queue, self.transport)
                           if graphs is not False and why is None else None)
        self.policy_tuner: tune.OnlineTuner | None = None
        if policy == "tuned":
            # every rank times its own dslash; the slowest rank's time decides, for all
            self.policy_tuner = tune.OnlineTuner(
                context, self.POLICY_TUNER, {"policy": list(self.POLICIES)},
                {"policy": "overlap"}, comm=comm, sources=[DSLASH_TEMPLATE, REGIONS_TEMPLATE, HALO_TEMPLATE],
                arguments={"local": self.partition.local, "grid": self.partition.grid,
                           "precision": precision, "reconstruct": reconstruct})

    # The exchange --------------------------------------------------------------------------
    def _setup_halo(self, transport: str) -> None:
        part = self.partition
        local = part.local
        dirs = [mu for mu in range(4) if part.partitioned[mu]]
        self._sections = halo_sections(local, part.partitioned)
        ghost_offsets = {(mu, step): offset for mu, step, offset, _ in self._sections}
        #: (mu, step) -> the face's part of the send buffer and the ghost zone
        self._slices = {(mu, step): slice(offset, offset + 12 * fh)
                        for mu, step, offset, fh in self._sections}
        self._ghost_size = max(sum(12 * fh for *_, fh in self._sections), 1)
        link_offsets, links = {}, []
        real = self.reconstruct == 8
        n = {18: 9, 12: 6, 8: 8}[self.reconstruct]
        offset = 0
        for mu in dirs:
            # only the backward neighbour's block is packed (a block, not the global links)
            below = Partition(part.dims, part.grid, part.neighbour(mu, -1))
            packed = gauge_fields.pack(below.block(self._global_links, site_axis=1),
                                       self.reconstruct)
            if self.precision == "half":  # single precision, but the values the block's 16 bits hold
                packed = half_storage.links_as_stored(packed, self.reconstruct, axis=-1)
            theirs = below.lattice.links_to_device(packed, self.template.real_dtype if real
                                                   else self.dtype)
            for link_parity in (0, 1):
                order = below.face_order(mu, link_parity, local[mu] - 1)
                links.append(theirs[mu, link_parity][:, order].reshape(-1))
                link_offsets[mu, link_parity] = offset
                offset += n * part.face_sites(mu)
        link_dtype = self.template.real_dtype if real else self.dtype
        host_links = np.concatenate(links) if links else np.zeros(1, link_dtype)
        self._ghost_links = self.context.to_device(self.queue, host_links.astype(link_dtype))
        # my forward face becomes the forward neighbour's backward ghost, and so on; the pack
        # kernel puts each face where its receiver keeps it (halo.send_sections)
        routes = [Route(dest=part.neighbour(mu, step), source=part.neighbour(mu, -step),
                        send=self._slices[mu, -step], recv=self._slices[mu, -step],
                        tag=2 * mu + (step < 0))
                  for mu in dirs for step in (1, -1)]
        #: how the faces travel (:mod:`.transport`); ``transport.name`` says which
        self.transport: Transport = make_transport(transport, self.comm, self.context,
                                                   self.queue, self._ghost_size, self.dtype,
                                                   routes)
        self._no_sites = self.context.zeros(self.queue, 1, np.uint32)
        #: the fused kernel's ticket counter (its launches run in turn on the queue; each
        #: launch's last ticket sets it back to 0), and its arguments when nothing is awaited
        self._tickets = self.context.zeros(self.queue, 1, np.uint32)
        self._no_arrival = [self._no_sites, self._no_sites, np.uint32(0), np.uint32(0)]
        signs = tuple(self.t_boundary if part.at_time_edge(step) else 1 for step in (1, -1))
        self._dist = {"regions": REGIONS_TEMPLATE.name, "partitioned": part.partitioned,
                      "t_signs": signs,
                      "ghost_offsets": ghost_offsets, "link_offsets": link_offsets,
                      "face_sites": tuple(part.face_sites(mu) for mu in range(4))}
        self._kernels: dict[tuple, Any] = {}
        self._packers: dict[tuple, Any] = {}  # by (parity, queue)
        self._halo: HaloTemplate | None = None
        # per parity, the checkerboard indices of the block's sites with a hop off the block
        lat = self.lattice
        x, y, z, t = (np.asarray(c) for c in np.unravel_index(np.arange(lat.volume),
                                                             lat.shape)[::-1])
        edge = np.zeros(lat.volume, dtype=bool)
        for mu, c in enumerate((x, y, z, t)):
            if part.partitioned[mu]:
                edge |= (c == 0) | (c == local[mu] - 1)
        self._boundary = []
        for parity in (0, 1):
            sites = np.nonzero(edge[lat.sites(parity)])[0].astype(np.uint32)
            self._boundary.append((self.context.to_device(self.queue, sites if sites.size else
                                                          np.zeros(1, np.uint32)), sites.size))

    def _packer(self, parity: int, queue: accel.CommandQueue | None = None,
                sixteen: bool = False) -> Any:
        """The pack kernel's launcher for faces of parity ``parity`` on ``queue`` (default:
        the operator's); ``sixteen``: of a 16-bit field (``pack(send, values, norms)``)."""
        queue = self.queue if queue is None else queue
        launch = self._packers.get((parity, queue, sixteen))
        if launch is None:
            if self._halo is None:
                local, cut = self.partition.local, self.partition.partitioned
                # a half operator's single precision fields are packed as a single one's (its
                # 16-bit ones with the same tuned work-group size)
                precision = "single" if self.precision == "half" else self.precision
                # one rank tunes the pack kernel (or reads the store) and tells the others
                with tune.collective(self.comm):
                    tuned = HaloTemplate.autotune(self.context, local, cut, precision)
                self._halo = HaloTemplate(self.context, local, cut, precision, tuned)
            launch = self._packers[parity, queue, sixteen] = self._halo.instantiate(
                queue, parity, sixteen)
        return launch

    def _kernel(self, variant: tuple, region: str, queue: accel.CommandQueue | None = None) -> Any:
        """The launcher of one of the block's kernels on ``queue`` (default: the operator's):
        ``variant`` (parity, dagger, xpay), and for half precision the arguments' storage
        (:func:`.half.kernel_args`' codes of out, in and x, e.g. "shs")."""
        queue = self.queue if queue is None else queue
        parity, dagger, xpay = variant[:3]
        key = (variant, region, queue)
        launch = self._kernels.get(key)
        if launch is None:
            t = self.template
            # the tuned parameters (online: the test ones), with their dir_split (work-items
            # a site), but one site a slot and nothing staged: the block's kernels launch on
            # site lists and regions that those shapes do not cover
            render = {**t.render_arguments(), "sites": 1, "stage": False}
            if region == "fused":
                # one work-item a site: the tuned split made the fused kernel slower (two
                # H200s, 32^4 a GPU, 2026-11-29: 93.7-94.0 us a dslash with 1, 99.5-100.0 with
                # the tuned 4), while it makes the interior update faster (73.6 against 76.1 us)
                render["dir_split"] = 1
            wgs = render["wgs"]
            whole = t.launch_size(render)  # the groups that cover every site, times wgs
            per_group = wgs // render.get("dir_split", 1)  # sites a group takes
            boundary = max(1, -(-self._boundary[parity][1] // per_group)) * wgs
            dist = {**self._dist, "region": region}
            if region == "fused":
                dist["interior_groups"] = whole // wgs
            program = self.context.build(DSLASH_TEMPLATE, {
                **render, "variants": [variant], "dist": dist})
            name = (f"dslash_dist_p{parity}{'_dag' if dagger else ''}"
                    f"{'_xpay' if xpay else ''}{''.join('_' + c for c in variant[3:])}_{region}")
            size = {"exterior": boundary, "fused": whole + boundary}.get(region, whole)
            launch = self._kernels[key] = queue.launcher(program.get_kernel(name), size, wgs)
        return launch

    @property
    def face_elements(self) -> int:
        """The spinor elements of this rank's faces: what one exchange sends its neighbours (0
        when no direction is partitioned)."""
        return sum(12 * fh for *_, fh in self._sections)

    def exchange(self, inp: accel.DeviceArray, parity: int) -> None:
        """Fill the ghost zone with the neighbours' faces of ``inp`` (a block of parity
        ``parity``): pack them, and ship them (:attr:`transport`)."""
        if self._sections:
            self.pack_faces(inp, parity)
            self.transport.start(self.transport.send, self.queue.mark())
            self.transport.finish()
            if self.recordings is not None:
                self.recordings.enqueued_directly()

    def pack_faces(self, inp: Any, parity: int, queue: accel.CommandQueue | None = None) -> None:
        """Enqueue the packing of the faces of ``inp`` (a block of parity ``parity``; a half
        operator's may be a 16-bit :class:`.half.HalfSpinor`) that the neighbours need into
        the send buffer, on ``queue`` (default: the operator's): the first half of
        :meth:`exchange`."""
        if isinstance(inp, half_storage.HalfSpinor):
            self._packer(parity, queue, True)(self.transport.send, inp.values, inp.norms)
        else:
            self._packer(parity, queue)(self.transport.send, inp)

    # Device operations ---------------------------------------------------------------------
    def dslash_parity(self, out: Any, inp: Any, parity: int, *, dagger: bool = False,
                      x: Any = None, a: float = 0.0) -> None:
        """out = D_{parity,1-parity} inp on this rank's block (x + a D inp with ``x``), the
        neighbours' faces of ``inp`` exchanged first. A half operator's fields may each be a
        16-bit :class:`.half.HalfSpinor` or single precision."""
        args, spinors, storage = self._arguments(out, inp, x, a)
        variant = (parity, bool(dagger), x is not None, *storage)
        if self.policy_tuner is not None and self._sections:
            with self.policy_tuner.measure(self.queue, variant) as params:
                self._dslash_with(args, inp, spinors, variant, params["policy"])
        else:
            self._dslash_with(args, inp, spinors, variant, self.policy)

    def dslash_kernel(self, out: Any, inp: Any, parity: int, region: str = "all", *,
                      dagger: bool = False, x: Any = None, a: float = 0.0,
                      queue: accel.CommandQueue | None = None) -> Callable[[], None]:
        """One dslash kernel on its own, to time it apart from the exchange: a call enqueues
        out = D_{parity,1-parity} inp (x + a D inp with ``x``) on the ``region`` of the block
        ("all" its sites, "interior" those with no hop off the block, "exterior" the others),
        reading the ghost zone as it stands (nothing is exchanged), on ``queue`` (default: the
        operator's)."""
        if region not in self.REGIONS:
            raise ValueError(f"region must be one of {', '.join(self.REGIONS)}, got {region!r}")
        args, _, storage = self._arguments(out, inp, x, a)
        if region in ("exterior", "fused"):
            sites, count = self._boundary[parity]
            args[-2:] = [sites, np.uint32(count)]
        if region == "fused":  # nothing awaited: the ghost zone as it stands
            args += [self._tickets, *self._no_arrival]
        kernel = self._kernel((parity, bool(dagger), x is not None, *storage), region, queue)
        return lambda: kernel(args)

    def _arguments(self, out: Any, inp: Any, x: Any, a: float) -> tuple[list, list, tuple]:
        """A dslash kernel's arguments, ``a`` checked: the spinors and links, then ``a``, the
        ghost zone (at [-4]) and links, and the sites to update with their count (at [-2:];
        here the whole block's). Also the spinors' device arrays, and their storage codes
        (half precision: one string, e.g. "shs"; else none)."""
        a = finite_real_scalar("dslash", "a", a, self.template.real_dtype.type)
        x = inp if x is None else x
        if self.template.half:
            sites = self.lattice.half_volume
            codes, (o, i, xs) = zip(*(half_storage.kernel_args(f, sites) for f in (out, inp, x)))
            spinors, storage = [*o, *i, *xs], ("".join(codes),)
            args = [*o, *i, self.gauge, *xs]
        else:
            spinors, storage = [out, inp, x], ()
            args = [out, inp, self.gauge, x]
        return args + [self.template.real_dtype.type(a), self.transport.ghost, self._ghost_links,
                       self._no_sites, np.uint32(0)], spinors, storage

    def _dslash_with(self, args: list, inp: Any, spinors: list, variant: tuple,
                     policy: str) -> None:
        if self.recordings is None or policy not in self.RECORDED_POLICIES or not self._sections:
            self._enqueue_dslash(args, inp, variant, policy)
            if self.recordings is not None:
                self.recordings.enqueued_directly()
            return
        key = (variant, policy, self.transport.phase,
               *((s.pointer, s.size) for s in spinors), float(args[-5]))
        self.recordings.run(key, lambda: self._enqueue_dslash(args, inp, variant, policy))

    def _enqueue_dslash(self, args: list, inp: Any, variant: tuple, policy: str) -> None:
        parity = variant[0]
        if not self._sections or policy == "serial":
            self.exchange(inp, 1 - parity)
            args[-4] = self.transport.ghost
            self._kernel(variant, "all")(args)
            return
        # the faces packed, the interior update enqueued at once, then the faces shipped on the
        # transport's queue: they travel while the interior update runs. Where the copies'
        # queue can wait for the neighbours' faces on the device, the exterior update runs
        # there, as soon as they arrive, beside the interior update's last blocks (it writes
        # other sites of out; that queue waited for the packing, so for everything before).
        # Policy "overlap" packs on the copies' queue too, beside the interior update: that
        # queue has high priority where the device has priorities (Transport.copies), so the
        # packing's and the exterior update's blocks start ahead of the interior's waiting ones
        sites, count = self._boundary[parity]
        if policy == "overlap":
            copies = self.transport.copies
            copies.wait_for_queue(self.queue)  # inp is written, out free
            self.pack_faces(inp, 1 - parity, copies)
            packed = copies.mark()
        else:
            self.pack_faces(inp, 1 - parity)
            packed = self.queue.mark()
        if policy == "fused":
            self.transport.start(self.transport.send, packed)
            args[-4] = self.transport.ghost
            self._fused(args, variant, sites, count)
            return
        self._kernel(variant, "interior")(args)  # reads no ghost (args[-4] is last round's)
        self.transport.start(self.transport.send, packed)
        args[-4] = self.transport.ghost
        if policy == "overlap":
            ready = self.transport.finish_on_copies()
        else:
            self.transport.finish()
            ready = self.queue
        args[-2:] = [sites, np.uint32(count)]
        self._kernel(variant, "exterior", ready)(args)
        self.queue.wait_for_queue(ready)  # (nothing where ready is the queue itself)

    def _fused(self, args: list, variant: tuple, sites: accel.DeviceArray, count: int) -> None:
        """The interior and exterior updates in one launch (policy "fused"), after the packing
        and the faces' shipping are enqueued: its exterior groups wait on the device for the
        neighbours' counts where the transport tells them there (the stream-ordered flags);
        elsewhere the faces are in first (:meth:`Transport.finish`) and nothing is awaited."""
        arrival = self.transport.kernel_arrival()
        if arrival is None:
            self.transport.finish()
            awaited = self._no_arrival
        else:
            awaited = [arrival.counters, arrival.words, np.uint32(arrival.nwords),
                       np.uint32(arrival.count & 0xFFFFFFFF)]
        args[-2:] = [sites, np.uint32(count)]
        self._kernel(variant, "fused")(args + [self._tickets, *awaited])

    # Host arrays: global in, global out ----------------------------------------------------
    def check_spinor(self, psi: Any) -> np.ndarray:
        """``psi`` if it is a global host spinor (numeric, of the global lattice's shape (T, Z,
        Y, X, 4, 3)), else a TypeError or ValueError saying why."""
        return host_spinor(psi, self.global_lattice.shape + (4, 3), "the global ")

    def to_device(self, psi: np.ndarray) -> SpinorField:
        """This rank's block of the global spinor ``psi``, on the device."""
        return self._field_of(self.partition.block(self.check_spinor(psi), site_axis=0))

    def _layout_tuning(self) -> dict[str, Any] | None:
        """One rank tunes the reorders (or reads the store) and tells the others (every rank
        moves its block at once)."""
        with tune.collective(self.comm):
            return SpinorLayoutTemplate.autotune(self.context, self.dtype)

    def host_shape(self) -> tuple[int, ...]:
        """The global lattice's host spinor shape (T, Z, Y, X, 4, 3): every rank takes and gives
        whole global spinors."""
        return self.global_lattice.shape + (4, 3)

    def from_device(self, field: SpinorField, out: np.ndarray | None = None) -> np.ndarray:
        """The global spinor whose blocks the ranks' ``field`` hold (on every rank): a new
        array, or ``out`` (:meth:`check_out`) written in place."""
        out = self.check_out(out)
        mine = super().from_device(field)  # this rank's block
        blocks = parallel.allgather(self.comm, mine, "the ranks' blocks of the field")
        if out is None:
            out = np.empty(self.host_shape(), dtype=np.complex128)
        for rank, block in enumerate(blocks):
            x0, y0, z0, t0 = Partition(self.partition.dims, self.partition.grid, rank).origin
            lx, ly, lz, lt = self.partition.local
            out[t0:t0 + lt, z0:z0 + lz, y0:y0 + ly, x0:x0 + lx] = block
        return out

    def _in_domain(self, block: tuple[int, ...], precision: str) -> WilsonOperator:
        """The Schwarz block system on this rank's part: a plain operator on the rank's block
        (blocks never span two ranks, so it communicates nothing), Dirichlet at the part's
        edges in the partitioned directions; its dslash parameters agreed across the ranks."""
        local, grid = self.partition.local, self.partition.grid
        if len(block) != 4 or any(b < 1 or n % b for b, n in zip(block, local)):
            raise ValueError(f"Schwarz blocks {tuple(block)} must divide each rank's part "
                             f"{local} of the lattice (grid {grid}): a block never spans two "
                             "GPUs")
        with tune.collective(self.comm):  # one rank tunes, every rank launches its choice
            tuned = DslashTemplate.autotune(self.context, local, precision, self.reconstruct)
        return WilsonOperator(self.context, self._links, self.kappa, precision, self.reconstruct,
                              self.t_boundary, check=False, queue=self.queue,
                              tuning=tuned, domain=tuple(block),
                              dirichlet_edges=tuple(bool(c) for c in self.partition.partitioned))

    def _in_precision(self, precision: str) -> DistributedWilsonOperator:
        return DistributedWilsonOperator(
            self.comm, self.context, self._global_links, self.kappa, self.partition.grid,
            precision, self.reconstruct, self.t_boundary, check=False, queue=self.queue,
            tuning=self.tuning, policy=self.policy, transport=self.transport.name,
            graphs=self._graphs_asked)
