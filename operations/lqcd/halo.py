"""``HaloTemplate``: the tuned kernel that packs a block's faces for its neighbours
(``halo.mako``), one parity of a spinor at a time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune

from .dslash import PRECISIONS
from .lattice import Lattice
from .partition import Partition

TEMPLATE = Path(__file__).with_name("halo.mako")


def sections(dims: tuple[int, int, int, int],
             partitioned: tuple[bool, bool, bool, bool]) -> list[tuple[int, int, int, int]]:
    """``(mu, step, offset, face_sites)`` of each face in the send buffer (and the ghost
    zone): for every cut direction the forward face, then the backward one; 12 components per
    site, component major."""
    out, offset = [], 0
    volume = int(np.prod(dims))
    for mu in range(4):
        if partitioned[mu]:
            fh = volume // (2 * dims[mu])
            for step in (1, -1):
                out.append((mu, step, offset, fh))
                offset += 12 * fh
    return out


def send_sections(dims: tuple[int, int, int, int],
                  partitioned: tuple[bool, bool, bool, bool]) -> list[tuple[int, int, int, int]]:
    """``(mu, step, offset, face_sites)`` of each face in the send buffer: where its receiver
    keeps it in its ghost zone (:func:`sections`), so that the faces one neighbour takes lie
    side by side and go in one copy. The face sent forward (step +1) fills the forward
    neighbour's backward ghost, its ``(mu, -1)`` part, and the other way round."""
    ghost = sections(dims, partitioned)
    at = {(mu, step): offset for mu, step, offset, _ in ghost}
    return [(mu, step, at[mu, -step], fh) for mu, step, _, fh in ghost]


class HaloTemplate:
    """Packs the faces of the cut directions of a (12, V/2) spinor parity into one buffer."""

    autotune_version = 3  # 2: components per work-item tuned too; 3: faces where the receiver keeps them
    autotune_sources = (TEMPLATE,)

    def __init__(self, context: accel.Context, dims: tuple[int, int, int, int],
                 partitioned: tuple[bool, bool, bool, bool], precision: str,
                 tuning: dict[str, Any] | None = None):
        self.context = context
        self.lattice = Lattice(tuple(dims))
        self.partitioned = tuple(bool(p) for p in partitioned)
        if len(self.partitioned) != 4 or not any(self.partitioned):
            raise ValueError(f"partitioned must be four flags with at least one set, got {partitioned}")
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be 'single' or 'double', got {precision!r}")
        self.dtype = np.dtype(PRECISIONS[precision][1])
        #: where each face goes in the send buffer (:func:`send_sections`)
        self.sections = send_sections(self.lattice.dims, self.partitioned)
        self.size = sum(12 * fh for *_, fh in self.sections)
        self.tuning = tune.tuning_for(HaloTemplate, context, tuning, dims=self.lattice.dims,
                                      partitioned=self.partitioned,
                                      precision=precision).parameters
        self.wgs = self.tuning["wgs"]
        self.comps = self.tuning["comps"]

    def instantiate(self, queue: accel.CommandQueue, parity: int, sixteen: bool = False) -> Any:
        """``pack(send, inp)``: the faces of ``inp`` (parity ``parity``) into ``send``. With
        ``sixteen``, ``pack(send, values, norms)`` packs a 16-bit spinor (:mod:`.half`'s
        storage) as it is: per face its words, then its norms (half the section's room)."""
        program = self.context.build(TEMPLATE, {
            "cplx": accel.c_type(self.dtype), "dims": self.lattice.dims, "parity": parity,
            "sections": [tuple(s) for s in self.sections], "wgs": self.wgs, "comps": self.comps,
            "sixteen": sixteen})
        # 12 / comps work-items a face site; a site a work-item in 16 bits
        items = self.size // (12 if sixteen else self.comps)
        launch = queue.launcher(program.get_kernel(f"pack_p{parity}{'_h' if sixteen else ''}"),
                                -(-items // self.wgs) * self.wgs, self.wgs)
        return lambda send, *inp: launch([send, *inp])

    @classmethod
    def autotune_space(cls, context: accel.Context, dims: tuple[int, int, int, int],
                       partitioned: tuple[bool, bool, bool, bool], precision: str) -> tune.Space:
        """Work-group sizes the device allows, and how many of a site's 12 spinor components
        one work-item copies (fewer: more work-items in flight for a small face)."""
        limit = context.device.max_work_group_size
        sizes = [32, 64, 128, 256, 512] if context.device.is_gpu else [16, 64, 256]
        return tune.Space({"wgs": sizes, "comps": [1, 3, 12]},
                          [tune.at_most("wgs", limit)])

    @classmethod
    @tune.autotuner(test={"wgs": 64, "comps": 12})
    def autotune(cls, context: accel.Context, dims: tuple[int, int, int, int],
                 partitioned: tuple[bool, bool, bool, bool], precision: str) -> dict[str, Any]:
        lattice = Lattice(tuple(dims))
        dtype = np.dtype(PRECISIONS[precision][1])
        queue = context.create_tuning_command_queue()
        rng = np.random.default_rng(4)
        host = (rng.standard_normal((12, lattice.half_volume))
                + 1j * rng.standard_normal((12, lattice.half_volume))).astype(dtype)
        block = Partition(lattice.dims, (1, 1, 1, 1), 0)
        expected = np.zeros(sum(12 * fh for *_, fh in sections(lattice.dims, tuple(partitioned))),
                            dtype)
        for mu, step, offset, fh in send_sections(lattice.dims, tuple(partitioned)):
            face = block.face_order(mu, 0, lattice.dims[mu] - 1 if step == 1 else 0)
            expected[offset:offset + 12 * fh] = host[:, face].reshape(-1)
        inp = context.to_device(queue, host)
        send = context.allocate(expected.size, dtype)

        def generate(wgs: int, comps: int) -> tune.Measurement:
            pack = cls(context, lattice.dims, partitioned, precision,
                       {"wgs": wgs, "comps": comps}).instantiate(queue, 0)
            return tune.make_measure(queue, lambda: pack(send, inp),
                                     lambda: bool(np.array_equal(send.get(queue), expected)),
                                     bytes=2 * expected.size * dtype.itemsize)

        return tune.autotune(generate)
