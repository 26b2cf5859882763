"""How the faces of a halo exchange travel between the ranks: device to device where the
devices can map each other's memory (CUDA IPC between the GPUs of one host, over NVLink or
PCIe), else through page-locked host buffers and MPI.

A transport owns the ghost zone the faces arrive in and the send buffer they leave from. The
caller packs its faces into :attr:`Transport.send` on its queue, marks the queue there, may
enqueue work that needs no ghosts (the interior update: enqueued first, it starts at once),
calls :meth:`Transport.start` with that buffer and the marker (the copies wait for the packing
on a queue of their own, so they overlap the caller's kernels), and calls
:meth:`Transport.finish`; after it, work enqueued on the queue sees the neighbours' faces in
:attr:`Transport.ghost`. Every rank calls both in the same order (they are collective over the
ranks that exchange).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune import accel, parallel

from .peer_flags import FlagSignals, KernelArrival

#: transports by name; "auto" takes the first that every rank can use
TRANSPORTS = ("peer", "host")
_TOKEN_TAG = 7001


@dataclass(frozen=True)
class Route:
    """One face: the ``send`` part of this rank's send buffer goes to rank ``dest``, into the
    ``recv`` part of its ghost zone; the ``recv`` part of this rank's ghost zone comes from rank
    ``source`` (every rank's buffers have the same layout). ``tag`` tells the faces apart."""

    dest: int
    source: int
    send: slice
    recv: slice
    tag: int


class Transport(ABC):
    """Moves the faces of a send buffer into the neighbours' ghost zones."""

    name = ""

    def __init__(self, comm: Any, context: accel.Context, queue: accel.CommandQueue, size: int,
                 dtype: Any, routes: list[Route]):
        self.comm, self.context, self.queue = comm, context, queue
        self.size, self.dtype, self.routes = size, np.dtype(dtype), list(routes)
        #: the copies' own queue: they run beside the caller's kernels. High priority where
        #: the device has priorities: the work the caller puts on it (the packing and the
        #: exterior update, policy "overlap") starts ahead of the interior update's blocks
        self.copies = context.create_command_queue(priority="high")
        #: the ghost zone that the exchange last started fills
        self.ghost: accel.DeviceArray
        #: the send buffers, used in turn (:attr:`send`)
        self.sends = [context.zeros(queue, size, dtype)]
        self._next_send = 0

    @property
    def send(self) -> accel.DeviceArray:
        """The buffer the caller packs the next exchange's faces into, and passes to
        :meth:`start`."""
        return self.sends[self._next_send]

    @abstractmethod
    def start(self, send: accel.DeviceArray, packed: accel.Marker) -> None:
        """Enqueue what ships the faces of ``send`` once the work before ``packed`` (a marker
        of the caller's queue after the packing) has run."""

    @abstractmethod
    def finish(self) -> None:
        """Return once work enqueued from now on sees the neighbours' faces in :attr:`ghost`."""

    def finish_on_copies(self) -> accel.CommandQueue:
        """:meth:`finish`, but where the transport can make a queue wait on the device for
        the faces (stream-ordered flags), the copies' queue is made to wait instead of the
        caller's. Returns the queue whose work enqueued from now on sees the neighbours' faces
        in :attr:`ghost`: the copies' queue or the caller's. Work on the copies' queue runs
        beside the caller's kernels, after the packing; the caller's queue must wait for it
        (``queue.wait_for(copies.mark())``) before anything that needs its results."""
        self.finish()
        return self.queue

    def kernel_arrival(self) -> KernelArrival | None:
        """Where a kernel can wait on the device for the neighbours' faces itself (stream-ordered
        flags): in place of :meth:`finish`, what it waits on; else None (call :meth:`finish`)."""
        return None

    @property
    def replayable(self) -> bool:
        """Whether an exchange's work can be recorded once and enqueued again (a CUDA graph:
        ``accel.CommandQueue.capture``): the host waits for nothing in it, and it differs from
        one exchange to the next only by :attr:`phase` and :attr:`count`."""
        return False

    @property
    def phase(self) -> int:
        """Which of the buffers used in turn the next exchange takes: a recording of an
        exchange is made for each phase."""
        return 0

    @property
    def count(self) -> int:
        """The value of the last started exchange's value writes and waits (a recording
        launched for a later exchange takes that exchange's)."""
        return 0

    def advance(self) -> int:
        """For a recorded exchange launched again: move on as :meth:`start` does, without
        enqueuing anything; returns the new exchange's :attr:`count`."""
        raise NotImplementedError(f"the {self.name} transport's exchanges are not replayable")

    def position(self) -> tuple:
        """Where the exchanges stand, for :meth:`rewind` (a recording that failed)."""
        return ()

    def rewind(self, position: tuple) -> None:
        """Back to ``position`` (:meth:`position`): the exchanges started since never ran."""

    @property
    @abstractmethod
    def description(self) -> str:
        """How the faces travel, for people."""


class HostStaged(Transport):
    """Device to page-locked host memory, MPI between the ranks, host to device."""

    name = "host"

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.ghost = self.context.zeros(self.queue, self.size, self.dtype)
        self._host_send = self.context.empty_host(self.size, self.dtype)
        self._host_ghost = self.context.empty_host(self.size, self.dtype)
        self._host_ghost[:] = 0
        self._sent: accel.Marker | None = None

    @property
    def description(self) -> str:
        return "page-locked host buffers and MPI (mpi4py Isend/Irecv)"

    def start(self, send: accel.DeviceArray, packed: accel.Marker) -> None:
        self.copies.wait_for(packed)
        send.get(self.copies, self._host_send, wait=False)
        self._sent = self.copies.mark()

    def finish(self) -> None:
        self._sent.wait()
        # every face at once, waited for with a deadline (AUTOTUNE_MPI_TIMEOUT): a neighbour
        # that never sends is an error that names it, not a rank spinning forever
        requests = [self.comm.Irecv(self._host_ghost[r.recv], source=r.source, tag=r.tag)
                    for r in self.routes]
        requests += [self.comm.Isend(self._host_send[r.send], dest=r.dest, tag=r.tag)
                     for r in self.routes]
        labels = [f"rank {r.source}'s face (tag {r.tag}, {r.recv.stop - r.recv.start} "
                  f"{self.dtype} values)" for r in self.routes]
        labels += [f"rank {r.dest} to take this rank's face (tag {r.tag})" for r in self.routes]
        parallel.wait(requests, "the halo exchange (host transport)", self.comm, labels=labels)
        # the next exchange's copy to the host comes after this one on the copies' queue, so
        # the host buffer is not refilled before this upload has read it
        self.ghost.set(self.copies, self._host_ghost, wait=False)
        self.queue.wait_for(self.copies.mark())


class PeerCopy(Transport):
    """Each rank copies its faces straight into its neighbours' ghost zones, which it has
    mapped (``Context.open_shared``: CUDA IPC), then tells them. The ghost zone is
    double-buffered, and no face overwrites one still being read: ``finish`` returns before
    the caller's reads of the ghost zone are enqueued, so the caller must enqueue them before
    packing again, as a dslash does.

    ``signal="flags"`` (where every rank's queues can write and wait for values in device
    memory: CUDA): the GPUs tell each other through counters in device memory, the send
    buffer is double-buffered too, and the host waits for nothing (:mod:`.peer_flags`).
    ``signal="token"``: an MPI message of one byte after the copies, waited for by the host;
    a rank writes buffer k % 2 in exchange k only after its neighbour said its copies of
    exchange k - 1 were done; those waited for its packing of exchange k - 1, which its queue
    ran after its reads of buffer k % 2 in exchange k - 2."""

    name = "peer"
    SIGNALS = ("flags", "token")

    def __init__(self, *args: Any, signal: str = "token"):
        if signal not in self.SIGNALS:
            raise ValueError(f"signal must be one of {', '.join(self.SIGNALS)}, got {signal!r}")
        super().__init__(*args)
        self.signal = signal
        self._ghosts = [self.context.zeros(self.queue, self.size, self.dtype) for _ in range(2)]
        self.ghost = self._ghosts[1]
        self._round = 1
        self._remote: dict[int, list[accel.DeviceArray]] = {}
        self._dests = sorted({r.dest for r in self.routes})
        self._sources = sorted({r.source for r in self.routes})
        #: (dest, send part, ghost part): the routes, those side by side at both ends merged
        self._copies = merged_copies(self.routes)
        self._token = np.zeros(1, np.uint8)
        self._tokens_in = np.zeros(max(len(self._sources), 1), np.uint8)
        self._copied: accel.Marker | None = None
        # (send buffer, round) -> (the neighbour's ghost part, the face) views, made once
        self._pairs: dict[tuple[int, int], list[tuple[accel.DeviceArray, accel.DeviceArray]]] = {}
        self._flags = (FlagSignals(self.comm, self.context, self.queue, self._dests,
                                   self._sources) if signal == "flags" else None)
        if self._flags is not None:  # packed in turn (peer_flags says why that is safe)
            self.sends.append(self.context.zeros(self.queue, self.size, self.dtype))
        self.queue.finish()  # zeroed before any neighbour writes in

    def close(self) -> None:
        """Stop watching the neighbours' counters (with flags; the watch also stops when the
        transport is collected)."""
        if self._flags is not None:
            self._flags.close()

    def shared_handles(self) -> list[bytes]:
        """The handles of this rank's two ghost zones (and its counters, with flags), for its
        neighbours to map."""
        handles = [self.context.share(g) for g in self._ghosts]
        return handles + [self._flags.share()] if self._flags is not None else handles

    def open(self, handles: list[list[bytes]]) -> None:
        """Map the destinations' ghost zones (``handles``: every rank's :meth:`shared_handles`)."""
        count = 3 if self._flags is not None else 2
        for peer in sorted(set(self._dests) | set(self._sources)):
            if not isinstance(handles[peer], list) or len(handles[peer]) != count:
                raise ValueError(f"rank {peer} sent no {count} shared handles (two ghost "
                                 f"zones{' and its counters' if count == 3 else ''})")
        for dest in self._dests:
            self._remote[dest] = [self.context.open_shared(h, self.size, self.dtype)
                                  for h in handles[dest][:2]]
        if self._flags is not None:
            self._flags.open([h[2] if isinstance(h, list) and len(h) == 3 else None
                              for h in handles])

    @property
    def description(self) -> str:
        told = ("arrival told by stream-ordered flags (cuStreamWriteValue32 / "
                "cuStreamWaitValue32), the host waits for nothing" if self._flags is not None
                else "arrival told by an MPI message")
        return f"device to device: CUDA IPC copies into the neighbours' ghost zones, {told}"

    @property
    def replayable(self) -> bool:
        return self._flags is not None  # the token is waited for by the host

    @property
    def phase(self) -> int:
        return self._round

    @property
    def count(self) -> int:
        return self._flags.round if self._flags is not None else 0

    def _advance(self) -> None:
        if self._flags is not None:
            self._flags.start()
            self._next_send = 1 - self._next_send  # the other buffer next time
        self._round ^= 1
        self.ghost = self._ghosts[self._round]

    def advance(self) -> int:
        if self._flags is None:
            return super().advance()
        self._advance()
        return self._flags.round

    def position(self) -> tuple:
        return (self._flags.round if self._flags is not None else 0, self._next_send,
                self._round)

    def rewind(self, position: tuple) -> None:
        count, self._next_send, self._round = position
        if self._flags is not None:
            self._flags.round = count
        self.ghost = self._ghosts[self._round]

    def start(self, send: accel.DeviceArray, packed: accel.Marker) -> None:
        self._advance()
        self.copies.wait_for(packed)
        pairs = self._pairs.get((id(send), self._round))
        if pairs is None:
            pairs = self._pairs[id(send), self._round] = [
                (self._remote[dest][self._round].view(recv.start, recv.stop),
                 send.view(part.start, part.stop)) for dest, part, recv in self._copies]
        for target, face in pairs:
            target.copy_from(self.copies, face)
        if self._flags is not None:
            self._flags.after_copies(self.copies)
            return
        self._copied = self.copies.mark()

    def kernel_arrival(self) -> KernelArrival | None:
        return self._flags.kernel_arrival() if self._flags is not None else None

    def finish_on_copies(self) -> accel.CommandQueue:
        if self._flags is None:
            return super().finish_on_copies()
        self._flags.arrivals(self.copies)
        return self.copies

    def finish(self) -> None:
        if self._flags is not None:
            self._flags.arrivals()
            return
        self._copied.wait()
        requests = [self.comm.Irecv(self._tokens_in[i:i + 1], source=s, tag=_TOKEN_TAG)
                    for i, s in enumerate(self._sources)]
        requests += [self.comm.Isend(self._token, dest=d, tag=_TOKEN_TAG) for d in self._dests]
        labels = [f"rank {s}'s word that its faces are copied in" for s in self._sources]
        labels += [f"rank {d} to take this rank's word" for d in self._dests]
        parallel.wait(requests, "the halo exchange (peer transport)", self.comm, labels=labels)


def merged_copies(routes: list[Route]) -> list[tuple[int, slice, slice]]:
    """(dest, send part, ghost part) of each copy the routes need: routes to one destination
    whose parts lie side by side in the send buffer and in the ghost zone alike go in one
    copy (the faces a neighbour takes, where the send buffer is packed in the receiver's
    layout)."""
    out: list[tuple[int, slice, slice]] = []
    for r in sorted(routes, key=lambda r: (r.dest, r.send.start)):
        if out and out[-1][0] == r.dest and out[-1][1].stop == r.send.start \
                and out[-1][2].stop == r.recv.start:
            dest, send, recv = out[-1]
            out[-1] = (dest, slice(send.start, r.send.stop), slice(recv.start, r.recv.stop))
        else:
            out.append((r.dest, r.send, r.recv))
    return out


def check_kind(kind: str) -> None:
    """ValueError unless ``kind`` names a transport or is "auto"."""
    if kind not in TRANSPORTS + ("auto",):
        raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)} or 'auto', "
                         f"got {kind!r}")


