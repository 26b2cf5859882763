"""Arrays as they are: other libraries' device arrays through the operations without a copy,
ordered after their producers' work, and ours out through DLPack (issue #43).

OpenCL (PoCL here): pyopencl arrays and buffers. CUDA: CuPy and PyTorch where installed, and
on any CUDA machine producers made of our own arrays on a second queue (a CAI v3 ``stream``,
and DLPack through our own export), so that the stream ordering is proven without them.
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

from autotune.accel import dlpack
from autotune.accel.interop import read_cuda_array_interface
from operations.blas import BlasTemplate
from operations.lqcd import WilsonOperator, haar_field
from operations.scale import ScaleTemplate

try:  # torch first: torch 2.11 fails its own import (schema parse error) once CuPy is loaded
    import torch
except ImportError:
    torch = None

SLOW_FILL = Path(__file__).with_name("kernels") / "slow_fill.mako"
REPS = 1 << 22  # the slow fill's loop: tens of milliseconds on a GPU
DIMS = (4, 4, 4, 8)
KAPPA = 0.124


def _reference_axpy_norm(a, x, y):
    y = a * x + y
    return y, float(np.sum(np.abs(y) ** 2))


def _assert_axpy(got, a, x, y):
    """``got`` is a x + y to the rounding of one fused multiply-add or a multiply and an add
    (a GPU fuses them, numpy does not): within 2 ulp of |a x| + |y| per element."""
    bound = 2 * np.finfo(np.float64).eps * (np.abs(a * x) + np.abs(y))
    assert np.all(np.abs(got - (a * x + y)) <= bound)


def _cl():
    pytest.importorskip("pyopencl", reason="pyopencl is not installed")
    import pyopencl as cl
    import pyopencl.array as cl_array

    return cl, cl_array


# DLPack's C structures, against numpy as the consumer and producer ----------------------------
class _HostExport:
    """Host memory exported through our capsule code (numpy consumes it)."""

    def __init__(self, a: np.ndarray):
        self.a = a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return dlpack.export_capsule(self.a.ctypes.data, self.a.shape, self.a.dtype,
                                     (dlpack.CPU, 0), self.a)

    def __dlpack_device__(self):
        return (dlpack.CPU, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128,
                                   np.int32, np.uint8, np.bool_])
def test_our_capsules_are_read_by_numpy_without_copying(dtype):
    source = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4)
    before = dlpack.live_exports()
    view = np.from_dlpack(_HostExport(source))
    assert view.ctypes.data == source.ctypes.data and view.dtype == source.dtype
    np.testing.assert_array_equal(view, source)
    assert dlpack.live_exports() == before + 1  # numpy holds it
    del view
    gc.collect()
    assert dlpack.live_exports() == before  # numpy called our deleter
    capsule = _HostExport(source).__dlpack__()
    assert dlpack.live_exports() == before + 1
    del capsule  # never consumed: the capsule's destructor deletes it
    gc.collect()
    assert dlpack.live_exports() == before


def test_numpy_capsules_are_read_in_place():
    a = np.arange(12, dtype=np.complex128).reshape(3, 4)
    tensor = dlpack.read_capsule(a.__dlpack__())
    assert tensor.pointer == a.ctypes.data and tensor.shape == (3, 4)
    assert tensor.dtype == np.complex128 and tensor.device == (dlpack.CPU, 0)
    assert tensor.strides in (None, (4, 1))
    assert dlpack.read_capsule(a[:, ::2].__dlpack__()).strides == (4, 2)
    with pytest.raises(TypeError, match="bfloat16"):
        dlpack.numpy_dtype(4, 16, 1)
    with pytest.raises(TypeError, match="no DLPack equivalent"):
        dlpack.data_type(np.dtype(">f8"))


def test_cuda_array_interface_dictionaries_are_checked():
    good = {"shape": (4, 3), "typestr": "<f8", "data": (4096, False), "version": 3,
            "strides": (24, 8), "stream": 7}
    read = read_cuda_array_interface("x", object(), good)
    assert (read.pointer, read.shape, read.dtype, read.stream) == (4096, (4, 3), np.float64, 7)
    assert read_cuda_array_interface("x", object(), {**good, "version": 2}).stream is None
    for bad, message in (({"strides": (8, 32)}, "not C-contiguous"),
                         ({"data": (4096, True)}, "read-only"),
                         ({"mask": object()}, "masked"),
                         ({"stream": 0}, "stream 0")):
        with pytest.raises(ValueError, match=message):
            read_cuda_array_interface("x", object(), {**good, **bad})


# OpenCL: pyopencl arrays and buffers ---------------------------------------------------------
@pytest.mark.opencl_only
def test_pyopencl_arrays_and_buffers_through_axpy_norm(context, command_queue):
    cl, cl_array = _cl()
    n, a = 1000, 0.75
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    want_y, want_norm = _reference_axpy_norm(a, x, y)
    theirs = cl.CommandQueue(context.cl_context)  # the producer's own queue
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    # pyopencl arrays
    dx, dy = cl_array.to_device(theirs, x), cl_array.to_device(theirs, y)
    assert fn(dx, dy, a=a) == pytest.approx(want_norm, rel=1e-12)
    _assert_axpy(dy.get(), a, x, y)  # written in place
    view = context.as_array(dy)
    assert view.buffer.int_ptr == dy.base_data.int_ptr and view.foreign.obj is dy
    assert repr(view.foreign) == "<PyOpenCLSource Array via pyopencl>"
    # bare buffers: the dtype comes from the operation
    bx = cl.Buffer(context.cl_context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                   hostbuf=x)
    by = cl.Buffer(context.cl_context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR,
                   hostbuf=y)
    assert fn(bx, by, a=a) == pytest.approx(want_norm, rel=1e-12)
    out = np.empty(n)
    cl.enqueue_copy(theirs, out, by)
    _assert_axpy(out, a, x, y)
    assert context.wrap(by, np.float64).buffer.int_ptr == by.int_ptr


@pytest.mark.opencl_only
def test_a_kept_view_follows_a_pyopencl_array_given_new_memory(context, command_queue):
    """The pass keeps its views of the arrays last passed; the same array object given another
    buffer in between is viewed again (a kept view would read the old buffer)."""
    cl, cl_array = _cl()
    n = 256
    theirs = cl.CommandQueue(context.cl_context)
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    x, y = cl_array.to_device(theirs, np.ones(n)), cl_array.zeros(theirs, n, np.float64)
    assert fn(x, y, a=1.0) == pytest.approx(n)  # y = 1
    assert fn(x, y, a=1.0) == pytest.approx(4 * n)  # the kept views: y = 2
    x.base_data = cl_array.to_device(theirs, np.full(n, 3.0)).base_data
    assert fn(x, y, a=1.0) == pytest.approx(25 * n)  # y = 2 + 3
    np.testing.assert_array_equal(y.get(), np.full(n, 5.0))


@pytest.mark.opencl_only
def test_pyopencl_arrays_through_scale(context, command_queue):
    cl, cl_array = _cl()
    n = 777
    x = np.arange(n, dtype=np.float32) % 13 - 6
    theirs = cl.CommandQueue(context.cl_context)
    fn = ScaleTemplate(context, np.float32, {"wgs": 64}).instantiate(command_queue, n, alpha=3.0)
    dx, dy = cl_array.to_device(theirs, x), cl_array.zeros(theirs, n, np.float32)
    fn(dx, dy)
    command_queue.finish()
    np.testing.assert_array_equal(dy.get(), 3 * x)
    by = cl.Buffer(context.cl_context, cl.mem_flags.READ_WRITE, 4 * n)
    fn(dx.base_data, by)
    command_queue.finish()
    out = np.empty(n, np.float32)
    cl.enqueue_copy(theirs, out, by)
    np.testing.assert_array_equal(out, 3 * x)
    # a slice on the buffer's alignment is a sub-buffer of the same memory
    align = context.cl_device.mem_base_addr_align // 8 // 4  # in float32 elements
    big = cl_array.to_device(theirs, np.concatenate([np.zeros(align, np.float32), x]))
    fn(big[align:], dy)
    command_queue.finish()
    np.testing.assert_array_equal(dy.get(), 3 * x)
    fn()  # the instance's own arrays still work
    with pytest.raises(TypeError, match="pass both x and y"):
        fn(dx)


@pytest.mark.opencl_only
def test_our_queue_waits_for_the_producers_queue(context, command_queue):
    """The producer's write waits for an event the host sets only after our pass is enqueued:
    without the ordering our kernel would read the old contents."""
    cl, cl_array = _cl()
    n = 4096
    theirs = cl.CommandQueue(context.cl_context)
    dx, dy = cl_array.to_device(theirs, np.ones(n)), cl_array.to_device(theirs, np.zeros(n))
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    assert fn(dx, dy, a=1.0) == pytest.approx(n)  # y = 1
    expected = 1.0
    for value in (5.0, 7.0):  # the second call reuses its checked views: ordered again
        gate = cl.UserEvent(context.cl_context)
        cl.enqueue_fill_buffer(theirs, dx.base_data, np.float64(value), 0, 8 * n,
                               wait_for=[gate])
        fn.enqueue((dx, dy), {"a": 2.0}, fetch=False)  # (PoCL's reads to the host block)
        gate.set_status(cl.command_execution_status.COMPLETE)
        (norm,) = fn.result()
        expected += 2 * value
        np.testing.assert_array_equal(dy.get(), np.full(n, expected))
        assert norm == pytest.approx(n * expected ** 2)


@pytest.mark.opencl_only
def test_opencl_inputs_that_would_need_a_copy_are_refused(context, command_queue):
    cl, cl_array = _cl()
    theirs = cl.CommandQueue(context.cl_context)
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, 8)
    x = cl_array.zeros(theirs, 16, np.float64)
    y = cl_array.zeros(theirs, 8, np.float64)
    with pytest.raises(ValueError, match="not C-contiguous.*never made silently"):
        fn(x[::2], y, a=1.0)
    with pytest.raises(TypeError, match="vector x has dtype float32, expected float64"):
        fn(cl_array.zeros(theirs, 8, np.float32), y, a=1.0)
    with pytest.raises(ValueError, match="starts at byte 8 of its buffer, not at a multiple"):
        fn(x[1:9], y, a=1.0)
    other = cl.Context([context.cl_device])
    elsewhere = cl_array.zeros(cl.CommandQueue(other), 8, np.float64)
    with pytest.raises(ValueError, match="belongs to another OpenCL context"):
        fn(elsewhere, y, a=1.0)
    with pytest.raises(TypeError, match="bare pyopencl.Buffer, which carries no dtype"):
        context.wrap(y.base_data)
    with pytest.raises(ValueError, match="does not hold whole float64"):
        context.wrap(cl.Buffer(context.cl_context, cl.mem_flags.READ_WRITE, 12), np.float64)
    with pytest.raises(ValueError, match=r"DLPack device kDLCPU.*never made silently"):
        fn(_HostExport(np.zeros(8)), y, a=1.0)
    with pytest.raises(TypeError, match="vector x is a numpy array"):
        fn(np.zeros(8), y, a=1.0)
    with pytest.raises(BufferError, match="do not export DLPack"):
        np.from_dlpack(context.allocate(8, np.float64))


@pytest.mark.opencl_only
def test_pyopencl_spinors_through_the_wilson_operator(context, command_queue):
    cl, cl_array = _cl()
    op = WilsonOperator(context, haar_field(DIMS, seed=3), KAPPA, "double", 18)
    half = op.lattice.half_volume
    rng = np.random.default_rng(4)
    psi = (rng.standard_normal((12, half)) + 1j * rng.standard_normal((12, half)))
    want = op.apply_pc(context.to_device(op.queue, psi),
                       context.allocate((12, half), np.complex128)).get(op.queue)
    theirs = cl.CommandQueue(context.cl_context)
    dpsi, dout = cl_array.to_device(theirs, psi), cl_array.empty(theirs, (12, half), np.complex128)
    assert op.apply_pc(dpsi, dout) is dout  # the caller's array back, not our view of it
    op.queue.finish()
    np.testing.assert_array_equal(dout.get(), want)
    both = np.concatenate([psi, psi])  # both parities: apply, the same way
    dboth, dres = cl_array.to_device(theirs, both), cl_array.empty(theirs, both.shape, both.dtype)
    assert op.apply(dboth, dres) is dres
    assert op.apply_pc_normal(dpsi, dout) is dout
    with pytest.raises(ValueError, match="this lattice needs"):
        op.apply_pc(cl_array.to_device(theirs, psi[:6]), dout)


# CUDA ----------------------------------------------------------------------------------------
class _OnStream:
    """A library whose work on the array runs on its own stream and says so (CAI v3)."""

    def __init__(self, array, queue):
        self.array, self.queue = array, queue

    @property
    def __cuda_array_interface__(self):
        return {**self.array.__cuda_array_interface__, "stream": self.queue.stream.handle}


class _ThroughDLPack:
    """A library that exports only DLPack (here: our own export, which orders the consumer's
    stream after every queue of the context)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self.array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def _slow_fill(context, queue, array, value):
    kernel = context.build(SLOW_FILL).get_kernel("slow_fill")
    n = array.size
    queue.enqueue_kernel(kernel, [array, np.float64(value), np.float64(1.0), np.float64(0.0),
                                  np.uint32(n), np.uint32(REPS)], -(-n // 128) * 128, 128)


@pytest.mark.cuda_only
@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_cuda_producer_streams_order_our_work(context, command_queue, protocol):
    """The producer fills x with a long kernel on its own stream and hands x over at once:
    the pass must read the new values (it would read the old ones if it did not wait)."""
    n = 1 << 16
    producer = context.create_command_queue()
    x = context.to_device(producer, np.ones(n))
    y = context.to_device(command_queue, np.zeros(n))
    theirs = _OnStream(x, producer) if protocol == "cai" else _ThroughDLPack(x)
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    assert fn(theirs, y, a=1.0) == pytest.approx(n)  # y = 1 (compiles, checks the views)
    assert context.as_array(theirs).pointer == x.pointer
    expected = 1.0
    for value in (5.0, 7.0):  # the second call reuses the checked views: ordered again
        _slow_fill(context, producer, x, value)
        norm = fn(theirs, y, a=2.0)
        expected += 2 * value
        np.testing.assert_array_equal(y.get(command_queue), np.full(n, expected))
        assert norm == pytest.approx(n * expected ** 2)


@pytest.mark.cuda_only
def test_cuda_arrays_export_dlpack_without_copying(context, command_queue):
    host = np.arange(48, dtype=np.complex64).reshape(4, 12)
    ours = context.to_device(command_queue, host)
    assert ours.__dlpack_device__() == (dlpack.CUDA, context.device_index)
    before = dlpack.live_exports()
    view = context.as_array(_ThroughDLPack(ours), queue=command_queue)
    assert view.pointer == ours.pointer and view.shape == (4, 12) and view.dtype == np.complex64
    np.testing.assert_array_equal(view.get(command_queue), host)
    del view
    gc.collect()
    assert dlpack.live_exports() == before
    with pytest.raises(BufferError, match="would need a copy"):
        ours.__dlpack__(dl_device=(dlpack.CPU, 0))
    with pytest.raises(ValueError, match="stream must be"):
        ours.__dlpack__(stream="the default")


def _cupy(context):
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    return cupy, cupy.cuda.Device(context.device_index)


def _cupy_slow_fill(cupy):
    """A CuPy kernel that fills its output with ``value`` after ``reps`` dependent steps (long
    work on whichever stream is CuPy's current one)."""
    return cupy.ElementwiseKernel(
        "float64 value, float64 one, float64 zero, uint32 reps", "float64 out",
        "double v = value; for (unsigned int r = 0; r < reps; ++r) v = v * one + zero; "
        "out = v;", "autotune_test_slow_fill")


def _torch(context):
    if torch is None:
        pytest.skip("PyTorch is not installed")
    return torch, f"cuda:{context.device_index}"


@pytest.mark.cuda_only
def test_cupy_arrays_through_axpy_norm_and_back(context, command_queue):
    cupy, device = _cupy(context)
    n, a = 100_003, -0.5
    rng = np.random.default_rng(5)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    want_y, want_norm = _reference_axpy_norm(a, x, y)
    with device:
        dx, dy = cupy.asarray(x), cupy.asarray(y)
        fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
        assert fn(dx, dy, a=a) == pytest.approx(want_norm, rel=1e-12)
        _assert_axpy(cupy.asnumpy(dy), a, x, y)
        assert context.as_array(dy).pointer == dy.data.ptr
        ours = context.to_device(command_queue, x)
        back = cupy.from_dlpack(ours)
        assert back.data.ptr == ours.pointer
        np.testing.assert_array_equal(cupy.asnumpy(back), x)


@pytest.mark.cuda_only
def test_torch_tensors_through_axpy_norm_and_back(context, command_queue):
    torch_, device = _torch(context)
    n, a = 100_003, 1.5
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    want_y, want_norm = _reference_axpy_norm(a, x, y)
    tx, ty = torch_.tensor(x, device=device), torch_.tensor(y, device=device)
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    assert fn(tx, ty, a=a) == pytest.approx(want_norm, rel=1e-12)
    _assert_axpy(ty.cpu().numpy(), a, x, y)
    view = context.as_array(ty)
    assert view.pointer == ty.data_ptr() and view.foreign.protocol == "DLPack"
    ours = context.to_device(command_queue, x)
    back = torch_.from_dlpack(ours)
    assert back.data_ptr() == ours.pointer
    np.testing.assert_array_equal(back.cpu().numpy(), x)
    with pytest.raises(ValueError, match="not C-contiguous"):
        fn(tx.view(-1)[:n], torch_.zeros(2 * n, dtype=torch_.float64, device=device)[::2], a=a)


@pytest.mark.cuda_only
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_foreign_spinors_through_the_wilson_operator(context, command_queue, library):
    op = WilsonOperator(context, haar_field(DIMS, seed=3), KAPPA, "double", 18)
    half = op.lattice.half_volume
    rng = np.random.default_rng(7)
    psi = rng.standard_normal((12, half)) + 1j * rng.standard_normal((12, half))
    want = op.apply_pc(context.to_device(op.queue, psi),
                       context.allocate((12, half), np.complex128)).get(op.queue)
    if library == "cupy":
        cupy, device = _cupy(context)
        with device:
            tpsi, tout = cupy.asarray(psi), cupy.zeros((12, half), cupy.complex128)
            assert op.apply_pc(tpsi, tout) is tout
            got, pointer = cupy.asnumpy(tout), tout.data.ptr
    else:
        torch_, device = _torch(context)
        tpsi = torch_.tensor(psi, device=device)
        tout = torch_.zeros((12, half), dtype=torch_.complex128, device=device)
        assert op.apply_pc(tpsi, tout) is tout
        got, pointer = tout.cpu().numpy(), tout.data_ptr()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13)
    assert context.as_array(tout).pointer == pointer


@pytest.mark.cuda_only
@pytest.mark.parametrize("stream_kind", ["own stream", "default stream"])
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_library_streams_order_our_work(context, command_queue, library, stream_kind):
    """CuPy (CAI v3: its current stream) and PyTorch (DLPack: __dlpack__(stream=ours)) fill x
    with long work on a non-blocking stream of their own, or on their default stream (the
    legacy one, which our blocking streams follow without an event), and pass it without
    synchronising; the second call reuses the pass's kept views, ordered again."""
    n = 1 << 16
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    own = stream_kind == "own stream"
    if library == "cupy":
        cupy, device = _cupy(context)
        with device:
            x, y = cupy.ones(n), cupy.zeros(n)
            fn(x, y, a=1.0)
            slow = _cupy_slow_fill(cupy)
            with cupy.cuda.Stream(non_blocking=True) if own else cupy.cuda.Stream.null:
                slow(5.0, 1.0, 0.0, np.uint32(REPS), x)
                norm = fn(x, y, a=2.0)
            got = cupy.asnumpy(y)
    else:
        torch_, device = _torch(context)
        x = torch_.ones(n, dtype=torch_.float64, device=device)
        y = torch_.zeros(n, dtype=torch_.float64, device=device)
        fn(x, y, a=1.0)
        stream = torch_.cuda.Stream(device=device) if own else \
            torch_.cuda.default_stream(device)
        with torch_.cuda.stream(stream):
            torch_.cuda._sleep(100_000_000)  # ~50 ms of spinning on the stream, then the write
            x.fill_(5.0)
            norm = fn(x, y, a=2.0)
        torch_.cuda.synchronize(device)
        got = y.cpu().numpy()
    np.testing.assert_array_equal(got, np.full(n, 11.0))
    assert norm == pytest.approx(n * 121.0)


@pytest.mark.cuda_only
def test_kept_views_of_two_libraries_wait_for_both_producers(context, command_queue):
    """x a PyTorch tensor and y a CuPy array, each written by long work on a non-blocking
    stream of its own library, passed again without synchronising: the call site's kept views
    order our queue after both streams (one wait per producer), or it reads a stale x or y."""
    torch_, device = _torch(context)
    cupy, cupy_device = _cupy(context)
    n = 1 << 16
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    x = torch_.ones(n, dtype=torch_.float64, device=device)
    with cupy_device:
        y = cupy.zeros(n)
        assert fn(x, y, a=1.0) == pytest.approx(n)  # the views are kept from here
        slow = _cupy_slow_fill(cupy)
        theirs = torch_.cuda.Stream(device=device)
        with torch_.cuda.stream(theirs), cupy.cuda.Stream(non_blocking=True):
            torch_.cuda._sleep(100_000_000)  # ~50 ms of spinning on torch's stream
            x.fill_(5.0)
            slow(7.0, 1.0, 0.0, np.uint32(REPS), y)  # tens of ms on CuPy's stream
            norm = fn(x, y, a=2.0)
        got = cupy.asnumpy(y)
    torch_.cuda.synchronize(device)
    np.testing.assert_array_equal(got, np.full(n, 17.0))
    assert norm == pytest.approx(n * 289.0)


@pytest.mark.cuda_only
def test_a_kept_view_follows_a_tensor_given_new_memory(context, command_queue):
    """The same tensor object given other memory between two calls (``set_``) is viewed again:
    a kept view would read the old memory."""
    torch_, device = _torch(context)
    n = 1 << 12
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, n)
    x = torch_.ones(n, dtype=torch_.float64, device=device)
    y = torch_.zeros(n, dtype=torch_.float64, device=device)
    assert fn(x, y, a=1.0) == pytest.approx(n)
    x.set_(torch_.full((n,), 3.0, dtype=torch_.float64, device=device))
    assert fn(x, y, a=1.0) == pytest.approx(16 * n)
    np.testing.assert_array_equal(y.cpu().numpy(), np.full(n, 4.0))


@pytest.mark.cuda_only
def test_cuda_inputs_that_would_need_a_copy_are_refused(context, command_queue):
    fn = BlasTemplate(context, np.float64, "axpy_norm").instantiate(command_queue, 8)
    y = context.allocate(8, np.float64)
    with pytest.raises(ValueError, match=r"DLPack device kDLCPU.*never made silently"):
        fn(_HostExport(np.zeros(8)), y, a=1.0)
    data = context.allocate(16, np.float64)
    strided = {**data.__cuda_array_interface__, "shape": (8,), "strides": (16,)}

    class Strided:
        __cuda_array_interface__ = strided

    with pytest.raises(ValueError, match="not C-contiguous.*never made silently"):
        fn(Strided(), y, a=1.0)
