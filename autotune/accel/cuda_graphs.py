"""CUDA graphs: a queue's work recorded once by stream capture and enqueued again with one
driver call (``cuGraphLaunch``), and the stream operations of the driver API that a CUDA queue
has beyond pycuda's (the value writes and waits of :mod:`cuda_interop`).

A recorded graph keeps its kernels' arguments, copies and value operations as they were
enqueued. Only the values of its stream value writes and waits change between launches
(:meth:`CudaGraph.launch` with ``value``): signals that count exchanges take a new count each
time, and the graph's batch memory operation nodes are updated in place
(``cuGraphExecBatchMemOpNodeSetParams``) before it is launched.

Every call needs the stream's context current (the queue's ``thread_scope``).
"""

from __future__ import annotations

import ctypes
import struct
import weakref
from typing import Any

from . import cuda_interop, cuda_streams
from .arrays import DeviceArray
from .errors import AccelError
from .queues import CapturedWork

_P, _U, _I, _S = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t
_SIGNATURES = {
    "cuStreamBeginCapture_v2": [_P, _I],
    "cuStreamEndCapture": [_P, ctypes.POINTER(_P)],
    "cuGraphInstantiateWithFlags": [ctypes.POINTER(_P), _P, ctypes.c_ulonglong],
    "cuGraphDestroy": [_P],
    "cuGraphExecDestroy": [_P],
    "cuGraphGetNodes": [_P, ctypes.POINTER(_P), ctypes.POINTER(_S)],
    "cuGraphNodeGetType": [_P, ctypes.POINTER(_I)],
    "cuGraphBatchMemOpNodeGetParams": [_P, _P],
}
#: only enqueue: called without releasing the GIL (cuda_streams.fast_driver)
_FAST = {"cuGraphLaunch": [_P, _P], "cuGraphExecBatchMemOpNodeSetParams": [_P, _P, _P]}
_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED: other threads' calls stay legal
_BATCH_MEM_OP = 12  # CU_GRAPH_NODE_TYPE_BATCH_MEM_OP
_USE_NODE_PRIORITY = 8  # CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY
_WAIT_VALUE_32, _WRITE_VALUE_32 = 1, 2  # CU_STREAM_MEM_OP_*: the operations with a 32-bit value
_OP_BYTES, _VALUE_OFFSET = 48, 16  # CUstreamBatchMemOpParams: its size, and its value's place
_functions: Any = 0  # (slow, fast) libcuda with the signatures set, None where missing


class _BatchParams(ctypes.Structure):
    """CUDA_BATCH_MEM_OP_NODE_PARAMS."""

    _fields_ = [("ctx", _P), ("count", _U), ("paramArray", _P), ("flags", _U)]


def _driver() -> tuple[Any, Any] | None:
    """libcuda with the graph calls' signatures (slow, fast), or None where it lacks them."""
    global _functions
    if _functions == 0:
        try:
            slow, fast = cuda_streams.driver(), cuda_streams.fast_driver()
            for name, argtypes in _SIGNATURES.items():
                getattr(slow, name).argtypes = argtypes
            for name, argtypes in _FAST.items():
                getattr(fast, name).argtypes = argtypes
            _functions = (slow, fast)
        except (AccelError, AttributeError):
            _functions = None
    return _functions


def available() -> bool:
    """Whether this driver can capture streams into graphs and update their value operations."""
    return _driver() is not None


class CudaGraph(CapturedWork):
    """A captured graph, instantiated, enqueued on ``queue``'s stream by :meth:`launch`."""

    def __init__(self, queue: Any, graph: int):
        slow, fast = _driver()
        self.queue, self.context = queue, queue.context
        executable = _P()
        # each kernel keeps the priority of the stream it was recorded on (a high-priority
        # queue's blocks still start ahead of the others'), where the driver can
        status = slow.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph,
                                                  _USE_NODE_PRIORITY)
        if status:
            status = slow.cuGraphInstantiateWithFlags(ctypes.byref(executable), graph, 0)
        if status:
            cuda_streams._release(slow.cuGraphDestroy, graph)
            cuda_streams.check(status, "cuGraphInstantiateWithFlags")
        self._exec = int(executable.value)
        weakref.finalize(self, _destroy, graph, self._exec)
        #: (node, its parameters, their operations, the offsets of the values to set)
        self._values = _value_nodes(slow, graph)
        self.value_operations = sum(len(offsets) for *_, offsets in self._values)
        self._value: int | None = None  # what the value operations hold now
        self._set, self._launch_graph = fast.cuGraphExecBatchMemOpNodeSetParams, fast.cuGraphLaunch

    @cuda_streams.in_context
    def _launch(self, value: int | None) -> None:
        if value is not None and self._values and value != self._value:
            for node, params, operations, offsets in self._values:
                for offset in offsets:
                    struct.pack_into("<I", operations, offset, value)
                cuda_streams.check(self._set(self._exec, node, ctypes.byref(params)),
                                   "cuGraphExecBatchMemOpNodeSetParams")
            self._value = value
        cuda_streams.check(self._launch_graph(self._exec, self.queue.stream.handle),
                           "cuGraphLaunch")


