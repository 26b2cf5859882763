"""When the store fails, the computation goes on (issue 39): a disk that fills before a read,
during ``warm`` and during online tuning (a file-size limit, ``RLIMIT_FSIZE``, in a child
process: the real ``EFBIG`` a full disk gives, without root), a PostgreSQL server stopped and
started again under concurrent tuners, a lock held, hostile text in cells and import files,
database paths that cannot be used, and keys too long to read back."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from autotune import tune
from autotune.tune.records import TuningKey, TuningRecord
from autotune.tune.store import ResultStore, settings

from test_cli import run
from test_trust import StandIn, _fake_rows
from toy_templates import FakeTimedTemplate, calls

TESTS = Path(__file__).parent
REPO = TESTS.parent
FAKE = "toy_templates:FakeTimedTemplate"
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]))
ESC = "\x1b]0;owned\x07\x1b[2J\x9b31m"  # retitle the window, clear the screen, C1 CSI


def _limited(limit: int):
    """For ``preexec_fn``: files of the child may grow to ``limit`` bytes, as on a full disk
    (SIGXFSZ ignored, so writes fail with EFBIG instead of killing it)."""
    import resource
    import signal

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

    return apply


def _keys(db: Path) -> list[str]:
    """The stored keys' arguments, after SQLite's integrity check; a key twice would fail."""
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        rows = [r[0] for r in connection.execute("SELECT arguments FROM tuning_results")]
    connection.close()
    assert len(rows) == len(set(rows))
    return sorted(rows)


def _sizes(db: Path) -> list[int]:
    return sorted(json.loads(arguments)["size"] for arguments in _keys(db))


# -- a full disk ---------------------------------------------------------------------------------


_READ_ON_FULL_DISK = textwrap.dedent("""
    import json, logging, sys
    from autotune import tune
    from autotune.cli import main
    from test_trust import StandIn
    from toy_templates import FakeTimedTemplate, calls
    logging.basicConfig(level=logging.WARNING, format="WARN %(message)s")
    ctx = StandIn()
    with tune.use_database(sys.argv[1]):
        out = [FakeTimedTemplate.autotune(ctx, 10), FakeTimedTemplate.autotune(ctx, 11)]
    shown = main(["show", "--db", sys.argv[1]])
    print(json.dumps({"results": out, "generated": calls["fake"], "show": shown}))
