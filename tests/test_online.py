"""Online tuning on a real device: scanning, the median's choice, locking, rescans, budgets,
parts, candidates prepared while the program runs, failures, threads. The kernel's cost grows
with a runtime argument, so candidates differ on purpose (tests/online_busy.py); stored results
and seeds are in tests/test_online_store.py."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from autotune import accel, tune
from autotune.tune.store import ResultStore

from online_busy import N, SPACE, TEST, Work, busy_reference, busy_tuner


@pytest.mark.force_autotune
def test_a_scan_visits_every_valid_candidate_and_the_median_picks_the_fastest(context, tmp_path, one_round):
    db = tmp_path / "t.db"
    tuner = busy_tuner(context, db)
    work = Work(context)
    used = [work.step(tuner) for _ in range(8 * 5)]
    # every launch computed the right thing with the parameters it was given
    work.queue.finish()
    np.testing.assert_allclose(work.y.get(work.queue)[:4096],  # rtol: FMA contraction
                               busy_reference(used[-1]["reps"] * work.reps, work.n), rtol=1e-4)
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
def test_the_closest_candidates_are_timed_again_before_the_choice(context, tmp_path, monkeypatch):
    """After every candidate has its samples, those within REFINE_MARGIN of the best (at most
    REFINE_AT_MOST, the closest) get as many again and the others are retired; the fastest
    still wins. (The margin is widened here so that the round's members are known.)"""
    monkeypatch.setattr(tune.online.scan, "REFINE_MARGIN", 1000.0)
    samples = 3
    tuner = busy_tuner(context, tmp_path / "t.db", samples=samples,
                   space={"reps": [300, 3, 30, 100, 600, 1000], "wgs": [32]})
    work = Work(context)
    launches: dict[int, int] = {}
    while tuner.scanning:
        reps = work.step(tuner)["reps"]
        launches[reps] = launches.get(reps, 0) + 1
        work.queue.finish()
    assert tuner.refined == tune.online.REFINE_AT_MOST == 4
    assert launches == {3: 2 * samples, 30: 2 * samples, 100: 2 * samples, 300: 2 * samples,
                        600: samples, 1000: samples}
    assert tuner.best == {"reps": 3, "wgs": 32} and tuner.stored
    record = ResultStore(f"sqlite:///{tmp_path / 't.db'}").get(tuner.key)
    assert json.loads(record.search)["refined"] == 4


@pytest.mark.force_autotune
def test_locked_until_the_period_then_rescans(context, tmp_path):
    tuner = busy_tuner(context, tmp_path / "t.db", period=1.0, samples=2,
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
    assert tuner.best == {"reps": 2, "wgs": 32} and not tuner.scanning and tuner.stored
    assert len(ResultStore(f"sqlite:///{tmp_path / 't.db'}").trials()) == 4  # 2 scans x 2


@pytest.mark.force_autotune
def test_a_scan_budget_leaves_out_what_is_not_built_in_time(context, tmp_path, one_round):
    """With ``budget``, the candidates still being prepared when it is spent are left out of
    the scan (the fastest among those built wins, the stored result says how many were left
    out); they keep building, and the next scan, after ``period``, times every candidate."""
    db = tmp_path / "t.db"
    slow = threading.Event()

    def prepare(params: dict) -> None:
        if params["reps"] in (3, 100):  # the fastest candidate among them: built late
            slow.wait(30)

    space = {"reps": [300, 1000, 3, 100], "wgs": [32]}
    with pytest.raises(tune.OnlineTuningError, match="budget"):
        busy_tuner(context, db, space=space, budget=0.0, prepare=prepare)
    with pytest.raises(tune.OnlineTuningError, match="without prepare"):
        busy_tuner(context, db, space=space, budget=1.0)
    tuner = busy_tuner(context, db, space=space, prepare=prepare, workers=4, samples=2,
                   budget=0.3, period=0.5)
    work = Work(context)
    while tuner.scanning:
        work.step(tuner)
        time.sleep(0.002)
    assert tuner.best == {"reps": 300, "wgs": 32} and tuner.left_out == 2
    assert tuner.stored
    record = ResultStore(f"sqlite:///{db}").get(tuner.key)
    assert json.loads(record.search)["left_out"] == 2
    assert len(ResultStore(f"sqlite:///{db}").trials(tuner.key)) == 2
    slow.set()
    time.sleep(0.5)  # the period: the next launch starts a scan, every candidate built by now
    work.step(tuner)
    assert tuner.scanning and tuner.wait_prepared(30)
    while tuner.scanning:
        work.step(tuner)
    assert tuner.best == {"reps": 3, "wgs": 32} and tuner.left_out == 0 and tuner.scans == 2


@pytest.mark.force_autotune
def test_template_budget_gives_template_tuners_made_in_its_block_a_budget(context, tmp_path):
    """``tune.online.template_budget(seconds)`` is the budget of the tuners ``for_template``
    makes with ``prepare`` and no budget of their own inside the block, and only there."""
    from operations.scale import ScaleTemplate

    queue = context.create_command_queue(timed=True)
    gate = threading.Event()
    built: dict[int, object] = {}
    guard = threading.Lock()

    def make(params) -> object:
        with guard:
            if params["wgs"] not in built:
                built[params["wgs"]] = ScaleTemplate(context, np.float32, dict(params)).instantiate(
                    queue, 1024)
            return built[params["wgs"]]

    def prepare(params: dict) -> None:  # only test= is built before the gate opens
        if params["wgs"] != 64:
            gate.wait(30)
        make(params)

    with pytest.raises(tune.OnlineTuningError, match="template_budget"):
        with tune.online.template_budget(0.0):
            pass
    try:
        with tune.online.template_budget(0.2):
            assert tune.online.template_budget_now() == 0.2
            tuner = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32,
                                                  db=str(tmp_path / "t.db"), samples=1,
                                                  prepare=prepare)
        assert tune.online.template_budget_now() is None
        while tuner.scanning:
            with tuner.measure(queue) as params:
                make(params)()
            time.sleep(0.002)
        assert tuner.best == {"wgs": 64} and tuner.left_out == len(tuner.space.configurations()) - 1
    finally:
        gate.set()
    assert tuner.wait_prepared(30)
    unbounded = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32,
                                              db=str(tmp_path / "u.db"), prepare=prepare)
    assert unbounded.wait_prepared(30)
    while unbounded.scanning:
        with unbounded.measure(queue) as params:
            make(params)()
    assert unbounded.left_out == 0


