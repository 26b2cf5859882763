"""Online tuning and the store: a stored result starts the next process locked, finished scans
written by one thread, stored choices and given seeds first, offline results and bad rows,
edited sources, template tuners sharing offline keys (the busy kernel of tests/online_busy.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from autotune import tune
from autotune.tune.store import ResultStore

from online_busy import KERNEL, N, TEST, Work, busy_tuner, device_selector

_NEXT_PROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
from autotune import accel, tune
from online_busy import Work, busy_tuner
context = accel.create_some_context()
tuner = busy_tuner(context, {db!r})
work = Work(context)
first = work.step(tuner)
print(json.dumps({{"scans": tuner.scans, "first": first, "best": tuner.best}}))
"""


@pytest.mark.force_autotune
def test_a_stored_result_starts_the_next_process_locked(context, tmp_path, one_round):
    db = tmp_path / "t.db"
    tuner = busy_tuner(context, db)
    work = Work(context)
    for _ in range(40):
        work.step(tuner)
    assert tuner.stored
    trials = len(ResultStore(f"sqlite:///{db}").trials())
    code = _NEXT_PROCESS.format(tests=str(Path(__file__).parent), db=str(db))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env={**__import__("os").environ,
                                             "AUTOTUNE_DEVICE": device_selector(context)})
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen == {"scans": 0, "first": tuner.best, "best": tuner.best}
    assert len(ResultStore(f"sqlite:///{db}").trials()) == trials  # nothing scanned


@pytest.mark.force_autotune
def test_finished_scans_are_written_by_one_thread_that_started_before_them(context, tmp_path,
                                                                            one_round):
    """The launch that ends a scan hands the write to the process's writer thread, started
    when the tuners were made: no thread starts on the launching thread (a thread's start
    makes the starting thread wait for it), and every tuner's result lands."""
    db = tmp_path / "t.db"
    tuners = [busy_tuner(context, db, name=f"tests.Busy.written{i}", samples=2) for i in range(3)]
    writers = [t for t in threading.enumerate() if t.name.startswith("autotune-online-store")]
    assert len(writers) == 1 and writers[0].is_alive()
    work = Work(context)
    threads_before = set(threading.enumerate())
    for _ in range(40):
        for tuner in tuners:
            work.step(tuner)
        assert set(threading.enumerate()) <= threads_before  # no thread started by a launch
    assert all(tuner.best is not None and tuner.stored for tuner in tuners)
    stored = {r.key.function: r.origin for r in ResultStore(f"sqlite:///{db}").records()}
    assert stored == {f"tests.Busy.written{i}": "online" for i in range(3)}


@pytest.mark.force_autotune
def test_new_arguments_scan_first_what_this_device_chose_for_others(context, tmp_path):
    """No result for the key, but results of the same function for other arguments on this
    device: their choices are built and timed first (and so soon serve the untimed launches),
    those of the rows sharing the most argument values first, then the most often chosen;
    another device's, a stale or an invalid row's, and choices outside the space do not count."""
    from dataclasses import replace

    from autotune.tune import TuningRecord
    from autotune.tune.encoding import encode_arguments

    db = tmp_path / "t.db"
    space = tune.Space({"reps": [300, 3, 30, 100], "wgs": [16, 32]})
    store = ResultStore(f"sqlite:///{db}")
    mine = {"n": N, "kind": "a"}
    probe = busy_tuner(context, db, space=space, arguments={"n": 1, "kind": "a"})
    assert probe.seeds == []  # nothing stored yet

    def row(n: int, kind: str, params: dict, **changes) -> TuningRecord:
        key = replace(probe.key, arguments=encode_arguments({"n": n, "kind": kind}),
                      **changes.pop("key", {}))
        return TuningRecord(key, json.dumps(params), 1e-4, "test",
                            fingerprint=changes.pop("fingerprint", probe.fingerprint))

    store.put(row(2, "b", {"reps": 30, "wgs": 16}))
    store.put(row(3, "b", {"reps": 30, "wgs": 16}))  # chosen twice, but for another kind
    store.put(row(4, "a", {"reps": 100, "wgs": 32}))  # once, for this kind: first
    store.put(row(5, "a", {"reps": 3, "wgs": 16}, key={"device_name": "Another GPU"}))
    store.put(row(6, "a", {"reps": 3, "wgs": 32}, fingerprint="edited since"))
    store.put(row(7, "a", {"reps": 3, "wgs": 64}))  # valid for the function, not in this space
    store.put(row(8, "a", {"reps": "3", "wgs": 16}))  # does not match test='s schema
    prepared: list[dict] = []

    def prepare(params: dict) -> None:
        prepared.append(params)

    tuner = busy_tuner(context, db, space=space, arguments=mine, prepare=prepare, workers=1,
                   samples=2)
    assert tuner.seeds == [{"reps": 100, "wgs": 32}, {"reps": 30, "wgs": 16}]
    assert tuner.wait_prepared(30)
    assert prepared[:2] == tuner.seeds  # built first (one worker: in order)
    work = Work(context)
    first = work.step(tuner)
    assert first == {"reps": 100, "wgs": 32}  # all ready: the first seed is timed first
    while tuner.scanning:
        work.step(tuner)
        work.queue.finish()
    assert tuner.best is not None and tuner.best["reps"] == 3  # still a full scan: the fastest
    assert tuner.stored and len(ResultStore(f"sqlite:///{db}").trials(tuner.key)) == 8


