"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest

#: The test files that take longest on a CPU with PoCL's cache cold (docs/performance.md, "The
#: suite on a CPU"), longest first, collected ahead of the others: pytest-xdist (``--dist
#: loadfile``) hands a worker the next file whenever it finishes one, so with the long files
#: out first the short ones even out the end, instead of one worker running the longest file
#: alone at the end (2 min of a 16 min suite, 2026-11-29).
LONGEST_FIRST = ("test_distributed.py", "test_half.py", "test_lqcd.py", "test_solvers.py",
                 "test_schwarz.py", "test_blas.py", "test_gemm.py")


def pytest_collection_modifyitems(config, items):
    """The files of :data:`LONGEST_FIRST` first, in that order; the rest as collected."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))


@pytest.fixture
def one_round(monkeypatch):
    """No second round for close candidates: for tests that count a scan's launches (the
    candidates with reps 3, say, differ by their work-group size only, often by less than
    REFINE_MARGIN, and would be timed again; the second round has its own test)."""
    from autotune import tune

    monkeypatch.setattr(tune.online.scan, "REFINE_AT_MOST", 1)  # where the scan reads it


@pytest.fixture
def db(tmp_path, monkeypatch):
    """A new tuning database file, made the default through ``AUTOTUNE_DB``."""
    path = tmp_path / "tune.db"
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    return path


_POSTGRES: dict = {}  #: data folder -> the pgserver server of this session


class PostgresOutage:
    """Stops the session's PostgreSQL server as a crash would (``pg_ctl stop -m immediate``)
    and starts it again, in the same data folder and socket."""

    def __init__(self, server):
        self.server = server
        self.stopped = False

    def stop(self) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.server.pgdata,
               user=self.server.system_user, timeout=60)
        self.stopped = True

    def start(self) -> None:
        with self.server._lock:
            self.server.ensure_postgres_running()
        self.stopped = False


@pytest.fixture
def postgres_outage(postgres_server):
    """Stop and start the session's PostgreSQL server; it runs again after the test."""
    outage = PostgresOutage(_POSTGRES[postgres_server])
    try:
        yield outage
    finally:
        if outage.stopped:
            outage.start()


@pytest.fixture(scope="session")
def postgres_server():
    """A real PostgreSQL server for this test session, from the ``pgserver`` wheel of the test
    extra: a new data folder, reached through a Unix socket in it (no TCP port is opened), and
    stopped and deleted after the session. Run as root, pgserver runs the server as its own
    unprivileged ``pgserver`` user (PostgreSQL refuses root)."""
    import shutil
    import tempfile
    import warnings
    from pathlib import Path

    try:
        with warnings.catch_warnings():  # platformdirs warns where XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import pgserver
        import psycopg  # noqa: F401 - the driver of the URLs below
    except ImportError as exc:
        pytest.skip(f"the PostgreSQL tests need the test extra's pgserver and psycopg ({exc}): "
                    "pip install -e '.[opencl,test]'")
    # short: the socket's path must fit in 107 bytes
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    server = pgserver.get_server(folder / "data", cleanup_mode="delete")
    _POSTGRES[folder / "data"] = server
    try:
        yield folder / "data"
    finally:
        server.cleanup()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server, request):
    """The SQLAlchemy URL of a new, empty database on the session's PostgreSQL server."""
    import re

    import sqlalchemy

    name = "t_" + re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:50]
    admin = sqlalchemy.create_engine(f"postgresql+psycopg://postgres@/postgres?host={postgres_server}",
                                     isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return f"postgresql+psycopg://postgres@/{name}?host={postgres_server}"


@pytest.fixture(scope="session")
def _broken_opencl_folder(tmp_path_factory):
    """Where this session's simulated OpenCL platforms live (``tests/broken_platform.py``).
    Skips, saying why, where the pyopencl wheel's PoCL is not installed."""
    from broken_platform import wheel_pocl

    missing = wheel_pocl()
    if isinstance(missing, str):
        pytest.skip(f"the broken-platform tests need the pyopencl wheel's PoCL: {missing}")
    return tmp_path_factory.mktemp("broken-opencl")


@pytest.fixture(scope="session")
def broken_opencl(_broken_opencl_folder) -> dict[str, str]:
    """The environment of a process that sees two OpenCL CPU platforms: ``opencl:0`` cannot
    build anything, ``opencl:1`` (the pyopencl wheel's PoCL) works."""
    import os

    from broken_platform import make

    return dict(os.environ, **make(_broken_opencl_folder))


@pytest.fixture(scope="session")
def broken_opencl_two_working(_broken_opencl_folder) -> dict[str, str]:
    """As :func:`broken_opencl` with a second working CPU platform: ``opencl:0`` broken,
    ``opencl:1`` and ``opencl:2`` working."""
    import os

    from broken_platform import make

    return dict(os.environ, **make(_broken_opencl_folder, working=True))
