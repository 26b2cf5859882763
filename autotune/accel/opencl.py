"""OpenCL backend over pyopencl (GPUs, and CPUs through PoCL)."""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import build_locks, opencl_interop
from .arrays import DeviceArray
from .capture import native_stderr, pass_on
from .context import Context
from .errors import BackendUnavailableError, CompileError
from .identity import DeviceIdentity
from .kernels import Kernel, KernelLimits, Program
from .queues import CommandQueue, IntervalTimer, Marker, check_priority
from .render import RenderedSource

logger = logging.getLogger("autotune.accel")

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover - depends on the installation
    cl = None


#: Builds that fail with no compiler diagnostic are tried again this many times: PoCL
#: sometimes fails a build for no reason in the source ("Device ... failed to build the
#: program", an empty log) while other processes build the same kernels into its shared cache
#: (a test suite's workers, MPI ranks): more than one retry was needed on a busy 2-core machine
#: (2026-11-28), each after a short pause that lets the other build finish. Builds of one
#: source now wait for each other (:mod:`.build_locks`); the retries stay for where no lock
#: can be had.
BUILD_RETRIES = 3
#: Seconds before retry ``n`` (1, 2, ...): ``n`` times this.
BUILD_RETRY_PAUSE = 0.05


def _diagnosed(log: str) -> bool:
    """Whether a build log says what is wrong with the source (a compiler error line)."""
    return "error" in log.lower()


def available() -> bool:
    return cl is not None


def _platforms() -> list[Any]:
    if cl is None:
        return []
    try:
        return cl.get_platforms()
    except cl.Error:  # no ICD loader, or no platforms
        return []


def _platform_devices(platform: Any) -> list[Any]:
    try:
        return platform.get_devices()
    except cl.Error:
        return []


def _identity(platform: Any, device: Any) -> DeviceIdentity:
    is_gpu = bool(device.type & cl.device_type.GPU)
    try:
        warp = int(device.get_info(cl.device_info.WARP_SIZE_NV))
    except (cl.Error, AttributeError):
        warp = 32 if is_gpu and "NVIDIA" in platform.name else (64 if is_gpu else 1)
    return DeviceIdentity(
        backend="opencl",
        name=device.name.strip(),
        platform=platform.name.strip(),
        driver_version=device.driver_version.strip(),
        compute_capability=None,
        multiprocessors=int(device.max_compute_units),
        global_memory=int(device.global_mem_size),
        max_work_group_size=int(device.max_work_group_size),
        local_memory=int(device.local_mem_size),
        is_gpu=is_gpu,
        warp_size=warp,
        double_precision="cl_khr_fp64" in device.extensions or device.double_fp_config != 0,
    )


def list_devices() -> list[tuple[int, int, DeviceIdentity, str]]:
    """(platform index, device index, identity, problem) for every OpenCL device: ``problem``
    is "" for a usable device, else why its platform cannot be used and what to do
    (:func:`platform_problem`)."""
    out = []
    for p_index, platform in enumerate(_platforms()):
        devices = _platform_devices(platform)
        problem = platform_problem(p_index, platform, devices[0]) if devices else ""
        for d_index, device in enumerate(devices):
            out.append((p_index, d_index, _identity(platform, device), problem))
    return out


#: The health check's kernel: one that every OpenCL compiler builds.
_PROBE = "__kernel void autotune_probe(__global int *a) { a[get_global_id(0)] = 1; }"
#: platform index -> (platform name, problem): each platform is checked once a process
_problems: dict[int, tuple[str, str]] = {}
#: the fix for PoCL builds whose LLVM does not know the host CPU (pocl/pocl#1049)
POCL_CPU_FIX = ("this PoCL's LLVM does not know this CPU (pocl/pocl#1049: the PoCL 3.0 of the "
                "pyopencl wheel on AMD Zen 5): install the distribution's PoCL (Debian/Ubuntu: "
                "apt-get install pocl-opencl-icd) and select it with AUTOTUNE_DEVICE=opencl:P "
                "(python -m autotune devices shows P)")
OTHER_FIX = ("update or reinstall this OpenCL driver, or select another device with "
             "AUTOTUNE_DEVICE (python -m autotune devices lists them)")


