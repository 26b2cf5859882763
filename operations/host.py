"""Host-friendly entry points: numpy arrays in, numpy arrays and numbers out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from autotune import accel

_lock = threading.Lock()
_default: dict[str, Any] = {}
_instances: OrderedDict = OrderedDict()
_MAX_INSTANCES = 32


def default_queue(context: accel.Context | None = None) -> tuple[accel.Context, accel.CommandQueue]:
    """A context (``create_some_context()`` unless given) and a command queue on it, reused."""
    with _lock:
        if context is None:
            if "context" not in _default:
                _default["context"] = accel.create_some_context()
            context = _default["context"]
        queue = _default.get(("queue", id(context)))
        if queue is None:
            queue = _default[("queue", id(context))] = context.create_command_queue()
        return context, queue


def host_call(template_cls: type, op: str, arrays: tuple, scalars: dict[str, Any],
              context: accel.Context | None) -> Any:
    """Run ``template_cls``'s operation ``op`` on numpy arrays; written vectors are updated in place."""
    if not arrays:
        raise TypeError(f"{op} needs at least one array")
    for i, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{op}: argument {i} must be a numpy array, not {type(a).__name__}")
    dtype = arrays[0].dtype
    n = arrays[0].size
    for i, a in enumerate(arrays[1:], start=1):
        if a.dtype != dtype:
            raise TypeError(f"{op}: arrays have different dtypes ({dtype} and {a.dtype}); "
                            "convert them to one with .astype()")
        if a.size != n:
            raise ValueError(f"{op}: arrays have different lengths ({n} and {a.size})")
    if n == 0:
        raise ValueError(f"{op}: empty input; there is nothing to compute")
    context, queue = default_queue(context)
    key = (template_cls, id(context), dtype, op, n)
    with _lock:
        inst = _instances.get(key)
        if inst is not None:
            _instances.move_to_end(key)
    if inst is None:
        inst = template_cls(context, dtype, op).instantiate(queue, n)
        with _lock:
            _instances[key] = inst
            while len(_instances) > _MAX_INSTANCES:
                _instances.popitem(last=False)
    device = [context.to_device(queue, np.ascontiguousarray(a).reshape(-1)) for a in arrays]
    inst.enqueue(device, scalars)
    outputs = inst.result()
    for name, a, d in zip(inst.template.op.vectors, arrays, device):
        if name in inst.template.op.written:
            a[...] = d.get(queue).reshape(a.shape)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs
