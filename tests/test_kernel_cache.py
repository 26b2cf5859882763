"""NVRTC's builds kept on disk (autotune.accel.kernel_cache): served again to any process,
never trusted when damaged, and never in the way when the folder cannot be written.

NVRTC needs no GPU, so these run in CI; the GPU suite runs them on the H200 too, and a CUDA
context loads a cached binary in the last test.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from autotune.accel import kernel_cache, nvrtc

pytestmark = pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (cuda-python) not installed")

SOURCE = 'extern "C" __global__ void k(float *a) { a[0] = %s; }'
ARCH = (9, 0)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    path = tmp_path / "kernels"
    monkeypatch.setenv(kernel_cache.ENV, str(path))
    return path


def entries(path):
    return sorted(path.glob("*.kernel")) if path.is_dir() else []


def uncached(text, options=()):
    saved = os.environ.get(kernel_cache.ENV)
    os.environ[kernel_cache.ENV] = "off"
    try:
        return nvrtc.compile_source(text, "k.cu", ARCH, options)
    finally:
        if saved is None:
            del os.environ[kernel_cache.ENV]
        else:
            os.environ[kernel_cache.ENV] = saved


def test_a_build_is_kept_and_served_from_the_folder(folder):
    text = SOURCE % "1.0f"
    first = nvrtc.compile_source(text, "k.cu", ARCH)
    (entry,) = entries(folder)
    assert first.binary == uncached(text).binary
    # what is served is the file's binary: put another kernel's build under this key
    other = uncached(SOURCE % "2.0f")
    assert other.binary != first.binary
    kernel_cache.save(entry.stem, kernel_cache.Entry(other.binary, "cubin", 90, "a warning"),
                      folder)
    again = nvrtc.compile_source(text, "k.cu", ARCH)
    assert (again.binary, again.log, again.kind) == (other.binary, "a warning", "cubin")


def test_another_process_finds_the_build(folder):
    text = SOURCE % "3.0f"
    code = ("import sys; from autotune.accel import nvrtc; "
            "sys.stdout.write(nvrtc.compile_source(sys.argv[1], 'k.cu', (9, 0)).binary.hex())")
    made = subprocess.run([sys.executable, "-c", code, text], capture_output=True, text=True,
                          check=True).stdout
    (entry,) = entries(folder)
    stamp = entry.stat().st_mtime_ns
    os.utime(entry, ns=(stamp - 10**9, stamp - 10**9))
    assert nvrtc.compile_source(text, "k.cu", ARCH).binary.hex() == made
    assert entries(folder) == [entry] and entry.stat().st_mtime_ns > stamp - 10**9, \
        "a hit marks the entry as used now"


def test_processes_compiling_at_once_leave_one_whole_entry(folder):
    """MPI ranks and warm's helpers build the same kernels at the same moment: each gets the
    binary, and the folder ends with one valid entry and no temporary files."""
    text = SOURCE % "12.0f"
    code = ("import sys; from autotune.accel import nvrtc; "
            "sys.stdout.write(nvrtc.compile_source(sys.argv[1], 'k.cu', (9, 0)).binary.hex())")
    runs = [subprocess.Popen([sys.executable, "-c", code, text], stdout=subprocess.PIPE,
                             text=True) for _ in range(4)]
    made = {run.communicate(timeout=120)[0] for run in runs}
    assert all(run.returncode == 0 for run in runs)
    assert made == {uncached(text).binary.hex()}
    (entry,) = entries(folder)
    assert kernel_cache.load(entry.stem, folder) is not None
    assert [p.name for p in folder.iterdir()] == [entry.name]


def test_options_and_architecture_are_part_of_the_key(folder):
    text = SOURCE % "4.0f"
    plain = nvrtc.compile_source(text, "k.cu", ARCH)
    fast = nvrtc.compile_source(text, "k.cu", ARCH, ("--use_fast_math",))
    older = nvrtc.compile_source(text, "k.cu", (8, 0))
    assert len(entries(folder)) == 3
    assert older.arch == 80 and plain.arch == 90 and fast.binary != older.binary


@pytest.mark.parametrize("damage", ["truncated", "binary changed", "header", "not an entry"])
def test_a_damaged_entry_is_compiled_again_and_replaced(folder, damage):
    text = SOURCE % "5.0f"
    good = nvrtc.compile_source(text, "k.cu", ARCH)
    (entry,) = entries(folder)
    data = entry.read_bytes()
    if damage == "truncated":  # a write cut short (a full disk, a killed process)
        data = data[:len(data) // 2]
    elif damage == "binary changed":
        data = data[:-1] + bytes([data[-1] ^ 1])
    elif damage == "header":
        data = data.replace(b'"kind": "cubin"', b'"kind": "shell"')
    else:
        data = b"#!/bin/sh\nrm -rf /\n"
    entry.write_bytes(data)
    assert nvrtc.compile_source(text, "k.cu", ARCH).binary == good.binary
    assert entry.read_bytes() != data and kernel_cache.load(entry.stem, folder) is not None


def test_a_folder_that_cannot_be_written_costs_only_the_cache(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv(kernel_cache.ENV, str(blocker / "kernels"))
    with caplog.at_level(logging.WARNING, logger="autotune"):
        outs = [nvrtc.compile_source(SOURCE % v, "k.cu", ARCH) for v in ("6.0f", "7.0f")]
    assert [o.binary for o in outs] == [uncached(SOURCE % v).binary for v in ("6.0f", "7.0f")]
    warnings = [r.getMessage() for r in caplog.records if "kernel cache" in r.getMessage()]
    assert len(warnings) == 1 and kernel_cache.ENV in warnings[0], warnings


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(kernel_cache.ENV, "off")
    assert kernel_cache.directory() is None
    nvrtc.compile_source(SOURCE % "8.0f", "k.cu", ARCH)
    assert not list(tmp_path.iterdir())


def test_a_build_with_its_own_headers_is_not_cached(folder, tmp_path):
    (tmp_path / "value.h").write_text("#define VALUE 9.0f\n")
    text = '#include "value.h"\n' + SOURCE % "VALUE"
    out = nvrtc.compile_source(text, "k.cu", ARCH, (f"-I{tmp_path}",))
    assert out.kind == "cubin" and entries(folder) == []


def test_the_folder_is_trimmed_oldest_first(folder):
    for i in range(4):
        nvrtc.compile_source(SOURCE % f"{10 + i}.0f", "k.cu", ARCH)
    paths = entries(folder)
    for age, path in enumerate(sorted(paths, key=lambda p: p.stat().st_mtime_ns)):
        os.utime(path, (1_000_000 + age, 1_000_000 + age))  # oldest first, in that order
    ordered = sorted(paths, key=lambda p: p.stat().st_mtime)
    size = ordered[0].stat().st_size
    # over the limit: trimmed to 3/4 of it, the entries used longest ago first
    removed = kernel_cache.trim(folder, limit=3 * size)
    left = entries(folder)
    assert removed >= size and ordered[-1] in left and ordered[0] not in left
    assert sum(p.stat().st_size for p in left) <= 3 * size * 3 // 4
    assert kernel_cache.trim(folder, limit=10 * size) == 0


@pytest.mark.cuda_only
def test_a_cached_build_runs(folder, context):
    import numpy as np

    template = folder.parent / "k.mako"
    template.write_text("KERNEL void k(GLOBAL float *y) { y[0] = ${v}; }\n")
    context.build(template, {"v": "11.0f"})
    (entry,) = entries(folder)
    # another context of the device builds it again (as a new process would): from the folder
    fresh = type(context)(context.device_index)
    stamp = entry.stat().st_mtime_ns
    os.utime(entry, ns=(stamp - 10**9, stamp - 10**9))
    program = fresh.build(template, {"v": "11.0f"})
    assert entries(folder) == [entry] and entry.stat().st_mtime_ns > stamp - 10**9
    queue = fresh.create_command_queue()
    y = fresh.allocate(1, np.float32)
    queue.launcher(program.get_kernel("k"), 1, 1)([y])
    assert y.get(queue)[0] == 11.0
