"""Ordering and timing device work: :class:`CommandQueue` (an in-order queue), its
:class:`Marker` points and :class:`IntervalTimer` timers, and :func:`tuning_turn`, which keeps
the work of threads that prepare it ahead of time in order on a tuning queue.

The backends subclass these and fill in the ``_``-prefixed hooks; the checks and the timing
rules live here. :func:`timing_listener` tells a caller when any tuning queue of the process
starts and stops timing (to keep other work of the machine out of the timed windows).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import numpy as np

from .arrays import DeviceArray
from .roles import ContextRole
from .errors import AccelError
from .kernels import Kernel
from .shapes import as_sizes


_listeners: list[Callable[[bool], None]] = []
_listeners_lock = threading.Lock()


@contextlib.contextmanager
def timing_listener(listener: Callable[[bool], None]) -> Iterator[None]:
    """Within the block, ``listener(True)`` is called whenever a tuning queue of this process
    starts timing (:meth:`CommandQueue.start_tuning`) and ``listener(False)`` when it has
    stopped (after :meth:`CommandQueue.stop_tuning` has waited for the timed work), from the
    thread that times. Several threads may time at once: each start has its stop. A listener
    that raises is logged and does not disturb the timing."""
    with _listeners_lock:
        _listeners.append(listener)
    try:
        yield
    finally:
        with _listeners_lock:
            _listeners.remove(listener)


def _tell(timing: bool) -> None:
    for listener in tuple(_listeners):
        try:
            listener(timing)
        except Exception as exc:  # noqa: BLE001 - a listener never breaks a measurement
            logging.getLogger("autotune.accel").info("a timing listener failed: %s", exc)


class _Turn:
    """One :func:`tuning_turn` block: its ``wait``, the turn around it (``outer``), and where
    ``ready`` is given, the copies to the device kept until the turn comes."""

    def __init__(self, wait: Callable[[], None], ready: Callable[[], bool] | None,
                 outer: _Turn | None):
        self.wait = wait
        self.ready = ready
        self.outer = outer
        self.kept: list[Callable[[], None]] = []
        self.failed: BaseException | None = None
        self.lock = threading.Lock()
        #: this turn and those around it, the outermost first (made once: :meth:`take` runs
        #: before every command on a tuning queue, timed launches included)
        self.chain: tuple[_Turn, ...] = (*(outer.chain if outer is not None else ()), self)

    def take(self) -> None:
        """Wait for every turn of the chain, the outermost first, running each one's kept
        copies once it has come (before anything this thread enqueues next)."""
        for turn in self.chain:
            turn.wait()
            turn.run_kept()

    def run_kept(self) -> None:
        """Enqueue the kept copies, in order, once. A command stays in :attr:`kept` until it
        has been enqueued, so that another thread of the turn that arrives meanwhile waits for
        the lock instead of enqueueing its own work ahead of a copy that work may read."""
        if not self.kept and self.failed is None:  # nothing kept: no lock (the usual case)
            return
        with self.lock:
            if self.failed is not None:
                raise AccelError(f"a copy to the device kept until this turn failed: "
                                 f"{self.failed}") from self.failed
            while self.kept:
                try:
                    self.kept[0]()
                except Exception as exc:
                    self.failed = exc
                    self.kept.clear()
                    raise
                self.kept.pop(0)

    def keep(self, command: Callable[[], None]) -> bool:
        """Keep ``command`` (a copy to the device) until the turn comes, if it has not come
        and this block allows that; False if it must run now (after :meth:`take`)."""
        if self.ready is None:
            return False
        with self.lock:
            if self.ready():
                return False  # the command waits, which runs what is kept first
            self.kept.append(command)
            return True


_turn: ContextVar[_Turn | None] = ContextVar("autotune_tuning_turn", default=None)


@contextlib.contextmanager
def tuning_turn(wait: Callable[[], None], *,
                ready: Callable[[], bool] | None = None) -> Iterator[None]:
    """Within the block, work this thread puts on a *tuning* queue first calls ``wait()``.

    A caller that prepares work ahead of time in other threads (the tuner compiles candidates
    in a pool) uses it to keep that work's device commands in order: ``wait`` returns when it is
    this thread's turn (or raises, to stop the thread's work). Compiling and allocating do not
    wait; uploads, copies, fills, launches, downloads, ``finish``, markers and timers on a
    tuning queue do.

    Turns nest: inside another block, work waits for the enclosing turn first, then for this
    one (a candidate compiled ahead within a key tuned ahead waits for both).

    ``ready``, where given, says without waiting whether the turn has come. Until it has,
    copies *to* the device this thread puts on a tuning queue (``set`` and ``to_device``, with a
    copy of the host data taken now; ``zero``; ``copy_from``) do not wait: they are kept, and
    enqueued in order once the turn has come, before the next command that waits (in this
    thread or in a turn nested in it). So the thread goes on to its compiles.
    """
    token = _turn.set(_Turn(wait, ready, _turn.get()))
    try:
        yield
    finally:
        _turn.reset(token)


class IntervalTimer(ABC):
    """The device time of the work a queue runs between :meth:`start` and :meth:`stop`, read
    later without stalling the host: :meth:`ready` asks whether that work has finished,
    :meth:`seconds` waits for it. One timer is reused for many intervals (start it again once
    read); at most one timer of a queue runs at a time. From :meth:`CommandQueue.interval_timer`.

    The device's wait for the host before the first command is not counted (OpenCL profiles
    from the first command's start; CUDA holds the queue at :meth:`start` until :meth:`stop`,
    so the work then runs back to back, gaps between its commands left out too). So the work
    timed must not wait for itself: a call that waits for the queue (``queue.finish()``, a
    blocking copy) lets it run first.
    """

    def __init__(self, queue: CommandQueue):
        self.queue = queue
        self.running = False

    def _open(self) -> None:
        """Let the timed work run now (before a wait for the queue); nothing where it runs."""

    def start(self) -> None:
        """Time the work this queue is given from now on (until :meth:`stop`)."""
        if self.running:
            raise AccelError("IntervalTimer.start called twice without stop")
        if self.queue._interval is not None:
            raise AccelError("another interval timer of this queue is running")
        self.queue._wait_turn()
        self.running = True
        self.queue._interval = self
        self._start()

    def stop(self) -> None:
        """End the interval: the work enqueued up to now is the work timed."""
        if not self.running:
            raise AccelError("IntervalTimer.stop called without start")
        self.running = False
        self.queue._interval = None
        self._stop()

    def ready(self) -> bool:
        """Whether the timed work has finished (never waits)."""
        return not self.running and self._ready()

    def seconds(self) -> float:
        """Device seconds from the start of the first command timed to the end of the last;
        waits for them to finish."""
        if self.running:
            raise AccelError("IntervalTimer.seconds called before stop")
        return self._seconds()

    @abstractmethod
    def _start(self) -> None: ...

    @abstractmethod
    def _stop(self) -> None: ...

    @abstractmethod
    def _ready(self) -> bool: ...

    @abstractmethod
    def _seconds(self) -> float: ...


class Marker(ABC):
    """A point in a queue's work (from :meth:`CommandQueue.mark`)."""

    queue: CommandQueue

    @abstractmethod
    def ready(self) -> bool:
        """Whether the work enqueued before the marker has finished (never waits)."""

    @abstractmethod
    def wait(self) -> None:
        """Wait until the work enqueued before the marker has finished."""


