"""Stream-ordered signals of the peer transport: the GPUs tell each other that faces have
arrived and that ghost zones may be written again, and the host waits for neither.

Each rank holds ``flags``: one 32-bit counter per rank in its device memory, mapped by its
neighbours (CUDA IPC). Word ``s`` counts the exchanges whose faces rank ``s`` has copied into
this rank's ghost zone: rank ``s`` writes it on its copies' queue after the copies
(``cuStreamWriteValue32``: after a memory barrier), and this rank waits on the device
(``cuStreamWaitValue32``) until it has counted the exchange before the exterior update: on its
queue, or on its copies' queue where the exterior update runs there (policy "overlap"), whose
work the queue then waits for before anything later.

That is all the ordering the exchange needs, because every rank that sends to a neighbour
also receives from it (both directions of each cut), and the ghost zones and send buffers are
double-buffered. A rank's copies of exchange ``r`` (into the neighbour's ghost zone ``r % 2``)
wait for its packing of ``r``, which its queue runs after its exterior update of ``r - 1``
(policy "overlap" packs and updates the exterior on its copies' queue, in that order too),
which waited for the neighbour's count ``r - 1``, which the neighbour wrote after its copies of
``r - 1``, which waited for its packing of ``r - 1``, which its queue ran after its reads of
ghost zone ``r % 2`` in exchange ``r - 2``: no face overwrites one still being read. Likewise a
rank packs send buffer ``r % 2`` again in exchange ``r + 2`` only after the neighbour's count
``r + 1``, written after its copies of ``r + 1``, which came after its exterior update of
``r``, which waited for this rank's count ``r``, written after the copies that read the buffer.
So the host waits for nothing, and the caller's queue waits only for the neighbours' counts.

Nothing on the device times out, so a watch thread reads the flags every
:data:`WATCH_PERIOD` seconds: a counter this rank waits on that has not moved for
``AUTOTUNE_MPI_TIMEOUT`` seconds names its rank as stuck. The watch then writes the awaited
counts itself, so that no stream and no host call waiting on one stays blocked, and the next
exchange raises :class:`~autotune.parallel.MPITimeoutError` with that message.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autotune import accel, parallel

#: seconds between two reads of the flags by the watch thread
WATCH_PERIOD = 0.5


def behind(have: int, want: int) -> bool:
    """Whether counter value ``have`` has not reached ``want`` (as the device compares: cyclic
    32-bit, so that counters may wrap around)."""
    return ((int(have) - int(want)) & 0xFFFFFFFF) >= 0x80000000


@dataclass(frozen=True)
class KernelArrival:
    """What a kernel waits on itself for an exchange's faces: until each word of ``counters``
    named in ``words`` (``nwords`` of them) has reached ``count`` (cyclic, as the device
    compares)."""

    counters: accel.DeviceArray  #: this rank's counters (uint32, one a rank)
    words: accel.DeviceArray  #: the sources' ranks (uint32)
    nwords: int
    count: int


class FlagSignals:
    """The counters of one rank's peer transport (see the module's description)."""

    def __init__(self, comm: Any, context: accel.Context, queue: accel.CommandQueue,
                 dests: list[int], sources: list[int]):
        if set(dests) != set(sources):
            raise ValueError("the flags need every rank that is sent faces to send faces back "
                             f"(destinations {dests}, sources {sources})")
        self.comm, self.context, self.queue = comm, context, queue
        self.dests, self.sources = dests, sources
        self.flags = context.zeros(queue, comm.size, np.uint32)
        self._remote: dict[int, accel.DeviceArray] = {}
        #: per queue: ``write(count)`` into each destination's counter of this rank, and
        #: ``wait(count)`` on each source's counter (checked once: queue.value_writer/waiter)
        self._writes: dict[accel.CommandQueue, list[Callable[[int], None]]] = {}
        self._waits: dict[accel.CommandQueue, list[Callable[[int], None]]] = {}
        #: the sources' words, for kernels that wait themselves (:meth:`kernel_arrival`)
        self._words = context.to_device(queue, np.array(sources or [0], np.uint32))
        self.round = 0  #: the exchanges started
        self.failed: str | None = None  #: what the watch found stuck
        self._watch: _Watch | None = None

    def share(self) -> bytes:
        """The handle of this rank's counters, for its neighbours to map."""
        return self.context.share(self.flags)

    def open(self, handles: list[Any]) -> None:
        """Map the destinations' counters (``handles``: every rank's :meth:`share`)."""
        for dest in self.dests:
            handle = handles[dest]
            if not isinstance(handle, bytes):
                raise ValueError(f"rank {dest} sent no handle of its exchange counters")
            self._remote[dest] = self.context.open_shared(handle, self.comm.size, np.uint32)

    @staticmethod
    def _bound(table: dict, queue: accel.CommandQueue,
               make: Callable[[], list[Callable[[int], None]]]) -> list[Callable[[int], None]]:
        """``table``'s calls bound for ``queue``, made the first time (checked once then)."""
        bound = table.get(queue)
        if bound is None:
            bound = table[queue] = make()
        return bound

    def start(self) -> None:
        """A new exchange (raising what the watch found stuck, if anything)."""
        self.check()
        self.round += 1

    def after_copies(self, copies: accel.CommandQueue) -> None:
        """On the copies' queue, after the copies: count this exchange into each destination."""
        for write in self._bound(self._writes, copies, lambda: [
                copies.value_writer(self._remote[d], self.comm.rank) for d in self.dests]):
            write(self.round)

    def arrivals(self, queue: accel.CommandQueue | None = None) -> None:
        """Make ``queue`` (default: the caller's) wait until every source has copied this
        exchange's faces in (the host does not wait); start the watch with the first exchange."""
        self.check()
        queue = self.queue if queue is None else queue
        for wait in self._bound(self._waits, queue, lambda: [
                queue.value_waiter(self.flags, s) for s in self.sources]):
            wait(self.round)
        if self._watch is None:
            self._watch = _Watch(self)

    def kernel_arrival(self) -> KernelArrival:
        """Instead of :meth:`arrivals`: what a kernel enqueued next waits on itself for this
        exchange's faces (starting the watch with the first exchange, as arrivals does)."""
        self.check()
        if self._watch is None:
            self._watch = _Watch(self)
        return KernelArrival(self.flags, self._words, len(self.sources), self.round)

    def check(self) -> None:
        """Raise what the watch found stuck, if it found anything."""
        if self.failed is not None:
            raise parallel.MPITimeoutError(self.failed)

    def awaited(self) -> list[tuple[int, int, str]]:
        """(word, count, what it means) for each counter this rank's queue waits on now."""
        r = self.round
        return [(s, r, f"rank {s}'s faces of exchange {r}") for s in self.sources]

    def close(self) -> None:
        """Stop the watch (it stops by itself when the transport is collected)."""
        if self._watch is not None:
            self._watch.close()