""")


def test_a_full_disk_serves_stored_keys_tunes_misses_and_shows(tmp_path):
    """A WAL database whose -shm file cannot be made: read immutably, served, shown."""
    db = tmp_path / "full.db"
    _fake_rows(db, sizes=(10,))
    tune.serving().store(f"sqlite:///{db}").dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full.db"]
    child = subprocess.run([sys.executable, "-c", _READ_ON_FULL_DISK, str(db)], env=ENV,
                           capture_output=True, text=True, timeout=120, preexec_fn=_limited(0))
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["results"] == [{"block": 3}] * 2 and report["show"] == 0
    assert report["generated"] == 5, "the stored key is served; only the miss is tuned"
    assert "FakeTimedTemplate" in child.stdout and "size=10" in child.stdout
    warnings = [line for line in child.stderr.splitlines() if line.startswith("WARN")]
    assert sum("read as immutable" in w for w in warnings) == 1, child.stderr
    assert any("could not store the tuning result" in w and "disk" in w for w in warnings)
    assert any("before the process ended" in w for w in warnings), child.stderr
    assert "Traceback" not in child.stderr
    assert _sizes(db) == [10]  # nothing lost, nothing half-written


def _warm(db: Path, **popen: Any) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "autotune", "warm", "--db", str(db), "--template",
         "toy_templates:SlowTemplate", "--quiet", "SlowTemplate"], env=ENV,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def _rows(db: Path) -> int:
    """Results in ``db`` now, read as another process would (0 before its tables exist)."""
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        try:
            count = connection.execute("SELECT count(*) FROM tuning_results").fetchone()[0]
        except sqlite3.OperationalError:
            count = 0
    connection.close()
    return count


@pytest.mark.skipif(not hasattr(__import__("resource"), "prlimit"), reason="needs prlimit (Linux)")
def test_warm_on_a_disk_that_fills_exits_3_naming_what_was_not_stored(tmp_path):
    """Once ``warm`` has stored its first key, no file of it may grow any more (the database
    file holds its first page; the rest is in the write-ahead log, which cannot grow either)."""
    import resource

    db = tmp_path / "filling.db"
    child = _warm(db, preexec_fn=_limited(resource.RLIM_INFINITY))
    deadline = time.monotonic() + 120
    while _rows(db) == 0 and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    resource.prlimit(child.pid, resource.RLIMIT_FSIZE, (db.stat().st_size, resource.RLIM_INFINITY))
    out, err = child.communicate(timeout=180)
    assert child.returncode == 3, out + err
    assert "Traceback" not in err
    unstored = [line for line in err.splitlines() if line.startswith("NOT STORED")]
    tuned = [line for line in out.splitlines() if line.startswith("SlowTemplate")
             and " tuned " in f"{line} " and "write failed" not in line]
    assert unstored and len(unstored) + len(tuned) == 6, out + err
    assert all("disk full" in line for line in unstored)
    assert f"{len(unstored)} tuned, write failed" in out
    assert "could not be written" in err and "exit status 3" in err
    # what warm says it stored is there, intact, once (the last try at exit may add some)
    assert len(tuned) <= len(_keys(db)) < 6


_ONLINE_ON_FULL_DISK = textwrap.dedent("""
    import json, logging, resource, signal, sys, time
    from autotune import accel, tune
    from autotune.tune.store import ResultStore, settings
    from online_busy import Work, busy_tuner
    logging.basicConfig(level=logging.WARNING, format="WARN %(message)s")
    settings.RETRY_SECONDS = 0.2
    db = sys.argv[1]
    context = accel.create_some_context()
    tuner = busy_tuner(context, db, samples=2)
    work = Work(context)
    for wgs in (16, 32, 64):  # every variant built first: a device compiler writes files too
        work._launch({"reps": 3, "wgs": wgs})
    work.queue.finish()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))  # the disk is full
    used = [work.step(tuner) for _ in range(40)]
    full = {"best": tuner.best, "stored": tuner.stored, "rows": len(ResultStore.open(db).records())}
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    deadline = time.monotonic() + 30  # room again: the kept result is written while it runs
    while len(ResultStore.open(db).records()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    work.step(tuner)
    print(json.dumps({**full, "launches": len(used), "later": len(ResultStore.open(db).records())}))
""")


@pytest.mark.force_autotune
def test_online_tuning_on_a_full_disk_goes_on_and_stores_once_there_is_room(context, tmp_path):
    db = tmp_path / "online.db"
    _fake_rows(db, sizes=(1,))  # a database in use, in WAL mode
    tune.serving().store(f"sqlite:///{db}").dispose()
    selector = "cuda" if context.device.backend == "cuda" else "opencl"
    child = subprocess.run([sys.executable, "-c", _ONLINE_ON_FULL_DISK, str(db)],
                           env=dict(ENV, AUTOTUNE_DEVICE=selector), capture_output=True,
                           text=True, timeout=180)
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["launches"] == 40 and report["best"] is not None
    assert report["stored"] is False and report["rows"] == 1  # the old row, read immutably
    assert report["later"] == 2, child.stderr
    assert "could not store the tuning result" in child.stderr and "Traceback" not in child.stderr
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        origins = sorted(r[0] for r in connection.execute("SELECT origin FROM tuning_results"))
    connection.close()
    assert origins == ["offline", "online"]


# -- a lock held, then released: the kept result is written while the process runs -----------


@pytest.mark.autotune_database
def test_a_result_kept_after_a_busy_lock_is_written_in_the_background(tmp_path, monkeypatch,
                                                                      caplog):
    monkeypatch.setattr(settings, "BUSY_TIMEOUT_SECONDS", 0.2)
    monkeypatch.setattr(settings, "RETRY_SECONDS", 0.1)
    db = tmp_path / "busy.db"
    _fake_rows(db, sizes=(1,))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with tune.use_database(db), caplog.at_level(logging.WARNING, logger="autotune.tune"):
            assert FakeTimedTemplate.autotune(StandIn(), 30) == {"block": 3}
        assert "written when the database takes writes again" in caplog.text
        assert tune.serving().kept.waiting(f"sqlite:///{db}") != []
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    deadline = time.monotonic() + 20  # no other tuning: the retry thread writes it
    while tune.serving().kept.waiting(f"sqlite:///{db}") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _sizes(db) == [1, 30]


# -- a PostgreSQL server stopped and started again under concurrent tuners ----------------------


TUNERS = 4


def _tune_through_outage(url: str, worker: int, tuned, restarted, results) -> None:
    """Tune keys of its own and a shared one while the server is down, then wait (running)
    until its results are stored once the server is back."""
    try:
        sys.path.insert(0, str(TESTS))
        logging.basicConfig(level=logging.WARNING)
        from autotune.tune.store import ResultStore as Store, settings as store_settings

        store_settings.RETRY_SECONDS = 0.3
        chosen = {}
        with tune.use_database(url):
            for size in (3000 + worker, 3100 + worker, 300):
                chosen[size] = FakeTimedTemplate.autotune(StandIn(), size)
        tuned.release()
        assert restarted.wait(timeout=120)
        mine = {3000 + worker, 3100 + worker, 300}
        deadline = time.monotonic() + 60
        seen: set[int] = set()
        while not mine <= seen and time.monotonic() < deadline:
            time.sleep(0.2)
            seen = {json.loads(r.key.arguments)["size"] for r in Store(url).records()}
        results.put((worker, chosen, sorted(mine - seen), None))
    except BaseException:
        results.put((worker, {}, [], traceback.format_exc()))


def test_tuners_survive_a_postgres_outage_and_store_everything_once_it_is_back(
        capsys, postgres_url, postgres_outage):
    import multiprocessing

    ResultStore(postgres_url).dispose()  # the tables exist before the crash
    postgres_outage.stop()
    # warm, which would tune for nothing, says so in one line
    code, _, err = run(capsys, "warm", "--db", postgres_url, "--template", FAKE, "--quiet",
                       "FakeTimedTemplate")
    assert "is the server down?" in _one_line_error(code, err)
    context = multiprocessing.get_context("spawn")
    tuned, restarted, results = context.Semaphore(0), context.Event(), context.Queue()
    processes = [context.Process(target=_tune_through_outage,
                                 args=(postgres_url, w, tuned, restarted, results))
                 for w in range(TUNERS)]
    for process in processes:
        process.start()
    try:
        for _ in processes:  # every tuned call returned while the server was down
            assert tuned.acquire(timeout=120)
    finally:
        postgres_outage.start()
        restarted.set()
    reports = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    errors = [report[-1] for report in reports if report[-1]]
    assert not errors, "\n".join(errors)
    assert [p.exitcode for p in processes] == [0] * TUNERS
    assert all(chosen == {s: {"block": 3} for s in chosen} and len(chosen) == 3
               for _, chosen, _, _ in reports)
    assert all(missing == [] for _, _, missing, _ in reports), reports  # stored while running
    records = ResultStore(postgres_url).records()
    keys = [r.key for r in records]
    assert len(keys) == len(set(keys)) == 2 * TUNERS + 1  # none lost, none twice


# -- hostile text is shown escaped --------------------------------------------------------------


def _hostile_rows(db: Path) -> None:
    _fake_rows(db, sizes=(1,))
    store = ResultStore(f"sqlite:///{db}")
    (record,) = store.records()
    key = TuningKey(record.key.function, record.key.version, f"GPU{ESC}", "Test platform",
                    "1.0", record.key.arguments)
    store.put(TuningRecord(key, record.parameters, record.score, f"1{ESC}",
                           fingerprint=record.fingerprint, sources=record.sources))
    store.dispose()


@pytest.mark.autotune_database
def test_show_export_and_logs_escape_control_characters(capsys, tmp_path, monkeypatch, caplog):
    db = tmp_path / "hostile.db"
    _hostile_rows(db)
    code, out, err = run(capsys, "show", "--db", db)
    assert code == 0 and "GPU\\x1b]0;owned\\x07\\x1b[2J\\x9b31m" in out, out
    assert not any(c in out + err for c in "\x1b\x07\x9b")
    code, out, err = run(capsys, "export", "--db", db, "--format", "csv")
    assert code == 0 and "GPU\\x1b]0;owned" in out and "1\\x1b" in out
    assert not any(c in out + err for c in "\x1b\x07\x9b")
    # JSON keeps the exact value (written as \\u escapes, so nothing raw either)
    code, out, err = run(capsys, "export", "--db", db, "--format", "json")
    assert code == 0 and not any(c in out for c in "\x1b\x07\x9b")
    assert {row["device_name"] for row in json.loads(out)} == {
        "Stand-in device", f"GPU{ESC}"}
    # a log naming the hostile device: escaped too
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    with tune.use_database(db), caplog.at_level(logging.INFO, logger="autotune.tune"):
        FakeTimedTemplate.autotune(StandIn("Another device"), 1)
    assert "GPU\\x1b]0;owned" in caplog.text, caplog.text
    assert not any(c in caplog.text for c in "\x1b\x07\x9b")


def test_import_errors_name_hostile_rows_escaped(capsys, tmp_path):
    rows = [{"function": f"f{ESC}", "version": 0, "device_name": f"d{ESC}",
             "device_platform": "p", "driver_version": "1", "arguments": "{}",
             "parameters": "not json", "score": 1.0}]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(rows))
    code, out, err = run(capsys, "import", path, "--db", tmp_path / "t.db")
    assert code == 2 and "row 1" in err and "d\\x1b]0;owned" in err, err
    assert not any(c in out + err for c in "\x1b\x07\x9b")


# -- every path and import error is one line, status 2 ------------------------------------------


def _one_line_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("autotune "), err
    return lines[0]


@pytest.mark.parametrize("command", ["show", "export", "warm", "import"])
def test_unusable_database_paths_are_one_line_errors(capsys, tmp_path, command):
    afile = tmp_path / "plain-file"
    afile.write_text("")
    long_name = tmp_path / ("x" * 300 + ".db")
    long_folder = tmp_path / ("y" * 300) / "t.db"
    source = tmp_path / "source.json"
    source.write_text("[]")
    extra = {"warm": ["--template", FAKE, "--quiet", "FakeTimedTemplate"],
             "import": [source]}.get(command, [])
    for path, why in [(long_name, "longer than the file system allows"),
                      (long_folder, "longer than the file system allows"),
                      (afile / "t.db", "a file, not a folder")]:
        code, _, err = run(capsys, command, *extra, "--db", path)
        if command in ("show", "export") and why.startswith("a file"):
            assert "no tuning database at" in _one_line_error(code, err)
            continue
        line = _one_line_error(code, err)
        assert why in line and "use another path" in line, line


def test_import_of_an_unusable_file_path_is_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "import", tmp_path / ("z" * 300 + ".json"), "--db", tmp_path / "t.db")
    assert "File name too long" in _one_line_error(code, err)


def _python_for_nobody() -> tuple[str, dict[str, str], int]:
    """A Python of this version that ``nobody`` may run, with this environment's packages (a
    virtual environment's interpreter may live in root's home); skips where there is none."""
    import pwd
    import shutil
    import site

    uid = pwd.getpwnam("nobody").pw_uid
    env = dict(ENV, HOME="/tmp", PYTHONPATH=os.pathsep.join(
        [ENV["PYTHONPATH"], *site.getsitepackages()]))
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for python in dict.fromkeys(filter(None, [sys.executable, shutil.which(version),
                                              f"/usr/bin/{version}"])):
        try:
            subprocess.run([python, "-c", "import autotune.cli, sqlalchemy, pandas"], env=env,
                           user=uid, cwd="/", check=True, capture_output=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        return python, env, uid
    pytest.skip(f"root searches every folder, and nobody cannot run a {version} with this "
                "environment's packages")


@pytest.mark.skipif(not hasattr(os, "setuid"), reason="needs POSIX users")
def test_a_database_in_a_folder_this_user_cannot_search(tmp_path):
    """A folder without search permission for this user (``0600``); as root, which may search
    any folder, the commands run as ``nobody`` on a folder of root's (``0700``)."""
    private = Path(tempfile.mkdtemp(prefix="autotune-private-"))
    try:
        private.chmod(0o700 if os.geteuid() == 0 else 0o600)
        db = private / "inner" / "t.db"
        python, env, as_user = sys.executable, dict(ENV, HOME="/tmp"), None
        if os.geteuid() == 0:
            python, env, as_user = _python_for_nobody()
        for command in (["show"], ["warm", "--template", FAKE, "--quiet", "FakeTimedTemplate"]):
            child = subprocess.run(
                [python, "-m", "autotune", *command, "--db", str(db)], env=env,
                capture_output=True, text=True, timeout=120, user=as_user, cwd="/")
            assert child.returncode == 2, child.stderr
            line = child.stderr.strip().splitlines()
            assert len(line) == 1 and "may not be searched" in line[0], child.stderr
    finally:
        private.chmod(0o755)
        import shutil

        shutil.rmtree(private)


