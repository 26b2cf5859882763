"""The timing gate of a CUDA queue: device time only, not the host's time enqueuing.

CUDA events count the time between their records, idle time included: where the device waits
for the host (a host-bound solver, a launch after a synchronisation, a kernel shorter than
Python's launch), an interval's time would hold the host's time enqueuing the work, Python's
and the driver's, not only the work's. A one-thread kernel (``gate.ptx``) ahead of the start
event spins on a page-locked counter that the host sets when the interval stops, so the work
runs back to back as on a busy device. Where the device is busy anyway, the host has set the
counter long before the gate runs, and it costs one empty launch.

Both of a queue's timers use it: interval timers (online tuning) and
``start_tuning``/``stop_tuning`` (the tuner's batches, the benchmarks' side-by-side timings).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("autotune.accel")

#: How long a gate holds its stream at most (seconds). Enqueuing takes microseconds; a gate
#: times out where the host waited for the device inside the timed block (a blocking call of
#: another library, or pycuda freeing memory when Python's cycle collector runs there) or
#: stalled. The interval then holds the stall: one outlier among a candidate's samples.
GATE_TIMEOUT = 0.002
#: The same for a tuning batch (``start_tuning``): its host enqueues up to hundreds of launches
#: (a batch of :data:`GATE_MAX_HELD` launches of 20 us of Python each takes 10 ms) before the
#: work may run; nobody waits for a tuning queue's work meanwhile.
TUNING_GATE_TIMEOUT = 0.02
#: A gate opens once this many commands wait behind it: the driver queues about a thousand
#: launches a stream, and a host that enqueues more waits for the device, which waits for
#: the host. The rest of the interval then runs as the host enqueues it (counted as before).
GATE_MAX_HELD = 512
#: A queue's gates are given up (its timers then count the host's time too) once this many
#: have timed out and they are more than a quarter of its gated intervals: its timed work waits
#: for itself every time, not once in a while.
GATE_TIMEOUTS_ALLOWED = 8
#: every closed gate of the process, of every context: a wait for a queue opens them all, since
#: the work waited for may wait for another queue's (or another device's) gated work; a
#: device-wide driver call opens its context's
CLOSED: set[Gate] = set()
GATE_PTX = Path(__file__).with_name("gate.ptx")
GATE_FORMAT = "PIQ"  #: the gate kernel's arguments: the counters' address, target, timeout (ns)


class Gate:
    """Holds a queue's stream at the start of each timed interval until the host has enqueued
    the interval's work (or the gate's timeout has passed, or :data:`GATE_MAX_HELD` commands
    wait).

    A spinning kernel must never wait for something that waits for it: driver calls that may
    wait for all of the device's work (loading a kernel, allocating) run under the context's
    ``device_wide`` lock, which opens every closed gate first, and no gate is closed while one
    runs (that interval is timed without a gate). A wait for the queue opens its gate first
    (``CommandQueue._before_waiting``). Other waits for the device inside a timed block (a free
    when the cycle collector runs there) last until the gate's timeout."""

    def __init__(self, context: Any, drv: Any):
        self.context = context
        self.function = context.gate_function()
        with context._waiting_for_the_device():
            self.flags = drv.pagelocked_zeros(2, np.uint32,
                                              mem_flags=drv.host_alloc_flags.DEVICEMAP)
        self.pointer = np.uintp(self.flags.base.get_device_pointer())
        self.count = 0  #: intervals gated (their targets), modulo 2^32
        self.closed: int | None = None  #: the target the stream waits for, if it waits
        self.held = 0  #: commands enqueued behind the closed gate
        self.timeouts = 0
        self.skipped = 0  #: intervals not gated: a device-wide driver call was running
        self.enabled = True

    def close(self, stream: Any, tuning: bool = False) -> int | None:
        """Enqueue a gate that holds ``stream`` at most :data:`GATE_TIMEOUT` seconds
        (:data:`TUNING_GATE_TIMEOUT` for a ``tuning`` batch); its target. None: not gated
        (the gates were given up, a device-wide driver call is running, or the gate is closed
        already, whose interval then holds this one's work too)."""
        lock = self.context.device_wide
        if not self.enabled or self.closed is not None:
            return None
        if not lock.acquire(blocking=False):
            self.skipped += 1
            return None
        try:
            self.count = (self.count + 1) & 0xFFFFFFFF
            seconds = TUNING_GATE_TIMEOUT if tuning else GATE_TIMEOUT
            self.function.prepared_async_call((1, 1, 1), (1, 1, 1), stream, self.pointer,
                                              np.uint32(self.count), np.uint64(seconds * 1e9))
            self.closed = self.count
            self.held = 0
            CLOSED.add(self)
        finally:
            lock.release()
        return self.count

    def hold(self) -> None:
        """One more command waits behind the closed gate: open it once too many do."""
        self.held += 1
        if self.held >= GATE_MAX_HELD:
            self.open()

    def open(self) -> None:
        """Let the work behind the gate run (any thread; once)."""
        target, self.closed = self.closed, None  # (two threads may both write it: harmless)
        if target is not None:
            self.flags[0] = target
            CLOSED.discard(self)

    def check(self, target: int) -> None:
        """After gate ``target``'s interval finished: count a timeout, give up after a few."""
        if int(self.flags[1]) == target and self.enabled:
            self.timeouts += 1
            if self.timeouts >= GATE_TIMEOUTS_ALLOWED and 4 * self.timeouts > self.count:
                self.enabled = False
                logger.info("%d of %d gates of a timed queue timed out (a blocking call inside "
                            "the timed work?); its intervals now count the host's enqueue time "
                            "too", self.timeouts, self.count)
