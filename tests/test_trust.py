"""The result store's trust boundary: nothing from a row runs, nothing hostile gets in, nothing
is lost. Each test here reproduces a way a shared tuning database used to fail."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from autotune import accel, tune
from autotune.cli import main
from autotune.tune.store import ResultStore, settings
from operations.scale import ScaleTemplate

from toy_templates import KERNEL, FakeTimedTemplate, calls

TESTS = Path(__file__).parent
REPO = TESTS.parent


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


class StandIn:
    """A context for tuning functions that never touch a device: only its identity matters."""

    def __init__(self, name: str = "Stand-in device"):
        self.device = accel.DeviceIdentity(
            backend="opencl", name=name, platform="Test platform", driver_version="1.0",
            compute_capability=None, multiprocessors=4, global_memory=2**30,
            max_work_group_size=256, local_memory=32768, is_gpu=False, warp_size=1,
            double_precision=True)


def _raw_update(db: Path, sql: str, *parameters) -> None:
    """Change cells the way a careless colleague or an attacker would: straight in SQL."""
    with sqlite3.connect(db) as connection:
        connection.execute(sql, parameters)
    connection.close()


# -- code from a row never runs -----------------------------------------------------------------


PROBE = "autotune_probe_module"


@pytest.fixture
def probe(tmp_path, monkeypatch) -> Path:
    """A module that leaves a marker file if anything imports it."""
    marker = tmp_path / "imported"
    (tmp_path / f"{PROBE}.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\nclass Thing:\n    X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return marker


def _hostile_rows(db: Path) -> None:
    store = ResultStore(f"sqlite:///{db}")
    for i, enum_type in enumerate((f"{PROBE}:Thing", "ctypes:cdll")):
        name = "X" if i == 0 else "/nonexistent/libnothing.so"
        arguments = json.dumps({"x": {"__enum__": enum_type, "name": name}}, sort_keys=True,
                               separators=(",", ":"))
        key = tune.TuningKey(f"somebody.Template{i}.autotune", 1, "GPU", "CUDA", "1", arguments)
        store.put(tune.TuningRecord(key, '{"wgs":64}', 1e-3, "1.0"))
        store.add_trial(tune.records.TrialRecord(key, '{"wgs":64}', "ok", "", 1e-3, 1e-3, 1e-3))
    store.dispose()


def test_show_export_import_and_plot_never_resolve_a_stored_name(capsys, tmp_path, probe):
    db = tmp_path / "hostile.db"
    _hostile_rows(db)
    code, out, _ = run(capsys, "show", "--db", db)
    assert code == 0 and "Thing.X" in out and "cdll./nonexistent/libnothing.so" in out
    exported = tmp_path / "out.json"
    assert run(capsys, "export", "--db", db, "--out", exported)[0] == 0
    assert run(capsys, "import", exported, "--db", tmp_path / "other.db")[0] == 0
    assert run(capsys, "import", db, "--db", tmp_path / "third.db")[0] == 0
    assert run(capsys, "plot", "Template0", "--db", db, "--out", tmp_path / "p.png")[0] == 0
    assert not probe.exists() and PROBE not in sys.modules


def test_decoding_resolves_enums_only_against_the_callers_classes(probe):
    text = json.dumps({"x": {"__enum__": f"{PROBE}:Thing", "name": "X"}})
    decoded = tune.encoding.decode_arguments(text)
    assert decoded == {"x": tune.encoding.StoredEnum(f"{PROBE}:Thing", "X")}
    assert not probe.exists()
    with pytest.raises(tune.encoding.MalformedJSONError):
        tune.encoding.decode_arguments(json.dumps({"d": {"__dtype__": "O"}}))  # objects are not data


# -- a stored value is used only if it is valid here --------------------------------------------


def _scale_key(context):
    return tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.dtype(np.float32))


@pytest.mark.autotune_database
@pytest.mark.parametrize("wgs", [-64, 0, 3, 100000, 10**23, 2**53 + 2])
def test_stored_parameters_outside_the_space_are_retuned_never_compiled(context, wgs, caplog):
    store = ResultStore.open()
    key = _scale_key(context)
    store.put(tune.TuningRecord(key, json.dumps({"wgs": wgs}), 1e-6, "1.0"))
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        template = ScaleTemplate(context, np.float32)  # a CompileError here would be the bug
    assert "ignoring stored tuning result" in caplog.text
    assert template.wgs in (32, 64, 128, 256, 512, 1024) and template.wgs != wgs
    replaced = store.get(key)
    assert json.loads(replaced.parameters) == {"wgs": template.wgs} and replaced.fingerprint


@pytest.mark.autotune_database
@pytest.mark.parametrize("column, value", [
    ("parameters", "[" * 100_000 + "]" * 100_000),   # RecursionError in json.loads
    ("parameters", '{"block":' * 40 + "1" + "}" * 40),  # deep but parseable
    ("created_at", "yesterday"),
    ("created_at", 12),
    ("score", "fast"),
    ("score", None),
    ("score", -1.0),
    ("version", "one"),
    ("fingerprint", "zz" * 32),
    ("sources", "{not json"),
    ("sources", "[" * 40 + "]" * 40),  # nested deeper than stored JSON may be
    ("gbps", "lots"),
])
def test_a_malformed_cell_makes_the_row_invalid(context, column, value, caplog, capsys):
    store = ResultStore.open()
    ctx = StandIn()
    FakeTimedTemplate.autotune(ctx, 10)
    tune.clear_memo()
    db = store.sqlite_path
    if column == "score" and value is None:
        # NOT NULL in the schema: a careless colleague's copy could still lack the constraint
        _raw_update(db, "UPDATE tuning_results SET score = 'NaN'")
    else:
        _raw_update(db, f"UPDATE tuning_results SET {column} = ?", value)
    calls.clear()
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        assert FakeTimedTemplate.autotune(ctx, 10) == {"block": 3}
    if column != "version":  # a row of another version is simply another key
        assert "ignoring stored tuning result" in caplog.text
    assert calls["fake"] == 5, "the key must be tuned again"
    code, out, _ = run(capsys, "show", "--function", "%FakeTimed%")
    assert code == 0 and "FakeTimedTemplate" in out


def test_stored_json_is_refused_past_its_depth_limit_and_brackets_in_strings_do_not_count():
    from autotune.tune.encoding import MAX_JSON_DEPTH, MalformedJSONError, load_json

    def nested(levels: int) -> str:  # a number inside lists: its depth is levels + 1
        return "[" * levels + "1" + "]" * levels

    assert load_json(nested(MAX_JSON_DEPTH - 1)) == json.loads(nested(MAX_JSON_DEPTH - 1))
    with pytest.raises(MalformedJSONError, match=f"deeper than {MAX_JSON_DEPTH}"):
        load_json(nested(MAX_JSON_DEPTH))
    flat = json.dumps({"wgs": 64, "note": "[" * 100 + "{" * 100})
    assert load_json(flat)["wgs"] == 64


# -- import takes in only what is valid, all or nothing, and leaves its source alone ------------


def _export(capsys, tmp_path, db) -> list[dict]:
    path = tmp_path / "export.json"
    assert run(capsys, "export", "--db", db, "--out", path)[0] == 0
    return json.loads(path.read_text())


def _fake_rows(db: Path, sizes=(1, 2, 3)) -> None:
    with tune.use_database(db):
        for size in sizes:
            FakeTimedTemplate.autotune.retune(FakeTimedTemplate, StandIn(), size)


@pytest.mark.parametrize("score", [-1, float("-inf"), float("nan"), 0, "fast"])
def test_import_refuses_the_whole_file_for_one_bad_score(capsys, tmp_path, score):
    source = tmp_path / "source.db"
    _fake_rows(source)
    rows = _export(capsys, tmp_path, source)
    rows[1]["score"] = score
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(rows))
    target = tmp_path / "target.db"
    code, out, err = run(capsys, "import", path, "--db", target)
    assert code == 2 and "row 2" in err and "nothing imported" in err
    assert not target.exists() or ResultStore(f"sqlite:///{target}").records() == []


def test_import_checks_rows_from_sqlite_sources_too(capsys, tmp_path):
    source = tmp_path / "source.db"
    _fake_rows(source)
    _raw_update(source, "UPDATE tuning_results SET parameters = ? WHERE arguments = ?",
                '{"block":"1); } __kernel void x() { //"}', '{"size":2}')
    target = tmp_path / "target.db"
    _fake_rows(target, sizes=(7,))
    code, _, err = run(capsys, "import", source, "--db", target)
    assert code == 2 and "nothing imported" in err and "block" in err
    assert len(ResultStore(f"sqlite:///{target}").records()) == 1


def test_import_leaves_an_sqlite_source_untouched(capsys, tmp_path):
    folder = tmp_path / "theirs"
    folder.mkdir()
    source = folder / "source.db"
    _fake_rows(source)
    tune.serving().store(f"sqlite:///{source}").dispose()
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert set(before) == {"source.db"}
    assert run(capsys, "import", source, "--db", tmp_path / "a.db")[0] == 0
    _raw_update(source, "UPDATE tuning_results SET score = 'slow' WHERE arguments = ?", '{"size":3}')
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    assert run(capsys, "import", source, "--db", tmp_path / "b.db")[0] == 2  # refused
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.parametrize("content", [b"my-hostname\n", b"", b"\x00\x01binary\xff", b"{}",
                                     b'[{"function": "f"}]', b"a,b\n1,2\n"])
def test_a_file_that_is_not_an_export_is_an_error(capsys, tmp_path, content):
    path = tmp_path / "hostname"
    path.write_bytes(content)
    code, out, err = run(capsys, "import", path, "--db", tmp_path / "t.db")
    assert code == 2 and out == "" and "Traceback" not in err
    assert "not" in err or "missing" in err


def test_unwritable_outputs_are_one_line_and_exit_2(capsys, tmp_path):
    db = tmp_path / "t.db"
    _fake_rows(db)
    code, _, err = run(capsys, "export", "--db", db, "--out", tmp_path)
    assert code == 2 and "cannot write" in err and err.count("\n") == 1
    code, _, err = run(capsys, "export", "--db", db, "--out", tmp_path / "no" / "such" / "x.csv")
    assert code == 2 and "cannot write" in err


def test_export_format_follows_the_extension(capsys, tmp_path):
    db = tmp_path / "t.db"
    _fake_rows(db)
    assert run(capsys, "export", "--db", db, "--out", tmp_path / "x.json")[0] == 0
    assert len(json.loads((tmp_path / "x.json").read_text())) == 3
    assert run(capsys, "export", "--db", db, "--out", tmp_path / "x.csv")[0] == 0
    assert (tmp_path / "x.csv").read_text().startswith("function,")


# -- read-only and busy databases serve instead of failing -------------------------------------


_READ_ONLY_SCRIPT = textwrap.dedent("""
    import json, logging, sys
    sys.path.insert(0, sys.argv[2])
    from autotune import tune
    from test_trust import StandIn
    from toy_templates import FakeTimedTemplate, calls
    logging.basicConfig(level=logging.WARNING, format="WARN %(message)s")
    ctx = StandIn()
    with tune.use_database(sys.argv[1]):
        out = [FakeTimedTemplate.autotune(ctx, 10), FakeTimedTemplate.autotune(ctx, 11),
               FakeTimedTemplate.autotune(ctx, 12)]
    print(json.dumps({"results": out, "generated": calls["fake"]}))