def platform_problem(p_index: int, platform: Any, device: Any) -> str:
    """"" when ``platform`` builds a trivial kernel for ``device`` (its first device), else one
    line: the compiler's first error and the fix. Checked once a process per platform; with
    PoCL's kernel cache warm it costs a context and a cached build (tens of milliseconds)."""
    name = platform.name.strip()
    known = _problems.get(p_index)
    if known is not None and known[0] == name:
        return known[1]
    error = ""
    with native_stderr() as said:  # clang's own printing kept off the terminal
        try:
            context = cl.Context([device])
            # pyopencl's own binary cache is bypassed: it could hand a broken compiler the
            # binary that another platform's device of the same name built
            cl._cl._Program(context, _PROBE).build(b"", [device])
        except cl.Error as exc:
            error = str(exc) or type(exc).__name__
    version = platform.version.split(",")[0].strip()  # "OpenCL 3.0 PoCL 3.0-rc2  Linux"
    problem = explain_build_failure(name, version, "\n".join([error, said.text])) if error else ""
    _problems[p_index] = (name, problem)
    return problem


def explain_build_failure(name: str, version: str, log: str) -> str:
    """One line for a platform whose build of the trivial kernel failed with ``log``: the
    first error line (not the whole log) and the fix."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    # a compiler diagnostic ("error: ...") first, else any line about an error
    errors = sorted((line for line in lines
                     if "error" in line.lower() and "clBuildProgram" not in line),
                    key=lambda line: "error:" not in line.lower())
    first = errors[0] if errors else (lines[0] if lines else "no build log")
    if len(first) > 200:
        first = first[:197] + "..."
    fix = POCL_CPU_FIX if "unknown target cpu" in log.lower() else OTHER_FIX
    return f"platform {name!r} ({version}) cannot build a trivial kernel ({first}); {fix}"


class OpenCLKernel(Kernel):
    def __init__(self, program: OpenCLProgram, name: str, handle: Any):
        super().__init__(program, name)
        self.handle = handle
        #: work-group sizes this kernel was launched with (PoCL generates code for each)
        self.launched: set[tuple[int, ...]] = set()
        dev = program.context.cl_device
        info = cl.kernel_work_group_info
        self._limits = KernelLimits(
            max_work_group_size=int(handle.get_work_group_info(info.WORK_GROUP_SIZE, dev)),
            registers=None,
            local_memory=int(handle.get_work_group_info(info.LOCAL_MEM_SIZE, dev)),
            private_memory=int(handle.get_work_group_info(info.PRIVATE_MEM_SIZE, dev)),
            preferred_multiple=int(
                handle.get_work_group_info(info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE, dev)
            ),
        )

    @property
    def limits(self) -> KernelLimits:
        return self._limits


class OpenCLProgram(Program):
    def __init__(self, context: OpenCLContext, source: RenderedSource, seconds: float,
                 log: str, handle: Any, lock_key: str):
        super().__init__(context, source, seconds, log, "opencl")
        self.handle = handle
        #: the host-wide lock key of this program's build (:mod:`.build_locks`)
        self.lock_key = lock_key

    def _get_kernel(self, name: str) -> Kernel:
        try:
            return OpenCLKernel(self, name, cl.Kernel(self.handle, name))
        except cl.Error as exc:
            raise CompileError(f"kernel {name!r} not found in {self.source.template}: {exc}") from exc


class OpenCLArray(DeviceArray):
    def __init__(self, context: OpenCLContext, shape: int | Sequence[int], dtype: Any,
                 *, buffer: Any = None, parent: OpenCLArray | None = None, offset: int = 0):
        super().__init__(context, shape, dtype)
        # OpenCL refuses zero-byte buffers; an empty array still gets a valid handle.
        self.buffer = buffer if buffer is not None else cl.Buffer(
            context.cl_context, cl.mem_flags.READ_WRITE, max(self.nbytes, 1))
        self._parent = parent  # a view keeps the array it views alive
        self._offset = offset  # bytes from the start of the root allocation

    def _view(self, offset: int, shape: tuple[int, ...]) -> OpenCLArray:
        # OpenCL has no sub-buffer of a sub-buffer: a view of a view is cut from the root
        root = self
        while root._parent is not None:
            root = root._parent
        offset += self._offset
        align = self.context.cl_device.mem_base_addr_align // 8
        if offset % align:
            raise ValueError(f"an OpenCL view must start at a multiple of {align} bytes, "
                             f"not at byte {offset}")
        size = max(math.prod(shape) * self.dtype.itemsize, 1)
        sub = root.buffer.get_sub_region(offset, size)
        return OpenCLArray(self.context, shape, self.dtype, buffer=sub, parent=root, offset=offset)

    @property
    def kernel_arg(self) -> Any:
        return self.buffer

    def _upload(self, queue: OpenCLQueue, host: np.ndarray) -> Any:
        return cl.enqueue_copy(queue.handle, self.buffer, host, is_blocking=False)

    def _download(self, queue: OpenCLQueue, host: np.ndarray) -> Any:
        return cl.enqueue_copy(queue.handle, host, self.buffer, is_blocking=False)

    def _download_range(self, queue: OpenCLQueue, host: np.ndarray, offset: int) -> Any:
        return cl.enqueue_copy(queue.handle, host, self.buffer, src_offset=offset,
                               is_blocking=False)

    def _fill_zero(self, queue: OpenCLQueue) -> Any:
        return cl.enqueue_fill_buffer(queue.handle, self.buffer, np.uint8(0), 0, self.nbytes)

    def _copy_from(self, queue: OpenCLQueue, other: OpenCLArray) -> Any:
        return cl.enqueue_copy(queue.handle, self.buffer, other.buffer, byte_count=self.nbytes)


class OpenCLIntervalTimer(IntervalTimer):
    """Profiles the commands enqueued while it runs (OpenCL markers' timestamps are not
    dependable on every driver)."""

    def __init__(self, queue: OpenCLQueue):
        super().__init__(queue)
        self.events: list[Any] = []

    def _start(self) -> None:
        self.events.clear()

    def _stop(self) -> None:
        pass

    def _ready(self) -> bool:
        # an in-order queue: the last command finished means all did
        return not self.events or (self.events[-1].command_execution_status
                                   == cl.command_execution_status.COMPLETE)

    def _seconds(self) -> float:
        if not self.events:
            return 0.0
        self.events[-1].wait()
        start = min(e.profile.start for e in self.events)
        end = max(e.profile.end for e in self.events)
        return max(end - start, 0) * 1e-9


class OpenCLMarker(Marker):
    """An OpenCL marker event."""

    def __init__(self, queue: OpenCLQueue):
        self.queue = queue
        self._event = cl.enqueue_marker(queue.handle)

    def ready(self) -> bool:
        return self._event.command_execution_status == cl.command_execution_status.COMPLETE

    def wait(self) -> None:
        self._event.wait()


class OpenCLQueue(CommandQueue):
    def __init__(self, context: OpenCLContext, tuning: bool, timed: bool = False):
        super().__init__(context, tuning, timed)
        props = cl.command_queue_properties.PROFILING_ENABLE if self.timed else 0
        self.handle = cl.CommandQueue(context.cl_context, context.cl_device, properties=props)
        self._events: list[Any] = []

    def _launch(self, kernel: OpenCLKernel, args: list[Any], global_size: tuple[int, ...],
                local_size: tuple[int, ...]) -> Any:
        cl_args = [a.kernel_arg if isinstance(a, DeviceArray) else a for a in args]
        kernel.handle.set_args(*cl_args)
        context = self.context
        local = tuple(local_size)
        if not (context.shared_with_processes and context.generates_at_launch) \
                or local in kernel.launched:
            return cl.enqueue_nd_range_kernel(self.handle, kernel.handle, global_size, local_size)
        # PoCL generates a kernel's code for a work-group size as its first launch with that
        # size runs: where other processes run the same kernels at once, that launch is
        # waited for under the host-wide lock, so that they find the code in PoCL's cache
        # instead of generating it too (alone, a process does not wait: its host work goes on
        # while PoCL generates)
        program = kernel.program
        with build_locks.shared_build(build_locks.key(program.lock_key, kernel.name, str(local))):
            event = cl.enqueue_nd_range_kernel(self.handle, kernel.handle, global_size, local_size)
            event.wait()
        kernel.launched.add(local)
        return event

    def _finish(self) -> None:
        self.handle.finish()

    def _record(self, event: Any) -> None:
        if event is None:
            return
        if self._timing:
            self._events.append(event)
        if self._interval is not None:
            self._interval.events.append(event)

    def _interval_timer(self) -> IntervalTimer:
        return OpenCLIntervalTimer(self)

    def _mark(self) -> Marker:
        return OpenCLMarker(self)

    def _wait_for(self, marker: OpenCLMarker) -> None:
        cl.enqueue_barrier(self.handle, wait_for=[marker._event])

    def _start_timing(self) -> None:
        self._events = []

    def _stop_timing(self) -> float:
        # Profiling every command (not markers, whose timestamps some drivers leave at zero)
        # so that work made only of copies is timed too.
        self.handle.finish()
        events, self._events = self._events, []
        if not events:
            return 0.0
        start = min(e.profile.start for e in events)
        end = max(e.profile.end for e in events)
        return max(end - start, 0) * 1e-9


class OpenCLContext(Context):
    backend = "opencl"

    def __init__(self, platform: Any, device: Any):
        if cl is None:
            raise BackendUnavailableError("pyopencl is not installed: pip install 'autotune[opencl]'")
        super().__init__(_identity(platform, device))
        self.cl_device = device
        self.cl_context = cl.Context([device])
        #: whether the driver generates a kernel's code at its first launch with a work-group
        #: size (PoCL), not when the program is built
        self.generates_at_launch = "Portable Computing Language" in self.device.platform

    def build_lock_key(self, text: str, options: tuple[str, ...]) -> str:
        """The host-wide lock key of building ``text`` with ``options`` for this device."""
        device = self.device
        return build_locks.key(device.platform, device.name, device.driver_version,
                               " ".join(options), text)

    def _compile(self, source: RenderedSource, options: tuple[str, ...], start: float) -> Program:
        # one process of the host compiles a source at a time; the others then find it in
        # the driver's cache (build_locks)
        lock_key = self.build_lock_key(source.text, options)
        with build_locks.shared_build(lock_key):
            return self._compile_unshared(source, options, start, lock_key)

    def _compile_unshared(self, source: RenderedSource, options: tuple[str, ...],
                          start: float, lock_key: str) -> Program:
        for attempt in range(1 + BUILD_RETRIES):
            program = cl.Program(self.cl_context, source.text)
            failure = None
            # pyopencl repeats a non-empty build log as a warning (we log it mapped instead);
            # the compiler's own writes to stderr go into the error, not once per candidate
            with warnings.catch_warnings(), native_stderr() as printed:
                warnings.simplefilter("ignore")
                try:
                    program.build(options=list(options))
                except cl.RuntimeError as exc:
                    failure = exc
            if failure is None:
                pass_on(printed)
                break
            if attempt < BUILD_RETRIES and not _diagnosed(self._build_log(program)):
                logger.warning("OpenCL build of %s failed without a diagnostic (%s); "
                               "building it again", source.template, str(failure).splitlines()[0])
                time.sleep(BUILD_RETRY_PAUSE * (attempt + 1))
                continue
            log = source.map_log(str(failure))
            if printed.text.strip() and printed.text.strip() not in log:
                log = f"{log}\n{source.map_log(printed.text.strip())}"
            raise CompileError(
                f"OpenCL build of {source.template} failed:\n{log}", log, source.text
            ) from None
        seconds = time.perf_counter() - start
        raw = self._build_log(program)
        log = source.map_log(raw.strip()) if raw.strip() else ""
        if "warning" in log:
            logger.warning("OpenCL build of %s: %s", source.template, log)
        return OpenCLProgram(self, source, seconds, log, program, lock_key)

    def _build_log(self, program: Any) -> str:
        try:
            return program.get_build_info(self.cl_device, cl.program_build_info.LOG) or ""
        except cl.Error:
            return ""

    def allocate(self, shape: int | Sequence[int], dtype: Any) -> DeviceArray:
        return OpenCLArray(self, shape, dtype)

    _views_foreign = "ours, a pyopencl.array.Array or a pyopencl.Buffer of this context"

    def _view_foreign(self, obj: Any, name: str, dtype: Any, shape: Any,
                      queue: CommandQueue | None) -> DeviceArray | None:
        """pyopencl arrays and buffers of this context (:mod:`.opencl_interop`); arrays of
        other device kinds are refused by name."""
        array = opencl_interop.view(self, obj, name, dtype, shape)
        if array is None:
            opencl_interop.refuse_elsewhere(self, obj, name)
        return array

    def _wrap_buffer(self, buffer: Any, shape: tuple[int, ...], dtype: np.dtype, *,
                     parent: OpenCLArray | None = None, offset: int = 0) -> OpenCLArray:
        """A device array over another library's ``buffer`` (a sub-buffer of ``parent``'s at
        byte ``offset``, where given)."""
        return OpenCLArray(self, shape, dtype, buffer=buffer, parent=parent, offset=offset)

    def create_command_queue(self, *, timed: bool = False, priority: str = "normal") -> CommandQueue:
        check_priority(priority, timed)  # OpenCL queues have no priority: a normal one
        return OpenCLQueue(self, tuning=False, timed=timed)

    def create_tuning_command_queue(self) -> CommandQueue:
        return OpenCLQueue(self, tuning=True)


def create_context(platform_index: int, device_index: int) -> OpenCLContext:
    platform = _platforms()[platform_index]
    return OpenCLContext(platform, _platform_devices(platform)[device_index])
