"""Fused BLAS-1 kernels against numpy expressions written here, independently of the ops."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import operations.blas as B
from autotune.tune.store import ResultStore
from operations.blas import BlasTemplate

DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


def _data(rng, n, dtype):
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    return rng.standard_normal(n).astype(dtype)


def _n2(v):
    return float(np.sum(np.abs(v) ** 2))


def _scalars(dtype):
    c = np.dtype(dtype).kind == "c"
    return {"a": 0.75, "b": -1.25, "ca": (0.5 - 2j) if c else 0.5, "cb": (1 + 0.5j) if c else 1.5,
            "cw": (-0.25 + 1j) if c else -0.25}


# name: (vector names, scalars from _scalars, expected(vectors, s) -> (updates, outputs))
CASES = {
    "axpy": (("x", "y"), {"a": "a"}, lambda v, s: ({"y": s["a"] * v["x"] + v["y"]}, ())),
    "xpay": (("x", "y"), {"a": "a"}, lambda v, s: ({"y": v["x"] + s["a"] * v["y"]}, ())),
    "axpby": (("x", "y"), {"a": "a", "b": "b"},
              lambda v, s: ({"y": s["a"] * v["x"] + s["b"] * v["y"]}, ())),
    "caxpy": (("x", "y"), {"a": "ca"}, lambda v, s: ({"y": s["ca"] * v["x"] + v["y"]}, ())),
    "axpy_norm": (("x", "y"), {"a": "a"},
                  lambda v, s: ({"y": (y := s["a"] * v["x"] + v["y"])}, (_n2(y),))),
    # a = 0.75 computed on the device as 2.25 / 3.0 (see _kernel_scalars)
    "axpy_norm_ratio": (("x", "y"), {"a": "ratio"},
                        lambda v, s: ({"y": (y := s["a"] * v["x"] + v["y"])}, (_n2(y),))),
    "caxpy_norm": (("x", "y"), {"a": "ca"},
                   lambda v, s: ({"y": (y := s["ca"] * v["x"] + v["y"])}, (_n2(y),))),
    "xmy_norm": (("x", "y"), {}, lambda v, s: ({"y": (y := v["x"] - v["y"])}, (_n2(y),))),
    "axpy_zpbx": (("x", "p", "z"), {"a": "a", "b": "b"},
                  lambda v, s: ({"x": v["x"] + s["a"] * v["p"], "p": v["z"] + s["b"] * v["p"]}, ())),
    "cdot_norm": (("x", "y"), {}, lambda v, s: ({}, (np.sum(np.conj(v["x"]) * v["y"]), _n2(v["x"])))),
    "cdot_norm_redot": (("x", "y", "z"), {},
                        lambda v, s: ({}, (np.sum(np.conj(v["x"]) * v["y"]), _n2(v["x"]),
                                           np.sum(np.conj(v["x"]) * v["z"]).real))),
    "cg_update": (("x", "p", "r", "s", "w"), {"a": "a", "b": "b"},
                  lambda v, s: ({"p": (p := v["r"] + s["b"] * v["p"]),
                                 "s": (q := v["w"] + s["b"] * v["s"]),
                                 "x": v["x"] + s["a"] * p, "r": v["r"] - s["a"] * q}, ())),
    "bicgstab_xs": (("x", "p", "s", "t", "r0"), {"a": "ca", "w": "cw"},
                    lambda v, s: ({"x": v["x"] + s["ca"] * v["p"] + s["cw"] * v["s"],
                                   "s": (r := v["s"] - s["cw"] * v["t"])},
                                  (np.sum(np.conj(v["r0"]) * r), _n2(r)))),
    "bicgstab_p": (("p", "r", "v"), {"b": "cb", "w": "cw"},
                   lambda v, s: ({"p": v["r"] + s["cb"] * (v["p"] - s["cw"] * v["v"])}, ())),
}


def _kernel_scalars(context, queue, scalar_map, s):
    """The scalars a kernel takes; "ratio" is s["a"] computed on the device."""
    out = {}
    for name, key in scalar_map.items():
        if key == "ratio":
            out[name] = B.DeviceRatio(s["a"] * 3.0, context.to_device(queue, np.array([7.0, 3.0])), 1)
        else:
            out[name] = s[key]
    return out


def test_every_op_has_a_test_case():
    assert set(CASES) == set(BlasTemplate.ops)


#: the ops' outputs that are dot products <a, b>: {output index: (a, b) by name}. A dot's
#: rounding error grows with the terms' size, not with the sum's: random data can cancel to a
#: small sum whose relative error is large, so its tolerance scales with the terms (their 2-norm).
DOTS = {"cdot_norm": {0: ("x", "y")}, "cdot_norm_redot": {0: ("x", "y"), 2: ("x", "z")},
        "bicgstab_xs": {0: ("r0", "s")}}


def _check(context, queue, op, dtype, n, rng):
    names, scalar_map, expected_fn = CASES[op]
    tol = 2e-6 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-13
    host = {name: _data(rng, n, dtype) for name in names}
    s = _scalars(dtype)
    wide = {k: v.astype(np.complex128 if v.dtype.kind == "c" else np.float64) for k, v in host.items()}
    updates, outputs = expected_fn(wide, s)
    device = {k: context.to_device(queue, v) for k, v in host.items()}
    fn = BlasTemplate(context, dtype, op).instantiate(queue, n)
    got = fn(*[device[k] for k in names], **_kernel_scalars(context, queue, scalar_map, s))
    got = () if got is None else (got if isinstance(got, tuple) else (got,))
    assert len(got) == len(outputs)
    for i, (g, e) in enumerate(zip(got, outputs)):
        scale = max(abs(e), 1.0)
        if i in DOTS.get(op, {}):  # b as updated, where the op writes it
            a, b = (updates.get(v, wide[v]) for v in DOTS[op][i])
            scale = max(scale, float(np.linalg.norm(np.conj(a) * b)))
        assert abs(g - e) <= tol * scale * 4, (op, n, g, e, scale)
    for name in names:
        value = device[name].get(queue)
        want = updates.get(name, wide[name])
        scale = max(np.max(np.abs(want)), 1.0)
        assert np.max(np.abs(value - want)) <= tol * scale * 4, (op, n, name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(CASES))
def test_blas_matches_numpy(context, command_queue, op, dtype):
    if not BlasTemplate.ops[op].supports(np.dtype(dtype)):
        with pytest.raises(TypeError, match="complex data only"):
            BlasTemplate(context, dtype, op)
        return
    rng = np.random.default_rng(zlib.crc32(op.encode()))  # the same data in every process
    for n in (1, 2, 31, 33, 1000, 2**20 + 7):
        _check(context, command_queue, op, dtype, n, rng)


def test_nan_propagates_through_norms(context, command_queue):
    x = np.array([1.0, np.nan, 3.0], np.float32)
    y = np.ones(3, np.float32)
    fn = BlasTemplate(context, np.float32, "axpy_norm").instantiate(command_queue, 3)
    dy = context.to_device(command_queue, y)
    assert np.isnan(fn(context.to_device(command_queue, x), dy, a=1.0))
    assert np.isnan(dy.get(command_queue)[1])


def test_scalar_errors(context, command_queue):
    fn = BlasTemplate(context, np.float32, "axpy").instantiate(command_queue, 4)
    x = context.to_device(command_queue, np.ones(4, np.float32))
    y = context.to_device(command_queue, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="needs scalar"):
        fn(x, y)
    with pytest.raises(TypeError, match="must be real"):
        fn(x, y, a=1j)


def test_device_ratio_errors(context, command_queue):
    fn = BlasTemplate(context, np.float32, "axpy_norm_ratio").instantiate(command_queue, 4)
    x = context.to_device(command_queue, np.ones(4, np.float32))
    y = context.to_device(command_queue, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="DeviceRatio"):
        fn(x, y, a=0.5)
    with pytest.raises(TypeError, match="float64 device array"):
        fn(x, y, a=B.DeviceRatio(1.0, context.to_device(command_queue, np.ones(2, np.float32))))
    with pytest.raises(IndexError, match="element 2"):
        fn(x, y, a=B.DeviceRatio(1.0, context.to_device(command_queue, np.ones(2)), 2))


def test_host_entry_points_update_in_place(context):
    rng = np.random.default_rng(11)
    x, y = _data(rng, 500, np.complex128), _data(rng, 500, np.complex128)
    y0 = y.copy()
    r2 = B.caxpy_norm(0.5 + 1j, x, y, context=context)
    np.testing.assert_allclose(y, (0.5 + 1j) * x + y0, rtol=1e-14)
    assert abs(r2 - np.vdot(y, y).real) < 1e-9
    p, z, xx = (_data(rng, 500, np.float64) for _ in range(3))
    p0, xx0 = p.copy(), xx.copy()
    assert B.axpy_zpbx(0.5, p, xx, z, 2.0, context=context) is None
    np.testing.assert_allclose(xx, xx0 + 0.5 * p0, rtol=1e-14)
    np.testing.assert_allclose(p, z + 2.0 * p0, rtol=1e-14)
    dot, norm = B.cdot_norm(x, y, context=context)
    assert abs(dot - np.vdot(x, y)) < 1e-9 and abs(norm - np.vdot(x, x).real) < 1e-9
    dot, norm, redot = B.cdot_norm_redot(x, y, xx0 + 1j * p0, context=context)
    assert abs(dot - np.vdot(x, y)) < 1e-9 and abs(norm - np.vdot(x, x).real) < 1e-9
    assert abs(redot - np.vdot(x, xx0 + 1j * p0).real) < 1e-9


#: The operations whose every candidate is checked on CPU devices, where PoCL takes seconds a
#: candidate: one of each shape of pass (written vectors, reductions, scalars), in both
#: element kinds. axpy_zpbx: two vectors written, no reduction; axpy_norm_ratio: one written,
#: a norm, a scalar computed on the device; cdot_norm: nothing written, two reductions;
#: bicgstab_xs: complex, two written, two reductions; caxpy: complex, one written, none. The
#: others (axpy, xpay, axpby, axpy_norm, caxpy_norm, xmy_norm, bicgstab_p; cdot_norm_redot,
#: cdot_norm's pass with a third sum) differ from one of these only in their elementwise body
#: or their sums, which test_blas_matches_numpy checks against numpy for every dtype; GPUs
#: check every candidate of all thirteen.
CPU_CANDIDATE_OPS = ("axpy_zpbx", "axpy_norm_ratio", "cdot_norm", "bicgstab_xs", "caxpy")


@pytest.mark.force_autotune
@pytest.mark.parametrize("op", sorted(CASES))
def test_every_candidate_computes_the_same_answer(context, op):
    if not context.device.is_gpu and op not in CPU_CANDIDATE_OPS:
        pytest.skip(f"on CPU devices the candidates of {', '.join(CPU_CANDIDATE_OPS)} are "
                    f"checked (the same shapes of pass as {op}'s); all on GPUs")
    dtype = np.complex64 if BlasTemplate.ops[op].complex_only or op.startswith("bicgstab") else np.float32
    BlasTemplate.autotune(context, dtype, op)
    trials = ResultStore.open().trials(function="operations.blas.BlasTemplate.autotune")
    bad = [(t.parameters, t.status, t.message) for t in trials if t.status != "ok"]
    assert not bad and len(trials) >= 8


def test_candidates_of_one_work_group_size_share_the_second_kernel(context):
    """Where the reductions take a second kernel (fused_finish: on OpenCL), every candidate of
    a work-group size takes it from one program, whatever its ipt and vec, and it is the
    kernel each candidate's own program holds, character for character: PoCL, which compiles a
    kernel at its first launch, then compiles it once for them, not once a candidate."""
    from operations.fused import TEST_PARAMETERS

    made = [BlasTemplate(context, np.float32, "axpy_norm", dict(TEST_PARAMETERS, ipt=i, vec=v))
            for i, v in [(1, 1), (2, 4), (4, 2)]]
    if made[0].single_pass:
        pytest.skip("the reductions take one launch on CUDA: no second kernel")
    assert len({id(m.program) for m in made}) == 3  # the candidates' own programs differ

    def finish(program):
        text = program.source.text
        return text[text.index("void fused_finish("):]

    assert all(m.finish_program is made[0].finish_program for m in made)
    assert all(finish(m.program) == finish(m.finish_program) for m in made)
    other = BlasTemplate(context, np.float32, "axpy_norm", dict(TEST_PARAMETERS, wgs=16))
    assert other.finish_program is not made[0].finish_program  # its own work-group size


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["axpy_norm", "cdot_norm", "axpy_zpbx"])
def test_vector_loads_handle_every_tail(context, command_queue, op, dtype):
    """Tunings with 16-byte loads (2 or 4 elements) must treat the last n % vec elements too."""
    from operations.fused import TEST_PARAMETERS

    vec = 16 // np.dtype(dtype).itemsize
    if vec == 1:
        pytest.skip("complex128 elements are already 16 bytes")
    tuning = dict(TEST_PARAMETERS, vec=vec, ipt=2)
    names, scalar_map, expected_fn = CASES[op]
    rng = np.random.default_rng(vec)
    s = _scalars(dtype)
    for n in (1, 2, 3, 5, 7, 9, 1001, 4099):
        host = {name: _data(rng, n, dtype) for name in names}
        wide = {k: v.astype(np.complex128 if v.dtype.kind == "c" else np.float64) for k, v in host.items()}
        updates, outputs = expected_fn(wide, s)
        device = {k: context.to_device(command_queue, v) for k, v in host.items()}
        fn = BlasTemplate(context, dtype, op, tuning).instantiate(command_queue, n)
        got = fn(*[device[k] for k in names], **{k: s[v] for k, v in scalar_map.items()})
        got = () if got is None else (got if isinstance(got, tuple) else (got,))
        for g, e in zip(got, outputs):
            assert abs(g - e) <= 1e-5 * max(abs(e), 1.0), (n, g, e)
        for name, want in updates.items():
            np.testing.assert_allclose(device[name].get(command_queue), want, rtol=1e-5, atol=1e-5,
                                       err_msg=f"{op} n={n} {name}")


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.complex128])
def test_online_scans_on_an_h200_start_from_candidates_of_the_scan(dtype):
    """Where an online scan of a vector pass starts on a CUDA GPU (an H200's description):
    candidates of its online space (the widest loads, warp shuffles); on CPUs, nowhere."""
    from toy_templates import H200, DescribedContext

    h200 = DescribedContext(H200, "cuda")
    space = BlasTemplate.autotune_online_space(h200, dtype, "axpy")
    seeds = BlasTemplate.autotune_online_seeds(h200, dtype, "axpy")
    fixed = {name: values[0] for name, values in space.parameters.items()}
    assert seeds and all(space.why_not({**fixed, **seed}) is None for seed in seeds)
    assert fixed["shuffle"] is True and fixed["vec"] * np.dtype(dtype).itemsize == 16


def test_online_scans_on_a_cpu_have_no_seeds(context):
    if context.device.is_gpu:
        pytest.skip("a CPU device's case")
    assert BlasTemplate.autotune_online_seeds(context, np.float32, "axpy") == []
