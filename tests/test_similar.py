"""``AUTOTUNE_MATCH=similar`` (the nearest tuned size that fits the call), ``AUTOTUNE_RECORD``
(the keys a run did not find exactly) and ``warm --recorded`` (tuning exactly those), with
real kernels on the devices found (PoCL in CI)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from autotune import accel, tune
from autotune.cli import main
from autotune.tune import similar
from autotune.tune.lookup import wait_for_notes
from autotune.tune.misses import RecordFileError, read_records, record_line
from autotune.tune.records import TuningKey
from autotune.tune.store import ResultStore

from operations.gemm import GemmTemplate
from operations.lqcd import DslashTemplate
from toy_templates import SizedTemplate, calls, run_sized

SIZED = "toy_templates:SizedTemplate"


@pytest.fixture(autouse=True)
def _short_searches():
    """Searches of two configurations, one timed batch each: what is tested is which stored
    result is served, not what a search finds."""
    with tune.search_settings(max_evals=2, batches=1):
        yield


def _sized(context, n, **more):
    return SizedTemplate.autotune(context, n, **more)


def _flush():
    """Wait for the similar serves to be written to the store."""
    wait_for_notes()


def _anchors(context):
    """Tune n = 8 and n = 64 for real; n = 64's row is then set to wgs 64 (a result its
    search may find), which does not fit a call for n < 64."""
    assert _sized(context, 8) == {"wgs": 8}  # the only work-group that fills 8
    _sized(context, 64)
    store = ResultStore.open()
    key = tune.tuner_of(SizedTemplate).key(SizedTemplate, context, 64)
    _set_result(store, key, 64)
    tune.clear_memo()
    return store


def _set_result(store, key, wgs):
    """Set ``key``'s stored result to work-groups of ``wgs``, at half the time of the fastest
    configuration its search measured (so that none of those is a near tie another size
    chose, which ``similar`` would serve instead)."""
    row = store.get(key)
    store.put(dataclasses.replace(row, parameters=json.dumps({"wgs": wgs}), score=row.score / 2))


@pytest.mark.autotune_database
def test_similar_serves_the_nearest_size_that_fits_and_skips_one_that_does_not(
        context, monkeypatch, caplog):
    store = _anchors(context)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    calls.clear()
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        # 64 is nearer to 32 than 8 is, but a work-group of 64 cannot be filled by 32
        assert _sized(context, 32) == {"wgs": 8}
        assert _sized(context, 100) == {"wgs": 64}  # 64 is nearest and fits
    assert calls["sized"] == 0  # nothing tuned
    assert "skipping the result of" in caplog.text and "for batch=1, label='a', n=64" in caplog.text
    assert "AUTOTUNE_MATCH=similar: no result for" in caplog.text
    assert "using the one tuned for batch=1, label='a', n=8 (similar" in caplog.text
    # the served parameters run correctly at the size they were served for
    queue = context.create_command_queue()
    kernel = context.build(SizedTemplate.autotune_sources[0],
                           {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    x = context.to_device(queue, np.arange(100, dtype=np.float32))
    y = context.allocate(100, np.float32)
    run_sized(queue, kernel, y, x, 100, 64)
    assert np.array_equal(y.get(queue), 2 * np.arange(100, dtype=np.float32))
    # each serve is recorded as the key's row: origin similar, not timed, with its source
    _flush()
    row = store.get(tune.tuner_of(SizedTemplate).key(SizedTemplate, context, 32))
    assert row.origin == "similar" and math.isinf(row.score) and row.parameters == '{"wgs":8}'
    assert similar.similar_from(row) == "n=8"
    # a later process ranks afresh: tuning n = 24 makes it the nearest that fits 32
    tune.clear_memo()
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    _sized(context, 24)
    _set_result(store, tune.tuner_of(SizedTemplate).key(SizedTemplate, context, 24), 16)
    tune.clear_memo()
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    assert _sized(context, 32) == {"wgs": 16}


@pytest.mark.autotune_database
def test_arguments_not_declared_are_never_generalised_and_exact_mode_tunes(context, monkeypatch):
    store = _anchors(context)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    calls.clear()
    assert _sized(context, 40) == {"wgs": 8}  # served from n = 8 (64 does not fit)
    assert calls["sized"] == 0
    _sized(context, 40, batch=2)  # batch is not declared: no size of batch 2 is tuned
    assert calls["sized"] > 0
    _flush()
    # exact mode does not serve the similar row of n = 40: it tunes, and the result replaces it
    key = tune.tuner_of(SizedTemplate).key(SizedTemplate, context, 40)
    assert store.get(key).origin == "similar"
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    tune.clear_memo()
    calls.clear()
    _sized(context, 40)
    assert calls["sized"] > 0 and store.get(key).origin == "offline"


@pytest.mark.autotune_database
def test_show_report_and_results_frame_say_similar_and_where_from(context, monkeypatch, capsys,
                                                                   tmp_path):
    _anchors(context)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    _sized(context, 100)
    _flush()
    frame = tune.results_frame()
    row = frame[frame["arg.n"] == 100].iloc[0]
    assert row.origin == "similar" and row.similar_from == "n=64" and row["param.wgs"] == 64
    assert frame[frame["arg.n"] != 100].similar_from.isna().all()
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert "similar (from n=64)" in out and out.count("similar (from") == 1
    assert main(["report", "--out", str(tmp_path / "report")]) == 0
    assert "similar (from n=64)" in (tmp_path / "report" / "index.html").read_text()


@pytest.mark.autotune_database
def test_record_lists_missed_nearest_and_similar_keys_and_warm_recorded_tunes_them(
        context, monkeypatch, capsys, tmp_path):
    store = _anchors(context)
    record = tmp_path / "wanted.jsonl"
    monkeypatch.setenv("AUTOTUNE_RECORD", str(record))
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    tuner = tune.tuner_of(SizedTemplate)
    # another driver's row of n = 12, batch 3: served as nearest (no size of batch 3 here)
    older = tuner.key(SizedTemplate, context, 12, batch=3)
    row = store.get(tuner.key(SizedTemplate, context, 8))
    store.put(dataclasses.replace(row, key=dataclasses.replace(
        older, driver_version=older.driver_version + "-older")))
    _sized(context, 64)  # exact: not recorded
    _sized(context, 32)  # similar
    _sized(context, 12, batch=3)  # nearest
    _sized(context, 16, label="b")  # missed: tuned now
    _sized(context, 32)  # memo: not recorded again
    tune.clear_memo()
    _sized(context, 32)  # again in this process: the file has it already
    lines = read_records(record)
    served = {line.key.arguments: line.served for line in lines}
    assert len(lines) == 3 and served == {
        tuner.key(SizedTemplate, context, 32).arguments: "similar",
        tuner.key(SizedTemplate, context, 12, batch=3).arguments: "nearest",
        tuner.key(SizedTemplate, context, 16, label="b").arguments: "missed"}
    assert all(line.key.device == older.device for line in lines)
    # a line for another device is skipped with a note; repeated lines are tuned once
    other = dataclasses.replace(lines[0].key, device_name="Another device")
    with record.open("a") as f:
        f.write(record_line(other, "missed") + record_line(lines[0].key, "similar"))
    monkeypatch.delenv("AUTOTUNE_RECORD")
    calls.clear()
    here = next(s.selector for s in accel.list_devices() if s.identity == context.device)
    code = main(["warm", "--recorded", str(record), "--template", SIZED, "--device", here])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "1 recorded key(s) for Another device" in err
    assert "warm them on a machine with that device" in err
    assert "warm: 3 keys on 1 device: 2 tuned, 1 stored, 0 failed" in out
    tuned = calls["sized"]
    assert tuned > 0
    # the next run serves every recorded key exactly and tunes none
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    tune.clear_memo()
    for args, more in ((32, {}), (12, {"batch": 3}), (16, {"label": "b"})):
        _sized(context, args, **more)
        assert store.get(tuner.key(SizedTemplate, context, args, **more)).origin == "offline"
    assert calls["sized"] == tuned


def test_malformed_record_lines_are_refused_with_their_line_numbers(capsys, tmp_path, db):
    key = TuningKey("toy_templates.SizedTemplate.autotune", 0, "Some device", "Some platform",
                    "1.0", '{"batch":1,"label":"a","n":8}')
    good = record_line(key, "missed")
    cases = {
        "not json\n": "line 2: not JSON",
        json.dumps({"autotune_record": 1}) + "\n": "line 2: function",
        good.replace('"missed"', '"guessed"'): "line 2: served 'guessed'",
        good.replace('\\"n\\":8', '\\"n\\": 8'):
            "line 2: arguments: arguments are not in canonical",
        good.replace('"version":0', '"version":-1'): "line 2: version -1",
    }
    for bad, expected in cases.items():
        path = tmp_path / "bad.jsonl"
        path.write_text(good + bad)
        with pytest.raises(RecordFileError, match=expected):
            read_records(path)
        code = main(["warm", "--recorded", str(path), "--template", SIZED])
        _, err = capsys.readouterr()
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_a_function_no_known_template_owns_is_refused_and_never_imported(capsys, tmp_path,
                                                                         monkeypatch, db):
    marker = tmp_path / "imported"
    (tmp_path / "sneaky_module.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "class Template:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    key = TuningKey("sneaky_module.Template.autotune", 0, "Some device", "Some platform", "1.0",
                    "{}")
    path = tmp_path / "wanted.jsonl"
    path.write_text(record_line(key, "missed"))
    code = main(["warm", "--recorded", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and "line 1: sneaky_module.Template.autotune is not" in err
    assert "--template" in err
    assert not marker.exists() and "sneaky_module" not in sys.modules


def _row(function, version, arguments, device=("D", "P", "1")):
    key = TuningKey(function, version, *device, json.dumps(arguments, sort_keys=True,
                                                           separators=(",", ":")))
    return tune.TuningRecord(key, '{"wgs":64}', 1e-5, "0")


def test_lattices_rank_by_their_extents_and_other_arguments_must_be_equal():
    rules = similar.declared_rules(DslashTemplate)
    assert rules == {"dims": "log"}

    def dims(*d, precision="single"):
        return {"dims": {"__tuple__": list(d)}, "precision": precision, "reconstruct": 12}

    name = "operations.lqcd.dslash.DslashTemplate.autotune"
    rows = [_row(name, 4, dims(32, 32, 32, 32)), _row(name, 4, dims(24, 24, 24, 24)),
            _row(name, 4, dims(16, 16, 16, 16)),
            _row(name, 4, dims(24, 24, 24, 48, precision="half")),
            _row(name, 3, dims(24, 24, 24, 48)),
            _row(name, 4, dims(24, 24, 24, 48), ("Other", "P", "1")),
            _row(name, 4, dims(10**400, 24, 24, 48)),  # stored data: far, never an error
            _row(name, 4, dims(0, 24, 24, 48))]  # not comparable: never a candidate
    asked = _row(name, 4, dims(24, 24, 24, 48)).key
    order = similar.ranked(rows, asked, rules)
    # 24^4 (ln 2 away) before 32^4 (3 ln(4/3) + ln(3/2)) before 16^4; other precisions,
    # versions and devices are never candidates
    assert [json.loads(r.key.arguments)["dims"]["__tuple__"][0] for _, r in order] == [
        24, 32, 16, 10**400]
    assert order[0][0] == pytest.approx(math.log(2))
    assert similar.ranked(rows, asked, {}) == []  # nothing declared: nothing generalised
    assert similar.declared_rules(GemmTemplate) == {"m": "log", "n": "log", "k": "log"}

    class Bad:
        autotune_similar = {"n": "linear"}

    with pytest.raises(TypeError, match="autotune_similar must map"):
        similar.declared_rules(Bad)


@pytest.mark.autotune_database
def test_a_small_gemm_is_served_a_tuned_shape_s_tiles_and_multiplies_correctly(context,
                                                                              monkeypatch):
    with tune.search_settings(max_evals=2):
        GemmTemplate.autotune(context, np.dtype(np.float32), 64, 48, 32)
    store = ResultStore.open()
    tuned = store.records()
    trials = len(store.trials())
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    tune.clear_memo()
    template = GemmTemplate(context, np.float32, 80, 40, 32)  # no tuning: the 64x48x32 tiles
    assert template.tuning == json.loads(tuned[0].parameters)
    assert len(store.trials()) == trials
    queue = context.create_command_queue()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((80, 32), dtype=np.float32)
    b = rng.standard_normal((32, 40), dtype=np.float32)
    c = context.allocate((80, 40), np.float32)
    template.instantiate(queue)(c, context.to_device(queue, np.ascontiguousarray(a.T)),
                                context.to_device(queue, b))
    np.testing.assert_allclose(c.get(queue), a @ b, rtol=1e-4, atol=1e-4)


def test_processes_sharing_a_record_file_write_whole_lines(tmp_path):
    path = tmp_path / "wanted.jsonl"
    script = (
        "import sys\n"
        "from autotune.tune.misses import note\n"
        "from autotune.tune.records import TuningKey\n"
        "from autotune.tune.serving import Serving\n"
        "state = Serving()\n"
        "for i in range(300):\n"
        "    note(state, TuningKey('m.T.autotune', 0, 'D' * 200, 'P', '1',\n"
        "                          '{\"n\":%d,\"who\":\"%s\"}' % (i, sys.argv[1])), 'missed')\n")
    env = {**os.environ, "AUTOTUNE_RECORD": str(path)}
    children = [subprocess.Popen([sys.executable, "-c", script, who], env=env)
                for who in ("a", "b", "c")]
    assert all(child.wait(timeout=120) == 0 for child in children)
    lines = read_records(path)
    assert len(lines) == 900 and len({line.key for line in lines}) == 900


EXITING_SERVE = """
import json, sys
import numpy as np
from autotune import accel, tune
from autotune.tune.serving import Serving
from operations.gemm import GemmTemplate