@pytest.mark.force_autotune
def test_given_seeds_come_after_stored_choices_and_start_the_run(context, tmp_path):
    """Seeds given to the tuner (a parameter left out takes test='s value) are built and timed
    after what this device chose for other arguments and before the rest; until something is
    timed, launches use the first of them instead of test=; the scan still visits every
    candidate and the fastest wins."""
    from dataclasses import replace

    from autotune.tune import TuningRecord
    from autotune.tune.encoding import encode_arguments

    db = tmp_path / "t.db"
    # a hundred times apart: on a many-core CPU, kernels of 3 and 30 are both mostly launch cost
    space = {"reps": [3000, 3, 300, 1000], "wgs": [32, 64]}
    probe = busy_tuner(context, db, space=space, arguments={"n": 1})
    ResultStore(f"sqlite:///{db}").put(TuningRecord(
        replace(probe.key, arguments=encode_arguments({"n": 2})),
        json.dumps({"reps": 1000, "wgs": 32}), 1e-4, "test", fingerprint=probe.fingerprint))
    gate = threading.Event()
    prepared: list[dict] = []

    def prepare(params: dict) -> None:
        prepared.append(params)
        gate.wait(30)

    tuner = busy_tuner(context, db, space=space, seeds=[{"reps": 300}, {"reps": 3, "wgs": 32}],
                   prepare=prepare, workers=1, samples=2)
    assert tuner.seeds == [{"reps": 1000, "wgs": 32}, {"reps": 300, "wgs": 64},
                           {"reps": 3, "wgs": 32}]
    work = Work(context)
    assert work.step(tuner) == {"reps": 1000, "wgs": 32}  # nothing prepared: the first seed
    gate.set()
    assert tuner.wait_prepared(30)
    assert prepared[:3] == tuner.seeds and len(prepared) == 8
    while tuner.scanning:
        work.step(tuner)
        work.queue.finish()
    assert tuner.best is not None and tuner.best["reps"] == 3  # the fastest, seed or not
    assert tuner.stored and len(ResultStore(f"sqlite:///{db}").trials(tuner.key)) == 8


@pytest.mark.force_autotune
def test_a_stored_choice_seeds_a_scan_that_fixes_some_of_its_parameters(context, tmp_path):
    """The dslash's online scan fixes its structure (sites per work-item, staging, the links'
    layout) at test=: a result of the full offline space stored for another lattice (two sites
    a work-item, as PoCL's searches choose) still seeds it, with the scan's values of those."""
    from dataclasses import replace

    from autotune.tune import TuningRecord
    from autotune.tune.encoding import encode_arguments
    from operations.lqcd.dslash import DslashTemplate

    db = tmp_path / "t.db"
    online = dict(dims=(4, 4, 4, 8), precision="single", reconstruct=12)
    probe = tune.OnlineTuner.for_template(DslashTemplate, context, db=str(db), **online)
    declared = probe.seeds  # the template's own (none on a CPU)
    assert len(probe.space.parameters["sites"]) == 1
    wgs = max(probe.space.parameters["wgs"])
    chosen = {**probe.test, "wgs": wgs, "sites": 2, "stage": True}
    assert probe.valid_space.why_not(chosen) is None and probe.space.why_not(chosen) is not None
    ResultStore(f"sqlite:///{db}").put(TuningRecord(
        replace(probe.key, arguments=encode_arguments(
            {"dims": [8, 8, 8, 8], "precision": "single", "reconstruct": 12})),
        json.dumps(chosen), 1e-4, "test", fingerprint=probe.fingerprint))
    tuner = tune.OnlineTuner.for_template(DslashTemplate, context, db=str(db), **online)
    stored = {**probe.test, "wgs": wgs}
    assert tuner.seeds == [stored] + [s for s in declared if s != stored]


