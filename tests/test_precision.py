"""Conversions between single and double precision against numpy's, on every device found."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.tune.store import ResultStore
from operations.precision import ConvertTemplate

PAIRS = [(np.complex128, np.complex64), (np.complex64, np.complex128),
         (np.float64, np.float32), (np.float32, np.float64)]


def _data(rng, n, dtype):
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


@pytest.mark.parametrize("src, dst", PAIRS, ids=lambda d: np.dtype(d).name)
def test_convert_and_add_converted_match_numpy(context, command_queue, src, dst):
    conv = ConvertTemplate(context, src, dst).instantiate(command_queue)
    rng = np.random.default_rng(5)
    for n in (1, 33, 1000, 2**20 + 5):
        x, y = _data(rng, n, src), _data(rng, n, dst)
        inp = context.to_device(command_queue, x)
        out = context.to_device(command_queue, np.full(n, np.nan, dst))  # every element written
        conv(out, inp)
        np.testing.assert_array_equal(out.get(command_queue), x.astype(dst), err_msg=f"n={n}")
        out.set(command_queue, y)
        conv.add(out, inp)
        # numpy adds in dst's precision after converting, as the kernel does
        np.testing.assert_array_equal(out.get(command_queue), y + x.astype(dst), err_msg=f"n={n}")


def test_bad_conversions_are_clear_errors(context, command_queue):
    with pytest.raises(TypeError, match="both must be float or both complex"):
        ConvertTemplate(context, np.float64, np.complex64)
    with pytest.raises(TypeError, match="cannot convert"):
        ConvertTemplate(context, np.int32, np.float32)
    conv = ConvertTemplate(context, np.float64, np.float32).instantiate(command_queue)
    inp = context.allocate(10, np.float64)
    with pytest.raises(ValueError, match="expected 10 elements"):
        conv(context.allocate(9, np.float32), inp)
    with pytest.raises(ValueError, match="float64 -> float32"):
        conv.add(context.allocate(10, np.float64), inp)


def test_warm_covers_both_directions_where_doubles_exist(context):
    configs = ConvertTemplate.warm_configurations(context)
    if not context.device.double_precision:
        assert configs == []
        return
    pairs = {(c["src"], c["dst"]) for c in configs}
    assert pairs == {(np.dtype(a), np.dtype(b)) for a, b in PAIRS}


@pytest.mark.force_autotune
def test_every_candidate_converts_exactly(context):
    ConvertTemplate.autotune(context, np.complex128, np.complex64)
    trials = ResultStore.open().trials(function="operations.precision.ConvertTemplate.autotune")
    assert trials and all(t.status == "ok" for t in trials), [(t.parameters, t.status) for t in trials]
