"""The tuner: decorator, search, store integration, matching and validation, on real kernels."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune import accel, tune
from autotune.tune.store import ResultStore, StoreError

from toy_templates import FailingTemplate, FakeTimedTemplate, Flavour, ToyTemplate, VersionedToy, calls

TOY_FUNCTION = "toy_templates.ToyTemplate.autotune"


def _store() -> ResultStore:
    return ResultStore.open()


def _only_result(function=TOY_FUNCTION):
    rows = _store().records(function=function)
    assert len(rows) == 1, rows
    return rows[0]


def test_test_mode_returns_test_parameters_without_a_database(context, tmp_path, monkeypatch):
    db = tmp_path / "never.db"
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    before = calls["ToyTemplate"]
    assert ToyTemplate(context).tuning == {"wgs": 64, "mode": "good"}
    assert calls["ToyTemplate"] == before
    assert not db.exists()


@pytest.mark.autotune_database
def test_tunes_once_then_serves_from_memo_and_database(context):
    calls.clear()
    first = ToyTemplate(context).tuning
    assert first["mode"] == "good" and first["wgs"] in (32, 64)
    generated = calls["ToyTemplate"]
    assert generated == 14  # every configuration was generated once
    assert ToyTemplate(context).tuning == first
    tune.clear_memo()  # the database alone must serve it now
    assert ToyTemplate(context).tuning == first
    assert calls["ToyTemplate"] == generated


@pytest.mark.autotune_database
def test_result_and_trial_tables_hold_the_key(context):
    ToyTemplate(context, np.float64, Flavour.FANCY, shape=(2, 3)).tuning
    row = _only_result()
    assert row.key.version == 1
    assert row.key.device_name == context.device.name
    assert row.key.device_platform == context.device.platform
    assert row.key.driver_version == context.device.driver_version
    arguments = tune.encoding.decode_arguments(row.key.arguments, enum_types=(Flavour,))
    assert arguments == {"dtype": np.dtype(np.float64), "flavour": Flavour.FANCY,
                         "shape": (2, 3), "extra": None}
    assert row.score > 0 and row.package_version
    assert json.loads(row.parameters)["mode"] == "good"
    trials = _store().trials(row.key)
    statuses = sorted(t.status for t in trials)
    # skip is absent: generate returned None for it
    assert statuses == sorted(["ok"] * 2 + ["invalid"] * 2 + ["compile_error"] * 2
                              + ["wrong_result"] * 2 + ["launch_error"] * 2 + ["error"] * 2)
    for t in trials:
        if t.status == "ok":
            assert 0 < t.min_seconds <= t.median_seconds <= t.max_seconds
        else:
            assert t.message and t.median_seconds is None
    wrong = [t for t in trials if t.status == "wrong_result"]
    assert all("reference" in t.message for t in wrong)
    broken = next(t for t in trials if t.status == "compile_error")
    assert "toy.mako:6" in broken.message


@pytest.mark.autotune_database
def test_versions_and_arguments_are_kept_apart(context):
    calls.clear()
    ToyTemplate(context)
    VersionedToy(context)
    ToyTemplate(context, np.float64)
    assert calls["ToyTemplate"] == 28 and calls["VersionedToy"] == 14
    rows = _store().records()
    versions = sorted((r.key.function, r.key.version, r.key.arguments) for r in rows)
    assert len(versions) == 3
    assert len({v[1] for v in versions}) == 2


@pytest.mark.autotune_database
def test_all_failures_raise_with_counts_and_first_messages(context):
    with pytest.raises(tune.AutotuneError) as info:
        FailingTemplate.autotune(context, ("invalid", "compile", "plain"))
    message = str(info.value)
    # wgs 0..5 (the test= baseline, wgs=64, is tried too but counted apart: it is outside the space)
    assert "(6 in the space, 6 tried, 0 skipped by generate)" in message
    assert "invalid: 2" in message and "wgs 0 invalid" in message
    assert "compile_error: 2" in message and "toy.mako" in message
    assert "error: 2" in message and "plain failure for 2" in message
    assert _store().records() == []
    assert len(_store().trials(function="toy_templates.FailingTemplate.autotune")) == 7


def test_empty_space_and_bad_space_are_clear_errors():
    with pytest.raises(tune.AutotuneError, match="no parameters"):
        tune.autotune(lambda: None)
    with pytest.raises(tune.AutotuneError, match="empty"):
        tune.autotune(lambda wgs: None, wgs=[])
    with pytest.raises(tune.AutotuneError, match="list of values"):
        tune.autotune(lambda wgs: None, wgs=64)


def test_all_skipped_is_an_error():
    with pytest.raises(tune.AutotuneError, match="2 skipped"):
        tune.autotune(lambda wgs: None, wgs=[1, 2])


def _put(store, key, parameters, when=None, score=1e-3):
    from datetime import datetime, timezone

    store.put(tune.TuningRecord(key=key, parameters=json.dumps(parameters), score=score,
                                package_version="test",
                                created_at=when or datetime.now(timezone.utc)))


def _fake_key(context, **changes):
    from dataclasses import replace

    key = tune.TuningKey(
        function="toy_templates.FakeTimedTemplate.autotune", version=0,
        device_name=context.device.name, device_platform=context.device.platform,
        driver_version=context.device.driver_version,
        arguments=tune.encoding.encode_arguments({"size": 10}),
    )
    return replace(key, **changes)


@pytest.mark.autotune_database
def test_nearest_match_relaxes_driver_then_platform_then_device(context, monkeypatch, caplog):
    from datetime import datetime, timedelta, timezone

    store = _store()
    now = datetime.now(timezone.utc)
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    steps = [
        ({"device_name": "Other GPU", "device_platform": "Other", "driver_version": "0"}, 5),
        ({"device_platform": "Other", "driver_version": "0"}, 4),
        ({"driver_version": "0"}, 2),
    ]
    calls.clear()
    for changes, block in steps:
        _put(store, _fake_key(context, **changes), {"block": block}, when=now - timedelta(days=1))
        tune.clear_memo()
        with caplog.at_level(logging.WARNING, logger="autotune.tune"):
            assert FakeTimedTemplate.autotune(context, 10) == {"block": block}
        assert "nearest" in caplog.text
        caplog.clear()
    assert calls["fake"] == 0
    # Newest wins among several candidates of the same step.
    _put(store, _fake_key(context, driver_version="1"), {"block": 4}, when=now)
    tune.clear_memo()
    assert FakeTimedTemplate.autotune(context, 10) == {"block": 4}
    # exact mode never uses another device's result: it tunes (best block is 3)
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    assert FakeTimedTemplate.autotune(context, 10) == {"block": 3}
    assert calls["fake"] == 5
    assert store.get(_fake_key(context)) is not None


@pytest.mark.autotune_database
def test_nearest_never_crosses_function_version_or_arguments(context, monkeypatch):
    store = _store()
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    _put(store, _fake_key(context, device_name="X", version=7), {"block": 5})
    _put(store, _fake_key(context, device_name="X", arguments=tune.encoding.encode_arguments({"size": 11})),
         {"block": 5})
    _put(store, _fake_key(context, device_name="X", function="other.f"), {"block": 5})
    assert FakeTimedTemplate.autotune(context, 10) == {"block": 3}


@pytest.mark.autotune_database
@pytest.mark.parametrize("stored", [
    {"block": 5, "evil": 1},                       # unknown key
    {},                                            # missing key
    {"block": "5"},                                # wrong type
    {"block": True},                               # bool is not an int
    {"block": 5.5},                                # float for an int
    {"block": "1); } __kernel void x() { //"},     # injected code
    ["block", 5],                                  # not an object
])
def test_tampered_rows_are_ignored_and_retuned(context, stored, caplog):
    store = _store()
    _put(store, _fake_key(context), stored)
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        assert FakeTimedTemplate.autotune(context, 10) == {"block": 3}
    assert "ignoring stored tuning result" in caplog.text
    assert json.loads(store.get(_fake_key(context)).parameters) == {"block": 3}


@pytest.mark.autotune_database
def test_malformed_json_is_ignored(context):
    store = _store()
    store.put(tune.TuningRecord(key=_fake_key(context), parameters="{not json", score=1.0,
                                package_version="x"))
    assert FakeTimedTemplate.autotune(context, 10) == {"block": 3}


@pytest.mark.autotune_database
def test_bad_environment_values_are_clear_errors(context, monkeypatch, tmp_path):
    monkeypatch.setenv("AUTOTUNE_MATCH", "fuzzy")
    with pytest.raises(tune.ConfigurationError, match="AUTOTUNE_MATCH='fuzzy'"):
        FakeTimedTemplate.autotune(context, 10)
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database" * 100)
    monkeypatch.setenv("AUTOTUNE_DB", str(garbage))
    with pytest.raises(StoreError, match="AUTOTUNE_DB"):
        FakeTimedTemplate.autotune(context, 10)


@pytest.mark.autotune_database
def test_a_hit_costs_well_under_a_millisecond(context):
    FakeTimedTemplate.autotune(context, 10)
    batches = []  # the best of several batches: what a hit costs, not what a busy machine adds
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(400):
            FakeTimedTemplate.autotune(context, 10)
        batches.append((time.perf_counter() - start) / 400)
    per_call = min(batches)
    assert per_call < 2e-4, f"{per_call * 1e6:.1f} us per hit"


def test_arguments_that_cannot_be_keys_are_rejected(context):
    tune.serving().test.force = True
    try:
        with pytest.raises(tune.encoding.ArgumentEncodingError, match="object"):
            FakeTimedTemplate.autotune(context, object())
    finally:
        tune.serving().test.force = False


_plain = st.one_of(st.none(), st.booleans(), st.integers(-2**60, 2**60),
                   st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
_dtypes = st.sampled_from([np.float32, np.float64, np.complex64, np.complex128, np.int8,
                           np.dtype([("re", np.float32), ("im", np.float32)])])
_values = st.recursive(
    st.one_of(_plain, _dtypes.map(np.dtype), st.sampled_from(list(Flavour))),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.tuples(inner, inner),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=8,
)


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), _values, max_size=4))
def test_argument_encoding_round_trips_and_is_canonical(arguments):
    text = tune.encoding.encode_arguments(arguments)
    assert tune.encoding.decode_arguments(text, enum_types=(Flavour,)) == arguments
    assert tune.encoding.encode_arguments(dict(reversed(list(arguments.items())))) == text


def _tune_in_process(db: str, selector: str, barrier, sizes: list[int]) -> str:
    os.environ["AUTOTUNE_DB"] = db
    try:
        from toy_templates import FakeTimedTemplate

        context = accel.select_devices(selector)[0].create_context()
        barrier.wait()
        for size in sizes:
            assert FakeTimedTemplate.autotune(context, size) == {"block": 3}
        return "ok"
    except Exception as exc:  # reported to the parent
        return f"{type(exc).__name__}: {exc}"


def test_eight_processes_tune_into_one_sqlite_file(tmp_path):
    db = str(tmp_path / "shared.db")
    selector = accel.select_devices("opencl")[0].selector if any(
        s.backend == "opencl" for s in accel.list_devices()) else accel.list_devices()[0].selector
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(8)
    sizes = [list(range(i % 3, 12, 1 + i % 2)) for i in range(8)]
    with ctx.Pool(8) as pool:
        outcomes = pool.starmap(_tune_in_process, [(db, selector, barrier, s) for s in sizes])
    assert outcomes == ["ok"] * 8
    store = ResultStore(f"sqlite:///{db}")
    rows = store.records()
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys)) == len(set().union(*map(set, sizes)))
    assert all(json.loads(r.parameters) == {"block": 3} for r in rows)
    store.dispose()


def test_candidates_are_generated_ahead_in_a_pool_but_not_all_held_at_once():
    import threading
    import weakref

    alive: set[int] = set()
    peak = [0]
    lock = threading.Lock()

    class Candidate:
        def __init__(self, n):
            time.sleep(0.2)  # stands in for compilation
            with lock:
                alive.add(n)
                peak[0] = max(peak[0], len(alive))
            weakref.finalize(self, alive.discard, n)

        def __call__(self, iterations):
            return 1e-6

    start = time.perf_counter()
    result = tune.search(Candidate, {"n": list(range(12))}, workers=4)
    elapsed = time.perf_counter() - start
    assert len(result.trials) == 12
    assert elapsed < 12 * 0.2 / 2, f"generation should overlap: {elapsed:.2f} s"
    # the window of four ahead, the one timed, one handed over, and the fastest four kept
    # built to be timed again before the choice (statistics of a choice)
    assert peak[0] <= 4 + 1 + 1 + tune.choice.LEADERS, f"{peak[0]} candidates were alive at once"


def test_failure_kinds_come_from_exception_types_not_messages():
    from autotune.tune.search import classify

    assert classify(ValueError("could not launch the rocket")) == "error"
    assert classify(accel.LaunchError("too big")) == "launch_error"
    assert classify(accel.CompileError("x")) == "compile_error"
    assert classify(tune.WrongResult("x")) == "wrong_result"
    assert classify(tune.InvalidConfiguration("x")) == "invalid"


def test_bad_test_values_are_rejected_when_decorating():
    for bad in ({"wgs": None}, {"wgs": "64; evil()"}, {"wgs": float("nan")}, {}):
        with pytest.raises(TypeError, match="test="):
            tune.autotuner(test=bad)


class HandPicked:
    @classmethod
    @tune.autotuner(test={"block": 1})
    def autotune(cls, context):
        return {"block": 7}  # chosen without a search


class InheritsToy(ToyTemplate):
    pass


@pytest.mark.autotune_database
def test_untimed_parameters_store_an_infinite_score(context):
    assert HandPicked.autotune(context) == {"block": 7}
    (row,) = _store().records(function="%HandPicked%")
    assert row.score == float("inf")


@pytest.mark.autotune_database
def test_a_subclass_gets_keys_of_its_own(context):
    calls.clear()
    ToyTemplate(context)
    InheritsToy(context)
    assert calls["InheritsToy"] == 14, "the subclass must not reuse its parent's result"
    functions = {r.key.function for r in _store().records()}
    assert functions == {TOY_FUNCTION, "test_tune.InheritsToy.autotune"}


class OutsideSpace:
    @classmethod
    @tune.autotuner(test={"block": 9})
    def autotune(cls, context):
        return tune.autotune(lambda block: (lambda iterations: block * 1e-6), block=[1, 2])


@pytest.mark.autotune_database
def test_the_test_parameters_are_timed_even_outside_the_space(context):
    assert OutsideSpace.autotune(context) == {"block": 1}
    timed = {json.loads(t.parameters)["block"] for t in _store().trials() if t.status == "ok"}
    assert timed == {1, 2, 9}