def _value_nodes(lib: Any, graph: int) -> list[tuple[int, _BatchParams, Any, list[int]]]:
    """The graph's batch memory operation nodes that hold 32-bit value writes or waits, each
    with a copy of its parameters to update."""
    count = _S()
    cuda_streams.check(lib.cuGraphGetNodes(graph, None, ctypes.byref(count)), "cuGraphGetNodes")
    nodes = (_P * count.value)()
    cuda_streams.check(lib.cuGraphGetNodes(graph, nodes, ctypes.byref(count)), "cuGraphGetNodes")
    found = []
    for node in nodes[:count.value]:
        kind = _I()
        cuda_streams.check(lib.cuGraphNodeGetType(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value != _BATCH_MEM_OP:
            continue
        params = _BatchParams()
        cuda_streams.check(lib.cuGraphBatchMemOpNodeGetParams(node, ctypes.byref(params)),
                           "cuGraphBatchMemOpNodeGetParams")
        operations = ctypes.create_string_buffer(
            ctypes.string_at(params.paramArray, _OP_BYTES * params.count), _OP_BYTES * params.count)
        offsets = [i * _OP_BYTES + _VALUE_OFFSET for i in range(params.count)
                   if struct.unpack_from("<I", operations, i * _OP_BYTES)[0]
                   in (_WAIT_VALUE_32, _WRITE_VALUE_32)]
        if offsets:
            params.paramArray = ctypes.cast(operations, _P)  # ours, to update
            found.append((int(node), params, operations, offsets))
    return found


def _destroy(graph: int, executable: int) -> None:
    slow, _ = _driver()
    cuda_streams._release(slow.cuGraphExecDestroy, executable)
    cuda_streams._release(slow.cuGraphDestroy, graph)


class DriverStreamOps:
    """What a CUDA queue does through the driver API beside pycuda's stream: value writes and
    waits, and capture into graphs (the hooks of :class:`~autotune.accel.CommandQueue`).
    Needs ``self.stream.handle`` and ``self.context``."""

    stream: Any
    context: Any

    @property
    def stream_values(self) -> bool:
        return cuda_interop.stream_values_available()

    @cuda_streams.in_context
    def _write_value(self, array: DeviceArray, index: int, value: int) -> None:
        cuda_interop.stream_write_value(self.stream.handle, array.pointer + 4 * index, value)

    @cuda_streams.in_context
    def _wait_value(self, array: DeviceArray, index: int, value: int) -> None:
        cuda_interop.stream_wait_value(self.stream.handle, array.pointer + 4 * index, value)

    @property
    def can_capture(self) -> bool:
        return available()

    @cuda_streams.in_context
    def _begin_capture(self) -> None:
        slow, _ = _driver()
        cuda_streams.check(slow.cuStreamBeginCapture_v2(self.stream.handle,
                                                            _CAPTURE_RELAXED),
                               "cuStreamBeginCapture")

    @cuda_streams.in_context
    def _end_capture(self, keep: bool) -> CudaGraph | None:
        slow, _ = _driver()
        graph = _P()
        status = slow.cuStreamEndCapture(self.stream.handle, ctypes.byref(graph))
        if not keep or status:
            if graph.value:
                cuda_streams._release(slow.cuGraphDestroy, int(graph.value))
            if keep:
                cuda_streams.check(status, "cuStreamEndCapture (a call in the block that "
                                   "cannot be captured, or a queue not joined back?)")
            return None
        return CudaGraph(self, int(graph.value))
