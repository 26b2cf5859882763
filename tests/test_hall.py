"""The hall behind the tuner's two doors (docs/architecture.md): one serving object holding the
process state, swappable for a block; one judge of a stored row for offline calls and online
tuners alike; observers and strategies passed in, scoped; a template's space made once per
device and arguments."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter

import numpy as np
import pytest

from autotune import tune
from autotune.tune.records import TuningRecord
from autotune.tune.serving import Serving
from autotune.tune.store import ResultStore
from autotune.tune.verdicts import Freshness
from operations.scale import ScaleTemplate


def _scale_key(context):
    return tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.float32)


def test_a_swapped_serving_object_has_its_own_memo_stores_and_test_mode(context, tmp_path):
    outer = tune.serving()
    assert outer.test.active  # the pytest plugin's: tuned functions return test=
    db = tmp_path / "swap.db"
    with tune.using_serving() as inner, tune.use_database(db):
        assert tune.serving() is inner and not inner.test.active
        tuned = ScaleTemplate.autotune(context, np.float32)  # a real search on this device
        url = f"sqlite:///{db}"
        assert inner.remembered((url, inner.match_mode(), _scale_key(context))) == tuned
        assert inner.store(url) is inner.store(url)
        assert ResultStore(url).get(_scale_key(context)) is not None
    assert tune.serving() is outer
    assert outer.remembered((url, outer.match_mode(), _scale_key(context))) is None
    with tune.use_database(db):
        assert ScaleTemplate.autotune(context, np.float32) == tune.tuner_of(ScaleTemplate).test


def test_using_serving_holds_for_every_thread_of_the_process(tmp_path):
    seen = []
    with tune.using_serving() as inner:
        thread = threading.Thread(target=lambda: seen.append(tune.serving()))
        thread.start()
        thread.join()
    assert seen == [inner]


def test_a_serving_object_refuses_a_match_mode_it_does_not_know():
    with pytest.raises(tune.ConfigurationError, match="'fuzzy' is not understood; use 'exact'"):
        Serving(match="fuzzy")


def _stored_row(context, db, parameters: dict) -> None:
    tuner = tune.tuner_of(ScaleTemplate)
    key = tuner.key(ScaleTemplate, context, np.float32)
    fingerprint = tuner.fingerprint(ScaleTemplate, context, np.float32)
    ResultStore(f"sqlite:///{db}").save(TuningRecord(
        key, json.dumps(parameters), 1e-5, "test", fingerprint=fingerprint.digest,
        sources=fingerprint.sources_json))


@pytest.mark.parametrize("parameters, fresh", [({"wgs": 128}, True), ({"wgs": 96}, False)])
def test_both_doors_judge_a_stored_row_alike(context, tmp_path, parameters, fresh):
    """A row in the space is served by a call and locks an online tuner at once; a row outside
    it (96 is not among the listed work-group sizes) is served by neither."""
    db = tmp_path / "judge.db"
    _stored_row(context, db, parameters)
    with tune.using_serving(), tune.use_database(db):
        verdict = tune.tuner_of(ScaleTemplate).judge(ScaleTemplate, context, np.float32)
        assert (verdict.freshness is Freshness.FRESH) == fresh
        online = tune.OnlineTuner.for_template(ScaleTemplate, context, dtype=np.float32)
        assert (online.best == parameters) == fresh
        assert online.scanning != fresh


def test_observers_are_scoped_to_their_block_and_nest():
    outer, inner = [], []

    def watch(log):
        return lambda event, data: log.append(event)

    generate = lambda a: (lambda iterations: 1e-6 * (a + 1))  # noqa: E731
    with tune.observing(watch(outer)):
        tune.search(generate, {"a": [1, 2]}, workers=0)
        with tune.observing(watch(inner)):
            tune.search(generate, {"a": [1, 2, 3]}, workers=0)
    tune.search(generate, {"a": [1]}, workers=0)
    assert outer == ["start", "trial", "trial", "start", "trial", "trial", "trial"]
    assert inner == ["start", "trial", "trial", "trial"]
    with pytest.raises(TypeError, match="takes a callable observer"):
        with tune.observing("print"):
            pass


def test_a_strategy_may_be_a_callable_of_ones_own():
    measured = []

    def last_first(ctx):
        """Measures the configurations from the last to the first."""
        for config in reversed(ctx.configs):
            measured.append(config["a"])
            ctx.evaluate([config])

    result = tune.search(lambda a: (lambda iterations: 1e-6 * abs(a - 2) + 1e-7),
                         {"a": [0, 1, 2, 3]}, strategy=last_first, workers=0)
    assert measured == [3, 2, 1, 0] and result.best == {"a": 2}
    assert result.info["strategy"].endswith("last_first")
    with tune.search_settings(strategy=last_first):
        measured.clear()
        tune.search(lambda a: (lambda iterations: 1e-6), {"a": [5, 6]}, workers=0)
        assert measured == [6, 5]
    with pytest.raises(tune.AutotuneError, match="pass a callable strategy"):
        tune.search(lambda a: None, {"a": [1]}, strategy=42, workers=0)


class CountedSpace:
    """A template whose space counts how often it is made, and whose candidates are checked
    against it as a template constructor checks explicit parameters."""

    made: Counter = Counter()
    seen: list = []
    autotune_version = 1

    @classmethod
    def autotune_space(cls, context, n):
        cls.made[(context.device.local_memory, n)] += 1
        return tune.Space({"wgs": [32, 64, 128]},
                          [tune.limit("fits", lambda p: p["wgs"] * 4 <= context.device.local_memory)])

    @classmethod
    @tune.autotuner(test={"wgs": 64})
    def autotune(cls, context, n):
        def generate(wgs):
            tune.checked_tuning(cls, context, {"wgs": wgs}, n=n)  # as a constructor does
            cls.seen.append(sum(cls.made.values()))
            return lambda iterations: 1e-6 * wgs

        return tune.autotune(generate)


def test_a_searchs_candidates_check_their_space_made_once(context, tmp_path):
    CountedSpace.made.clear()
    CountedSpace.seen.clear()
    with tune.using_serving(), tune.use_database(tmp_path / "space.db"):
        assert CountedSpace.autotune(context, 10) == {"wgs": 32}
    assert len(CountedSpace.seen) == 3 and len(set(CountedSpace.seen)) == 1  # none made anew
    before = sum(CountedSpace.made.values())
    tune.checked_tuning(CountedSpace, context, {"wgs": 64}, n=10)  # outside a search: made afresh
    assert sum(CountedSpace.made.values()) == before + 1
    small = dataclasses.replace(context.device, local_memory=256)  # another device's limits

    class Small:
        device = small

    with pytest.raises(ValueError, match="cannot run on"):
        tune.checked_tuning(CountedSpace, Small(), {"wgs": 128}, n=10)


def test_the_kept_results_are_the_serving_objects(tmp_path):
    """A result a database could not take is kept by the serving object in use (and listed
    until written), not by a module somewhere."""
    with tune.using_serving() as inner:
        assert inner.kept.waiting() == []
        assert tune.serving().kept is inner.kept
    assert tune.serving().kept is not inner.kept