@pytest.mark.force_autotune
def test_rescan_starts_the_next_scan_now_unless_one_runs(context, tmp_path):
    tuner = busy_tuner(context, tmp_path / "t.db", samples=1, space={"reps": [2, 20], "wgs": [32]})
    tuner.rescan()  # a scan runs: nothing changes
    assert tuner.scanning and tuner.scans == 1
    work = Work(context)
    while tuner.scanning:
        work.step(tuner)
    assert tuner.best is not None and tuner.scans == 1
    tuner.rescan()
    assert tuner.scanning and tuner.scans == 2 and len(tuner.scan.candidates) == 2


def test_rescan_under_pytest_scans_nothing(context, tmp_path):
    tuner = busy_tuner(context, tmp_path / "t.db")
    tuner.rescan()
    assert not tuner.scanning and tuner.scans == 0 and tuner.best == TEST


@pytest.mark.force_autotune
@pytest.mark.gpu_alone  # times kernels: other workers' work on the GPU would be in it
def test_parts_scan_each_kernel_on_its_own_and_their_medians_add_up(context, tmp_path):
    # two kernels share one parameter x and are launched alternately, as a solver's variants
    # are: with one round-robin over two candidates, each candidate would only ever be timed
    # on one of the kernels (candidate 0 on the cheap launch of "a"), and lose or win wrongly
    # (3 times apart in sum, 600 times in part "a": a busy 2-core machine's stalls do not turn
    # the medians of 5 samples around, as they did those of 3 at 1.5 times apart)
    reps = {("a", 0): 3, ("b", 0): 1800, ("a", 1): 300, ("b", 1): 300}
    samples = 5
    tuner = tune.OnlineTuner(context, "tests.Busy.parts", {"x": [0, 1]}, {"x": 0},
                             arguments={"n": N}, db=str(tmp_path / "t.db"), samples=samples)
    work = Work(context)
    launched = []
    while tuner.scanning:
        for part in ("a", "b"):
            with tuner.measure(work.queue, part) as params:
                launched.append((part, params["x"]))
                work._launch({"reps": reps[part, params["x"]], "wgs": 32})
    assert tuner.best == {"x": 1}  # 300 + 300 against 3 + 1800
    for part in ("a", "b"):  # each candidate timed on each kernel
        assert all(sum(1 for p, y in launched if (p, y) == (part, x)) >= samples for x in (0, 1))
    assert tuner.stored  # written in a thread of its own: this waits for it
    stored = ResultStore(f"sqlite:///{tmp_path / 't.db'}").get(tuner.key)
    assert json.loads(stored.search)["parts"] == 2 and stored.score == tuner.best_seconds
    # the statistics of its choice (statistics of a choice): over the best's rounds of the mix
    assert stored.ties == 0 and stored.ci_low <= stored.ci_high and stored.spread >= 0