#: the priorities a queue can be asked for: "high" queues' work is scheduled ahead of the
#: work of "normal" ones where the device can (CUDA stream priorities)
PRIORITIES = ("normal", "high")


class CapturedWork(ABC):
    """Work recorded by :meth:`CommandQueue.capture` (a CUDA graph): :meth:`launch` enqueues
    all of it again with one call."""

    queue: CommandQueue  #: the queue it was recorded on, where it is enqueued
    value_operations: int  #: the value writes and waits in it (:meth:`CommandQueue.write_value`)

    def launch(self, value: int | None = None) -> None:
        """Enqueue the recorded work on its queue again. With ``value``, every value write and
        wait in it (:meth:`CommandQueue.write_value`, :meth:`CommandQueue.wait_value`) takes
        ``value`` (modulo 2^32) instead of the value recorded: counters move on each launch."""
        self.queue._wait_turn()
        self._launch(None if value is None else int(value) & 0xFFFFFFFF)

    @abstractmethod
    def _launch(self, value: int | None) -> None: ...


class Capture:
    """What :meth:`CommandQueue.capture` yields: :attr:`work` once its block has ended."""

    work: CapturedWork | None = None


def check_priority(priority: str, timed: bool) -> None:
    """A ValueError unless ``priority`` is one of :data:`PRIORITIES` (and "normal" where the
    queue is ``timed``: timed queues measure work as it runs beside the others')."""
    if priority not in PRIORITIES:
        raise ValueError(f"queue priority must be one of {', '.join(PRIORITIES)}, got {priority!r}")
    if priority != "normal" and timed:
        raise ValueError("a timed or tuning queue has normal priority; make the high-priority "
                         "queue without timed=True")


