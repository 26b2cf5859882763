"""``python -m autotune`` on temporary databases, on the devices found (PoCL in CI)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.tune.registry import registered_templates
from autotune.tune.store import ResultStore

TESTS = Path(__file__).parent
FAKE = "toy_templates:FakeTimedTemplate"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _rows(out: str, status: str) -> int:
    """Rows of warm's table with this status."""
    return sum(1 for line in out.splitlines()
               if line.lstrip().startswith("FakeTimedTemplate") and f" {status} " in line)


def test_registry_holds_the_shipped_templates():
    names = {t.name for t in registered_templates()}
    assert "scale" in names


def test_devices_lists_identities(capsys):
    code, out, _ = run(capsys, "devices")
    assert code == 0
    assert "platform" in out and "driver" in out


def test_warm_with_only_a_template_option_warms_only_that_template(capsys, db):
    code, out, _ = run(capsys, "warm", "--dry-run", "--template", FAKE, "--quiet")
    assert code == 0 and out.count("would tune") == 3
    assert {line.split()[0] for line in out.splitlines() if "would tune" in line} == {
        "FakeTimedTemplate"}
    # named operations still choose among the registered templates and the given ones
    code, out, _ = run(capsys, "warm", "--dry-run", "--template", FAKE, "--quiet", "scale",
                       "FakeTimedTemplate")
    assert code == 0 and out.count("would tune") == 5  # 3 of its own, float32 and float64 of scale
    assert {line.split()[0] for line in out.splitlines() if "would tune" in line} == {
        "FakeTimedTemplate", "scale"}


