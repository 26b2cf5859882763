"""A device that cannot compile is never chosen (issue #38): an OpenCL platform that cannot
build a trivial kernel is listed as unusable with the reason, skipped with one warning, and
an error, not a traceback, when nothing usable is left. The machine of the issue (a second
OpenCL CPU platform whose builds fail) is made by ``tests/broken_platform.py``; each check
runs in a new process, whose OpenCL loader sees it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autotune.accel import opencl

ROOT = Path(__file__).parent.parent


def _python(env: dict, *args: str) -> subprocess.CompletedProcess:
    env = dict(env, PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          env=env)


def test_devices_shows_the_broken_platform_as_unusable_with_its_reason(broken_opencl):
    out = _python(broken_opencl, "-m", "autotune", "devices")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("opencl:0:0: ") and lines[0].endswith("(UNUSABLE)")
    reason = next(line for line in lines if line.strip().startswith("unusable:"))
    assert "cannot build a trivial kernel (error: " in reason and "file not found" in reason
    assert "select another device with AUTOTUNE_DEVICE" in reason
    working = next(line for line in lines if line.startswith("opencl:1:0: "))
    assert "UNUSABLE" not in working
    assert sum("unusable:" in line for line in lines) == 1
    # the compiler's own output (clang writes to the terminal) is kept out
    assert "error generated" not in out.stdout + out.stderr


CHOOSE = """
import json, time
from autotune import accel
from autotune.accel import opencl, selection
start = time.perf_counter()
listed = [s.selector for s in accel.list_devices()]
first = time.perf_counter() - start
chosen = [s.selector for s in accel.select_devices("opencl")]
start = time.perf_counter()
accel.list_devices()
again = time.perf_counter() - start
ctx = accel.create_some_context()
print(json.dumps({"listed": listed, "chosen": chosen, "first": first, "again": again,
                  "context": ctx.device == accel.select_devices()[0].identity}))
"""


def test_a_broken_platform_is_skipped_with_one_warning_and_checked_once(broken_opencl):
    """Listing, selecting and opening skip opencl:0:0 with one warning in all (naming the
    device, the cause and the fix); the check runs once a process (a second listing costs
    next to nothing)."""
    import json

    out = _python(dict(broken_opencl, AUTOTUNE_DEVICE="opencl"), "-c", CHOOSE)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["listed"] == ["opencl:1:0"] and got["chosen"] == ["opencl:1:0"]
    assert got["context"]
    warnings = [line for line in out.stderr.splitlines() if "skipping device" in line]
    assert len(warnings) == 1, out.stderr
    assert "skipping device opencl:0:0" in warnings[0]
    assert "cannot build a trivial kernel" in warnings[0] and "AUTOTUNE_DEVICE" in warnings[0]
    assert got["again"] < 0.01, got  # cached: no context, no build


def test_nothing_usable_is_one_clear_error_without_a_traceback(broken_opencl):
    out = _python(dict(broken_opencl, AUTOTUNE_DEVICE="opencl:0"), "-m", "autotune", "warm",
                  "--dry-run")
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("autotune warm: error: no usable device matches 'opencl:0': "
                               "opencl:0:0 (")
    assert "is unusable: platform 'Portable Computing Language'" in lines[0]
    assert "Traceback" not in out.stderr and "error generated" not in out.stderr


def test_the_test_fixtures_skip_the_unusable_device(broken_opencl):
    """The pytest plugin's context fixture runs on opencl:1:0, never on the broken device,
    and the report's header says which device is left out and why."""
    out = _python(broken_opencl, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0",
                  "--collect-only", "--devices", "all",
                  str(ROOT / "tests" / "test_accel_devices.py")
                  + "::test_identity_fields_are_filled_and_stable")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line.strip() for line in out.stdout.splitlines() if "<Function " in line]
    assert len(ids) == 1 and "[opencl:1:0-" in ids[0], out.stdout
    assert "autotune: device opencl:0:0 (" in out.stdout
    assert "is left out of the fixtures: platform 'Portable Computing Language'" in out.stdout


def test_the_pocl_cpu_failure_names_the_distributions_pocl_and_one_error_line():
    """What PoCL 3.0's LLVM 14 says on AMD Zen 5 (pocl/pocl#1049): the reason is its first
    error line, not the long list of CPUs that follows, and the fix is the distribution's
    PoCL selected with AUTOTUNE_DEVICE."""
    log = ("clBuildProgram failed: BUILD_PROGRAM_FAILURE - clBuildProgram failed: "
           "BUILD_PROGRAM_FAILURE\n\nBuild on <pyopencl.Device 'cpu-generic'>:\n\n"
           "error: unknown target CPU 'generic'\n"
           "note: valid target CPU values are: " + ", ".join(["znver3"] * 200) + "\n")
    said = opencl.explain_build_failure("Portable Computing Language", "OpenCL 3.0 PoCL 3.0",
                                        log)
    assert said.startswith("platform 'Portable Computing Language' (OpenCL 3.0 PoCL 3.0) "
                           "cannot build a trivial kernel (error: unknown target CPU "
                           "'generic'); ")
    assert "apt-get install pocl-opencl-icd" in said and "AUTOTUNE_DEVICE=opencl:P" in said
    assert "znver3" not in said and "\n" not in said
    other = opencl.explain_build_failure("Some GPU", "OpenCL 1.2", "error: internal fault\n")
    assert "pocl-opencl-icd" not in other and "select another device" in other
