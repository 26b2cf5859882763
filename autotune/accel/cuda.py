"""CUDA backend over pycuda, compiling with NVRTC in-process (nvcc as the fallback)."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import logging
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from . import cuda_gate, cuda_interop, cuda_streams, nvrtc
from .cuda_gate import GATE_FORMAT, GATE_PTX, Gate
from .cuda_graphs import DriverStreamOps
from .cuda_streams import in_context as _in_context
from .cuda_teardown import PageLocked, drop_in_context
from .arrays import DeviceArray
from .context import Context
from .errors import AccelError, BackendUnavailableError, CompileError
from .identity import DeviceIdentity
from .kernels import Kernel, KernelLimits, Program
from .queues import CommandQueue, IntervalTimer, Marker, check_priority
from .render import RenderedSource
from .shapes import as_shape

logger = logging.getLogger("autotune.accel")

try:
    import pycuda.driver as drv
except ImportError:  # pragma: no cover - depends on the installation
    drv = None

_init_lock = threading.Lock()
_initialised: bool | None = None
_pushed: list[Any] = []  # primary contexts made current on the main thread, popped at exit
#: device index -> pycuda's wrapper of the device's primary context, one a process (see
#: :func:`_primary_context`)
_primaries: dict[int, Any] = {}


@atexit.register
def _pop_pushed_contexts() -> None:
    # pycuda aborts the interpreter if a context is still on the stack when it unloads.
    while _pushed:
        _pushed.pop()
        try:
            drv.Context.pop()
        except Exception:  # already gone: nothing left to clean up
            break


def _primary_context(device: Any, index: int) -> Any:
    """The primary context of ``device`` (index ``index``), as one pycuda wrapper for every
    :class:`CudaContext` of the process.

    pycuda binds memory, streams, events and modules to the wrapper current where they are made,
    and frees them without switching only where that same wrapper is current. Two wrappers of
    one context (each ``retain_primary_context()`` makes one) compare equal, so
    :meth:`CudaContext.thread_scope` would not switch between them, yet pycuda would: an object
    made under one and dropped under the other in a thread that did not make the first was
    leaked with "... in out-of-thread context could not be cleaned up" (two ``warm`` runs in
    one process, the second's look-ahead thread collecting the first's garbage)."""
    with _init_lock:
        primary = _primaries.get(index)
        if primary is None:
            primary = _primaries[index] = device.retain_primary_context()
        return primary


def available() -> bool:
    """True if pycuda imports and the driver initialises."""
    global _initialised
    if drv is None:
        return False
    with _init_lock:
        if _initialised is None:
            try:
                drv.init()
                _initialised = drv.Device.count() > 0
            except Exception:  # no driver, no GPU
                _initialised = False
        return _initialised


def _identity(dev: Any) -> DeviceIdentity:
    attr = drv.device_attribute
    driver = drv.get_driver_version()
    built = ".".join(str(v) for v in drv.get_version())
    return DeviceIdentity(
        backend="cuda",
        name=dev.name(),
        platform="CUDA",
        driver_version=f"{driver // 1000}.{driver % 1000 // 10} (pycuda CUDA {built})",
        compute_capability=tuple(dev.compute_capability()),
        multiprocessors=dev.get_attribute(attr.MULTIPROCESSOR_COUNT),
        global_memory=dev.total_memory(),
        max_work_group_size=dev.get_attribute(attr.MAX_THREADS_PER_BLOCK),
        local_memory=dev.get_attribute(attr.MAX_SHARED_MEMORY_PER_BLOCK),
        is_gpu=True,
        warp_size=dev.get_attribute(attr.WARP_SIZE),
        double_precision=True,
    )


def list_devices() -> list[tuple[int, DeviceIdentity]]:
    if not available():
        return []
    return [(i, _identity(drv.Device(i))) for i in range(drv.Device.count())]


try:
    from pycuda._pvt_struct import pack as _pack_arguments
except ImportError:  # no pycuda here, or a release without it: prepared_async_call packs
    _pack_arguments = None
#: launch through pycuda's Function._launch_kernel with the arguments packed here: what its
#: prepared_async_call does, less ~1.3 us of Python a launch (H200 host), which a host-bound
#: solver launching every few microseconds pays on every launch
_DIRECT_LAUNCH = _pack_arguments is not None and hasattr(getattr(drv, "Function", None),
                                                          "_launch_kernel")


def _enqueue(function: Any, grid: tuple[int, ...], block: tuple[int, ...], stream: Any,
             fmt: str, values: Sequence[Any]) -> None:
    """Launch a prepared function (``prepare(fmt)`` done) on ``stream``, no dynamic shared memory."""
    if _DIRECT_LAUNCH:
        function._launch_kernel(grid, block, _pack_arguments(fmt, *values), 0, stream)
    else:
        function.prepared_async_call(grid, block, stream, *values)


class CudaKernel(Kernel):
    def __init__(self, program: CudaProgram, name: str, handle: Any):
        super().__init__(program, name)
        self.handle = handle
        self._format: str | None = None
        #: the argument format by the arguments' types (a launcher passes the same each call)
        self._formats: dict[tuple[type, ...], str] = {}
        fa = drv.function_attribute
        self._limits = KernelLimits(
            max_work_group_size=handle.get_attribute(fa.MAX_THREADS_PER_BLOCK),
            registers=handle.get_attribute(fa.NUM_REGS),
            local_memory=handle.get_attribute(fa.SHARED_SIZE_BYTES),
            private_memory=handle.get_attribute(fa.LOCAL_SIZE_BYTES),
            preferred_multiple=program.context.device.warp_size,
        )

    @property
    def limits(self) -> KernelLimits:
        return self._limits

    def _set_carveout(self, percent: int) -> None:
        with self.program.context.thread_scope():
            self.handle.set_attribute(
                drv.function_attribute.PREFERRED_SHARED_MEMORY_CARVEOUT, percent)
            if self._raw is not None:
                self._raw.set_carveout(percent)
        self._carveout = percent

    _raw: cuda_streams.RawFunction | None = None
    _carveout: int | None = None

    @property
    def context(self) -> Any:
        return self.program.context

    def __del__(self) -> None:
        drop_in_context(self, "handle", "_raw")

    def raw(self) -> cuda_streams.RawFunction:
        """This kernel loaded again through the driver API, for queues of raw streams (made
        on first use, with the carve-out set on this one; the caller's context is current)."""
        if self._raw is None:
            raw = cuda_streams.RawFunction(self.program.binary, self.name)
            if self._carveout is not None:
                raw.set_carveout(self._carveout)
            self._raw = raw
        return self._raw


class CudaProgram(Program):
    def __init__(self, context: CudaContext, source: RenderedSource, seconds: float, log: str,
                 compiler: str, binary: bytes):
        super().__init__(context, source, seconds, log, compiler)
        self.binary = binary
        self._module = None

    def __del__(self) -> None:
        drop_in_context(self, "_module")

    def _get_kernel(self, name: str) -> Kernel:
        # loading may wait for the device (lazy loading loads a kernel when first asked for:
        # CudaKernel reads its attributes, so it is loaded before any launch)
        with self.context.thread_scope(), self.context._waiting_for_the_device():
            if self._module is None:
                self._module = drv.module_from_buffer(self.binary)
            try:
                return CudaKernel(self, name, self._module.get_function(name))
            except drv.LogicError as exc:
                raise CompileError(
                    f"kernel {name!r} not found in {self.source.template}; kernels need the "
                    f"KERNEL qualifier (extern \"C\"): {exc}"
                ) from exc


class CudaArray(DeviceArray):
    def __init__(self, context: CudaContext, shape: int | Sequence[int], dtype: Any,
                 *, wrap: Any = None, pointer: int | None = None):
        super().__init__(context, shape, dtype)
        if pointer is None:
            with context.thread_scope(), context._waiting_for_the_device():
                self.allocation = drv.mem_alloc(max(self.nbytes, 1))
            self.pointer = int(self.allocation)
        else:
            self.allocation = None
            self.pointer = pointer
        self._owner = wrap  # keeps a wrapped foreign array alive

    def __del__(self) -> None:
        # the allocation, and a wrapped pycuda object (a peer's mapped memory)
        drop_in_context(self, "allocation", "_owner")

    def _view(self, offset: int, shape: tuple[int, ...]) -> CudaArray:
        return CudaArray(self.context, shape, self.dtype, wrap=self, pointer=self.pointer + offset)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A DLPack capsule of this memory (no copy): ``stream`` (the consumer's; None: the
        legacy default stream, -1: none) waits for the work of this context's queues."""
        return cuda_interop.export(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self.context.device_index)  # kDLCUDA

    @property
    def __cuda_array_interface__(self) -> dict:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.pointer, False),
            "strides": None,
            "version": 3,
        }

    @property
    def kernel_arg(self) -> Any:
        return self.pointer

    # the copies go through the driver API on the queue's stream handle: one way for pycuda's
    # streams and the raw ones of high-priority queues
    @_in_context
    def _upload(self, queue: CudaQueue, host: np.ndarray) -> Any:
        cuda_streams.upload(self.pointer, host, queue.stream.handle)

    @_in_context
    def _download(self, queue: CudaQueue, host: np.ndarray) -> Any:
        cuda_streams.download(host, self.pointer, queue.stream.handle)

    @_in_context
    def _download_range(self, queue: CudaQueue, host: np.ndarray, offset: int) -> Any:
        cuda_streams.download(host, self.pointer + offset, queue.stream.handle)

    @_in_context
    def _fill_zero(self, queue: CudaQueue) -> Any:
        cuda_streams.zero(self.pointer, self.nbytes, queue.stream.handle)

    @_in_context
    def _copy_from(self, queue: CudaQueue, other: CudaArray) -> Any:
        cuda_streams.copy(self.pointer, other.pointer, self.nbytes, queue.stream.handle)


