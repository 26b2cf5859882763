"""The diffusion stencil against a numpy reference written here, independently of the operation."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from autotune import accel, tune
from autotune.accel import nvrtc
from autotune.tune.store import ResultStore
from operations import diffusion
from operations.diffusion import DiffusionTemplate

SIZES = [(1000, 777), (5, 3), (33, 65), (3, 3)]  # (nx, ny): multiples of no block or tile
TUNINGS = [
    {"block_x": 16, "block_y": 16, "tile_x": 1, "tile_y": 1, "local": False},
    {"block_x": 16, "block_y": 16, "tile_x": 1, "tile_y": 1, "local": True},
    {"block_x": 32, "block_y": 4, "tile_x": 2, "tile_y": 4, "local": True},
    {"block_x": 48, "block_y": 2, "tile_x": 4, "tile_y": 2, "local": False},
    {"block_x": 64, "block_y": 1, "tile_x": 4, "tile_y": 1, "local": True},
    {"block_x": 16, "block_y": 8, "tile_x": 1, "tile_y": 4, "local": False},
]


def expected_steps(field: np.ndarray, steps: int, dt: float = 0.225) -> np.ndarray:
    """``steps`` explicit steps in float64, summing the five-point Laplacian point by point."""
    u = field.astype(np.float64)
    for _ in range(steps):
        lap = np.zeros_like(u)
        inner = (slice(1, -1), slice(1, -1))
        for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            lap[inner] += u[1 + dy:u.shape[0] - 1 + dy, 1 + dx:u.shape[1] - 1 + dx]
        lap[inner] -= 4 * u[inner]
        u = u + dt * lap  # lap is zero on the boundary: boundary values stay
    return u


def assert_steps_match(got: np.ndarray, field: np.ndarray, steps: int, dt: float = 0.225) -> None:
    want = expected_steps(field, steps, dt)
    assert got.dtype == np.float32 and got.shape == field.shape
    # float32 rounding grows by a few ulps a step; a wrong index is off by ~0.1
    scale = max(float(np.max(np.abs(field))), 1.0)
    err = np.max(np.abs(got - want)) if got.size else 0.0
    assert err <= 2e-6 * (steps + 1) * scale, f"max error {err} after {steps} steps"
    for edge in (np.s_[0, :], np.s_[-1, :], np.s_[:, 0], np.s_[:, -1]):
        np.testing.assert_array_equal(got[edge], field[edge], err_msg="boundary changed")


def random_field(nx: int, ny: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((ny, nx), dtype=np.float32)


@pytest.mark.parametrize("nx,ny", SIZES)
def test_steps_match_numpy(context, command_queue, nx, ny):
    field = random_field(nx, ny, seed=nx)
    op = DiffusionTemplate(context, nx, ny).instantiate(command_queue)
    assert_steps_match(op.run(field, 7), field, 7)


def _tuning_id(t: dict) -> str:
    where = "local" if t["local"] else "global"
    return f"{t['block_x']}x{t['block_y']}-tile{t['tile_x']}x{t['tile_y']}-{where}"


@pytest.mark.parametrize("tuning", TUNINGS, ids=_tuning_id)
def test_explicit_tunings_match_numpy(context, command_queue, tuning):
    for nx, ny in ((1000, 777), (33, 65)):
        field = random_field(nx, ny, seed=ny)
        op = DiffusionTemplate(context, nx, ny, tuning=tuning).instantiate(command_queue)
        assert_steps_match(op.run(field, 4), field, 4)


def test_dt_and_zero_steps(context, command_queue):
    field = random_field(40, 30, seed=3)
    op = DiffusionTemplate(context, 40, 30, dt=0.1).instantiate(command_queue)
    assert_steps_match(op.run(field, 3), field, 3, dt=0.1)
    same = op.run(field, 0)
    np.testing.assert_array_equal(same, field)
    assert same is not field


def test_a_step_between_device_arrays_writes_every_point(context, command_queue):
    nx, ny = 70, 45
    field = random_field(nx, ny, seed=9)
    op = DiffusionTemplate(context, nx, ny).instantiate(command_queue)
    src = context.to_device(command_queue, field)
    dst = context.to_device(command_queue, np.full((ny, nx), np.nan, np.float32))
    op(src, dst)
    got = dst.get(command_queue)
    assert not np.isnan(got).any()
    assert_steps_match(got, field, 1)
    op(dst, src)  # ping-pong by hand
    assert_steps_match(src.get(command_queue), field, 2)


def test_bad_input_gives_clear_errors(context, command_queue):
    op = DiffusionTemplate(context, 20, 10).instantiate(command_queue)
    good = np.zeros((10, 20), np.float32)
    with pytest.raises(ValueError, match=r"= \(10, 20\)"):
        op.run(np.zeros((20, 10), np.float32), 1)
    with pytest.raises(TypeError, match="float32"):
        op.run(good.astype(np.float64), 1)
    with pytest.raises(TypeError, match="numpy array"):
        op.run(good.tolist(), 1)
    with pytest.raises(ValueError, match="at least 0"):
        op.run(good, -1)
    with pytest.raises(TypeError, match="steps must be an int"):
        op.run(good, 2.0)
    src = context.to_device(command_queue, good)
    with pytest.raises(ValueError, match="same array"):
        op(src, src)
    with pytest.raises(TypeError, match="numpy array"):
        op(good, src)
    with pytest.raises(ValueError, match="shape"):
        op(src, context.allocate((20, 10), np.float32))
    with pytest.raises(TypeError, match="float32"):
        op(src, context.allocate((10, 20), np.float64))
    for nx, ny in ((2, 10), (10, 1), (0, 0)):
        with pytest.raises(ValueError, match="at least 3"):
            DiffusionTemplate(context, nx, ny)
    with pytest.raises(TypeError, match="nx must be an int"):
        DiffusionTemplate(context, 10.0, 10)
    with pytest.raises(TypeError, match="ny must be an int"):
        DiffusionTemplate(context, 10, True)
    with pytest.raises(ValueError, match="2\\^31"):
        DiffusionTemplate(context, 2**16, 2**15)
    with pytest.raises(ValueError, match="dt"):
        DiffusionTemplate(context, 10, 10, dt=float("nan"))


@pytest.mark.parametrize("change,match", [
    ({"block_x": 0}, "blocks of 1 to 1024 items a side"),
    ({"block_y": 2048}, "blocks of 1 to 1024 items a side"),
    ({"tile_x": 2.0}, "'tile_x' = 2.0 is not an int"),
    ({"tile_y": True}, "'tile_y' = True is not an int"),
    ({"tile_y": 17}, "tiles of 1 to 16 points a side"),
    ({"local": "yes"}, "'local' = 'yes' is not a bool"),
    ({"extra": 1}, "keys"),
])
def test_bad_tunings_are_rejected_before_rendering(context, change, match):
    tuning = dict(diffusion.TEST_PARAMETERS, **change)
    with pytest.raises(ValueError, match=match):
        DiffusionTemplate(context, 10, 10, tuning=tuning)
    with pytest.raises(ValueError, match=match):  # the others completed from test=, then checked
        DiffusionTemplate(context, 10, 10, tuning=change)


def test_device_limits_are_checked_before_compiling(context):
    device = context.device
    params = dict(diffusion.TEST_PARAMETERS)  # 256 work-items, no local memory
    assert diffusion.device_limit_exceeded(device, params) is None
    small = dataclasses.replace(device, max_work_group_size=128)
    assert "work-group" in diffusion.device_limit_exceeded(small, params)
    staged = dict(params, local=True, tile_x=4, tile_y=2)
    assert diffusion.local_memory_bytes(staged) == (16 * 2 + 2) * (16 * 4 + 2) * 4
    tiny = dataclasses.replace(device, local_memory=8192)
    assert "local memory" in diffusion.device_limit_exceeded(tiny, staged)
    assert diffusion.device_limit_exceeded(tiny, dict(staged, local=False)) is None
    too_big = dict(params, block_x=1024, block_y=1024)
    with pytest.raises(ValueError, match="cannot run on .*work-group and its local memory fit"):
        DiffusionTemplate(context, 10, 10, tuning=too_big)


def test_local_parameter_reaches_the_source():
    """``local`` is a name Mako reserves: the template must receive it as ``use_local``."""
    for local in (False, True):
        kws = diffusion.render_kws(50, 40, dict(diffusion.TEST_PARAMETERS, local=local))
        source = accel.render(diffusion.TEMPLATE, "opencl", kws).text
        assert f"#define USE_LOCAL {int(local)}\n" in source


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (cuda-python) not installed")
def test_cuda_source_compiles_for_sm90_also_as_kernel_tuner_renders_it():
    kws = diffusion.render_kws(4096, 4096, None)
    source = accel.render(diffusion.TEMPLATE, "cuda", kws).text
    assert "block_size_x" in source and "use_local" in source
    corners = [(16, 1, 1, 1, False), (128, 8, 4, 2, True), (32, 32, 1, 1, True),
               (48, 16, 2, 1, True), (64, 16, 4, 4, False)]
    for bx, by, tx, ty, local in corners:
        params = {"block_x": bx, "block_y": by, "tile_x": tx, "tile_y": ty, "local": local}
        assert diffusion.local_memory_bytes(params) <= 48 * 1024
        ours = accel.render(diffusion.TEMPLATE, "cuda", diffusion.render_kws(4096, 4096, params))
        nvrtc.compile_source(ours.text, "diffusion.cu", (9, 0))
        # What Kernel Tuner compiles: its #defines above the source, C++11.
        defines = "".join(f"#define {k} {v}\n" for k, v in (
            ("block_size_x", bx), ("block_size_y", by), ("block_size_z", 1),
            ("tile_size_x", tx), ("tile_size_y", ty), ("use_local", int(local)),
            ("kernel_tuner", 1)))
        nvrtc.compile_source(defines + "#line 1\n" + source, "diffusion.cu", (9, 0),
                             ("--std=c++11",))


def _space_size(context) -> int:
    lists = DiffusionTemplate.autotune_space(context, 203, 150).parameters
    names = list(lists)
    fits = [dict(zip(names, values)) for values in itertools.product(*lists.values())]
    fits = [p for p in fits if diffusion.device_limit_exceeded(context.device, p) is None]
    return len(fits) + (diffusion.TEST_PARAMETERS not in fits)


@pytest.mark.autotune_database
def test_every_candidate_computes_the_same_answer(context):
    params = DiffusionTemplate.autotune(context, 203, 150)
    trials = ResultStore.open().trials(function="operations.diffusion.DiffusionTemplate.autotune")
    bad = [(t.parameters, t.status, t.message) for t in trials if t.status != "ok"]
    assert not bad
    # every configuration that fits the device was compiled, checked and timed; no other
    assert len(trials) == _space_size(context)
    assert tune.checked_tuning(DiffusionTemplate, context, params, nx=203, ny=150) == params
    field = random_field(203, 150, seed=5)
    op = DiffusionTemplate(context, 203, 150).instantiate(context.create_command_queue())
    assert op.template.tuning == params
    assert_steps_match(op.run(field, 3), field, 3)