""")


@contextlib.contextmanager
def _read_only(folder: Path):
    """Make ``folder`` and its files unwritable for this user, root included: file modes for
    other users; for root, which ignores modes, the immutable attribute, or a read-only bind
    mount where the file system has no such attribute."""
    files = [p for p in folder.iterdir()]
    if os.geteuid() != 0:
        for p in files:
            p.chmod(0o444)
        folder.chmod(0o555)
        try:
            yield
        finally:
            folder.chmod(0o755)
            for p in files:
                p.chmod(0o644)
        return
    targets = [*files, folder]
    if subprocess.run(["chattr", "+i", *map(str, targets)], capture_output=True).returncode == 0:
        try:
            yield
        finally:
            subprocess.run(["chattr", "-i", *map(str, targets)], check=True)
        return
    bind = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if bind.returncode != 0:
        pytest.fail("cannot make a folder read-only for root here (no chattr, no mount): "
                    f"{bind.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_database_serves_hits_and_show(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    db = folder / "readonly.db"
    _fake_rows(db, sizes=(10,))
    tune.serving().store(f"sqlite:///{db}").dispose()
    script = tmp_path / "child.py"
    script.write_text(_READ_ONLY_SCRIPT)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(REPO)]))
    with _read_only(folder):
        assert not os.access(db, os.W_OK)
        child = subprocess.run([sys.executable, str(script), str(db), str(TESTS)], env=env,
                               capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        report = json.loads(child.stdout.splitlines()[-1])
        assert report["results"] == [{"block": 3}] * 3
        assert report["generated"] == 10, "the hit is served; the two misses are tuned"
        warnings = [line for line in child.stderr.splitlines() if line.startswith("WARN")]
        stored = [line for line in warnings if "read-only" in line]
        assert len(stored) == 1, child.stderr  # one warning that results are not stored
        assert len(warnings) == 2 and "for the first time" in warnings[0], child.stderr
        show = subprocess.run([sys.executable, "-m", "autotune", "show", "--db", str(db)], env=env,
                              capture_output=True, text=True, timeout=120)
        assert show.returncode == 0 and "FakeTimedTemplate" in show.stdout, show.stderr
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


@pytest.mark.autotune_database
def test_a_busy_database_still_returns_the_result_and_writes_it_later(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(settings, "BUSY_TIMEOUT_SECONDS", 0.3)
    db = tmp_path / "busy.db"
    _fake_rows(db, sizes=(1,))
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process holding the write lock
    ctx = StandIn()
    calls.clear()
    try:
        with tune.use_database(db), caplog.at_level(logging.WARNING, logger="autotune.tune"):
            assert FakeTimedTemplate.autotune(ctx, 20) == {"block": 3}
            assert FakeTimedTemplate.autotune(ctx, 20) == {"block": 3}  # kept in this process
        assert calls["fake"] == 5
        assert "write lock" in caplog.text and "busy timeout" in caplog.text
        assert "AUTOTUNE_DB" not in caplog.text
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with tune.use_database(db):
        FakeTimedTemplate.autotune(ctx, 21)  # the next write also stores the pending result
    sizes = {json.loads(r.key.arguments)["size"] for r in ResultStore(f"sqlite:///{db}").records()}
    assert sizes == {1, 20, 21}


# -- generated candidates may share buffers -----------------------------------------------------


def test_candidates_sharing_one_buffer_are_set_up_checked_and_timed_in_order(context):
    """katsdpsigproc's own pattern: every candidate uploads into one buffer in ``generate``."""
    queue = context.create_tuning_command_queue()
    n = 1 << 14
    shared = context.allocate(n, np.float32)
    out = context.allocate(n, np.float32)

    def generate(value: int):
        kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
        shared.set(queue, np.full(n, value, np.float32))
        return tune.make_measure(
            queue, lambda: queue.enqueue_kernel(kernel, [out, shared, np.uint32(n)], n, 64),
            check=lambda: bool(np.all(out.get(queue) == 2 * value)))

    result = tune.search(generate, {"value": list(range(20))}, workers=4)
    assert [t.status for t in result.trials] == ["ok"] * 20, \
        [(t.parameters, t.status) for t in result.trials if t.status != "ok"]
