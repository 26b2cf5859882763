"""Building kernels from one Mako template for CUDA and OpenCL."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from autotune import accel
from operations.scale import ScaleTemplate


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("wgs", [32, 128])
def test_scale_matches_numpy_for_awkward_sizes(context, command_queue, dtype, wgs):
    template = ScaleTemplate(context, dtype, {"wgs": wgs})
    rng = np.random.default_rng(wgs)
    for n in (1, 7, wgs - 1, wgs + 1, 10**6 + 3):
        fn = template.instantiate(command_queue, n, alpha=-1.75)
        x = rng.standard_normal(n).astype(dtype)
        fn.x.set(command_queue, x)
        fn.y.set(command_queue, np.full(n, np.nan, dtype))  # poison: every element must be written
        fn()
        np.testing.assert_array_equal(fn.y.get(command_queue), dtype(-1.75) * x, err_msg=f"n={n}")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_compile_error_names_template_file_and_line(context, tmp_path):
    path = _write(tmp_path, "broken.mako", (
        "## a comment line that renders nothing\n"
        "KERNEL void broken(GLOBAL float *y)\n"
        "{\n"
        "% for i in range(2):\n"
        "    y[${i}] = 1.0f;\n"
        "% endfor\n"
        "    y[0] = no_such_identifier;\n"
        "}\n"
    ))
    with pytest.raises(accel.CompileError) as info:
        context.build(path, {})
    assert "broken.mako:7" in str(info.value)
    assert "no_such_identifier" in str(info.value)


def test_included_template_errors_point_into_the_included_file(context, tmp_path):
    _write(tmp_path, "helper.mako", "DEVICE_FN float helper(float x)\n{\n    return x * missing_name;\n}\n")
    path = _write(tmp_path, "main.mako", (
        "<%include file=\"helper.mako\"/>\n"
        "KERNEL void k(GLOBAL float *y) { y[0] = helper(y[0]); }\n"
    ))
    with pytest.raises(accel.CompileError) as info:
        context.build(path, {})
    assert "helper.mako:3" in str(info.value)


def test_undefined_template_variable_is_an_error(context, tmp_path):
    path = _write(tmp_path, "undef.mako", "KERNEL void k(GLOBAL ${ctype} *y) { y[0] = 0; }\n")
    with pytest.raises(accel.CompileError, match="ctype"):
        context.build(path, {})


def test_programs_are_cached_by_source_and_options(context, tmp_path):
    path = _write(tmp_path, "cached.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${value}; }\n")
    first = context.build(path, {"value": "1.0f"})
    assert context.build(path, {"value": "1.0f"}) is first
    assert context.build(path, {"value": "2.0f"}) is not first
    assert first.compile_seconds > 0
    assert first.source.text.count("y[0] = 1.0f") == 1


def test_an_edited_template_is_rendered_again(context, tmp_path):
    path = _write(tmp_path, "edited.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${value}; }\n")
    first = context.build(path, {"value": "1.0f"})
    path.write_text("KERNEL void k(GLOBAL float *y) { y[0] = 3.0f * ${value}; }\n")
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 2 * 10**9))  # Mako checks whole seconds
    second = context.build(path, {"value": "1.0f"})
    assert second is not first and "3.0f * 1.0f" in second.source.text


def test_the_same_build_in_several_threads_at_once_is_done_once(context, tmp_path):
    """Threads asking for one build at the same time (online tuning prepares candidates that
    differ only in launch parameters together) wait for the first thread's, which renders and
    compiles once; a build that fails there fails in every thread with its own error."""
    log = tmp_path / "renders.log"
    path = _write(tmp_path, "counted.mako",
                  "<% with open(log, 'a') as f: f.write('rendered\\n') %>"
                  "KERNEL void k(GLOBAL float *y) { y[0] = ${value}; }\n")
    bad = _write(tmp_path, "failing.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${value} }\n")
    for template, kws in ((path, {"log": str(log), "value": "1.0f"}), (bad, {"value": "1.0f"})):
        start = threading.Barrier(4)
        got: list = []

        def build(template=template, kws=kws, start=start, got=got) -> None:
            with context.thread_scope():  # CUDA: the context current in this thread
                start.wait()
                try:
                    got.append(context.build(template, kws))
                except accel.CompileError as exc:
                    got.append(exc)

        threads = [threading.Thread(target=build) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert len(got) == 4
        if template == path:
            assert all(p is got[0] for p in got) and isinstance(got[0], accel.Program)
            assert log.read_text() == "rendered\n"
        else:
            assert all(isinstance(e, accel.CompileError) and "failing.mako" in str(e) for e in got)


def test_builds_with_non_plain_arguments_are_rendered_every_time(context, tmp_path):
    class Value:
        text = "1.0f"

        def __str__(self):
            return self.text

    path = _write(tmp_path, "objects.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${value}; }\n")
    value = Value()
    first = context.build(path, {"value": value})
    value.text = "2.0f"  # the same object, now rendering differently
    assert "y[0] = 2.0f" in context.build(path, {"value": value}).source.text
    assert "y[0] = 1.0f" in first.source.text


def test_kernel_limits_and_launch_checks(context, command_queue):
    template = ScaleTemplate(context, np.float32, {"wgs": 64})
    kernel = template.program.get_kernel("scale")
    limits = kernel.limits
    assert 0 < limits.max_work_group_size <= context.device.max_work_group_size
    assert limits.preferred_multiple >= 1
    with pytest.raises(accel.LaunchError, match="exceeds its limit"):
        kernel.check_launch(limits.max_work_group_size * 2, limits.max_work_group_size * 2)
    with pytest.raises(accel.LaunchError, match="not a multiple"):
        kernel.check_launch(100, 64)
    fn = template.instantiate(command_queue, 10)
    with pytest.raises(TypeError, match="numpy scalar"):
        command_queue.enqueue_kernel(kernel, [fn.y, fn.x, 2.0, np.uint32(10)], 64, 64)


def test_the_carve_out_is_set_where_the_backend_has_one(context, command_queue):
    """CUDA takes any share from 0 to 100 (a hint) and -1; OpenCL only -1; out of range is a
    ValueError everywhere. The kernel still runs after it."""
    template = ScaleTemplate(context, np.float32, {"wgs": 64})
    kernel = template.program.get_kernel("scale")
    kernel.set_carveout(-1)
    if context.backend == "cuda":
        kernel.set_carveout(100)
        kernel.set_carveout(0)
    else:
        with pytest.raises(accel.LaunchError, match="no L1/shared carve-out"):
            kernel.set_carveout(50)
    for bad in (101, -2, True, 50.0):
        with pytest.raises(ValueError, match="carve-out must be"):
            kernel.set_carveout(bad)
    fn = template.instantiate(command_queue, 100)
    x = np.arange(100, dtype=np.float32)
    fn.x.set(command_queue, x)
    fn()
    np.testing.assert_array_equal(fn.y.get(command_queue), 2 * x)


def test_missing_kernel_name_is_a_clear_error(context):
    template = ScaleTemplate(context, np.float32, {"wgs": 64})
    with pytest.raises(accel.CompileError, match="not_there"):
        template.program.get_kernel("not_there")


COMPLEX_KERNEL = """
KERNEL void cplx(GLOBAL ${c} *out, GLOBAL const ${c} *a, GLOBAL const ${c} *b, unsigned int n)
{
    const size_t i = get_global_id(0);
    if (i >= n) return;
    out[4 * i + 0] = ${c}_mul(a[i], b[i]);
    out[4 * i + 1] = ${c}_conj_mul(a[i], b[i]);
    out[4 * i + 2] = ${c}_add(${c}_scale(a[i], 3), ${c}_conj(b[i]));
    out[4 * i + 3] = ${c}_new(${c}_abs2(a[i]), ${c}_imag(b[i]) - ${c}_real(b[i]));
}
"""


@pytest.mark.parametrize("dtype", [np.complex64, np.complex128])
def test_portability_header_complex_helpers(context, command_queue, tmp_path, dtype):
    c = "cfloat" if dtype == np.complex64 else "cdouble"
    program = context.build(_write(tmp_path, "cplx.mako", COMPLEX_KERNEL), {"c": c})
    kernel = program.get_kernel("cplx")
    rng = np.random.default_rng(1)
    n = 1000
    a = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    b = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dtype)
    d_a, d_b = context.to_device(command_queue, a), context.to_device(command_queue, b)
    out = context.allocate(4 * n, dtype)
    command_queue.enqueue_kernel(kernel, [out, d_a, d_b, np.uint32(n)], 1024, 64)
    got = out.get(command_queue).reshape(n, 4)
    expected = np.stack([a * b, np.conj(a) * b, 3 * a + np.conj(b),
                         np.abs(a) ** 2 + 1j * (b.imag - b.real)], axis=1)
    rtol = 1e-5 if dtype == np.complex64 else 1e-13
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=rtol)


def test_rendered_lines_map_back_to_the_template(tmp_path):
    path = _write(tmp_path, "lines.mako", "// line 1\n% for i in range(3):\nint v${i};\n% endfor\n")
    for backend in ("cuda", "opencl"):
        source = accel.render(path, backend, {})
        lines = source.text.splitlines()
        for number, text in enumerate(lines, start=1):
            if text.startswith("int v"):
                assert source.origin(number) == (str(path), 3)
            if text == "// line 1":
                assert source.origin(number) == (str(path), 1)
        assert any(origin[0].endswith("portability.mako") for origin in source.origins)


def test_a_rendered_source_travels_between_processes_with_its_line_map(tmp_path):
    import pickle

    body = "".join(f"% for i in range({n}):\nfloat a{n}_${{i}};\n% endfor\n" for n in (50, 100))
    path = _write(tmp_path, "many.mako", "// top\n" + body)
    source = accel.render(path, "cuda", {})
    data = pickle.dumps(source, protocol=pickle.HIGHEST_PROTOCOL)
    back = pickle.loads(data)  # as a helper's reply arrives
    assert back == source and back.text == source.text
    assert len(back.origins) == len(source.text.splitlines()) > 150
    assert list(back.origins) == list(source.origins)
    lines = source.text.splitlines()
    for number in (lines.index("float a50_3;") + 1, lines.index("float a100_99;") + 1):
        assert back.origin(number) == source.origin(number)
    assert back.origin(lines.index("float a100_99;") + 1) == (str(path), 6)
    assert back.origins[-2:] == source.origins[-2:]
    assert "many.mako:6" in back.map_log(f"many.cu({lines.index('float a100_0;') + 1}): error")
    # the map is two arrays, not a tuple a line: a few bytes a line beside the text
    assert len(pickle.dumps(source.origins, protocol=pickle.HIGHEST_PROTOCOL)) < 10 * len(lines)


@pytest.mark.cuda_only
def test_cuda_compiles_in_process_with_nvrtc(context, tmp_path):
    path = _write(tmp_path, "fast.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${v}; }\n")
    program = context.build(path, {"v": "3.0f"})
    assert program.compiler == "nvrtc"
    assert program.compile_seconds < 0.5, "NVRTC should build a small kernel in tens of ms"


def test_launcher_checks_once_and_again_when_argument_types_change(context, command_queue):
    template = ScaleTemplate(context, np.float32, {"wgs": 64})
    kernel = template.program.get_kernel("scale")
    fn = template.instantiate(command_queue, 100)
    fn.x.set(command_queue, np.arange(100, dtype=np.float32))
    launch = command_queue.launcher(kernel, 128, 64)
    launch([fn.y, fn.x, np.float32(3), np.uint32(100)])
    np.testing.assert_array_equal(fn.y.get(command_queue), 3 * np.arange(100, dtype=np.float32))
    with pytest.raises(TypeError, match="numpy scalar"):
        launch([fn.y, fn.x, 3.0, np.uint32(100)])
    with pytest.raises(accel.LaunchError, match="not a multiple"):
        command_queue.launcher(kernel, 100, 64)


def test_an_edit_to_an_included_file_within_the_same_second_is_seen(context, tmp_path):
    part = _write(tmp_path, "same_second_part.mako", "#define VALUE 1.0f\n")
    main = _write(tmp_path, "same_second_main.mako",
                  '<%include file="same_second_part.mako"/>\n'
                  "KERNEL void k(GLOBAL float *y) { y[0] = VALUE; }\n")
    first = context.build(main, {})
    stat = part.stat()
    part.write_text("#define VALUE 2.0f\n")  # same size, and (usually) the same whole second
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1000))
    second = context.build(main, {})
    assert second is not first and "#define VALUE 2.0f" in second.source.text
    assert {f.name for f in second.source.files} == {
        "portability.mako", "same_second_main.mako", "same_second_part.mako"}


def test_builds_in_helper_processes_match_builds_here_and_report_the_same_errors(
        context, command_queue, tmp_path):
    from autotune.accel import helpers

    path = _write(tmp_path, "helped.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${value}; }\n")
    with accel.recording() as used, accel.builds_in_helpers():
        program = context.build(path, {"value": "2.5f"})
    assert {f.name for f in used} >= {"helped.mako"}  # what the helper rendered is recorded
    assert [h.process.pid for h in helpers._started] and \
        all(h.process.pid != os.getpid() for h in helpers._started)
    if hasattr(os, "getpriority"):  # background work: below this process's CPU priority
        mine = os.getpriority(os.PRIO_PROCESS, 0)
        assert all(os.getpriority(os.PRIO_PROCESS, h.process.pid)
                   == min(mine + helpers.HELPER_NICENESS, 19) for h in helpers._started)
    here = accel.render(path, context.backend, {"value": "2.5f"}, header_kws={"backend": context.backend})
    assert program.source.text == here.text
    y = context.zeros(command_queue, 1, np.float32)
    command_queue.enqueue_kernel(program.get_kernel("k"), [y], 1, 1)
    assert y.get(command_queue)[0] == 2.5
    assert context.build(path, {"value": "2.5f"}) is program  # the same cache as builds here
    # a template error and a compile error read as they do for a build here
    broken = _write(tmp_path, "broken2.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${nope}; }\n")
    with accel.builds_in_helpers(), pytest.raises(accel.CompileError, match="nope"):
        context.build(broken, {})
    wrong = _write(tmp_path, "wrong.mako", "KERNEL void k(GLOBAL float *y) {\n y[0] = missing; }\n")
    with accel.builds_in_helpers(), pytest.raises(accel.CompileError, match="wrong.mako:2"):
        context.build(wrong, {})
    assert not helpers.active()


def test_build_helpers_started_ahead_ready_themselves_and_then_build(context, command_queue,
                                                                     tmp_path):
    from autotune.accel import helpers

    context.start_build_helpers()  # returns at once; the helpers ready themselves meanwhile
    assert len(helpers._started) == helpers.MAX_HELPERS
    pids = {h.process.pid for h in helpers._started}
    context.start_build_helpers()  # a second call starts no more
    assert {h.process.pid for h in helpers._started} == pids
    path = _write(tmp_path, "ahead.mako", "KERNEL void k(GLOBAL float *y) { y[0] = ${v}; }\n")
    with accel.builds_in_helpers():
        program = context.build(path, {"v": "4.5f"})
    y = context.zeros(command_queue, 1, np.float32)
    command_queue.enqueue_kernel(program.get_kernel("k"), [y], 1, 1)
    assert y.get(command_queue)[0] == 4.5
    assert {h.process.pid for h in helpers._started} == pids  # built by one of them
    assert all(h.process.poll() is None for h in helpers._started)


def _counting_builds(monkeypatch, fail_first: int = 0) -> list[int]:
    """Count pyopencl builds (each still runs); the first ``fail_first`` fail as PoCL's
    transient failures do: BUILD_PROGRAM_FAILURE with no diagnostic in the log."""
    import pyopencl as cl

    calls: list[int] = []
    real = cl.Program.build

    def build(self, *args, **kwargs):
        calls.append(1)
        if len(calls) <= fail_first:
            raise cl.RuntimeError("clBuildProgram failed: BUILD_PROGRAM_FAILURE")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(cl.Program, "build", build)
    return calls


def test_opencl_build_without_a_diagnostic_is_tried_again(context, command_queue, tmp_path,
                                                          monkeypatch):
    if context.backend != "opencl":
        pytest.skip("the retry is the OpenCL backend's")
    from autotune.accel import opencl

    calls = _counting_builds(monkeypatch, fail_first=opencl.BUILD_RETRIES)
    path = _write(tmp_path, "retried.mako", "KERNEL void k(GLOBAL float *y) { y[0] = 3.5f; }\n")
    program = context.build(path, {})
    assert len(calls) == 1 + opencl.BUILD_RETRIES
    y = context.zeros(command_queue, 1, np.float32)
    command_queue.enqueue_kernel(program.get_kernel("k"), [y], 1, 1)
    assert y.get(command_queue)[0] == 3.5


def test_opencl_builds_failing_past_the_retries_are_a_compile_error(context, tmp_path,
                                                                     monkeypatch):
    if context.backend != "opencl":
        pytest.skip("the retry is the OpenCL backend's")
    from autotune.accel import opencl

    calls = _counting_builds(monkeypatch, fail_first=1 + opencl.BUILD_RETRIES)
    # (a text no other test builds: the context compiles an identical source once)
    path = _write(tmp_path, "never.mako", "KERNEL void k(GLOBAL float *y) { y[0] = -6.125f; }\n")
    with pytest.raises(accel.CompileError, match="never.mako"):
        context.build(path, {})
    assert len(calls) == 1 + opencl.BUILD_RETRIES


def test_opencl_compile_error_is_not_tried_again(context, tmp_path, monkeypatch):
    if context.backend != "opencl":
        pytest.skip("the retry is the OpenCL backend's")
    calls = _counting_builds(monkeypatch)
    path = _write(tmp_path, "once.mako", "KERNEL void k(GLOBAL float *y) {\n y[0] = not_declared; }\n")
    with pytest.raises(accel.CompileError, match="once.mako:2"):
        context.build(path, {})
    assert len(calls) == 1


_HOLD_LOCK = """
import sys, time
from pathlib import Path
from autotune.accel import build_locks
with build_locks.shared_build(sys.argv[1]):
    Path(sys.argv[2]).write_text("held")
    time.sleep(float(sys.argv[3]))