def make_transport(kind: str, comm: Any, context: accel.Context, queue: accel.CommandQueue,
                   size: int, dtype: Any, routes: list[Route]) -> Transport:
    """The transport ``kind`` ("peer", "host", or "auto": peer where every rank can map its
    neighbours' memory, else host), made collectively by every rank of ``comm``."""
    from mpi4py import MPI

    check_kind(kind)
    args = (comm, context, queue, size, dtype, routes)
    if kind == "host":
        return HostStaged(*args)
    host = MPI.Get_processor_name()
    everyone = parallel.allgather(comm, (host, context.SHARE_HANDLE_BYTES > 0), "the ranks' hosts")
    peers = {r.dest for r in routes} | {r.source for r in routes}
    why = None
    if not all(can for _, can in everyone):
        why = "some rank's device cannot share its memory with other processes (only CUDA can)"
    elif any(everyone[p][0] != host for p in peers):
        why = "some neighbours run on another host"
    why = parallel.allgather(comm, why, "whether every rank can share device memory")
    why = next((w for w in why if w), None)
    if why is None:
        # flags where every rank's queues can signal in device memory (and every rank sends
        # back to those that send to it: peer_flags), else the MPI token
        symmetric = {r.dest for r in routes} == {r.source for r in routes}
        flags = parallel.allgather(comm, queue.stream_values and symmetric,
                                   "whether every rank's queues can signal through device memory")
        transport = PeerCopy(*args, signal="flags" if all(flags) else "token")
        handles = parallel.allgather(comm, transport.shared_handles(), "the ranks' memory handles")
        try:
            transport.open(handles)
        except (accel.AccelError, ValueError) as exc:
            why = str(exc)
        failed = [w for w in parallel.allgather(comm, why, "whether every rank opened its peers")
                  if w]
        if not failed:
            return transport
        why = failed[0]
    if kind == "peer":
        raise accel.AccelError(f"the peer transport cannot be used: {why}; use "
                               "transport='host' (or 'auto', which falls back to it)")
    return HostStaged(*args)