def _watch(watch_ref: Any, signals_ref: Any) -> None:
    """The watch thread: :meth:`_Watch.run` while the watch lives. Where this thread drops the
    last reference to it, its page-locked buffer and queue free themselves with their context
    current (the device layer's objects do so in any thread)."""
    watch = watch_ref()
    if watch is not None:
        watch.run(signals_ref)


class _Watch:
    """A daemon thread that reads a rank's counters and releases its streams from a
    neighbour that stopped (see the module's description)."""

    def __init__(self, signals: FlagSignals):
        self.stop = threading.Event()
        self.timeout = parallel.timeout_seconds()
        # made here, in the thread that owns the context: CUDA objects made in the watch's
        # thread could not be freed at exit
        self.queue = signals.context.create_command_queue()  # beside the waiting streams
        # page-locked: the read is a copy on this queue alone, not one the driver orders
        # after other streams' work
        self.host = signals.context.empty_host(signals.comm.size, np.uint32)
        # the thread holds weak references only: the watch lives as long as its signals
        self.thread = threading.Thread(target=_watch, args=(weakref.ref(self), weakref.ref(signals)),
                                       name="autotune-peer-watch", daemon=True)
        weakref.finalize(signals, self.stop.set)
        watch = weakref.ref(self)  # at exit, before the CUDA contexts go; not kept alive by it
        atexit.register(lambda: (w := watch()) is not None and w.close())
        self.thread.start()

    def close(self) -> None:
        """Stop the watch and wait for its last read (at exit: before the contexts go)."""
        self.stop.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(2 * WATCH_PERIOD + 1)

    def run(self, ref: Any) -> None:
        """The watch's loop (in its thread) while the signals ``ref`` names live."""
        queue, host = self.queue, self.host
        moved: dict[int, tuple[int, float]] = {}  # word -> (value, when it last changed)
        while not self.stop.wait(WATCH_PERIOD):
            signals = ref()
            if signals is None or signals.failed is not None:
                return
            try:
                signals.flags.get(queue, host)
            except Exception:
                if self.stop.is_set():  # the process is ending: its contexts may be gone
                    return
                raise
            now = time.monotonic()
            stuck = []
            for word, count, what in signals.awaited():
                value = int(host[word])
                if moved.get(word, (None,))[0] != value:
                    moved[word] = (value, now)
                elif behind(value, count) and now - moved[word][1] > self.timeout:
                    stuck.append((word, count, what))
            if stuck:
                self._release(signals, queue, host, stuck)
                return
            del signals

    def _release(self, signals: FlagSignals, queue: accel.CommandQueue, host: np.ndarray,
                 stuck: list[tuple[int, int, str]]) -> None:
        comm = signals.comm
        signals.failed = (
            f"rank {comm.rank} of {comm.size}: the halo exchange (peer transport) waited "
            f"{self.timeout:g} s for {'; '.join(what for *_, what in stuck)}, which never came; "
            f"is that rank stuck, or did it die without aborting the run? "
            f"({parallel.ENV_TIMEOUT} sets the wait, default {parallel.DEFAULT_TIMEOUT:g} s)")
        # every awaited count written here: the waiting streams (and any host call waiting
        # for them) go on, and the next exchange raises the message
        for word, count, _ in signals.awaited():
            if behind(int(host[word]), count):
                signals.flags.view(word, word + 1).set(queue, np.array([count], np.uint32))
