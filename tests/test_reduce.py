"""Reductions against numpy (float64 references), on every device found."""

from __future__ import annotations

import numpy as np
import pytest

import operations.reduce as R
from autotune import tune
from autotune.tune.store import ResultStore
from operations.reduce import ReduceTemplate

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]
SIZES = [1, 2, 31, 33, 1000, 2**20 + 7]


def _data(rng, n, dtype):
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def _wide(a):
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


REFERENCES = {
    "sum": lambda x: _wide(x).sum(),
    "sumsq": lambda x: float(np.sum(np.abs(_wide(x)) ** 2)),
    "min": lambda x: x.min(),
    "max": lambda x: x.max(),
}


def _tol(dtype):
    return 1e-5 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-11


def _device(context, queue, a):
    return context.to_device(queue, a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["sum", "sumsq", "min", "max"])
def test_single_vector_reductions_match_numpy(context, command_queue, op, dtype):
    if not ReduceTemplate.ops[op].supports(np.dtype(dtype)):
        with pytest.raises(TypeError, match="real data only"):
            ReduceTemplate(context, dtype, op)
        return
    template = ReduceTemplate(context, dtype, op)
    rng = np.random.default_rng(7)
    for n in SIZES:
        x = _data(rng, n, dtype)
        got = template.instantiate(command_queue, n)(_device(context, command_queue, x))
        expected = REFERENCES[op](x)
        if op in ("min", "max"):
            assert got == expected and np.asarray(got).dtype == dtype, (n, got, expected)
        else:
            # double accumulation: far tighter than the data's own precision
            scale = np.sum(np.abs(_wide(x)) ** (2 if op == "sumsq" else 1))
            assert abs(got - expected) <= 1e-12 * scale + 1e-300, (n, got, expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dot_conjugates_x(context, command_queue, dtype):
    template = ReduceTemplate(context, dtype, "dot")
    rng = np.random.default_rng(3)
    for n in SIZES:
        x, y = _data(rng, n, dtype), _data(rng, n, dtype)
        fn = template.instantiate(command_queue, n)
        got = fn(_device(context, command_queue, x), _device(context, command_queue, y))
        expected = np.sum(np.conj(_wide(x)) * _wide(y))
        assert abs(got - expected) <= 1e-12 * np.sum(np.abs(_wide(x) * _wide(y))), n
        if np.dtype(dtype).kind == "c" and n > 1:
            assert abs(got - np.sum(_wide(x) * _wide(y))) > 1e-6, "x must be conjugated"


@pytest.mark.parametrize("wgs", [64, 256])
def test_one_pass_answers_right_on_every_call(context, command_queue, wgs):
    """Reused passes over many work-groups (on CUDA the last group to finish combines the others'
    partials and resets its ticket counter for the next call): each call sees its own data."""
    n = 300_001
    tuning = {"wgs": wgs, "ipt": 2, "groups_per_cu": 16, "vec": 1,
              "shuffle": context.backend == "cuda"}
    fn = ReduceTemplate(context, np.float64, "dot", tuning).instantiate(command_queue, n)
    assert fn.groups > 1
    rng = np.random.default_rng(11)
    x = context.allocate(n, np.float64)
    y = context.allocate(n, np.float64)
    for call in range(5):
        a, b = rng.standard_normal(n), rng.standard_normal(n) + call
        x.set(command_queue, a)
        y.set(command_queue, b)
        got = fn(x, y)
        assert abs(got - np.dot(a, b)) <= 1e-12 * np.sum(np.abs(a * b)), call


def test_the_largest_vector_ci_holds(context, command_queue):
    n = 2**25 + 3  # 128 MiB of float32
    x = np.random.default_rng(1).random(n, dtype=np.float32)
    got = ReduceTemplate(context, np.float32, "sum").instantiate(command_queue, n)(
        context.to_device(command_queue, x))
    assert abs(got - x.sum(dtype=np.float64)) < 1e-9 * n


def test_nan_and_inf_propagate_as_in_numpy(context, command_queue):
    cases = {
        "inf": np.array([1.0, np.inf, 2.0], np.float32),
        "inf-inf": np.array([np.inf, -np.inf, 2.0], np.float32),
        "nan": np.array([1.0, np.nan, -np.inf], np.float32),
        "nan-last": np.array([3.0, 1.0, np.nan], np.float32),
    }
    for name, x in cases.items():
        for op, ref in (("sum", np.sum), ("min", np.min), ("max", np.max), ("sumsq", lambda a: np.sum(a * a))):
            got = ReduceTemplate(context, np.float32, op).instantiate(command_queue, x.size)(
                context.to_device(command_queue, x))
            with np.errstate(invalid="ignore", over="ignore"):
                expected = ref(x.astype(np.float64))
            assert (np.isnan(got) and np.isnan(expected)) or got == expected, (name, op, got, expected)


def test_bad_input_gives_clear_errors(context, command_queue):
    fn = ReduceTemplate(context, np.float32, "dot").instantiate(command_queue, 10)
    x = context.to_device(command_queue, np.ones(10, np.float32))
    with pytest.raises(ValueError, match="lengths differ"):
        fn(x, context.to_device(command_queue, np.ones(11, np.float32)))
    with pytest.raises(TypeError, match="dtype"):
        fn(x, context.to_device(command_queue, np.ones(10, np.float64)))
    with pytest.raises(TypeError, match="host entry points"):
        fn(x, np.ones(10, np.float32))
    with pytest.raises(TypeError, match="takes 2 vectors"):
        fn(x)
    with pytest.raises(ValueError, match="empty"):
        ReduceTemplate(context, np.float32, "sum").instantiate(command_queue, 0)
    with pytest.raises(ValueError, match="unknown operation"):
        ReduceTemplate(context, np.float32, "median")
    with pytest.raises(TypeError, match="supports float32"):
        ReduceTemplate(context, np.int32, "sum")


def test_host_entry_points(context):
    rng = np.random.default_rng(5)
    x, y = _data(rng, 777, np.complex64), _data(rng, 777, np.complex64)
    assert abs(R.sum(x, context=context) - _wide(x).sum()) < 1e-9
    assert abs(R.dot(x, y, context=context) - np.vdot(_wide(x), _wide(y))) < 1e-9
    assert abs(R.sumsq(x, context=context) - np.vdot(_wide(x), _wide(x)).real) < 1e-9
    r = rng.standard_normal(50).astype(np.float64)
    assert R.min(r, context=context) == r.min() and R.max(r, context=context) == r.max()
    with pytest.raises(ValueError, match="empty"):
        R.sum(np.empty(0, np.float32), context=context)
    with pytest.raises(ValueError, match="different lengths"):
        R.dot(x, y[:5], context=context)
    with pytest.raises(TypeError, match="different dtypes"):
        R.dot(x, y.astype(np.complex128), context=context)


@pytest.mark.force_autotune
@pytest.mark.parametrize("op,dtype", [("sum", np.float32), ("min", np.float64), ("max", np.float32),
                                      ("sumsq", np.complex64), ("dot", np.complex128)])
def test_every_candidate_computes_the_same_answer(context, op, dtype):
    params = ReduceTemplate.autotune(context, dtype, op)
    trials = ResultStore.open().trials(function="operations.reduce.ReduceTemplate.autotune")
    statuses = {t.status for t in trials}
    assert statuses == {"ok"}, [(t.parameters, t.status, t.message) for t in trials if t.status != "ok"]
    assert len(trials) >= 8
    tune.encoding.validate_parameters(params, tune.tuner_of(ReduceTemplate).test)


@pytest.mark.cuda_only
def test_cupy_arrays_are_reduced_in_place(context, command_queue):
    cupy = pytest.importorskip("cupy")
    with cupy.cuda.Device(context.device_index):
        x = cupy.arange(10**6, dtype=cupy.float64)
        fn = ReduceTemplate(context, np.float64, "sum").instantiate(command_queue, x.size)
        assert fn(x) == float(x.sum())


@pytest.mark.parametrize("op", ["sum", "min", "max"])
def test_reductions_with_vector_loads_handle_every_tail(context, command_queue, op):
    from operations.fused import TEST_PARAMETERS

    rng = np.random.default_rng(2)
    template = ReduceTemplate(context, np.float32, op, dict(TEST_PARAMETERS, vec=4, ipt=2))
    for n in (1, 2, 3, 5, 6, 7, 1001, 4099):
        x = rng.standard_normal(n).astype(np.float32)
        got = template.instantiate(command_queue, n)(context.to_device(command_queue, x))
        expected = REFERENCES[op](x)
        assert abs(got - expected) <= 1e-9 * np.abs(x).sum(), (op, n, got, expected)


@pytest.mark.cuda_only
def test_misaligned_views_are_refused_for_vector_loads(context, command_queue):
    cupy = pytest.importorskip("cupy")
    from operations.fused import TEST_PARAMETERS

    with cupy.cuda.Device(context.device_index):
        x = cupy.arange(1001, dtype=cupy.float32)[1:]  # starts 4 bytes into an allocation
        fn = ReduceTemplate(context, np.float32, "sum", dict(TEST_PARAMETERS, vec=4)).instantiate(
            command_queue, x.size)
        with pytest.raises(ValueError, match="multiple of 16 bytes"):
            fn(x)
        assert (ReduceTemplate(context, np.float32, "sum").instantiate(command_queue, x.size)(x)
                == float(x.sum()))