"""


def _hold_lock(tmp_path, key: str, seconds: float):
    """A process that holds the build lock of ``key`` for ``seconds`` (returned once it
    holds it)."""
    import subprocess
    import sys
    import time

    flag = tmp_path / f"held-{key[:8]}"
    child = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, key, str(flag), str(seconds)])
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert child.poll() is None and time.monotonic() < deadline, "the lock holder did not start"
        time.sleep(0.02)
    return child


def test_a_build_waits_while_another_process_builds_the_same_source(context, tmp_path):
    """Processes of one host that compile one source at once (MPI ranks, a suite's workers)
    take turns, so that only the first compiles and the others read the driver's cache: an
    OpenCL build waits while another process holds its source's lock, and a different source
    (another lock) does not wait."""
    import time

    from autotune.accel import build_locks
    from autotune.accel.render import RenderedSource

    if context.device.backend != "opencl":
        pytest.skip("builds are shared between processes through the OpenCL driver's disk cache")
    text = f"__kernel void held(__global int *a) {{ a[0] = {time.time_ns() % 100000}; }}\n"
    source = RenderedSource(text, [("held.cl", 1)], "held.cl")
    key = context.build_lock_key(text, ())
    stripe = lambda k: int(k[:8], 16) % build_locks.STRIPES  # noqa: E731
    other = next(k for k in (build_locks.key("another source", str(i)) for i in range(200))
                 if stripe(k) != stripe(key))
    child = _hold_lock(tmp_path, key, 1.5)
    try:
        start = time.monotonic()
        with build_locks.shared_build(other):
            pass
        assert time.monotonic() - start < 0.5  # another source's lock: no wait
        program = context.compile(source)
        assert time.monotonic() - start > 0.9  # waited for the other process's build
        assert program.get_kernel("held") is not None
    finally:
        child.wait(timeout=60)
