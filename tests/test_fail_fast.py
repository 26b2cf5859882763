"""Fail fast, validate early: a ``test=`` that does not name the space's parameters is refused
before the first candidate, and a kernel that fails to compile the same way whatever the
configuration ends the search after a few candidates, its compiler output in the error."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from autotune import tune
from autotune.tune.evaluation import SAME_COMPILE_ERROR

generated: Counter = Counter()


class Misnamed:
    """Its space has ``wgs`` and ``unroll``; its ``test=`` names ``wgs`` and ``ipt``."""

    autotune_version = 0

    @classmethod
    def autotune_space(cls, context, n):
        return tune.Space({"wgs": [32, 64, 128, 256], "unroll": list(range(1, 11))})

    @classmethod
    @tune.autotuner(test={"wgs": 64, "ipt": 1})
    def autotune(cls, context, n):
        def generate(wgs, unroll):
            generated["misnamed"] += 1
            return lambda iterations: 1e-6 * wgs * unroll

        return tune.autotune(generate)


@pytest.mark.force_autotune
def test_test_names_that_differ_from_the_space_are_refused_before_any_candidate(context):
    generated.clear()
    with pytest.raises(tune.InvalidParametersError) as info:
        Misnamed.autotune(context, 10)
    assert generated["misnamed"] == 0
    assert str(info.value) == (
        f"{__name__}.Misnamed.autotune: test= names ['ipt', 'wgs'] differ from the space's "
        "parameters ['wgs', 'unroll'] (the space's unroll missing from test=; test='s ipt not in "
        "the space); give test= one value for each parameter of the space")


def _broken_kernel(tmp_path, body):
    kernel = tmp_path / "broken.mako"
    kernel.write_text("KERNEL REQD_WORK_GROUP_SIZE(${wgs}, 1, 1) void k(GLOBAL float *y)\n"
                      "{\n    y[get_global_id(0)] = " + body + ";\n}\n")
    return kernel


def test_a_compile_error_the_same_for_every_candidate_stops_after_three(context, tmp_path, capfd):
    kernel = _broken_kernel(tmp_path, "not_declared_anywhere * ${wgs}")
    built = Counter()

    def generate(wgs):
        built[wgs] += 1
        program = context.build(kernel, {"wgs": wgs})
        return tune.make_measure(None, lambda: program.get_kernel("k"))

    capfd.readouterr()
    with pytest.raises(tune.AutotuneError) as info:
        tune.search(generate, {"wgs": list(range(1, 33))}, workers=0)
    message = str(info.value)
    assert len(built) == SAME_COMPILE_ERROR == 3
    assert message.endswith("; stopped after the first 3 candidates all failed with the same "
                            "CompileError (configuration values aside)")
    assert "compile_error: 3" in message and "not_declared_anywhere" in message
    printed = capfd.readouterr()
    assert "error" not in printed.err and "error" not in printed.out  # all of it is in the error
    if context.backend == "opencl" and "error generated" in info.value.__cause__.log:
        assert "error generated" in message  # what the compiler printed, in the error


def test_compile_errors_that_differ_by_configuration_do_not_stop_the_search(context, tmp_path):
    kernel = _broken_kernel(tmp_path, "missing_${wgs}")  # names a different identifier each time
    built = Counter()

    def generate(wgs):
        built[wgs] += 1
        context.build(kernel, {"wgs": wgs})

    with pytest.raises(tune.AutotuneError) as info:
        tune.search(generate, {"wgs": [1, 2, 4, 8, 16]}, workers=0)
    assert len(built) == 5 and "stopped" not in str(info.value)
    assert "compile_error: 5" in str(info.value)


def test_a_compile_error_stops_early_only_while_nothing_has_succeeded(context, tmp_path):
    good = tmp_path / "good.mako"
    good.write_text("KERNEL void k(GLOBAL float *y) { y[get_global_id(0)] = 1.0f; }\n")
    kernel = _broken_kernel(tmp_path, "not_declared_anywhere")
    queue = context.create_tuning_command_queue()
    y = context.allocate(64, np.float32)

    def generate(wgs):
        if wgs == 1:
            program = context.build(good)
            run = program.get_kernel("k")
            return tune.make_measure(queue, lambda: queue.enqueue_kernel(run, [y], 64, 1))
        context.build(kernel, {"wgs": wgs})

    result = tune.search(generate, {"wgs": [1, 2, 3, 5, 6, 7]}, workers=0)
    assert result.best == {"wgs": 1} and len(result.trials) == 6


def test_compile_errors_alike_but_for_each_candidates_values_are_the_same_failure():
    """NVRTC's log ends "1 error detected": for the candidate whose value is 1 that number must
    not make its message differ from the others' (the GPU suite's failure on an H200)."""
    from autotune.accel import CompileError
    from autotune.tune.evaluation import all_alike, failure_signature

    def failure(wgs, line=4):
        log = (f"k.mako, line {line}: error: identifier \"nope\" is undefined\n"
               f"      y[i] = nope * {wgs};\n1 error detected in the compilation of \"k.cu\".")
        return failure_signature(CompileError(log, log), {"wgs": wgs})

    assert all_alike([failure(1), failure(2), failure(3)])
    assert all_alike([failure(4), failure(1), failure(32)])
    assert not all_alike([failure(1), failure(2, line=5), failure(3)])  # another line: not alike
    plain = [failure_signature(KeyError(f"no {v}"), {"wgs": v}) for v in (1, 2, 3)]
    assert not all_alike(plain)  # only compile errors are compared values aside