class Described:  # what a tuned function reads of a context: its device's identity
    device = accel.DeviceIdentity(
        backend="cuda", name="NVIDIA H200", platform="CUDA", driver_version="13.0",
        compute_capability=(9, 0), multiprocessors=132, global_memory=141 * 2**30,
        max_work_group_size=1024, local_memory=48 * 1024, is_gpu=True, warp_size=32,
        double_precision=True)

ctx, f32, db = Described(), np.dtype(np.float32), sys.argv[1]
gemm = tune.tuner_of(GemmTemplate)
args = (GemmTemplate, ctx, f32, 4096, 4096, 4096)
if sys.argv[2] == "anchor":
    fingerprint = gemm.fingerprint(*args)
    parameters = {"MWG": 128, "NWG": 128, "KWG": 32, "MDIMC": 16, "NDIMC": 16, "MDIMA": 16,
                  "NDIMB": 16, "KWI": 2, "VWM": 4, "VWN": 4, "STRM": 0, "STRN": 0, "SA": 1,
                  "SB": 1}
    tune.store.ResultStore.open(db).merge([tune.TuningRecord(
        gemm.key(*args), json.dumps(parameters, sort_keys=True, separators=(",", ":")), 1e-3,
        "bench", fingerprint=fingerprint.digest, sources=fingerprint.sources_json)])
else:
    with tune.using_serving(Serving(match="similar")), tune.use_database(db):
        print(json.dumps(GemmTemplate.autotune(ctx, f32, 2000, 3000, 1500)))
"""


def test_a_process_that_exits_right_after_a_similar_serve_still_records_it(tmp_path):
    # the note is written on a thread after the call returns; the interpreter's exit waits
    db = str(tmp_path / "tune.db")

    def run(step):
        return subprocess.run([sys.executable, "-c", EXITING_SERVE, db, step], check=True,
                              capture_output=True, text=True, timeout=120).stdout

    run("anchor")
    served = json.loads(run("serve"))
    records = {json.loads(r.key.arguments)["m"]: r for r in ResultStore.open(db).records()}
    assert sorted(records) == [2000, 4096]
    assert records[2000].origin == "similar"
    assert json.loads(records[2000].parameters) == served == json.loads(records[4096].parameters)
