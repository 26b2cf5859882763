"""DLPack's C structures (v0.8, the unversioned ``"dltensor"`` capsule) over ctypes.

:func:`export_capsule` makes the capsule a DLPack consumer (``torch.from_dlpack``,
``cupy.from_dlpack``, ``numpy.from_dlpack``) reads our memory through; :func:`read_capsule`
reads one a producer made. The layout is DLPack's ``dlpack.h``::

    DLDevice        {int32 device_type; int32 device_id}
    DLDataType      {uint8 code; uint8 bits; uint16 lanes}
    DLTensor        {void *data; DLDevice device; int32 ndim; DLDataType dtype;
                     int64 *shape; int64 *strides; uint64 byte_offset}
    DLManagedTensor {DLTensor dl_tensor; void *manager_ctx; void (*deleter)(DLManagedTensor *)}

Ownership: the capsule is named ``"dltensor"`` until a consumer takes it (it renames it
``"used_dltensor"`` and calls ``deleter`` when done). The capsule's destructor calls ``deleter``
only while it still has the first name, so that memory is released exactly once. Our deleter
drops the reference that kept the exported array (and its owner) alive.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

#: DLDeviceType values used here
CPU, CUDA, CUDA_HOST, OPENCL, CUDA_MANAGED = 1, 2, 3, 4, 13
DEVICE_NAMES = {1: "kDLCPU (host memory)", 2: "kDLCUDA", 3: "kDLCUDAHost (pinned host memory)",
                4: "kDLOpenCL", 7: "kDLVulkan", 8: "kDLMetal", 10: "kDLROCM",
                13: "kDLCUDAManaged", 14: "kDLOneAPI"}
#: DLDataTypeCode -> numpy kind
_KINDS = {0: "i", 1: "u", 2: "f", 5: "c", 6: "b"}
_CODES = {kind: code for code, kind in _KINDS.items()}

NAME = b"dltensor"
USED_NAME = b"used_dltensor"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                            ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
# the destructor gets the capsule while it is being freed: a raw pointer, never a py_object
# (which would take a new reference to an object at refcount zero)
_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))

#: manager_ctx -> what a live export keeps alive (structures, the array, its owner)
_live: dict[int, tuple] = {}
_live_lock = threading.Lock()
_next_key = [1]


def _delete(managed: Any) -> None:
    """DLManagedTensor.deleter: the consumer (or the unconsumed capsule) is done with it."""
    key = managed.contents.manager_ctx
    with _live_lock:
        _live.pop(key, None)


def _destroy_capsule(capsule: int) -> None:
    """The capsule's destructor: delete the tensor unless a consumer took it (renamed it)."""
    if _is_valid_raw(capsule, NAME):
        pointer = _get_pointer_raw(capsule, NAME)
        managed = ctypes.cast(pointer, ctypes.POINTER(DLManagedTensor))
        managed.contents.deleter(managed)


_deleter = _DELETER(_delete)
_capsule_destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(_destroy_capsule)


def data_type(dtype: np.dtype) -> DLDataType:
    """The DLDataType of a numpy dtype; TypeError for one DLPack cannot describe."""
    dtype = np.dtype(dtype)
    code = _CODES.get(dtype.kind)
    if code is None or not dtype.isnative:
        raise TypeError(f"dtype {dtype} has no DLPack equivalent (DLPack describes native "
                        "integers, floats, complex numbers and bools)")
    return DLDataType(code, dtype.itemsize * 8, 1)


def numpy_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype of a DLDataType; TypeError for one numpy has no dtype for."""
    kind = _KINDS.get(code)
    if kind is None or lanes != 1 or bits % 8:
        what = {3: "an opaque handle", 4: "bfloat16"}.get(code, f"code {code}")
        raise TypeError(f"DLPack data type ({what}, {bits} bits, {lanes} lanes) has no numpy "
                        "dtype; convert the array to a float, complex or integer type first")
    return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(bool)


def export_capsule(pointer: int, shape: tuple[int, ...], dtype: np.dtype, device: tuple[int, int],
                   keep_alive: Any) -> Any:
    """A ``"dltensor"`` capsule describing C-contiguous memory at ``pointer``.

    ``device`` is ``(DLDeviceType, device id)``; ``keep_alive`` stays referenced until the
    consumer calls the deleter (or the capsule is freed unconsumed)."""
    ndim = len(shape)
    extents = (ctypes.c_int64 * max(ndim, 1))(*shape)
    managed = DLManagedTensor()
    tensor = managed.dl_tensor
    tensor.data = pointer or None
    tensor.device = DLDevice(*device)
    tensor.ndim = ndim
    tensor.dtype = data_type(dtype)
    tensor.shape = ctypes.cast(extents, ctypes.POINTER(ctypes.c_int64))
    tensor.strides = None  # C-contiguous (DLPack's convention for a null strides pointer)
    tensor.byte_offset = 0
    with _live_lock:
        key = _next_key[0]
        _next_key[0] += 1
        _live[key] = (managed, extents, keep_alive)
    managed.manager_ctx = key
    managed.deleter = _deleter
    return _api.PyCapsule_New(ctypes.addressof(managed), NAME, _capsule_destructor)


def live_exports() -> int:
    """How many exported tensors are not yet deleted (for tests)."""
    with _live_lock:
        return len(_live)


@dataclass(frozen=True)
class TensorView:
    """What a producer's capsule describes (the capsule itself keeps the memory alive)."""

    pointer: int  #: data + byte_offset
    shape: tuple[int, ...]
    strides: tuple[int, ...] | None  #: in elements, None for C-contiguous
    dtype: np.dtype
    device: tuple[int, int]  #: (DLDeviceType, device id)
    capsule: Any


def read_capsule(capsule: Any) -> TensorView:
    """The tensor an unconsumed ``"dltensor"`` capsule describes; ValueError for anything else
    (a versioned ``"dltensor_versioned"`` capsule is not asked for, so not expected)."""
    if not _api.PyCapsule_IsValid(capsule, NAME):
        raise ValueError("__dlpack__ did not return an unconsumed 'dltensor' capsule; pass the "
                         "array itself, not a capsule that was already used")
    managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule, NAME),
                          ctypes.POINTER(DLManagedTensor)).contents
    tensor = managed.dl_tensor
    ndim = int(tensor.ndim)
    shape = tuple(int(tensor.shape[i]) for i in range(ndim))
    strides = tuple(int(tensor.strides[i]) for i in range(ndim)) if tensor.strides else None
    dtype = numpy_dtype(tensor.dtype.code, tensor.dtype.bits, tensor.dtype.lanes)
    pointer = int(tensor.data or 0) + int(tensor.byte_offset)
    device = (int(tensor.device.device_type), int(tensor.device.device_id))
    return TensorView(pointer, shape, strides, dtype, device, capsule)


def device_name(device_type: int) -> str:
    return DEVICE_NAMES.get(device_type, f"DLPack device type {device_type}")