class CudaIntervalTimer(IntervalTimer):
    """Two CUDA events on the queue's stream, behind the queue's gate
    (:class:`~autotune.accel.cuda_gate.Gate`)."""

    def __init__(self, queue: CudaQueue):
        super().__init__(queue)
        self.context = queue.context
        self._target: int | None = None
        self._make()

    @_in_context
    def _make(self) -> None:
        self._begin = drv.Event()
        self._end = drv.Event()

    def __del__(self) -> None:
        drop_in_context(self, "_begin", "_end")

    @_in_context
    def _start(self) -> None:
        gate = self.queue._gate
        self._target = gate.close(self.queue.stream) if gate is not None else None
        self._begin.record(self.queue.stream)

    @_in_context
    def _stop(self) -> None:
        self._end.record(self.queue.stream)
        self._open()

    def _open(self) -> None:
        if self._target is not None:
            self.queue._gate.open()

    @_in_context
    def _ready(self) -> bool:
        return self._end.query()

    @_in_context
    def _seconds(self) -> float:
        self._end.synchronize()
        if self._target is not None:  # gated: the queue has its gate
            self.queue._gate.check(self._target)
            self._target = None
        return self._end.time_since(self._begin) * 1e-3


class CudaMarker(Marker):
    """An event without timing (a driver API handle: :mod:`cuda_streams`) recorded on the
    queue's stream. Events are reused: a marker's goes back to its queue when the marker is
    collected (a stream that waited for it took the record's state when it was told to wait,
    so recording the event again changes nothing for it), which saves a hot loop the driver's
    event creation and destruction each mark."""

    def __init__(self, queue: CudaQueue):
        self.queue = queue
        self.context = queue.context
        self._record()

    @_in_context
    def _record(self) -> None:
        free = self.queue._free_events
        self._event = free.pop() if free else cuda_streams.new_event()
        cuda_streams.record(self._event, self.queue.stream.handle)

    def __del__(self) -> None:
        event = self.__dict__.get("_event")
        if event is not None:
            if len(self.queue._free_events) < _FREE_EVENTS:
                self.queue._free_events.append(event)
            else:
                cuda_streams.destroy_event(event)

    @_in_context
    def ready(self) -> bool:
        return cuda_streams.event_done(self._event)

    @_in_context
    def wait(self) -> None:
        self.queue._before_waiting()  # a gate would hold the work before the marker
        cuda_streams.event_wait(self._event)


def _destroy_events(events: list[int]) -> None:
    for event in events:
        cuda_streams.destroy_event(event)
    events.clear()


#: events a queue keeps for its next markers
_FREE_EVENTS = 64


class CudaQueue(DriverStreamOps, CommandQueue):
    #: its stream is made without CU_STREAM_NON_BLOCKING: the device makes its work wait for
    #: the legacy default stream's earlier work (what other libraries' default streams are)
    blocking = True

    def __init__(self, context: CudaContext, tuning: bool, timed: bool = False,
                 priority: str = "normal"):
        super().__init__(context, tuning, timed)
        check_priority(priority, self.timed)
        with context.thread_scope():
            if priority == "high":  # pycuda makes streams of the default priority only
                self.stream = cuda_streams.RawStream(cuda_streams.priority_range()[1])
            else:
                self.stream = drv.Stream()
            self._start = drv.Event() if tuning else None
            self._stop = drv.Event() if tuning else None
        self.priority = priority
        self._raw = isinstance(self.stream, cuda_streams.RawStream)  #: pycuda cannot launch there
        self._gate: Gate | None = None
        self._ungated = False  #: the gate could not be made here
        self._tuning_target: int | None = None  #: the gate of the running start_tuning batch
        self._free_events: list[int] = []  #: markers' events to record again
        weakref.finalize(self, _destroy_events, self._free_events)
        context._queues.add(self)  # DLPack exports order the consumer after every live queue

    def __del__(self) -> None:
        drop_in_context(self, "stream", "_start", "_stop", "_gate")

    @_in_context
    def _launch(self, kernel: CudaKernel, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...]) -> Any:
        # the argument format by the arguments' types (a launcher's are the same each call)
        types = tuple(map(type, args))
        fmt = kernel._formats.get(types)
        if fmt is None:
            fmt = kernel._formats[types] = "".join(
                "P" if isinstance(a, DeviceArray) else a.dtype.char for a in args)
        if fmt != kernel._format:
            kernel.handle.prepare(fmt)
            kernel._format = fmt
        block = tuple(local_size) + (1,) * (3 - len(local_size))
        grid = tuple(g // b for g, b in zip(global_size, local_size)) + (1,) * (3 - len(global_size))
        values = [a.pointer if c == "P" else a for a, c in zip(args, fmt)]
        if self._raw:
            if _pack_arguments is None:
                raise AccelError("a high-priority queue launches with pycuda's argument "
                                 "packing (pycuda._pvt_struct), which this pycuda lacks")
            kernel.raw().launch(grid, block, self.stream.handle, _pack_arguments(fmt, *values))
        else:
            _enqueue(kernel.handle, grid, block, self.stream, fmt, values)

    @_in_context
    def _finish(self) -> None:
        self.stream.synchronize()

    def _made_gate(self) -> Gate | None:
        """The queue's timing gate, made on first use (None where it cannot be made)."""
        if self._gate is None and not self._ungated:
            try:
                with self.context.thread_scope():
                    self._gate = Gate(self.context, drv)
            except (drv.Error, AttributeError) as exc:  # no mapped host memory, or no gate
                self._ungated = True
                logger.info("timers on %s run without a gate (%s): they count the host's "
                            "enqueue time too", self.context.device.name, exc)
        return self._gate

    def _interval_timer(self) -> IntervalTimer:
        self._made_gate()
        return CudaIntervalTimer(self)

    def _record(self, event: Any) -> None:
        gate = self._gate
        if gate is not None and gate.closed is not None:
            gate.hold()

    def _before_waiting(self) -> None:
        super()._before_waiting()
        if cuda_gate.CLOSED:  # every closed gate (cuda_gate.CLOSED says why)
            for gate in list(cuda_gate.CLOSED):
                gate.open()

    def _mark(self) -> Marker:
        return CudaMarker(self)

    @_in_context
    def _wait_for(self, marker: CudaMarker) -> None:
        cuda_streams.wait_event(self.stream.handle, marker._event)

    @_in_context
    def _wait_for_queue(self, other: CudaQueue) -> None:
        # the other queue's reusable ordering event: a stream that waits takes the record's
        # state when it is told to, so recording it again for the next hand-over is safe
        event = other.__dict__.get("_order_event") or cuda_interop.queue_event(other)
        cuda_streams.record(event, other.stream.handle)
        cuda_streams.wait_event(self.stream.handle, event)

    @_in_context
    def _start_timing(self) -> None:
        # behind the gate: the batch runs once enqueued, so the host's time is not counted
        gate = self._made_gate() if self._interval is None else None
        self._tuning_target = (gate.close(self.stream, tuning=True)
                               if gate is not None else None)
        self._start.record(self.stream)

    @_in_context
    def _stop_timing(self) -> float:
        # Events on the stream bracket every command in between, copies included.
        self._stop.record(self.stream)
        target, self._tuning_target = self._tuning_target, None
        if target is not None:
            self._gate.open()
        self._stop.synchronize()
        if target is not None:
            self._gate.check(target)
        return self._start.time_till(self._stop) * 1e-3


class CudaContext(Context):
    backend = "cuda"

    def __init__(self, device_index: int = 0):
        if not available():
            raise BackendUnavailableError(
                "CUDA is not usable here: pycuda is missing or no NVIDIA GPU/driver was found "
                "(pip install 'autotune[cuda]')"
            )
        dev = drv.Device(device_index)
        super().__init__(_identity(dev))
        self.device_index = device_index
        # The primary context is the one CuPy and PyTorch use, so their arrays work here.
        self.cu_context = _primary_context(dev, device_index)
        if drv.Context.get_current() is not self.cu_context:  # (the wrapper: _primary_context)
            self.cu_context.push()
            if threading.current_thread() is threading.main_thread():
                _pushed.append(self.cu_context)
        self.handle = cuda_streams.current_context()  #: the context's raw handle (it is current)
        self.compiler = "nvrtc" if nvrtc.available() else "nvcc"
        self._gate_function: Any = None
        #: held around driver calls that may wait for all of the device's work (see cuda_gate.Gate)
        self.device_wide = threading.Lock()
        self._queues: weakref.WeakSet[CudaQueue] = weakref.WeakSet()

    def __del__(self) -> None:
        # the timing gate's function holds its module, which pycuda frees only in this context
        held = self.__dict__.pop("_gate_function", None)
        if held is not None and drv is not None:
            try:
                with self.thread_scope():
                    del held
            except Exception:  # pragma: no cover - at exit, the context may be gone already
                pass

    @contextlib.contextmanager
    def _waiting_for_the_device(self) -> Iterator[None]:
        """Around a driver call that may wait for all of the device's work: no gate holds it."""
        with self.device_wide:
            for gate in list(cuda_gate.CLOSED):
                if gate.context is self:
                    gate.open()
            yield

    def gate_function(self) -> Any:
        """The timing gate's kernel (``gate.ptx``, loaded once; see :class:`~autotune.accel.cuda_gate.Gate`)."""
        with self._programs_lock:
            if self._gate_function is None:
                with self.thread_scope(), self._waiting_for_the_device():
                    module = drv.module_from_buffer(GATE_PTX.read_bytes())
                    function = module.get_function("autotune_gate")
                    function.prepare(GATE_FORMAT)
                    self._gate_function = function
            return self._gate_function

    @contextlib.contextmanager
    def thread_scope(self) -> Iterator[None]:
        """This context current in the calling thread for the block. It is pushed unless its
        own pycuda wrapper is current already: another wrapper of the same context (a user's
        ``pycuda.autoprimaryctx``) compares equal, but pycuda frees what is made under one
        only where that one is current (:func:`_primary_context`)."""
        current = drv.Context.get_current()
        if current is self.cu_context:
            yield
            return
        self.cu_context.push()
        try:
            yield
        finally:
            drv.Context.pop()

    def _helper_target(self, options: tuple[str, ...]) -> Any:
        return (self.device.compute_capability, options) if self.compiler == "nvrtc" else None

    def _program_from_helper(self, source: RenderedSource, compiled: Any, seconds: float) -> Program:
        log = source.map_log(compiled.log) if compiled.log else ""
        if "warning" in log:
            logger.warning("CUDA build of %s: %s", source.template, log)
        return CudaProgram(self, source, seconds, log, "nvrtc", compiled.binary)

    def _compile(self, source: RenderedSource, options: tuple[str, ...], start: float) -> Program:
        cc = self.device.compute_capability
        name = source.template.rsplit("/", 1)[-1].replace(".mako", ".cu")
        if self.compiler == "nvrtc":
            try:
                out = nvrtc.compile_source(source.text, name, cc, options)
            except nvrtc.NvrtcError as exc:
                log = source.map_log(exc.log)
                raise CompileError(
                    f"NVRTC build of {source.template} failed:\n{log}", log, source.text
                ) from None
            binary, log = out.binary, out.log
        else:
            from pycuda.compiler import compile as nvcc_compile

            try:
                binary = nvcc_compile(source.text, options=list(options), no_extern_c=True,
                                      arch=f"sm_{cc[0]}{cc[1]}")
            except drv.CompileError as exc:
                log = source.map_log(getattr(exc, "stderr", "") or str(exc))
                raise CompileError(
                    f"nvcc build of {source.template} failed:\n{log}", log, source.text
                ) from None
            log = ""
        seconds = time.perf_counter() - start
        log = source.map_log(log) if log else ""
        if "warning" in log:
            logger.warning("CUDA build of %s: %s", source.template, log)
        return CudaProgram(self, source, seconds, log, self.compiler, binary)

    def allocate(self, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        return CudaArray(self, shape, dtype)

    def empty_host(self, shape: int | Sequence[int], dtype: Any) -> np.ndarray:
        shape, dtype = as_shape(shape), np.dtype(dtype)
        with self.thread_scope(), self._waiting_for_the_device():
            memory = drv.pagelocked_empty(shape, dtype)
        if not memory.nbytes:
            return memory
        # the array's memory is a ctypes view that keeps a holder alive, and the holder frees
        # the page-locked memory with this context current in whichever thread drops it last
        view = (ctypes.c_byte * memory.nbytes).from_address(memory.ctypes.data)
        view.holder = PageLocked(self, memory)
        return np.frombuffer(view, dtype).reshape(shape)

    SHARE_HANDLE_BYTES = 64  # a CUipcMemHandle

    def share(self, array: DeviceArray) -> bytes | None:
        """A CUDA IPC handle of ``array`` (see :meth:`Context.share`)."""
        if not isinstance(array, CudaArray) or array.context is not self:
            raise ValueError("only device arrays of this context can be shared")
        if array.allocation is None:
            raise ValueError("only a whole allocation (context.allocate) can be shared, "
                             "not a view or a wrapped foreign array")
        with self.thread_scope():
            return bytes(drv.mem_get_ipc_handle(array.pointer))

    def open_shared(self, handle: bytes, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        """Map another process's device array (CUDA IPC; peer access between the two GPUs is
        enabled as needed). The mapping is closed when the returned array is collected."""
        handle, shape, dtype = self._check_share_handle(handle, shape, dtype)
        try:
            with self.thread_scope():
                mapping = drv.IPCMemoryHandle(bytearray(handle),
                                              drv.ipc_mem_flags.LAZY_ENABLE_PEER_ACCESS)
        except drv.Error as exc:
            raise AccelError(f"cannot map the shared device memory on {self.device.name}: {exc} "
                             "(the GPUs may have no peer access; exchange through host memory "
                             "instead)") from exc
        return CudaArray(self, shape, dtype, wrap=mapping, pointer=int(mapping))

    _views_foreign = ("ours, or any object with __cuda_array_interface__ or __dlpack__ on this "
                      "GPU: CuPy, PyTorch, JAX, Numba")

    def _view_foreign(self, obj: Any, name: str, dtype: Any, shape: Any,
                      queue: CommandQueue | None) -> DeviceArray | None:
        return cuda_interop.view(self, obj, name, queue)

    def _wrap_pointer(self, shape: tuple[int, ...], dtype: Any, pointer: int,
                      owner: Any) -> CudaArray:
        """A device array at another library's ``pointer``, keeping ``owner`` alive."""
        return CudaArray(self, shape, dtype, wrap=owner, pointer=pointer)

    def create_command_queue(self, *, timed: bool = False, priority: str = "normal") -> CommandQueue:
        return CudaQueue(self, tuning=False, timed=timed, priority=priority)

    def create_tuning_command_queue(self) -> CommandQueue:
        return CudaQueue(self, tuning=True)
