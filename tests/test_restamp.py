""".ci/restamp-rows's check: a row is re-stamped only where every kernel its key builds renders
the same text from the old files as from today's. Here the "old" dslash.mako is today's,
edited: in a part only the distributed kernels render (the rows' kernels are the same), and in
the kernel body every kernel renders (they are not); the "old" fused.mako likewise, in the
work-group sum of GPUs or of CPU devices."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from operations import fused
from operations.lqcd import dslash

SCRIPT = Path(__file__).resolve().parents[1] / ".ci" / "restamp-rows"
ARGS = {"dims": (4, 4, 4, 4), "precision": "single", "reconstruct": 12}
PARAMS = {"carveout": -1, "dir_split": 2, "fast_math": False, "half_bits": False,
          "link_load": 16, "min_blocks": 0, "project16": "none", "sites": 1, "stage": False,
          "wgs": 64}
# a line of the ghost zone's read, which only the distributed kernels render
DIST_ONLY = "            for (int k = 0; k < 12; k++)\n                psi[k] = ghost["
# a line of the site update every kernel renders
EVERY_KERNEL = "    const unsigned int t = r / ${Z}u;\n"


@pytest.fixture(scope="module")
def restamp():
    loader = importlib.machinery.SourceFileLoader("restamp_rows", str(SCRIPT))
    spec = importlib.util.spec_from_loader("restamp_rows", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _old(tmp_path: Path, edit: tuple[str, str]) -> Path:
    text = Path(dslash.TEMPLATE).read_text()
    assert text.count(edit[0]) == 1, edit[0]
    text = text.replace(*edit)
    (tmp_path / "dslash.mako").write_text(text)
    return tmp_path


@pytest.mark.parametrize("backend", ["opencl", "cuda"])
def test_only_a_change_the_rows_kernels_render_keeps_them_stale(restamp, tmp_path, backend):
    dist = restamp.dslash_renders_alike(
        _old(tmp_path, (DIST_ONLY, "            /* as it was */\n" + DIST_ONLY)),
        ARGS, PARAMS, backend, backend == "cuda")
    assert dist == "", dist
    body = restamp.dslash_renders_alike(
        _old(tmp_path, (EVERY_KERNEL, EVERY_KERNEL + "    /* as it was */\n")),
        ARGS, PARAMS, backend, backend == "cuda")
    assert "renders differently" in body, body


# a line of the work-group sum's tree, which GPUs render, and of its serial form (CPU devices)
TREE_ONLY = "    if (lid < ${half})\n"
SERIAL_ONLY = "        for (unsigned int i = 1; i < ${wgs}u; i++)\n"


def _old_fused(tmp_path: Path, edit: tuple[str, str]) -> Path:
    text = Path(fused.TEMPLATE).read_text()
    assert text.count(edit[0]) == 1, edit[0]
    (tmp_path / "fused.mako").write_text(text.replace(*edit))
    return tmp_path


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_a_fused_row_stays_stale_only_where_its_device_renders_the_change(restamp, tmp_path, gpu):
    """fused.mako's tree sum is rendered on GPUs, its serial sum on CPU devices: an edit of one
    keeps the rows of passes with reductions stale on the devices that render it, and leaves
    the others' alike; a pass without reductions renders neither (the pass and the second
    kernel's program, both compared)."""
    backend = "cuda" if gpu else "opencl"
    check = restamp.CHECKS["operations.blas.BlasTemplate.autotune"]
    params = {"wgs": 256, "ipt": 4, "groups_per_cu": 4, "vec": 1, "shuffle": False}
    norm = {"dtype": np.dtype(np.complex128), "op": "axpy_norm"}
    plain = {"dtype": np.dtype(np.complex128), "op": "axpy"}
    tree = _old_fused(tmp_path, (TREE_ONLY, "    /* as it was */\n" + TREE_ONLY))
    assert ("renders differently" in check(tree, norm, params, backend, gpu)) is gpu
    assert check(tree, plain, params, backend, gpu) == ""
    serial = _old_fused(tmp_path, (SERIAL_ONLY, "        /* as it was */\n" + SERIAL_ONLY))
    assert ("renders differently" in check(serial, norm, params, backend, gpu)) is not gpu
    assert check(serial, plain, params, backend, gpu) == ""
