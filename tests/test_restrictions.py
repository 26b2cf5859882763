"""Two kinds of restriction: limits (the device cannot run it) and preferences (not worth
searching). Searches prune both; explicit, stored and imported configurations meet limits only."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from autotune import tune
from operations.lqcd.dslash import DslashTemplate

from toy_templates import H200, KERNEL, DescribedContext

SPACE = tune.Space({"wgs": [16, 32, 64, 128], "ipt": [1, 2]}, [
    tune.limit("wgs x ipt at most 128", lambda p: p["wgs"] * p["ipt"] <= 128),
    tune.preference("whole warps of 32", lambda p: p["wgs"] % 32 == 0),
])


def test_searches_prune_both_kinds_and_explicit_choices_meet_limits_only():
    assert SPACE.configurations() == [{"wgs": w, "ipt": i} for w, i in
                                      ((32, 1), (32, 2), (64, 1), (64, 2), (128, 1))]
    assert "whole warps of 32" in SPACE.why_not({"wgs": 16, "ipt": 1})
    assert SPACE.runs({"wgs": 16, "ipt": 1}) is None  # runs: only a preference breaks
    assert SPACE.runs({"wgs": 8, "ipt": 1}) is None   # values need not be listed either
    assert "wgs x ipt at most 128" in SPACE.runs({"wgs": 128, "ipt": 2})
    assert SPACE.preference_broken({"wgs": 16, "ipt": 1}) == "'whole warps of 32'"
    assert SPACE.preference_broken({"wgs": 32, "ipt": 1}) is None
    # a plain callable is a limit; a kind is checked when the restriction is made
    assert tune.Space({"a": [1, 2]}, [lambda p: p["a"] < 2]).runs({"a": 2}) is not None
    with pytest.raises(tune.SpaceError, match="kind 'maybe' is not one of"):
        tune.restriction("x", lambda p: True, kind="maybe")


def test_the_dslash_takes_a_tuning_a_gpu_search_would_skip(caplog):
    """On an NVIDIA GPU the dslash searches whole warps per direction part only, but a smaller
    work-group runs there: an explicit tuning of 16 work-items is used (logged), one above
    the device's limit is refused naming the limit."""
    gpu = DescribedContext(H200, "cuda")
    lattice = dict(dims=(4, 4, 4, 8), precision="single", reconstruct=12)
    space = DslashTemplate.autotune_space(gpu, **lattice)
    assert all(c["wgs"] // c["dir_split"] % 32 == 0 for c in space.configurations())
    test = tune.tuner_of(DslashTemplate).test
    with caplog.at_level(logging.INFO, logger="autotune.tune"):
        clean = tune.checked_tuning(DslashTemplate, gpu, {**test, "wgs": 16}, **lattice)
    assert clean["wgs"] == 16
    assert "whole warps of 32" in caplog.text and "used as given" in caplog.text
    with pytest.raises(ValueError, match=r"cannot run on NVIDIA H200: .*wgs from 1 to 1024"):
        tune.checked_tuning(DslashTemplate, gpu, {**test, "wgs": 2048}, **lattice)


#: Whether the preference below excludes 16-item work-groups (the test turns it on after tuning:
#: restrictions are code, so the stored result stays fresh).
PREFER_LARGE = {"on": False}


class PreferringTemplate:
    """y = 2 x with a real kernel; a preference that the test switches on after tuning."""

    autotune_version = 1
    autotune_sources = (KERNEL,)

    @classmethod
    def autotune_space(cls, context):
        return tune.Space({"wgs": [16]}, [
            tune.preference("work-groups above 16", lambda p: not PREFER_LARGE["on"] or p["wgs"] > 16)])

    @classmethod
    @tune.autotuner(test={"wgs": 16})
    def autotune(cls, context):
        queue = context.create_tuning_command_queue()
        n = 1024
        kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
        x = context.to_device(queue, np.arange(n, dtype=np.float32))
        y = context.allocate(n, np.float32)

        def generate(wgs):
            PreferringTemplate.generated += 1

            def run():
                queue.enqueue_kernel(kernel, [y, x, np.uint32(n)], n, wgs)

            return tune.make_measure(queue, run)

        return tune.autotune(generate)

    generated = 0


@pytest.mark.autotune_database
def test_a_stored_result_that_breaks_only_a_preference_is_served(context):
    PREFER_LARGE["on"] = False
    try:
        assert PreferringTemplate.autotune(context) == {"wgs": 16}
        tuned = PreferringTemplate.generated
        assert tuned >= 1
        PREFER_LARGE["on"] = True  # a search would now skip the stored choice
        tune.clear_memo()
        assert PreferringTemplate.autotune(context) == {"wgs": 16}
        assert PreferringTemplate.generated == tuned  # served, not tuned again
    finally:
        PREFER_LARGE["on"] = False
