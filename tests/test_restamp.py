""".ci/restamp-rows's check: a dslash row is re-stamped only where every kernel its key builds
renders the same text from the old files as from today's. Here the "old" dslash.mako is today's,
edited: in a part only the distributed kernels render (the rows' kernels are the same), and in
the kernel body every kernel renders (they are not)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

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
    template = Path(dslash.TEMPLATE)
    dist = restamp.renders_alike(
        template, _old(tmp_path, (DIST_ONLY, "            /* as it was */\n" + DIST_ONLY)),
        ARGS, PARAMS, backend)
    assert dist == "", dist
    body = restamp.renders_alike(
        template, _old(tmp_path, (EVERY_KERNEL, EVERY_KERNEL + "    /* as it was */\n")),
        ARGS, PARAMS, backend)
    assert "renders differently" in body, body
