"""``tune.tuning_for``: the one call a template constructor makes for its ``tuning=``, on real
templates: None serves or tunes under the key the constructors used before, a dict is
completed from ``test=`` and checked, ``"online"`` gives an online tuner where the template
tunes online, anything else is a one-line error."""

from __future__ import annotations

import dataclasses
import logging
import re

import numpy as np
import pytest

from autotune import tune
from autotune.tune.encoding import decode_parameters
from autotune.tune.store import ResultStore
from operations.blas import BlasTemplate
from operations.gemm import GemmTemplate
from operations.gemm import TEST_PARAMETERS as GEMM_TEST
from operations.fused import TEST_PARAMETERS as FUSED_TEST
from operations.lqcd.dslash import DslashTemplate
from operations.lqcd.half import HalfConvertTemplate
from operations.lqcd.schwarz import SchwarzMRTemplate
from operations.scale import ScaleTemplate

LATTICE = {"dims": (4, 4, 4, 8), "precision": "single", "reconstruct": 12}
F32 = np.dtype(np.float32)


def test_none_gives_test_parameters_under_pytest(context):
    chosen = tune.tuning_for(ScaleTemplate, context, None, dtype=F32)
    assert chosen == tune.Tuning({"wgs": 64}) and chosen.online is None and not chosen.is_online
    with pytest.raises(dataclasses.FrozenInstanceError):
        chosen.parameters = {"wgs": 128}  # type: ignore[misc]


@pytest.mark.autotune_database
def test_none_serves_what_the_old_positional_call_stored(context, tmp_path):
    """A result tuned by ``ScaleTemplate.autotune(context, dtype)`` (the constructors' old
    call, arguments by position) is what ``tuning_for`` serves, without tuning again: the
    keys are the same."""
    with tune.use_database(tmp_path / "served.db") as url:
        tuned = tune.tuner_of(ScaleTemplate).retune(ScaleTemplate, context, F32)
        store = ResultStore(url)
        trials = len(store.trials())
        assert trials > 0
        tune.clear_memo()
        chosen = tune.tuning_for(ScaleTemplate, context, None, dtype=F32)
        assert chosen.parameters == tuned.parameters and chosen.online is None
        assert len(store.trials()) == trials  # served from the store, not tuned
        assert ScaleTemplate(context, F32).wgs == tuned.parameters["wgs"]


@pytest.mark.force_autotune
@pytest.mark.parametrize("template,arguments,positional", [
    (HalfConvertTemplate, {"dtype": np.dtype(np.complex64)}, (np.dtype(np.complex64),)),
    (SchwarzMRTemplate,  # the old call passed half, which has a default, by position
     {"dims": (8, 4, 4, 8), "block": (4, 4, 4, 4), "dtype": np.dtype(np.complex64),
      "half": False},
     ((8, 4, 4, 8), (4, 4, 4, 4), np.dtype(np.complex64), False)),
])
def test_none_tunes_under_the_key_of_the_old_call(context, template, arguments, positional):
    chosen = tune.tuning_for(template, context, None, **arguments)
    old_key = tune.tuner_of(template).key(template, context, *positional)
    stored = ResultStore(tune.store.database_url()).get(old_key)
    assert stored is not None, f"nothing stored under the old key {old_key}"
    assert decode_parameters(stored.parameters) == chosen.parameters


def test_a_partial_dict_takes_test_values_and_is_checked(context, caplog):
    given = {"MWG": 128, "NWG": 128}  # 256 accumulators a work-item: a preference breaks
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        chosen = tune.tuning_for(GemmTemplate, context, given, dtype=F32, m=64, n=64, k=64)
    assert chosen.parameters == {**GEMM_TEST, **given} and chosen.online is None
    assert given == {"MWG": 128, "NWG": 128}  # the caller's dict is left alone
    assert "at most 128 accumulators" in caplog.text and "used as given" in caplog.text
    assert tune.tuning_for(ScaleTemplate, context, {}, dtype=F32).parameters == {"wgs": 64}
    assert BlasTemplate(context, F32, "axpy", {"ipt": 2}).tuning == {**FUSED_TEST, "ipt": 2}


@pytest.mark.parametrize("tuning,message", [
    ({"wgs": 1 << 20}, r"ScaleTemplate: tuning \{'wgs': 1048576\} cannot run on .*device's limit"),
    ({"wgs": "big"}, r"ScaleTemplate: tuning \{'wgs': 'big'\}: parameter 'wgs' = 'big' is not an int"),
    ({"wgs": 64, "x": 1}, r"parameters have keys \['wgs', 'x'\], the template expects \['wgs'\]"),
])
def test_a_bad_dict_is_refused_naming_the_problem(context, tuning, message):
    with pytest.raises(ValueError, match=message):
        tune.tuning_for(ScaleTemplate, context, tuning, dtype=F32)
    with pytest.raises(ValueError, match=message):  # and so by the constructor
        ScaleTemplate(context, F32, tuning)


def test_online_gives_the_dslash_a_tuner_under_its_offline_key(context):
    prepared = []
    chosen = tune.tuning_for(DslashTemplate, context, "online",
                             online={"prepare": prepared.append}, **LATTICE)
    assert chosen.parameters is None and chosen.is_online
    assert isinstance(chosen.online, tune.OnlineTuner)
    assert chosen.online.key == tune.tuner_of(DslashTemplate).key(
        DslashTemplate, context, (4, 4, 4, 8), "single", 12)
    assert chosen.online.best == tune.tuner_of(DslashTemplate).test  # under pytest: test=
    template = DslashTemplate(context, tuning="online", **LATTICE)
    assert template.tuning is None and isinstance(template.online, tune.OnlineTuner)
    assert template.online.key == chosen.online.key
    assert DslashTemplate(context, tuning={"wgs": 16}, **LATTICE).online is None


def test_online_fused_passes_make_their_tuners_per_pass(context):
    """A fused template accepts "online" (``online=True``) and makes no tuner; each pass it
    instantiates makes its own through tuning_for."""
    chosen = tune.tuning_for(BlasTemplate, context, "online", online=True, dtype=F32, op="axpy")
    assert chosen == tune.Tuning(None) and chosen.is_online
    template = BlasTemplate(context, F32, "axpy", "online")
    assert template.online is True and template.tuning is None
    online = template.instantiate(context.create_command_queue(timed=True), 1000)
    assert online.tuner.key == tune.tuner_of(BlasTemplate).key(BlasTemplate, context, F32, "axpy")


def test_online_is_refused_where_the_template_has_no_online_tuning(context):
    message = (r"^ScaleTemplate: tuning must be a dict of parameters or None \(ScaleTemplate "
               r"has no online tuning\), got 'online'$")
    with pytest.raises(ValueError, match=message):
        tune.tuning_for(ScaleTemplate, context, "online", dtype=F32)
    with pytest.raises(ValueError, match=message):
        ScaleTemplate(context, F32, "online")


@pytest.mark.parametrize("tuning", ["later", 64, [64], ("wgs", 64)])
def test_any_other_value_is_refused(context, tuning):
    accepted = re.escape(f"DslashTemplate: tuning must be a dict of parameters, None or 'online', "
                         f"got {tuning!r}")
    with pytest.raises(ValueError, match=f"^{accepted}$"):
        tune.tuning_for(DslashTemplate, context, tuning, online={}, **LATTICE)
    with pytest.raises(ValueError, match=r"^ScaleTemplate: tuning must be a dict of parameters "
                                         r"or None, got "):
        tune.tuning_for(ScaleTemplate, context, tuning, dtype=F32)
