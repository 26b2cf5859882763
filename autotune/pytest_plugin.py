"""pytest plugin (entry point ``pytest11``): device fixtures and tuning marks.

- ``context`` and ``command_queue`` fixtures, parametrized over the usable devices chosen with
  ``--devices=first|all|cuda|opencl`` (default ``first``: the first device of each backend) or
  device selectors separated by commas (``--devices=cuda:0``: one GPU of several); a
  device that fails the health check (an OpenCL platform that cannot build) is left out, and
  the report's header says why.
- Inside tests ``@autotuner`` returns its ``test=`` parameters without touching a database.
  ``@pytest.mark.force_autotune`` runs the tuning function on every call, with no caching
  (katsdpsigproc's contract), storing into a temporary database;
  ``@pytest.mark.autotune_database`` behaves as outside tests (tune on a miss, then serve from
  the memo and the database), with a fresh temporary database.
- ``@pytest.mark.cuda_only`` / ``@pytest.mark.opencl_only`` skip on the other backend.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from autotune import accel
from autotune.tune.serving import serving

_DEVICE_CHOICES = ("first", "all", "cuda", "opencl")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("autotune")
    group.addoption(
        "--devices", default="first",
        help="devices for the context fixture: first (first of each backend, default), all, "
             "cuda, opencl, or selectors separated by commas (cuda:0,opencl:0:0)",
    )
    group.addoption(
        "--autotune-use-db", action="store_true",
        help="tuned functions serve (and on a miss tune into) the configured database "
             "(AUTOTUNE_DB), as outside tests, instead of returning their test= parameters: for "
             "benchmarks run under pytest",
    )


def pytest_configure(config: pytest.Config) -> None:
    for line in (
        "force_autotune: run the tuning function on every call (no caching), into a temporary database",
        "autotune_database: tune on a miss and serve hits, as outside tests, with a temporary database",
        "cuda_only: run only with a CUDA context",
        "gpu_alone: a timing test that needs the GPU to itself (skipped on CUDA under pytest-xdist "
        "with several workers, whose contexts time-slice the GPU; .ci/gpu-suite runs these after)",
        "opencl_only: run only with an OpenCL context",
    ):
        config.addinivalue_line("markers", line)
    serving().test.active = not config.getoption("--autotune-use-db")


def pytest_unconfigure(config: pytest.Config) -> None:
    serving().test.active = False


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The devices the fixtures leave out because they fail the health check, and why."""
    return [f"autotune: device {s.selector} ({s.identity.name}) is left out of the fixtures: "
            f"{s.unusable}" for s in accel.all_devices() if s.unusable]


def _selected(config: pytest.Config) -> list[accel.DeviceSpec]:
    """The usable devices ``--devices`` asks for (an unusable one is never a parameter)."""
    cached = getattr(config, "_autotune_devices", None)
    if cached is not None:
        return cached
    choice = config.getoption("--devices")
    specs = accel.list_devices()
    if choice in ("cuda", "opencl"):
        specs = [s for s in specs if s.backend == choice]
    elif choice not in _DEVICE_CHOICES:
        wanted = [c.strip() for c in choice.split(",") if c.strip()]
        known = {s.selector: s for s in specs}
        unknown = [c for c in wanted if c not in known]
        if unknown or not wanted:
            raise pytest.UsageError(
                f"--devices={choice}: no device {', '.join(unknown) or 'named'} here; give "
                f"{', '.join(_DEVICE_CHOICES)} or selectors of {', '.join(known) or 'no devices'}")
        specs = [known[c] for c in dict.fromkeys(wanted)]
    elif choice == "first":
        seen: set[str] = set()
        firsts = []
        for s in specs:
            if s.backend not in seen:
                seen.add(s.backend)
                firsts.append(s)
        specs = firsts
    config._autotune_devices = specs  # type: ignore[attr-defined]
    return specs


def _device_id(spec: accel.DeviceSpec) -> str:
    name = "".join(c if c.isalnum() else "_" for c in spec.identity.name).strip("_")
    return f"{spec.selector}-{name[:24]}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "context" not in metafunc.fixturenames:
        return
    specs = _selected(metafunc.config)
    if not specs:
        params: list[Any] = [pytest.param(None, marks=pytest.mark.skip(reason="no device found"))]
        metafunc.parametrize("context", params, indirect=True, ids=["no-device"])
        return
    metafunc.parametrize("context", specs, indirect=True, ids=[_device_id(s) for s in specs])


_contexts: dict[str, accel.Context] = {}


@pytest.fixture
def context(request: pytest.FixtureRequest) -> accel.Context:
    """A context on one of the selected devices (the test runs once per device)."""
    spec: accel.DeviceSpec = request.param
    marks = {m.name for m in request.node.iter_markers()}
    if "cuda_only" in marks and spec.backend != "cuda":
        pytest.skip("cuda_only test on a non-CUDA device")
    if "opencl_only" in marks and spec.backend != "opencl":
        pytest.skip("opencl_only test on a non-OpenCL device")
    if "gpu_alone" in marks and spec.backend == "cuda" and \
            int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1) > 1:
        pytest.skip("needs the GPU to itself: other workers' contexts time-slice it, and event "
                    "intervals then hold their slices (run with -n 0, as .ci/gpu-suite does)")
    ctx = _contexts.get(spec.selector)
    if ctx is None:
        ctx = _contexts[spec.selector] = spec.create_context()
    return ctx


@pytest.fixture
def command_queue(context: accel.Context) -> accel.CommandQueue:
    """A command queue on ``context``."""
    return context.create_command_queue()


@pytest.fixture(autouse=True)
def _autotune_mode(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch):
    """Test mode by default; ``force_autotune`` and ``autotune_database`` tune into a fresh
    temporary database."""
    force = request.node.get_closest_marker("force_autotune") is not None
    cached = request.node.get_closest_marker("autotune_database") is not None
    if not (force or cached):
        yield
        return
    db = tmp_path_factory.mktemp("autotune-db") / "tuning.db"
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    serving().test.force = force
    serving().test.cached = cached
    serving().clear_memo()
    try:
        yield db
    finally:
        serving().test.force = False
        serving().test.cached = False
        serving().clear_memo()