@pytest.mark.force_autotune
def test_candidates_are_launched_only_once_prepared(context, tmp_path):
    prepared: set[int] = set()
    guard = threading.Lock()

    def prepare(params: dict) -> None:
        if params["reps"] == 7:
            raise RuntimeError("does not compile")
        time.sleep(0.2 if params["reps"] != 300 else 0.0)
        with guard:
            prepared.add(params["reps"])

    tuner = busy_tuner(context, tmp_path / "t.db", space={"reps": [300, 3, 7, 30], "wgs": [32]},
                   samples=2, prepare=prepare, workers=2)
    work = Work(context)
    early = work.step(tuner)
    # the others sleep in their preparation: the first launch is reps 300, timed where its
    # instant preparation (a helper thread's) is done already, else test= untimed (on a busy
    # machine the thread may not have run yet)
    assert early in ({"reps": 300, "wgs": 32}, TEST), early
    seen = []
    while tuner.scanning:
        params = work.step(tuner)
        work.queue.finish()  # as a solver's reductions do: untimed launches do not pile up
        with guard:
            assert params["reps"] in prepared or params["reps"] == 300, params
        seen.append(params["reps"])
    assert 7 not in seen and tuner.best is not None and tuner.best["reps"] != 7 and tuner.stored
    statuses = {json.loads(t.parameters)["reps"]: t.status
                for t in ResultStore(f"sqlite:///{tmp_path / 't.db'}").trials()}
    assert statuses == {300: "ok", 3: "ok", 30: "ok", 7: "compile_error"}
    # a rescan does not prepare again what was prepared
    prepared.clear()
    tuner.rescan()
    assert tuner.wait_prepared(5) and prepared == set()


@pytest.mark.force_autotune
def test_a_candidate_prepared_while_others_wait_is_timed_at_its_next_launch(context, tmp_path):
    """While nothing can be timed the tuner repeats its untimed fallback without looking at
    every candidate; a candidate that becomes ready must still be taken at the next launch."""
    gates = {reps: threading.Event() for reps in (3, 30)}
    done = {reps: threading.Event() for reps in (3, 30)}

    def prepare(params: dict) -> None:
        if params["reps"] in gates:
            gates[params["reps"]].wait(30)
            done[params["reps"]].set()

    tuner = busy_tuner(context, tmp_path / "t.db", space={"reps": [300, 3, 30], "wgs": [32]},
                   samples=2, prepare=prepare, workers=2)
    work = Work(context)
    picks = []
    for _ in range(3 * tune.online.IDLE_RECHECK):  # test= timed twice, then only fallbacks
        picks.append(work.step(tuner)["reps"])
        work.queue.finish()
    assert set(picks) == {300} and tuner.scanning
    # the prepared test= candidate was timed once, not its two samples, while the others wait:
    # every candidate's samples are then taken in the same stretch of the run
    assert [c.launched for c in tuner.scan.candidates] == [{None: 1}, {}, {}]
    for reps in (3, 30):
        gates[reps].set()
        assert done[reps].wait(30)
        deadline = time.monotonic() + 30  # the tuner marks it ready just after prepare returns
        while not any(c.ready for c in tuner.scan.candidates if c.params["reps"] == reps):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert work.step(tuner)["reps"] == reps
        work.queue.finish()
    while tuner.scanning:
        work.step(tuner)
        work.queue.finish()
    assert tuner.best is not None