def test_malformed_imports_are_one_line_errors_and_write_nothing(capsys, tmp_path):
    target = tmp_path / "target.db"
    _fake_rows(target, sizes=(1,))
    code, out, _ = run(capsys, "export", "--db", target, "--format", "json")
    (row,) = json.loads(out)
    cases = {
        "huge-version.json": json.dumps([{**row, "version": 2**70}]),
        "negative-version.json": json.dumps([{**row, "version": -1}]),
        "nul.json": json.dumps([{**row, "device_name": "a\x00b"}]),
        "surrogate.json": json.dumps([{**row, "device_name": "a\ud800b"}]),
        "long-field.csv": "function,version,device_name,device_platform,driver_version,"
                          f"arguments,parameters,score\nf,0,{'d' * 140_000},p,1,{{}},{{}},1\n",
        "bad-quote.csv": 'function,version,device_name,device_platform,driver_version,'
                         'arguments,parameters,score\nf,0,"d\x00,p,1,{},{},1\n',
    }
    for name, text in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        code, _, err = run(capsys, "import", path, "--db", target)
        line = _one_line_error(code, err)
        assert "nothing imported" in line, (name, line)
    assert _sizes(target) == [1]


# -- keys too long to be read back are refused when tuned ---------------------------------------


@pytest.mark.autotune_database
def test_a_key_too_long_to_read_back_is_refused_naming_the_argument(tmp_path):
    calls.clear()
    with tune.use_database(tmp_path / "t.db"):
        with pytest.raises(tune.encoding.ArgumentsTooLongError,
                           match=r"70011 characters, more than the 65536 .*argument 'size'"):
            FakeTimedTemplate.autotune(StandIn(), "s" * 70_000)
        assert calls["fake"] == 0  # refused before anything was tuned
        assert FakeTimedTemplate.autotune(StandIn(), "s" * 65_000) == {"block": 3}
        assert calls["fake"] == 5
        tune.clear_memo()  # a long key under the limit is read back, not tuned again
        assert FakeTimedTemplate.autotune(StandIn(), "s" * 65_000) == {"block": 3}
    assert calls["fake"] == 5