@pytest.mark.autotune_database
def test_an_offline_result_or_a_bad_row_for_the_key(context, tmp_path):
    db = tmp_path / "t.db"
    probe = busy_tuner(context, db)  # scanning: nothing stored yet
    store = ResultStore(f"sqlite:///{db}")
    # an offline row tuned against the same sources and space counts the same
    store.put(tune.TuningRecord(probe.key, '{"reps":600,"wgs":16}', 1e-4, "0.1",
                                fingerprint=probe.fingerprint))
    assert busy_tuner(context, db).best == {"reps": 600, "wgs": 16}
    # a row outside the space (600 x 32 is restricted), hostile text, or one tuned against
    # another kernel or space is never used
    for bad, fingerprint in [('{"reps":600,"wgs":32}', probe.fingerprint),
                             ('{"reps":"1); } __kernel void x() { //","wgs":16}', probe.fingerprint),
                             ('{"reps":3}', probe.fingerprint), ('{"reps":600,"wgs":16}', "0" * 64)]:
        store.put(tune.TuningRecord(probe.key, bad, 1e-4, "0.1", fingerprint=fingerprint))
        tuner = busy_tuner(context, db)
        assert tuner.best is None and tuner.scanning, bad


@pytest.mark.autotune_database
def test_an_edited_kernel_source_makes_the_stored_result_stale(context, tmp_path):
    source = tmp_path / "busy.mako"
    source.write_text(KERNEL.read_text())
    db = tmp_path / "t.db"
    tuner = busy_tuner(context, db, sources=[source], samples=1)
    work = Work(context)
    while tuner.scanning:
        work.step(tuner)
    assert tuner.stored and busy_tuner(context, db, sources=[source]).best == tuner.best
    source.write_text(KERNEL.read_text() + "\n// edited\n")
    again = busy_tuner(context, db, sources=[source])
    assert again.best is None and again.scanning
    assert tune.OnlineTuner(context, "x.y", {"wgs": [32]}, {"wgs": 32}, sources=[source]).fingerprint \
        != tuner.fingerprint  # the space is part of it too


@pytest.mark.autotune_database
def test_a_template_tuner_shares_offline_keys_both_ways(context):
    from operations.scale import ScaleTemplate

    queue = context.create_command_queue(timed=True)
    n = 1 << 14
    x = np.arange(n, dtype=np.float32) % 97
    instances: dict[int, object] = {}
    guard = threading.Lock()

    def instance(params: dict):
        with guard:
            made = instances.get(params["wgs"])
        if made is None:
            made = ScaleTemplate(context, np.float32, params).instantiate(queue, n)
            made.x.set(queue, x)
            with guard:
                made = instances.setdefault(params["wgs"], made)
        return made

    tuner = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32, samples=2,
                                          prepare=instance)
    assert tuner.key == tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.float32)
    while tuner.scanning:
        with tuner.measure(queue) as params:
            used = instance(params)
            used()
    np.testing.assert_array_equal(used.y.get(queue), 2 * x)
    assert tuner.stored
    # the offline call serves the online result (no tuning: no trials are added)
    store = ResultStore(tune.store.database_url())
    trials = len(store.trials())
    assert ScaleTemplate.autotune(context, np.float32) == tuner.best
    assert len(store.trials()) == trials
    # and an offline result starts a template tuner locked
    offline = tune.tuner_of(ScaleTemplate).retune(ScaleTemplate, context, np.float64)
    fresh = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float64)
    assert fresh.best == offline.parameters and fresh.scans == 0


@pytest.mark.force_autotune
def test_a_template_s_seeds_that_this_device_cannot_take_are_left_out(context, monkeypatch):
    """A template's autotune_online_seeds are guesses for a kind of device: for_template keeps
    those that are candidates of the scan here (a missing parameter takes test='s value), in
    their order; a malformed one is still a clear error."""
    from operations.scale import ScaleTemplate

    guesses = [{"wgs": 1000}, {"wgs": 128}, {}]
    monkeypatch.setattr(ScaleTemplate, "autotune_online_seeds",
                        classmethod(lambda cls, context, dtype: guesses), raising=False)
    tuner = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32)
    assert tuner.seeds == [{"wgs": 128}, {"wgs": 64}]
    guesses[:] = [{"block": 4}]
    with pytest.raises(tune.OnlineTuningError, match=r"names \['block'\]"):
        tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32)


def test_under_pytest_it_uses_test_and_tunes_nothing(context, tmp_path):
    tuner = busy_tuner(context, tmp_path / "t.db")
    work = Work(context)
    assert all(work.step(tuner) == TEST for _ in range(10))
    assert tuner.scans == 0 and not (tmp_path / "t.db").exists()