@pytest.mark.force_autotune
def test_while_a_candidate_is_prepared_launches_use_the_fastest_timed_so_far(context, tmp_path):
    """Each prepared candidate is timed once; while one is still being prepared the launches use
    the fastest of those timed (not test=, not the last timed), and the scan then finishes."""
    gate = threading.Event()

    def prepare(params: dict) -> None:
        if params["reps"] == 1000:
            gate.wait(30)

    tuner = busy_tuner(context, tmp_path / "t.db", space={"reps": [300, 3, 3000, 1000], "wgs": [32]},
                   samples=2, prepare=prepare, workers=2)
    deadline = time.monotonic() + 30
    while not all(c.ready for c in tuner.scan.candidates if c.params["reps"] != 1000):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    work = Work(context)
    picks = []
    for _ in range(2 * tune.online.IDLE_RECHECK):
        picks.append(work.step(tuner)["reps"])
        work.queue.finish()
    assert sorted(picks[:3]) == [3, 300, 3000]  # each prepared candidate once, in the scan's order
    assert set(picks[3:]) == {3}, picks  # then the fastest timed (not the last: 3000)
    gate.set()
    while tuner.scanning:
        work.step(tuner)
        work.queue.finish()
    assert tuner.best == {"reps": 3, "wgs": 32}


@pytest.mark.force_autotune
def test_a_failing_candidate_is_skipped_and_its_error_raised_once(context, tmp_path, one_round):
    too_big = context.device.max_work_group_size * 2
    tuner = busy_tuner(context, tmp_path / "t.db", samples=2,
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
    assert tuner.best["wgs"] in (32, 64) and tuner.stored
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
            with context.thread_scope():  # CUDA: the context current in this thread
                run_here(i)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    def run_here(i: int) -> None:
        tuner = busy_tuner(context, tmp_path / "t.db", space=spaces[i], samples=3,
                       name=f"tests.Busy.thread{i}")
        work = Work(context)
        for _ in range(3 * len(spaces[i]) + 5):
            work.step(tuner, device)
        assert tuner.stored
        found[i] = tuner.best

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(spaces))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    trials = {(t.key.function, t.parameters): t.median_seconds
              for t in ResultStore(f"sqlite:///{tmp_path / 't.db'}").trials()}
    assert found == {0: {"reps": 4, "wgs": 32}, 1: {"reps": 5, "wgs": 32},
                     2: {"reps": 6, "wgs": 32}}, trials
    # one tuner shared by threads, each on its own queue: the scan finishes, all launches valid
    shared = busy_tuner(context, tmp_path / "t.db", space={"reps": [200, 2], "wgs": [32]},
                    samples=4, name="tests.Busy.shared")
    works = [Work(context) for _ in range(3)]

    def hammer(work: Work) -> None:
        try:
            with context.thread_scope():
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
        busy_tuner(context, tmp_path / "t.db", samples=0)
    with pytest.raises(tune.OnlineTuningError, match="period"):
        busy_tuner(context, tmp_path / "t.db", period=-1)
    with pytest.raises(tune.OnlineTuningError, match="collective"):
        busy_tuner(context, tmp_path / "t.db", comm=object(), prepare=lambda params: None)
    with pytest.raises(tune.OnlineTuningError, match="test= names"):
        tune.OnlineTuner(context, "x.y", {"wgs": [32]}, {"block": 1})
    with pytest.raises(tune.OnlineTuningError, match="exclude every"):
        tune.OnlineTuner(context, "x.y", tune.Space({"wgs": [32]}, [lambda c: False]), {"wgs": 32})
    with pytest.raises(tune.OnlineTuningError, match="list of parameter dicts"):
        busy_tuner(context, tmp_path / "t.db", seeds={"reps": 3})
    with pytest.raises(tune.OnlineTuningError, match=r"names \['nope'\]"):
        busy_tuner(context, tmp_path / "t.db", seeds=[{"nope": 1}])
    with pytest.raises(tune.OnlineTuningError, match="not a candidate of the scan"):
        busy_tuner(context, tmp_path / "t.db", seeds=[{"reps": 5}])
    tuner = tune.OnlineTuner(context, "x.y", {"wgs": [32]}, {"wgs": 32})
    with pytest.raises(accel.AccelError, match="timed=True"):
        with tuner.measure(context.create_command_queue()):
            pass
