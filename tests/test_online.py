"""Online tuning on a real device: scanning, the median's choice, locking, rescans, the store,
threads. The kernel's cost grows with a runtime argument, so candidates differ on purpose."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from autotune import accel, tune
from autotune.tune.store import ResultStore

KERNEL = Path(__file__).with_name("kernels") / "busy.mako"
N = 1 << 14
SPACE = {"reps": [300, 3, 600], "wgs": [16, 32, 64]}
TEST = {"reps": 300, "wgs": 64}


class Work:
    """A device buffer pair and the busy kernel, on a timed queue."""

    def __init__(self, context: accel.Context):
        self.queue = context.create_command_queue(timed=True)
        self.kernel = context.build(KERNEL).get_kernel("busy")
        self.x = context.to_device(self.queue, np.linspace(0, 1, N, dtype=np.float32))
        self.y = context.allocate(N, np.float32)

    def step(self, tuner: tune.OnlineTuner, device: threading.Lock | None = None) -> dict:
        """One launch with the tuner's parameters; with ``device``, the launch runs alone on the
        device (threads share one CPU device, whose work-groups would otherwise interleave and
        stretch every kernel's time), while the tuner itself is entered concurrently."""
        with tuner.measure(self.queue) as params:
            if device is None:
                self._launch(params)
            else:
                with device:
                    self._launch(params)
                    self.queue.finish()
        return dict(params)

    def _launch(self, params) -> None:
        self.queue.enqueue_kernel(self.kernel, [self.y, self.x, np.uint32(N),
                                                np.uint32(params["reps"])], N, params["wgs"])


def _reference(reps: int) -> np.ndarray:
    v = np.linspace(0, 1, N, dtype=np.float32)
    for _ in range(reps):
        v = v * np.float32(0.999) + np.float32(0.001)
    return v


def _tuner(context, db, **kwargs) -> tune.OnlineTuner:
    space = kwargs.pop("space", tune.Space(SPACE, [lambda c: (c["reps"], c["wgs"]) != (600, 32)]))
    return tune.OnlineTuner(context, kwargs.pop("name", "tests.Busy.step"), space, TEST,
                            arguments={"n": N}, db=str(db), **kwargs)


@pytest.mark.force_autotune
def test_a_scan_visits_every_valid_candidate_and_the_median_picks_the_fastest(context, tmp_path):
    db = tmp_path / "t.db"
    tuner = _tuner(context, db)
    work = Work(context)
    used = [work.step(tuner) for _ in range(8 * 5)]
    # every launch computed the right thing with the parameters it was given
    work.queue.finish()
    np.testing.assert_allclose(work.y.get(work.queue), _reference(used[-1]["reps"]), rtol=1e-5)
    # 9 configurations, one excluded by the restriction: 8 candidates x 5 samples
    assert len(used) == 40 and {json.dumps(u, sort_keys=True) for u in used} == {
        json.dumps({"reps": r, "wgs": w}, sort_keys=True)
        for r in SPACE["reps"] for w in SPACE["wgs"] if (r, w) != (600, 32)}
    assert used[0] == TEST  # the default first, so the first launch is the known one
    assert tuner.best is not None and tuner.best["reps"] == 3  # 100x less work than reps=300
    assert tuner.best_seconds > 0 and tuner.stored
    # round-robin: every candidate had its k-th launch before any had its (k+1)-th
    counts: dict[str, int] = {}
    for u in used:
        k = json.dumps(u, sort_keys=True)
        counts[k] = counts.get(k, 0) + 1
        assert counts[k] - min(counts.get(c, 0) for c in counts) <= 1
    # stored like an offline result, with one trial per candidate, found online
    (record,) = ResultStore(f"sqlite:///{db}").records()
    assert record.key == tuner.key and record.origin == "online"
    assert json.loads(record.parameters) == tuner.best
    search = json.loads(record.search)
    assert search["strategy"] == "online" and search["test"] == TEST
    assert search["test_seconds"] > record.score
    trials = ResultStore(f"sqlite:///{db}").trials()
    assert len(trials) == 8 and all(t.status == "ok" and t.median_seconds for t in trials)


@pytest.mark.force_autotune
def test_locked_until_the_period_then_rescans(context, tmp_path):
    tuner = _tuner(context, tmp_path / "t.db", period=1.0, samples=2,
                   space={"reps": [200, 2], "wgs": [32]}, )
    work = Work(context)
    for _ in range(4):
        work.step(tuner)
    locked_at = time.monotonic()
    assert tuner.best == {"reps": 2, "wgs": 32} and tuner.scans == 1
    # locked: the same object every time, nothing timed
    assert tuner.measure(work.queue) is tuner.measure(work.queue)
    while time.monotonic() - locked_at < 0.5:
        assert work.step(tuner) == {"reps": 2, "wgs": 32}
    assert tuner.scans == 1
    time.sleep(1.0)
    seen = [work.step(tuner) for _ in range(4)]
    assert tuner.scans == 2 and {s["reps"] for s in seen} == {200, 2}
    assert tuner.best == {"reps": 2, "wgs": 32} and not tuner.scanning
    assert len(ResultStore(f"sqlite:///{tmp_path / 't.db'}").trials()) == 4  # 2 scans x 2


_NEXT_PROCESS = """
import json, sys
sys.path.insert(0, {tests!r})
from autotune import accel, tune
from test_online import Work, _tuner
context = accel.create_some_context()
tuner = _tuner(context, {db!r})
work = Work(context)
first = work.step(tuner)
print(json.dumps({{"scans": tuner.scans, "first": first, "best": tuner.best}}))
"""


@pytest.mark.force_autotune
def test_a_stored_result_starts_the_next_process_locked(context, tmp_path):
    db = tmp_path / "t.db"
    tuner = _tuner(context, db)
    work = Work(context)
    for _ in range(40):
        work.step(tuner)
    assert tuner.stored
    trials = len(ResultStore(f"sqlite:///{db}").trials())
    code = _NEXT_PROCESS.format(tests=str(Path(__file__).parent), db=str(db))
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=120, env={**__import__("os").environ,
                                             "AUTOTUNE_DEVICE": _selector(context)})
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen == {"scans": 0, "first": tuner.best, "best": tuner.best}
    assert len(ResultStore(f"sqlite:///{db}").trials()) == trials  # nothing scanned


