"""Sizes near each other choose alike: a new size's search measures this device's choices at the
nearest tuned sizes first (``seeds.size_seeds``), and ``AUTOTUNE_MATCH=similar`` serves, of the
configurations a size's search measured within ``similar.NEAR_TIE`` of its result there, one
that more of the other tuned sizes about as near chose (``lookup._chosen_elsewhere``,
``similar.VOTE_REACH``). With the real toy
kernel on the devices found (PoCL in CI)."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from autotune import tune
from autotune.tune import similar
from autotune.tune.lookup import wait_for_notes
from autotune.tune.records import TrialRecord
from autotune.tune.store import ResultStore

from toy_templates import KERNEL, SizedTemplate, calls, run_sized


class UnsizedTemplate(SizedTemplate):
    """The sized toy declaring no argument that generalises."""

    autotune_similar = None


def _row(context, n, wgs, score, label="a", template=SizedTemplate):
    """A stored result of ``template`` for ``n`` (and ``label``), as a search would store it."""
    tuner = tune.tuner_of(template)
    fingerprint = tuner.fingerprint(template, context, n, label)
    return tune.TuningRecord(tuner.key(template, context, n, label), json.dumps({"wgs": wgs}),
                             score, "test", fingerprint=fingerprint.digest,
                             sources=fingerprint.sources_json)


def _trial(record, wgs, median):
    """A configuration ``record``'s search measured at its size."""
    return TrialRecord(record.key, json.dumps({"wgs": wgs}), "ok", "", median, median, median,
                       fingerprint=record.fingerprint)


def _family(store, context, label, near_tie_at, others, sizes=(160, 48)):
    """n = 64 tuned to wgs 8 (10 us), its search having measured 32 at 1.02x, 16 at
    ``near_tie_at`` and 64 at 1.2x; the ``sizes`` (by default 1.3x and 1.7x as far from n = 96
    as 64 is, in log distance) tuned to ``others``."""
    source = _row(context, 64, 8, 1.0e-5, label)
    for n, wgs in zip(sizes, others):
        store.put(_row(context, n, wgs, 2.0e-5, label))
    store.put(source)
    store.add_trials([_trial(source, 8, 1.0e-5), _trial(source, 32, 1.02e-5),
                      _trial(source, 16, near_tie_at * 1.0e-5), _trial(source, 64, 1.2e-5)])


@pytest.mark.autotune_database
def test_a_near_tie_other_sizes_chose_is_served_before_the_nearest_size_s_result(
        context, monkeypatch, caplog):
    store = ResultStore.open()
    _family(store, context, "a", 1.04, (16, 16))  # 16: within 5%, chosen at both others
    _family(store, context, "b", 1.06, (16, 16))  # 16: 6% slower at 64
    _family(store, context, "c", 1.04, (8, 16))   # 8, the result, as often chosen as 16
    _family(store, context, "d", 1.04, (16, 32))  # 16 and 32 once each: the faster, 32
    # 16 chosen at both others, but they are 5.8x and 7.5x as far from 96 as 64 is
    _family(store, context, "e", 1.04, (16, 16), sizes=(1024, 2048))
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    calls.clear()
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        served = {label: SizedTemplate.autotune(context, 96, label)["wgs"]
                  for label in "abcde"}
    assert served == {"a": 16, "b": 8, "c": 8, "d": 32, "e": 8}
    assert calls["sized"] == 0  # nothing tuned
    assert "using a configuration tried for batch=1, label='a', n=64, within 5% of its result " \
           "there and chosen at 2 other tuned sizes (batch=1, label='a', n=160; batch=1, " \
           "label='a', n=48)" in caplog.text
    wait_for_notes()
    tuner = tune.tuner_of(SizedTemplate)
    row = store.get(tuner.key(SizedTemplate, context, 96, "a"))
    assert row.origin == "similar" and similar.served_a_trial(row)
    assert similar.similar_from(row) == "n=64"
    for label in "be":
        assert not similar.served_a_trial(store.get(tuner.key(SizedTemplate, context, 96, label)))
    # the served work-group computes y = 2 x at this size
    queue = context.create_command_queue()
    kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    x = context.to_device(queue, np.arange(96, dtype=np.float32))
    y = context.allocate(96, np.float32)
    run_sized(queue, kernel, y, x, 96, served["a"])
    assert np.array_equal(y.get(queue), 2 * np.arange(96, dtype=np.float32))


@pytest.mark.autotune_database
def test_a_new_size_s_search_measures_the_nearest_sizes_choices_first(context):
    """The sized toy declares ``n``: tuning n = 128 measures n = 64's choice (64), then n =
    4096's (32), before the space's declared order (8, 16, 32, 64); a row of another label is
    not one of its sizes. A template that declares nothing starts in the declared order."""
    store = ResultStore.open()
    for template in (SizedTemplate, UnsizedTemplate):
        store.put(_row(context, 64, 64, 1e-5, template=template))
        store.put(_row(context, 4096, 32, 1e-5, template=template))
        store.put(_row(context, 64, 16, 1e-5, label="b", template=template))
    measured = []

    def observe(event, data):
        trial = data.get("trial")
        if event == "trial" and trial is not None:
            measured.append(trial.parameters["wgs"])

    first = {}
    for template in (SizedTemplate, UnsizedTemplate):
        measured.clear()
        with tune.observing(observe), tune.search_settings(max_evals=4, batches=1):
            template.autotune(context, 128)
        first[template] = [w for w in measured if w != 8][:2]  # 8: test=, the baseline
    assert first[SizedTemplate] == [64, 32]
    assert first[UnsizedTemplate] == [16, 32]
