"""``AUTOTUNE_MATCH=similar`` serves another size's parameters only where they fill the device
(``autotune_fill``, :mod:`autotune.tune.fill`): where the nearest size's result under-fills,
the fastest configuration its search tried that fills; where nothing fills, a miss (tuned).
With real kernels on the devices found (PoCL in CI) and with the H200 described."""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from autotune import tune
from autotune.cli import main
from autotune.tune import fill, similar
from autotune.tune.fill import Fill
from autotune.tune.lookup import wait_for_notes
from autotune.tune.records import TrialRecord
from autotune.tune.store import ResultStore

from operations.gemm import GemmTemplate
from operations.lqcd import DslashTemplate
from toy_templates import H200, DescribedContext, SizedTemplate, calls

#: places a compute unit offers the filled toy's work-groups (its declared estimate)
PER_UNIT = 16


class FilledTemplate(SizedTemplate):
    """The sized toy (y = 2 x over ``n`` elements in work-groups of ``wgs``) declaring the
    work-groups it launches: ``ceil(n / wgs)``, :data:`PER_UNIT` at once on a compute unit."""

    @classmethod
    def autotune_fill(cls, context, params, n, label="a", batch=1):
        return Fill(-(-n // params["wgs"]), per_unit=PER_UNIT)


def _filled(context, n):
    return FilledTemplate.autotune(context, n)


def _anchor(context, units):
    """Tune n = 64 x PER_UNIT x units for real, every work-group tried (its trials), then set
    its result to wgs 64: PER_UNIT x units work-groups there, every place of the device
    filled once."""
    n = 64 * PER_UNIT * units
    with tune.search_settings(max_evals=4, batches=1):
        _filled(context, n)
    store = ResultStore.open()
    key = tune.tuner_of(FilledTemplate).key(FilledTemplate, context, n)
    assert {json.loads(t.parameters)["wgs"] for t in store.trials(key) if t.status == "ok"} \
        == {8, 16, 32, 64}
    store.put(dataclasses.replace(store.get(key), parameters='{"wgs":64}'))
    tune.clear_memo()
    return store, key


@pytest.mark.autotune_database
def test_a_result_that_under_fills_here_is_replaced_by_the_fastest_trial_that_fills(
        context, monkeypatch, caplog):
    units = context.device.multiprocessors
    store, anchor = _anchor(context, units)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    places = PER_UNIT * units
    n = 16 * places  # wgs 64: places / 4 work-groups (fill 1/4, against 1 at the anchor)
    # of the trials, wgs 8 and 16 fill every place here (2 x places, places work-groups);
    # wgs 32 fills half of them, which keeps more than tune.fill.KEPT (40%) of its fill at the
    # anchor: served, the fastest of the three at the anchor
    medians = {json.loads(t.parameters)["wgs"]: t.median_seconds
               for t in store.trials(anchor) if t.status == "ok"}
    fastest = min((8, 16, 32), key=lambda w: (medians[w], w))
    calls.clear()
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        assert _filled(context, n) == {"wgs": fastest}
    assert calls["sized"] == 0
    assert "a trial of that search, not its result: it under-fills the device here: " \
           f"{places // 4} work-groups on {units} compute units, {PER_UNIT} at once on each " \
           "(fill 0.25)" in caplog.text
    # the served configuration runs correctly at this size
    queue = context.create_command_queue()
    kernel = context.build(FilledTemplate.autotune_sources[0],
                           {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    x = context.to_device(queue, np.arange(n, dtype=np.float32))
    y = context.allocate(n, np.float32)
    queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], n, fastest)
    assert np.array_equal(y.get(queue), 2 * np.arange(n, dtype=np.float32))
    # recorded as similar, from the anchor's size, a trial
    wait_for_notes()
    row = store.get(tune.tuner_of(FilledTemplate).key(FilledTemplate, context, n))
    assert row.origin == "similar" and similar.similar_from(row) == f"n={64 * PER_UNIT * units}"
    assert similar.served_a_trial(row)
    assert similar.origin_text(row) == f"similar (from n={64 * PER_UNIT * units}, a trial)"
    # without the declaration the anchor's result itself is served (it is valid here)
    monkeypatch.delattr(FilledTemplate, "autotune_fill")
    tune.clear_memo()
    assert _filled(context, n) == {"wgs": 64}


@pytest.mark.autotune_database
def test_where_nothing_fills_the_lookup_misses_and_the_size_is_tuned(context, monkeypatch,
                                                                      caplog):
    units = context.device.multiprocessors
    _anchor(context, units)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    n = 64  # wgs 64 fits, but even wgs 8 launches 8 work-groups: at most half the places
    calls.clear()
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        _filled(context, n)
    assert calls["sized"] > 0  # tuned
    assert "it under-fills the device here" in caplog.text
    assert "using the one tuned for" not in caplog.text and "using a configuration" \
        not in caplog.text
    row = ResultStore.open().get(tune.tuner_of(FilledTemplate).key(FilledTemplate, context, n))
    assert row.origin == "offline"


def _gemm_row(ctx, size, params, score):
    args = (GemmTemplate, ctx, np.dtype(np.float32), size, size, size)
    tuner = tune.tuner_of(GemmTemplate)
    fingerprint = tuner.fingerprint(*args)
    return tune.TuningRecord(tuner.key(*args), json.dumps(params, sort_keys=True,
                                                          separators=(",", ":")),
                             score, "test", fingerprint=fingerprint.digest,
                             sources=fingerprint.sources_json)


def _tiles(mwg, nwg, vwm):
    return {"MWG": mwg, "NWG": nwg, "KWG": 32, "MDIMC": 16, "NDIMC": 16, "MDIMA": 16,
            "NDIMB": 16, "KWI": 2, "VWM": vwm, "VWN": 4, "STRM": 0, "STRN": 0, "SA": 1, "SB": 1}


@pytest.mark.autotune_database
def test_a_gemm_tile_that_leaves_an_h200_idle_at_512_is_not_served_there(monkeypatch, capsys):
    """The H200 described (132 compute units): 1024^3's 64 x 128 tiles launch 128 work-groups
    there, 32 at 512^3; its search's 32 x 64 tiles launch 128 at 512^3 and are served."""
    monkeypatch.delattr(GemmTemplate, "autotune_scaled")  # the trials' path alone (below)
    ctx = DescribedContext(H200, "cuda")
    winner, small, square = _tiles(64, 128, 4), _tiles(32, 64, 2), _tiles(128, 64, 4)
    anchor = _gemm_row(ctx, 1024, winner, 1.0e-4)
    store = ResultStore.open()
    store.put(anchor)

    def trial(params, median, status="ok", fingerprint=anchor.fingerprint):
        return TrialRecord(anchor.key, json.dumps(params, sort_keys=True, separators=(",", ":")),
                           status, "", median, median, median, fingerprint=fingerprint)

    store.add_trials([
        trial(winner, 1.0e-4),
        trial(_tiles(128, 128, 4), 0.5e-4, status="launch_error"),  # did not run
        trial(small, 1.0e-4, fingerprint="0" * 64),  # another search's: not its trial
        trial(_tiles(16, 64, 1), 1.1e-4),  # fills 512^3 (256 groups), but slower at 1024^3
        trial(square, 1.05e-4),  # 32 groups at 512^3, as the winner: under-fills
        trial(small, 1.2e-4), trial(small, 1.08e-4)])  # its faster median counts
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    f32 = np.dtype(np.float32)
    assert GemmTemplate.autotune(ctx, f32, 512, 512, 512) == small
    assert GemmTemplate.autotune(ctx, f32, 2000, 2000, 1000) == winner  # it fills there
    wait_for_notes()
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    assert out.count("similar (from k=1024, m=1024, n=1024, a trial)") == 1
    assert out.count("similar (from k=1024, m=1024, n=1024)") == 1
    frame = tune.results_frame().set_index("arg.m")
    assert frame.loc[512].similar_trial and frame.loc[512]["param.MWG"] == 32
    assert not frame.loc[2000].similar_trial and frame.loc[1024].similar_trial is None
    # the rule, not the trials' order, chose: without it 1024^3's result is served
    monkeypatch.delattr(GemmTemplate, "autotune_fill")
    tune.clear_memo()
    assert GemmTemplate.autotune(ctx, f32, 512, 512, 512) == winner


@pytest.mark.autotune_database
@pytest.mark.parametrize("derives, served", [
    (lambda params: [{"wgs": 16}], 16),           # derived, valid, filling: served scaled
    (lambda params: [{"wgs": 12}], "trial"),      # not a listed work-group: a trial instead
    (lambda params: [{"wgs": params["nope"]}], "trial"),  # fails on the stored result
    (lambda params: "wgs 16", TypeError),         # the template's mistake
    (lambda params: [{"wgs": object()}], TypeError)])
def test_what_a_template_derives_for_a_size_is_judged_as_a_trial_is(context, monkeypatch,
                                                                    derives, served):
    """The filled toy's anchor (wgs 64) under-fills a quarter of its size (:func:`_anchor`):
    the configuration its ``autotune_scaled`` derives is served where it is valid and fills;
    otherwise the fastest trial that fills, as without the declaration."""
    units = context.device.multiprocessors
    _anchor(context, units)

    class Scaled(FilledTemplate):
        @classmethod
        def autotune_scaled(cls, context, params, here, there, space):
            return derives(params)

    monkeypatch.setattr(FilledTemplate, "autotune_scaled", Scaled.autotune_scaled,
                        raising=False)
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    n = 16 * PER_UNIT * units
    if served is TypeError:
        with pytest.raises(TypeError, match="autotune_scaled"):
            _filled(context, n)
        return
    got = _filled(context, n)
    wait_for_notes()
    row = ResultStore.open().get(tune.tuner_of(FilledTemplate).key(FilledTemplate, context, n))
    assert similar.served_scaled(row) == (served != "trial")
    assert similar.served_a_trial(row) == (served == "trial")
    if served != "trial":
        assert got == {"wgs": served}


#: 1024^3's result on an H200 on 2026-12-01: 64 x 128 tiles of 8 x 32 work-items
MEASURED = {"MWG": 64, "NWG": 128, "KWG": 32, "MDIMC": 8, "NDIMC": 32, "MDIMA": 8, "NDIMB": 16,
            "KWI": 2, "VWM": 4, "VWN": 4, "STRM": 0, "STRN": 0, "SA": 1, "SB": 1}


@pytest.mark.autotune_database
def test_a_gemm_result_that_under_fills_is_served_with_its_tiles_scaled(monkeypatch, capsys,
                                                                        caplog):
    """The H200 described: 1024^3's 64 x 128 tiles launch 32 work-groups at 512^3 (128 there);
    served scaled: 32 x 64 tiles of the same 8 x 32 work-items, which launch 128, the vector
    width that no longer divides the tile halved, before any trial of its search."""
    ctx = DescribedContext(H200, "cuda")
    anchor = _gemm_row(ctx, 1024, MEASURED, 1.0e-4)
    store = ResultStore.open()
    store.put(anchor)
    store.add_trials([TrialRecord(anchor.key, json.dumps(_tiles(32, 64, 2), sort_keys=True,
                                                         separators=(",", ":")),
                                  "ok", "", 1.1e-4, 1.1e-4, 1.1e-4, fingerprint=anchor.fingerprint)])
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    f32 = np.dtype(np.float32)
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        served = GemmTemplate.autotune(ctx, f32, 512, 512, 512)
    assert served == {**MEASURED, "MWG": 32, "NWG": 64, "VWN": 2}
    assert GemmTemplate.autotune_fill(ctx, served, f32, 512, 512, 512) == 128
    assert "using the one tuned for dtype=float32, k=1024, m=1024, n=1024 scaled to this size" \
        in caplog.text
    # at a size where its tiles fill the device, the result itself
    assert GemmTemplate.autotune(ctx, f32, 2000, 2000, 700) == MEASURED
    wait_for_notes()
    assert main(["show"]) == 0
    assert capsys.readouterr().out.count("similar (from k=1024, m=1024, n=1024, scaled)") == 1
    frame = tune.results_frame().set_index("arg.m")
    assert frame.loc[512].similar_scaled and not frame.loc[512].similar_trial
    assert frame.loc[512]["param.NWG"] == 64 and not frame.loc[2000].similar_scaled
    # tiles as small as their work-items (32 x 32 of 32 x 32) cannot shrink: at 192^3 (36
    # work-groups, 1024 at 1024^3) a trial that fills is served instead (16 x 32: 72)
    whole = {**MEASURED, "MWG": 32, "NWG": 32, "MDIMC": 32, "NDIMC": 32, "MDIMA": 32,
             "NDIMB": 32, "VWM": 1, "VWN": 1}
    trial = {**_tiles(16, 32, 1), "VWN": 2}
    assert GemmTemplate.autotune_scaled(ctx, whole, dict(dtype=f32, m=192, n=192, k=192),
                                        dict(dtype=f32, m=1024, n=1024, k=1024)) == []
    store.put(dataclasses.replace(anchor, parameters=json.dumps(whole, sort_keys=True,
                                                                separators=(",", ":"))))
    store.add_trials([TrialRecord(anchor.key, json.dumps(trial, sort_keys=True,
                                                         separators=(",", ":")),
                                  "ok", "", 1.2e-4, 1.2e-4, 1.2e-4, fingerprint=anchor.fingerprint)])
    tune.clear_memo()
    assert GemmTemplate.autotune(ctx, f32, 192, 192, 192) == trial


@pytest.mark.parametrize("measured, here", [
    (MEASURED, (512, 512, 512)),
    (_tiles(64, 128, 4), (300, 200, 100)),     # padded: no tile divides the sizes
    (_tiles(128, 128, 4), (256, 96, 64))])
def test_scaled_gemm_tiles_compute_the_product(context, measured, here):
    """A configuration derived for another size computes A B there as numpy does, on the
    device found (its limits allowing the H200's tiles), padding included."""
    h200 = DescribedContext(H200, "cuda")
    f32 = np.dtype(np.float32)
    m, n, k = here
    [derived] = GemmTemplate.autotune_scaled(h200, measured, dict(dtype=f32, m=m, n=n, k=k),
                                             dict(dtype=f32, m=1024, n=1024, k=1024))
    assert GemmTemplate.autotune_fill(h200, derived, f32, m, n, k) \
        > GemmTemplate.autotune_fill(h200, measured, f32, m, n, k)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((m, k), np.float32), rng.standard_normal((k, n), np.float32)
    queue = context.create_command_queue()
    c = context.allocate((m, n), f32)
    gemm = GemmTemplate(context, f32, m, n, k, tuning=derived).instantiate(queue)
    gemm(c, context.to_device(queue, np.ascontiguousarray(a.T)), context.to_device(queue, b))
    np.testing.assert_allclose(c.get(queue), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-3)


def test_fill_counts_waves_and_the_dslash_declares_its_launch():
    assert Fill(32).fraction(132) == pytest.approx(32 / 132)
    assert Fill(132).fraction(132) == 1.0
    assert Fill(800).fraction(132) == pytest.approx(800 / (7 * 132))  # a 6/132 last wave
    assert Fill(10, per_unit=4).fraction(2) == pytest.approx(10 / 16)
    ctx = DescribedContext(H200, "cuda")

    def groups(context, params, n):
        return n

    # less than a wave here: 40% of the fill kept (0.42 of 1.0 is; 0.24 is not)
    assert fill.fills(groups, ctx, {}, {"n": 56}, {"n": 132}) is None
    assert "32 work-groups on 132 compute units (fill 0.24)" in fill.fills(
        groups, ctx, {}, {"n": 32}, {"n": 132})
    # a wave or more, the last partly empty: 60% (1.2 waves where it had 3 is; 1.05 is not)
    assert fill.fills(groups, ctx, {}, {"n": 160}, {"n": 396}) is None
    assert "139 work-groups on 132 compute units (fill 0.53)" in fill.fills(
        groups, ctx, {}, {"n": 139}, {"n": 396})
    shape = {"wgs": 128, "sites": 1, "dir_split": 4, "stage": False, "link_load": 16,
             "fast_math": False, "half_bits": False, "project16": "none", "min_blocks": 2,
             "carveout": -1}
    measure = fill.declared(DslashTemplate)
    assert measure(ctx, shape, (24,) * 4, "single", 12) == Fill(24 ** 4 // 2 // 32, 2)
    arguments = {"precision": "single", "reconstruct": 12}
    # 32 sites a group: 5184 groups at 24^4 fill 264 places 0.98; 64 at 8^4 fill 0.24
    assert fill.fills(measure, ctx, shape, {"dims": (24, 24, 24, 32), **arguments},
                      {"dims": (24,) * 4, **arguments}) is None
    why = fill.fills(measure, ctx, shape, {"dims": (8,) * 4, **arguments},
                     {"dims": (24,) * 4, **arguments})
    assert why == ("it under-fills the device here: 64 work-groups on 132 compute units, 2 at "
                   "once on each (fill 0.24), against 5184 work-groups on 132 compute units, "
                   "2 at once on each (fill 0.98) where it was measured")
    # parameters the measure cannot take are not served; a wrong declaration is an error
    assert "cannot be measured: KeyError" in fill.fills(
        measure, ctx, {}, {"dims": (8,) * 4, **arguments}, {"dims": (24,) * 4, **arguments})

    class Bad:
        @classmethod
        def autotune_fill(cls, context, params, n):
            return 2.5

    with pytest.raises(TypeError, match="autotune_fill must return a positive int"):
        fill.fills(fill.declared(Bad), ctx, {}, {"n": 1}, {"n": 2}, "Bad")

    class NotCallable:
        autotune_fill = 3

    with pytest.raises(TypeError, match="autotune_fill must be a classmethod"):
        fill.declared(NotCallable)


@pytest.mark.autotune_database
def test_a_small_lattice_is_served_a_launch_shape_that_fills_an_h200(monkeypatch):
    """The H200 described: 16^4's 256 work-items a group, one site each, launch 128
    work-groups there (fill 0.97) and 8 at 8^4; its search's 32 work-items of four
    directions each (8 sites a group) launch 256 at 8^4 and are served."""
    ctx = DescribedContext(H200, "cuda")
    tuner = tune.tuner_of(DslashTemplate)
    args = (DslashTemplate, ctx, (16,) * 4, "single", 12)
    fingerprint = tuner.fingerprint(*args)
    base = {"wgs": 256, "sites": 1, "dir_split": 1, "stage": False, "link_load": 16,
            "fast_math": False, "half_bits": False, "project16": "none", "min_blocks": 0,
            "carveout": -1}
    split = {**base, "wgs": 32, "dir_split": 4}

    def text(params):
        return json.dumps(params, sort_keys=True, separators=(",", ":"))

    store = ResultStore.open()
    anchor = tune.TuningRecord(tuner.key(*args), text(base), 2e-5, "test",
                               fingerprint=fingerprint.digest, sources=fingerprint.sources_json)
    store.put(anchor)
    store.add_trials([TrialRecord(anchor.key, text(p), "ok", "", t, t, t,
                                  fingerprint=anchor.fingerprint)
                      for p, t in ((base, 2e-5), ({**base, "wgs": 128}, 2.1e-5), (split, 2.4e-5))])
    monkeypatch.setenv("AUTOTUNE_MATCH", "similar")
    # wgs 128 launches 16 work-groups at 8^4: under-fills too; the split shape fills
    assert DslashTemplate.autotune(ctx, (8,) * 4, "single", 12) == split
    assert DslashTemplate.autotune(ctx, (16, 16, 16, 20), "single", 12) == base
