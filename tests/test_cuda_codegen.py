"""Every kernel template renders and compiles as CUDA C++ with NVRTC, on any machine.

NVRTC needs no GPU, so CI (which has none) still proves that each operation's CUDA source is
valid for the Hopper architecture the GPU runs use, and that NVRTC's output buffers are handled
without touching shared Python objects.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune import accel
from autotune.accel import nvrtc
from operations import blas, fused, reduce

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (cuda-python) not installed")


def test_compiling_leaves_shared_bytes_objects_alone():
    before = b" "
    out = nvrtc.compile_source('extern "C" __global__ void k(float *a) { a[0] = 1.0f; }', "k.cu", (9, 0))
    assert out.kind == "cubin" and out.binary[:4] == b"\x7fELF"
    assert b" " == before == bytes([32])


@pytest.mark.parametrize("module", [reduce, blas], ids=["reduce", "blas"])
def test_every_fused_op_compiles_for_sm90(module):
    """Every op in every dtype it supports, each in one of three launch shapes (scalar loads
    with warp shuffles, wide vectors without, both): shape ``(op + dtype) % 3``, a Latin
    square, so that every shape meets every dtype and an op of three or more dtypes meets every
    shape, in a third of the compiles of all three for each (the GPU suite builds the kernels
    it runs)."""
    shapes = ((64, 1, False, True), (1024, 8, True, False), (128, 2, True, True))
    for (o, op), (d, dtype) in itertools.product(enumerate(module.OPS.values()),
                                                 enumerate(fused.DTYPES)):
        if not op.supports(dtype):
            continue
        wgs, ipt, wide, shuffle = shapes[(o + d) % len(shapes)]
        vec = 16 // np.dtype(dtype).itemsize if wide else 1
        render, _ = fused.program_variables("cuda", True, np.dtype(dtype), op, {
            "wgs": wgs, "ipt": ipt, "vec": vec, "shuffle": shuffle})
        source = accel.render(fused.TEMPLATE, "cuda", render)
        try:
            nvrtc.compile_source(source.text, "fused.cu", (9, 0))
        except nvrtc.NvrtcError as exc:
            pytest.fail(f"{op.name} {np.dtype(dtype)} wgs {wgs} ipt {ipt} vec {vec} shuffle {shuffle}: "
                        f"{source.map_log(exc.log)}")


@pytest.mark.parametrize("half", [False, True], ids=["single", "half"])
def test_the_schwarz_mr_step_compiles_for_sm90(half):
    """Every form of schwarz_mr.mako: vectors in single, double or half storage, blocks walked
    by parity rows (even x extent) or over all their sites (odd)."""
    from operations.lqcd.half import HALF_MAX
    from operations.lqcd.schwarz import MR_TEMPLATE

    dtypes = [np.complex64] if half else [np.complex64, np.complex128]
    for dtype, block in itertools.product(dtypes, [(4, 4, 4, 4), (1, 8, 8, 8), (8, 8, 8, 16)]):
        source = accel.render(MR_TEMPLATE, "cuda", {
            "cplx": accel.c_type(dtype), "real": accel.c_type(accel.real_dtype(dtype)),
            "dims": (8, 8, 8, 16), "block": block, "parity": 0, "wgs": 128, "splits": 4,
            "half": half, "half_max": HALF_MAX}, header_kws={"backend": "cuda"})
        try:
            nvrtc.compile_source(source.text, "schwarz_mr.cu", (9, 0))
        except nvrtc.NvrtcError as exc:
            pytest.fail(f"{np.dtype(dtype)} block {block}: {source.map_log(exc.log)}")


def test_the_answer_check_compiles_for_sm90():
    """tune_kernel's answer check on the device (autotune/tune/closeness.mako), float and
    double: it is built on CUDA devices only in the GPU suite."""
    from autotune.tune import closeness

    for dtype in (np.float32, np.float64):
        source = accel.render(closeness.KERNEL, "cuda", {"ctype": accel.c_type(dtype),
                                                         "wgs": closeness.WGS},
                              header_kws={"backend": "cuda"})
        try:
            nvrtc.compile_source(source.text, "closeness.cu", (9, 0))
        except nvrtc.NvrtcError as exc:
            pytest.fail(f"{np.dtype(dtype)}: {source.map_log(exc.log)}")


def test_compile_errors_map_to_the_template_line(tmp_path):
    path = tmp_path / "bad.mako"
    path.write_text("KERNEL void k(GLOBAL float *y)\n{\n    y[0] = nope;\n}\n")
    source = accel.render(path, "cuda", {})
    with pytest.raises(nvrtc.NvrtcError) as info:
        nvrtc.compile_source(source.text, "bad.cu", (9, 0))
    assert "bad.mako:3" in source.map_log(info.value.log)


@pytest.mark.parametrize("precision", ["half", "single", "double"])
def test_every_dslash_compiles_for_sm90(precision):
    """Every reconstruction with its CUDA-only paths (launch bounds, 16-byte link and spinor
    loads, the fast reciprocal square root of the 8-parameter form, 16-bit reads by bit
    arithmetic), with the variants a solve launches; and the shapes with two sites a
    work-item, four work-items a site and staged neighbours, with 8-byte link loads (pairwise:
    each precision and each reconstruction in both shapes, each pair once)."""
    from operations.lqcd.dslash import (HALF_SOLVER_VARIANTS, SOLVER_VARIANTS, TEMPLATE,
                                        kernel_arguments, link_loads, render_tuned)

    # each reconstruction in one of the two shapes, the shape turning with the precision:
    # every pair of (precision, reconstruction, shape) compiled, in half the compiles
    turn = ("single", "double", "half").index(precision)
    for r, reconstruct in enumerate((18, 12, 8)):
        base = {"wgs": 128, "min_blocks": 2, "fast_math": precision != "double",
                "half_bits": precision == "half", "carveout": -1,
                "project16": ("none", "cvt", "bits")[r] if precision == "half" else "none"}
        shapes = [{"sites": 1, "dir_split": 1, "stage": False, "link_load": 16},
                  {"sites": 2, "dir_split": 4, "stage": True,
                   "link_load": min(link_loads(precision, reconstruct))}]
        variants = list(HALF_SOLVER_VARIANTS) if precision == "half" else list(SOLVER_VARIANTS)
        for shape in [shapes[(turn + r) % 2]]:
            source = accel.render(TEMPLATE, "cuda", {
                **kernel_arguments((8, 8, 8, 16), precision, reconstruct),
                **render_tuned(precision, reconstruct, {**base, **shape}),
                "variants": variants}, header_kws={"backend": "cuda"})
            try:
                nvrtc.compile_source(source.text, "dslash.cu", (9, 0))
            except nvrtc.NvrtcError as exc:
                pytest.fail(f"{precision} {reconstruct} {shape}: {source.map_log(exc.log)}")


@pytest.mark.parametrize("precision,reconstruct", [("half", 8), ("single", 12), ("double", 18)])
def test_the_multi_rhs_dslash_compiles_for_sm90(precision, reconstruct):
    """Four right-hand sides a launch (``nrhs``, operations/lqcd/dslash_multi.py) with xpay,
    launch bounds and two sites a work-item, in one precision and compression each."""
    from operations.lqcd.dslash import TEMPLATE as DSLASH
    from operations.lqcd.dslash import kernel_arguments, render_tuned

    params = {"wgs": 64, "sites": 2, "dir_split": 1, "stage": False, "link_load": 16,
              "fast_math": precision != "double", "half_bits": False, "min_blocks": 2,
              "carveout": -1, "project16": "cvt" if precision == "half" else "none"}
    variant = (1, True, True) + (("hsh",) if precision == "half" else ())
    source = accel.render(DSLASH, "cuda", {
        **kernel_arguments((8, 8, 8, 16), precision, reconstruct),
        **render_tuned(precision, reconstruct, params), "variants": [variant], "nrhs": 4},
        header_kws={"backend": "cuda"})
    assert "_rhs4(" in source.text
    try:
        nvrtc.compile_source(source.text, "dslash.cu", (9, 0))
    except nvrtc.NvrtcError as exc:
        pytest.fail(f"{precision} {reconstruct}: {source.map_log(exc.log)}")


def test_the_half_precision_blas_compiles_for_sm90():
    """The half precision BLAS-1 and reductions (shared-memory double sums) as CUDA C++."""
    from operations.lqcd.half import HALF_MAX
    from operations.lqcd.half_blas import TEMPLATE

    source = accel.render(TEMPLATE, "cuda", {"wgs": 128, "half_max": HALF_MAX},
                          header_kws={"backend": "cuda"})
    try:
        nvrtc.compile_source(source.text, "half_blas.cu", (9, 0))
    except nvrtc.NvrtcError as exc:
        pytest.fail(source.map_log(exc.log))


@pytest.mark.parametrize("dst", ["cfloat", "cdouble"])
def test_the_spinor_layout_compiles_for_sm90(dst):
    """The host-to-device spinor reorders (spinor_layout.mako) as CUDA C++."""
    from operations.lqcd.spinor_layout import TEMPLATE

    source = accel.render(TEMPLATE, "cuda", {"dst": dst, "wgs": 128},
                          header_kws={"backend": "cuda"})
    try:
        nvrtc.compile_source(source.text, "spinor_layout.cu", (9, 0))
    except nvrtc.NvrtcError as exc:
        pytest.fail(f"{dst}: {source.map_log(exc.log)}")