def _selector(context) -> str:
    return "cuda" if context.device.backend == "cuda" else "opencl"


@pytest.mark.autotune_database
def test_an_offline_result_or_a_bad_row_for_the_key(context, tmp_path):
    db = tmp_path / "t.db"
    probe = _tuner(context, db)  # scanning: nothing stored yet
    store = ResultStore(f"sqlite:///{db}")
    store.put(tune.TuningRecord(probe.key, '{"reps":600,"wgs":16}', 1e-4, "0.1"))
    assert _tuner(context, db).best == {"reps": 600, "wgs": 16}  # offline rows count the same
    # a row outside the space (600 x 32 is restricted) or hostile text is never used
    for bad in ('{"reps":600,"wgs":32}', '{"reps":"1); } __kernel void x() { //","wgs":16}',
                '{"reps":3}'):
        store.put(tune.TuningRecord(probe.key, bad, 1e-4, "0.1"))
        tuner = _tuner(context, db)
        assert tuner.best is None and tuner.scanning, bad


def test_under_pytest_it_uses_test_and_tunes_nothing(context, tmp_path):
    tuner = _tuner(context, tmp_path / "t.db")
    work = Work(context)
    assert all(work.step(tuner) == TEST for _ in range(10))
    assert tuner.scans == 0 and not (tmp_path / "t.db").exists()


@pytest.mark.force_autotune
def test_a_failing_candidate_is_skipped_and_its_error_raised_once(context, tmp_path):
    too_big = context.device.max_work_group_size * 2
    tuner = _tuner(context, tmp_path / "t.db", samples=2,
                   space={"reps": [2], "wgs": [too_big, 32, 64]}, name="tests.Busy.big")
    work = Work(context)
    errors = 0
    used = []
    for _ in range(6):
        try:
            used.append(work.step(tuner))
        except accel.AccelError:
            errors += 1
    assert errors == 1 and {u["wgs"] for u in used} == {32, 64} and len(used) == 5
    assert tuner.best["wgs"] in (32, 64)
    statuses = {json.loads(t.parameters)["wgs"]: t.status
                for t in ResultStore(f"sqlite:///{tmp_path / 't.db'}").trials()}
    assert statuses == {too_big: "launch_error", 32: "ok", 64: "ok"}


@pytest.mark.force_autotune
def test_tuners_in_threads_do_not_interfere(context, tmp_path):
    # each thread has its own tuner and queue; the fastest is a different reps for each
    spaces = [{"reps": [400, 4, 80], "wgs": [32]}, {"reps": [5, 300], "wgs": [32]},
              {"reps": [90, 600, 6], "wgs": [32]}]
    found: dict[int, dict] = {}
    errors: list[BaseException] = []
    device = threading.Lock()

    def run(i: int) -> None:
        try:
            tuner = _tuner(context, tmp_path / "t.db", space=spaces[i], samples=3,
                           name=f"tests.Busy.thread{i}")
            work = Work(context)
            for _ in range(3 * len(spaces[i]) + 5):
                work.step(tuner, device)
            found[i] = tuner.best
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(spaces))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert found == {0: {"reps": 4, "wgs": 32}, 1: {"reps": 5, "wgs": 32},
                     2: {"reps": 6, "wgs": 32}}
    # one tuner shared by threads, each on its own queue: the scan finishes, all launches valid
    shared = _tuner(context, tmp_path / "t.db", space={"reps": [200, 2], "wgs": [32]},
                    samples=4, name="tests.Busy.shared")
    works = [Work(context) for _ in range(3)]

    def hammer(work: Work) -> None:
        try:
            for _ in range(10):
                assert work.step(shared, device)["reps"] in (200, 2)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(w,)) for w in works]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert shared.best == {"reps": 2, "wgs": 32}


@pytest.mark.force_autotune
def test_bad_setups_are_clear_errors(context, tmp_path):
    with pytest.raises(tune.OnlineTuningError, match="samples=0"):
        _tuner(context, tmp_path / "t.db", samples=0)
    with pytest.raises(tune.OnlineTuningError, match="period"):
        _tuner(context, tmp_path / "t.db", period=-1)
    with pytest.raises(tune.OnlineTuningError, match="test= names"):
        tune.OnlineTuner(context, "x.y", {"wgs": [32]}, {"block": 1})
    with pytest.raises(tune.OnlineTuningError, match="exclude every"):
        tune.OnlineTuner(context, "x.y", tune.Space({"wgs": [32]}, [lambda c: False]), {"wgs": 32})
    tuner = tune.OnlineTuner(context, "x.y", {"wgs": [32]}, {"wgs": 32})
    with pytest.raises(accel.AccelError, match="timed=True"):
        with tuner.measure(context.create_command_queue()):
            pass