def test_warm_then_show_then_skip(capsys, db):
    code, out, _ = run(capsys, "warm", "--dry-run", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    assert code == 0 and out.count("would tune") == 3
    assert not db.exists(), "a dry run must not create the database"
    code, out, _ = run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    assert code == 0, out
    assert _rows(out, "tuned") == 3 and "block=3" in out
    assert "warm: 3 keys on 1 device: 3 tuned, 0 stored, 0 failed" in out
    assert "3.00x" in out  # test= block=1 costs 3 us, the best (block=3) 1 us
    code, out, _ = run(capsys, "show")
    assert code == 0 and out.count("FakeTimedTemplate") == 3 and "block=3" in out
    code, out, _ = run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    assert code == 0 and _rows(out, "stored") == 3
    before = ResultStore(f"sqlite:///{db}").records()
    code, out, _ = run(capsys, "warm", "--template", FAKE, "--quiet", "--force", "FakeTimedTemplate")
    after = ResultStore(f"sqlite:///{db}").records()
    assert _rows(out, "tuned") == 3
    assert all(a.created_at > b.created_at for a, b in zip(after, before))


def test_warm_real_template_on_a_device(capsys, db, context):
    code, out, _ = run(capsys, "warm", "scale", "--device", _selector(context), "--quiet")
    assert code == 0, out
    assert sum(1 for line in out.splitlines() if line.lstrip().startswith("scale") and " tuned " in line) == 2
    rows = ResultStore(f"sqlite:///{db}").records(function="operations.scale.ScaleTemplate.autotune")
    assert {r.key.device_name for r in rows} == {context.device.name}


def _selector(context):
    from autotune import accel

    return next(s.selector for s in accel.list_devices() if s.identity == context.device)


def test_failed_keys_give_a_nonzero_exit_with_why(capsys, db):
    code, out, err = run(capsys, "warm", "--template", "toy_templates:FailingTemplate", "--quiet",
                         "FailingTemplate")
    assert code == 1
    assert "failed" in out
    assert "FAILED FailingTemplate" in err and "plain failure" in err


def test_unknown_operation_and_bad_device_are_one_line_errors(capsys, db):
    code, _, err = run(capsys, "warm", "no_such_operation")
    assert code == 2 and "unknown operation" in err and "scale" in err
    code, _, err = run(capsys, "warm", "--device", "cuda:77")
    assert code == 2 and err.count("\n") >= 1 and "Traceback" not in err
    with pytest.raises(SystemExit) as info:
        main(["frobnicate"])
    assert info.value.code == 2


def test_unreadable_database_is_one_clear_line(capsys, tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"garbage" * 1000)
    code, _, err = run(capsys, "show", "--db", bad)
    assert code == 2 and "tuning database" in err and "not a database" in err and "Traceback" not in err
    code, _, err = run(capsys, "show", "--db", tmp_path / "missing.db")
    assert code == 2 and "no tuning database" in err
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize("fmt", ["json", "csv"])
def test_export_import_round_trip(capsys, db, tmp_path, fmt):
    run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    out_file = tmp_path / f"results.{fmt}"
    code, _, _ = run(capsys, "export", "--format", fmt, "--out", out_file)
    assert code == 0 and out_file.stat().st_size > 0
    other = tmp_path / "other.db"
    code, out, _ = run(capsys, "import", out_file, "--db", other)
    assert code == 0 and "3 added" in out
    mine = ResultStore(f"sqlite:///{db}").records()
    theirs = ResultStore(f"sqlite:///{other}").records()
    assert [(r.key, r.parameters, r.score) for r in mine] == \
        [(r.key, r.parameters, r.score) for r in theirs]
    assert [r.created_at for r in mine] == [r.created_at for r in theirs]


def test_import_keeps_ours_unless_told_otherwise(capsys, db, tmp_path):
    run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    exported = json.loads(_export_json(capsys))
    assert len(exported) == 3
    exported[0]["score"] /= 2           # better than ours
    exported[0]["parameters"] = '{"block":2}'
    exported[1]["score"] *= 2           # worse than ours
    exported[1]["parameters"] = '{"block":4}'
    exported[2]["arguments"] = '{"size":99}'  # a key we lack: added
    path = tmp_path / "theirs.json"
    path.write_text(json.dumps(exported))

    def params():
        rows = {r.key.arguments: r for r in ResultStore(f"sqlite:///{db}").records()}
        return [json.loads(rows[e["arguments"]].parameters)["block"] for e in exported[:2]], len(rows)

    code, out, _ = run(capsys, "import", path)
    assert code == 0 and "keep ours" in out
    assert "1 added" in out and "0 replaced" in out and "2 kept" in out
    assert params() == ([3, 3], 4)
    code, out, _ = run(capsys, "import", path, "--on-conflict", "better")
    assert code == 0 and "if the imported score is lower" in out
    assert "0 added" in out and "1 replaced" in out and "2 kept" in out
    assert params() == ([2, 3], 4)
    code, out, _ = run(capsys, "import", path, "--replace")
    assert code == 0 and "replace ours" in out and "3 replaced" in out
    assert params() == ([2, 4], 4)


def _export_json(capsys) -> str:
    code, out, _ = run(capsys, "export", "--format", "json")
    assert code == 0
    return out


def test_import_from_another_database_and_bad_files(capsys, db, tmp_path):
    other = tmp_path / "other.db"
    run(capsys, "warm", "--template", FAKE, "--quiet", "--db", other, "FakeTimedTemplate")
    code, out, _ = run(capsys, "import", other)
    assert code == 0 and "3 added" in out
    code, out, _ = run(capsys, "import", other)
    assert "3 kept" in out
    bad = tmp_path / "bad.json"
    bad.write_text('[{"function": "f"}]')
    code, _, err = run(capsys, "import", bad)
    assert code == 2 and "missing field" in err
    code, _, err = run(capsys, "import", tmp_path / "nope.csv")
    assert code == 2 and "does not exist" in err


def test_clear_asks_and_deletes(capsys, db, monkeypatch):
    run(capsys, "warm", "--template", FAKE, "--quiet", "FakeTimedTemplate")
    monkeypatch.setattr(sys, "stdin", open(os.devnull))
    code, _, err = run(capsys, "clear")
    assert code == 2 and "--yes" in err
    assert len(ResultStore(f"sqlite:///{db}").records()) == 3
    code, out, _ = run(capsys, "clear", "--yes", "--function", "%FakeTimed%")
    assert code == 0 and "deleted 3" in out
    store = ResultStore(f"sqlite:///{db}")
    assert store.records() == [] and store.trials() == []


def test_help_explains_the_database_with_an_example(capsys):
    for command in ("warm", "show", "export", "import", "clear", "plot", "report", "devices"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        out = capsys.readouterr().out
        assert "AUTOTUNE_DB" in out and "Example:" in out, command


def test_interrupted_warm_resumes_without_retuning(tmp_path):
    db = tmp_path / "resume.db"
    log = tmp_path / "generate.log"
    env = dict(os.environ, AUTOTUNE_DB=str(db), SLOW_TEMPLATE_LOG=str(log),
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "autotune", "warm", "--quiet", "--template",
            "toy_templates:SlowTemplate", "SlowTemplate"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    done_first: list = []
    while time.monotonic() < deadline and len(done_first) < 2:
        time.sleep(0.1)
        if db.exists():
            done_first = ResultStore(f"sqlite:///{db}").records()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 2 <= len(done_first) < 6, "the run should be killed part-way"
    first = {r.key.arguments: r.created_at for r in ResultStore(f"sqlite:///{db}").records()}
    lines_before = log.read_text().splitlines()
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    rows = ResultStore(f"sqlite:///{db}").records()
    assert len(rows) == 6 and len({r.key for r in rows}) == 6
    for r in rows:
        if r.key.arguments in first:
            assert r.created_at == first[r.key.arguments], "a finished key was tuned again"
    retuned = {int(line.split()[0]) for line in log.read_text().splitlines()[len(lines_before):]}
    finished = {json.loads(a)["index"] for a in first}
    assert not retuned & finished
    assert retuned | finished == set(range(6))


def test_warm_all_devices_with_jobs(capsys, db):
    from autotune import accel

    devices = accel.list_devices()
    if len(devices) < 2:
        pytest.skip("needs two devices (the GPU machine has CUDA and PoCL)")
    code, out, _ = run(capsys, "warm", "--all-devices", "--jobs", "2", "--template", FAKE,
                       "FakeTimedTemplate")
    assert code == 0, out
    rows = ResultStore(f"sqlite:///{db}").records()
    assert {r.key.device_name for r in rows} == {d.identity.name for d in devices}
    # identical GPUs share their keys: each is tuned once, on one of them
    assert len(rows) == 3 * len({d.identity for d in devices})
    assert f"keys on {len(devices)} devices:" in out  # identical GPUs count as two


def test_warm_rejects_a_bad_match_mode_once(capsys, db, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_MATCH", "closest")
    code, out, err = run(capsys, "warm", "--template", FAKE, "FakeTimedTemplate", "--quiet")
    assert code == 2 and "AUTOTUNE_MATCH" in err and out == ""


def test_import_refuses_a_foreign_sqlite_database(capsys, db, tmp_path):
    import sqlite3

    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("create table something (a int)")
    before = foreign.read_bytes()
    code, _, err = run(capsys, "import", foreign)
    assert code == 2 and "not an autotune" in err
    assert foreign.read_bytes() == before


def test_warm_under_mpiexec_splits_the_keys_among_ranks(tmp_path, context):
    """Two ranks on devices of one class (here the same device) tune each key once between
    them, into one database; rank 0 reports every key."""
    from autotune import accel
    from test_distributed import _mpiexec

    db = tmp_path / "ranks.db"
    log = tmp_path / "generate.log"
    env = dict(os.environ, AUTOTUNE_DB=str(db), SLOW_TEMPLATE_LOG=str(log),
               AUTOTUNE_DEVICE="cuda" if context.device.backend == "cuda" else "opencl",
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    argv = [_mpiexec(), "-n", "2", sys.executable, "-m", "autotune", "warm", "--quiet",
            "--template", "toy_templates:SlowTemplate", "SlowTemplate"]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    # each rank on its own device of the class where there are two (a two-GPU machine)
    alike = sum(s.identity == context.device for s in accel.list_devices())
    on = "1 device" if alike < 2 else "2 devices"
    assert f"warm: 6 keys on {on}: 6 tuned, 0 stored, 0 failed" in result.stdout
    assert result.stdout.count("warm: ") == 1  # one report, from rank 0
    rows = ResultStore(f"sqlite:///{db}").records()
    assert len(rows) == 6 and len({r.key for r in rows}) == 6
    calls = [line.split() for line in log.read_text().splitlines()]
    by_key: dict[str, set[str]] = {}
    for index, _block, pid in calls:
        by_key.setdefault(index, set()).add(pid)
    assert len(calls) == 6 * 3  # every key searched once: three blocks each, no repeats
    assert all(len(pids) == 1 for pids in by_key.values())  # each key by one rank
    assert len({pid for pids in by_key.values() for pid in pids}) == 2  # both ranks worked


def test_keys_are_split_among_devices_of_one_class():
    from autotune.cli.warm import shares

    h200, h100 = ("NVIDIA H200", "CUDA", "13.0"), ("NVIDIA H100", "CUDA", "13.0")
    assert shares([h200, h100, h200, h200]) == [(0, 3), (0, 1), (1, 3), (2, 3)]


def test_warm_all_devices_narrowed_by_device(capsys, db):
    """``--all-devices --device cpu`` warms the CPU devices only (on the GPU machine: not the
    GPUs), and a selector that matches nothing is an error naming what exists."""
    from autotune import accel

    cpus = accel.select_devices("cpu")
    code, out, _ = run(capsys, "warm", "--all-devices", "--device", "cpu", "--quiet",
                       "--template", FAKE, "FakeTimedTemplate")
    assert code == 0, out
    rows = ResultStore(f"sqlite:///{db}").records()
    assert {r.key.device_name for r in rows} == {d.identity.name for d in cpus}
    assert len(rows) == 3 * len(cpus)
    code, _, err = run(capsys, "warm", "--all-devices", "--device", "opencl:97", "--quiet",
                       "--template", FAKE, "FakeTimedTemplate")
    assert code != 0 and "no device matches" in err