class CommandQueue(ABC):
    """An in-order queue of device work.

    A *tuning* queue times everything enqueued between :meth:`start_tuning` and
    :meth:`stop_tuning` with device-side timestamps, copies included. Any queue whose context
    made it with ``timed=True`` (and every tuning queue) can also time intervals of its work
    without waiting for it (:meth:`interval_timer`), as online tuning does.
    """

    #: the priority this queue's work has: "high" only where the device schedules it so
    priority = "normal"

    def __init__(self, context: ContextRole, tuning: bool, timed: bool = False):
        self.context = context
        self.tuning = tuning
        self.timed = tuning or timed
        self._timing = False
        self._interval: IntervalTimer | None = None

    def interval_timer(self) -> IntervalTimer:
        """A new reusable :class:`IntervalTimer` on this queue (allocate them up front: a
        timer holds device events)."""
        if not self.timed:
            raise AccelError("timing intervals needs a queue made with "
                             "context.create_command_queue(timed=True)")
        return self._interval_timer()

    @abstractmethod
    def _interval_timer(self) -> IntervalTimer: ...

    def mark(self) -> Marker:
        """A :class:`Marker` of the work enqueued so far: waiting on it does not wait for work
        enqueued after it (the host can act on a copy while a later kernel runs)."""
        self._wait_turn()
        return self._mark()

    @abstractmethod
    def _mark(self) -> Marker: ...

    def wait_for(self, marker: Marker) -> None:
        """Make work enqueued on this queue from now on wait (on the device, the host does not)
        until the work before ``marker`` has finished: ``marker`` may come from another queue
        of the same context, so that a copy on a second queue overlaps a kernel on the first."""
        if not isinstance(marker, Marker):
            raise TypeError(f"expected a Marker from queue.mark(), not {type(marker).__name__}")
        if marker.queue.context is not self.context:
            raise AccelError("the marker belongs to a queue of another context")
        if marker.queue is self:
            return  # an in-order queue's later work comes after its earlier work anyway
        self._wait_turn()
        self._wait_for(marker)

    @abstractmethod
    def _wait_for(self, marker: Marker) -> None: ...

    def wait_for_queue(self, other: CommandQueue) -> None:
        """Make work enqueued on this queue from now on wait (on the device) for the work
        enqueued on ``other`` (a queue of the same context) so far: ``wait_for(other.mark())``,
        where a backend can, without a marker to make and collect (two queues that hand over
        work every step of a hot loop)."""
        if other is self:
            return
        if other.context is not self.context:
            raise AccelError("the queue belongs to another context")
        self._wait_turn()
        self._wait_for_queue(other)

    def _wait_for_queue(self, other: CommandQueue) -> None:
        self._wait_for(other._mark())

    @property
    def stream_values(self) -> bool:
        """Whether :meth:`write_value` and :meth:`wait_value` work on this queue (CUDA)."""
        return False

    def write_value(self, array: DeviceArray, index: int, value: int) -> None:
        """Enqueue a write of ``value`` (modulo 2^32) into the 32-bit word ``index`` of
        ``array`` (uint32; it may be another process's memory mapped with
        :meth:`Context.open_shared`), after the work before it has run and with its writes
        visible first: a signal to whatever waits on that word (:meth:`wait_value`), on this
        device or another. Only where :attr:`stream_values` (CUDA)."""
        self._bound_value(array, index, self._write_value)(value)

    def wait_value(self, array: DeviceArray, index: int, value: int) -> None:
        """Make work enqueued from now on wait (on the device; the host does not) until the
        32-bit word ``index`` of ``array`` has reached ``value``: until ``(int32) (word -
        value) >= 0``, a comparison that lets counters wrap around. Whoever writes the word
        must write it: nothing times out on the device. Only where :attr:`stream_values`."""
        self._bound_value(array, index, self._wait_value)(value)

    def value_writer(self, array: DeviceArray, index: int) -> Callable[[int], None]:
        """:meth:`write_value` into one word, checked once, for hot loops: the returned
        ``write(value)`` only enqueues."""
        return self._bound_value(array, index, self._write_value)

    def value_waiter(self, array: DeviceArray, index: int) -> Callable[[int], None]:
        """:meth:`wait_value` on one word, checked once, for hot loops: the returned
        ``wait(value)`` only enqueues."""
        return self._bound_value(array, index, self._wait_value)

    def _bound_value(self, array: DeviceArray, index: int,
                     enqueue: Callable[[DeviceArray, int, int], None]) -> Callable[[int], None]:
        self._check_word(array, index)

        def call(value: int) -> None:
            self._wait_turn()
            enqueue(array, index, int(value) & 0xFFFFFFFF)

        return call

    def _check_word(self, array: DeviceArray, index: int) -> None:
        if not self.stream_values:
            raise AccelError(f"{self.context.device.name}: queues cannot write or wait for "
                             "values in device memory here (CUDA stream memory operations); "
                             "signal through the host instead")
        if not isinstance(array, DeviceArray) or array.context is not self.context:
            raise AccelError("the flag array must be a device array of this queue's context")
        if array.dtype != np.uint32 or not 0 <= index < array.size:
            raise ValueError(f"a flag is a word of a uint32 array: index {index} of a "
                             f"{array.dtype} array of {array.size}")

    def _write_value(self, array: DeviceArray, index: int, value: int) -> None:
        raise NotImplementedError

    def _wait_value(self, array: DeviceArray, index: int, value: int) -> None:
        raise NotImplementedError

    @property
    def can_capture(self) -> bool:
        """Whether :meth:`capture` works on this queue (CUDA graphs)."""
        return False

    @contextlib.contextmanager
    def capture(self) -> Iterator[Capture]:
        """Within the block, the work enqueued on this queue is recorded, not run: with it, the
        work of other queues made to wait for it (:meth:`wait_for_queue`, :meth:`wait_for`),
        which this queue must wait for again before the block ends. After the block,
        ``capture.work`` (:class:`CapturedWork`) enqueues all of it with one call; none of it
        has run. Within the block the host must not wait for the queue or its markers, nor
        allocate or copy from the host. Only where :attr:`can_capture` (CUDA); an AccelError
        where the driver refuses the recording."""
        if not self.can_capture:
            raise AccelError(f"{self.context.device.name}: this queue cannot record its work "
                             "for replay (CUDA graphs); enqueue it each time instead")
        self._wait_turn()
        captured = Capture()
        self._begin_capture()
        try:
            yield captured
        except BaseException:
            self._end_capture(False)
            raise
        captured.work = self._end_capture(True)

    def _begin_capture(self) -> None:
        raise NotImplementedError

    def _end_capture(self, keep: bool) -> CapturedWork | None:
        raise NotImplementedError

    def enqueue_kernel(self, kernel: Kernel, args: Sequence[Any],
                       global_size: int | Sequence[int], local_size: int | Sequence[int]) -> None:
        """Launch ``kernel`` over ``global_size`` work-items in groups of ``local_size``.

        ``args`` are :class:`DeviceArray` objects and numpy scalars (``np.int32(n)``): a bare
        Python number is rejected because its C type would be a guess.
        """
        kernel.check_launch(global_size, local_size)
        g = as_sizes(global_size, "global_size")
        loc = as_sizes(local_size, "local_size")
        self._check_args(kernel, args)
        self._wait_turn()
        self._record(self._launch(kernel, list(args), g, loc))

    def launcher(self, kernel: Kernel, global_size: int | Sequence[int],
                 local_size: int | Sequence[int]) -> Callable[[Sequence[Any]], None]:
        """``enqueue_kernel`` with the launch configuration checked once, for hot loops.

        The returned ``launch(args)`` checks its arguments on the first call and again whenever
        their types change; otherwise it only enqueues.
        """
        kernel.check_launch(global_size, local_size)
        g = as_sizes(global_size, "global_size")
        loc = as_sizes(local_size, "local_size")
        checked: list[tuple] = []
        ordered = self.tuning

        def launch(args: Sequence[Any]) -> None:
            types = tuple(map(type, args))
            if not checked or checked[0] != types:
                self._check_args(kernel, args)
                checked[:] = [types]
            if ordered:
                self._wait_turn()
            self._record(self._launch(kernel, args, g, loc))

        return launch

    def _check_args(self, kernel: Kernel, args: Sequence[Any]) -> None:
        for i, a in enumerate(args):
            if isinstance(a, DeviceArray):
                if a.context is not self.context:
                    raise AccelError(f"argument {i} belongs to another context")
            elif not isinstance(a, np.generic):
                raise TypeError(
                    f"kernel {kernel.name} argument {i} is {type(a).__name__}; pass a DeviceArray "
                    "or a numpy scalar such as np.int32(n) or np.float32(x)"
                )

    @abstractmethod
    def _launch(self, kernel: Kernel, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...]) -> Any: ...

    def finish(self) -> None:
        """Wait until everything enqueued so far has completed."""
        self._wait_turn()
        self._before_waiting()
        self._finish()

    def _before_waiting(self) -> None:
        """Before anything that may wait for this queue (finish, a marker's wait, a copy
        between host and device: from pageable host memory the driver waits): the running
        interval's work may run now."""
        if self._interval is not None:
            self._interval._open()

    @abstractmethod
    def _finish(self) -> None: ...

    def _wait_turn(self) -> None:
        if self.tuning:
            turn = _turn.get()
            if turn is not None:
                turn.take()

    def _may_keep(self) -> bool:
        """Whether :meth:`_keep` may keep a command now (a tuning queue in a tuning turn);
        False means it will not."""
        return self.tuning and _turn.get() is not None

    def _keep(self, command: Callable[[], None]) -> bool:
        """Keep ``command`` (a copy to the device on this queue) until this thread's turn comes,
        where its :func:`tuning_turn` allows that (True); else False: run it now."""
        if not self.tuning:
            return False
        turn = _turn.get()
        return turn is not None and turn.keep(command)

    def start_tuning(self) -> None:
        """Start timing everything enqueued from now on, until :meth:`stop_tuning`.

        The device's work is timed, not the host's time enqueuing it: CUDA holds the batch
        until :meth:`stop_tuning` (or a wait for a queue, or 512 commands) and then runs it back
        to back; OpenCL profiles from the first command's start to the last one's end."""
        if not self.tuning:
            raise AccelError("start_tuning needs a queue from context.create_tuning_command_queue()")
        if self._timing:
            raise AccelError("start_tuning called twice without stop_tuning")
        self._wait_turn()
        if _listeners:
            _tell(True)
        self._timing = True
        try:
            self._start_timing()
        except BaseException:
            self._timing = False
            if _listeners:
                _tell(False)
            raise

    def stop_tuning(self) -> float:
        """Seconds of device time from :meth:`start_tuning` to the end of the last command."""
        if not self._timing:
            raise AccelError("stop_tuning called without start_tuning")
        self._timing = False
        try:
            return self._stop_timing()
        finally:
            if _listeners:
                _tell(False)

    def _record(self, event: Any) -> None:
        """Called with whatever the backend returns for each enqueued command."""

    @abstractmethod
    def _start_timing(self) -> None: ...

    @abstractmethod
    def _stop_timing(self) -> float: ...
