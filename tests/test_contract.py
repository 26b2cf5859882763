"""One contract between templates and the tuner: declared spaces and sources, stale results
that expire when a kernel changes, the typed tuned function, measurements, and the
katsdpsigproc tuner behaviours our API must keep."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from autotune import accel, tune
from autotune.cli import main
from autotune.tune.registry import RegistryError, check_protocol, registered_templates
from autotune.tune.store import ResultStore

from toy_templates import KERNEL, FakeTimedTemplate, calls

TESTS = Path(__file__).parent


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- stale results expire when the kernel changes ----------------------------------------------


def _edited_template(tmp_path: Path):
    """A template whose kernel lives in tmp_path (so the test can edit it) and includes a file."""
    kernel = tmp_path / "edit_me.mako"
    shutil.copy(KERNEL, kernel)
    kernel.write_text('<%include file="edit_me_too.mako"/>\n' + kernel.read_text())
    (tmp_path / "edit_me_too.mako").write_text("/* an included file */\n")

    class Edited:
        autotune_version = 1
        autotune_sources = (kernel,)

        @classmethod
        def autotune_space(cls, context, n):
            return tune.Space({"wgs": [32, 64]})

        @classmethod
        @tune.autotuner(test={"wgs": 64})
        def autotune(cls, context, n):
            queue = context.create_tuning_command_queue()
            x = context.to_device(queue, np.arange(n, dtype=np.float32))
            y = context.allocate(n, np.float32)

            def generate(wgs):
                calls["edited"] += 1
                program = context.build(kernel, {"wrong": False, "factor": "2.0f"})
                launch = queue.launcher(program.get_kernel("toy"), -(-n // wgs) * wgs, wgs)
                return tune.make_measure(queue, lambda: launch([y, x, np.uint32(n)]),
                                         lambda: np.array_equal(y.get(queue), 2 * np.arange(n)),
                                         bytes=8 * n, flops=n)

            return tune.autotune(generate)

    return Edited, kernel, tmp_path / "edit_me_too.mako"


@pytest.mark.autotune_database
@pytest.mark.parametrize("edit", ["template", "include"])
def test_editing_a_kernel_expires_its_results(context, tmp_path, monkeypatch, caplog, capsys, edit):
    Edited, kernel, include = _edited_template(tmp_path)
    calls.clear()
    first = Edited.autotune(context, 1000)
    assert calls["edited"] == 2
    key = tune.tuner_of(Edited).key(Edited, context, 1000)
    row = ResultStore.open().get(key)
    assert set(json.loads(row.sources)) == {"edit_me.mako", "edit_me_too.mako", "portability.mako"}
    tune.clear_memo()
    assert Edited.autotune(context, 1000) == first and calls["edited"] == 2  # fresh: served
    target = kernel if edit == "template" else include
    target.write_text(target.read_text() + "/* edited */\n")
    tune.clear_memo()
    verdict = tune.tuner_of(Edited).judge(Edited, context, 1000)
    assert verdict.freshness is tune.verdicts.Freshness.STALE and target.name in verdict.reason
    # nearest matching may still serve it, with a warning
    monkeypatch.setenv("AUTOTUNE_MATCH", "nearest")
    with caplog.at_level(logging.WARNING, logger="autotune.tune"):
        assert Edited.autotune(context, 1000) == first
    assert calls["edited"] == 2 and "stale" in caplog.text
    # exact matching never serves it: tuned again, the new result replaces it
    monkeypatch.setenv("AUTOTUNE_MATCH", "exact")
    tune.clear_memo()
    Edited.autotune(context, 1000)
    assert calls["edited"] == 4
    assert ResultStore.open().get(key).fingerprint != row.fingerprint
    assert tune.tuner_of(Edited).judge(Edited, context, 1000).freshness is tune.verdicts.Freshness.FRESH


@pytest.mark.autotune_database
@pytest.mark.parametrize("edit", ["template", "include"])
def test_an_undeclared_template_goes_stale_when_a_kernel_it_rendered_changes(context, tmp_path, edit):
    Edited, kernel, include = _edited_template(tmp_path)

    class Undeclared(Edited):
        autotune_sources = None  # declares nothing: what it renders is recorded instead

    calls.clear()
    tuner = tune.tuner_of(Undeclared)
    first = Undeclared.autotune(context, 1000)
    assert calls["edited"] == 2
    row = ResultStore.open().get(tuner.key(Undeclared, context, 1000))
    rendered = json.loads(row.search)["rendered"]
    assert set(rendered) == {"edit_me.mako", "edit_me_too.mako", "portability.mako"}
    assert rendered["edit_me.mako"]["path"] == str(kernel.resolve())
    assert json.loads(row.sources) == {}
    tune.clear_memo()
    assert Undeclared.autotune(context, 1000) == first and calls["edited"] == 2  # fresh: served
    target = kernel if edit == "template" else include
    target.write_text(target.read_text() + "/* edited */\n")
    verdict = tuner.judge(Undeclared, context, 1000)
    assert verdict.freshness is tune.verdicts.Freshness.STALE
    assert verdict.reason == f"its kernel sources changed since it was tuned ({target.name})"
    tune.clear_memo()
    Undeclared.autotune(context, 1000)  # exact mode: tuned again, the new result replaces it
    assert calls["edited"] == 4
    assert tuner.judge(Undeclared, context, 1000).freshness is tune.verdicts.Freshness.FRESH
    # a declared template's row records nothing beyond its declaration
    Edited.autotune(context, 1000)
    declared = ResultStore.open().get(tune.tuner_of(Edited).key(Edited, context, 1000))
    assert "rendered" not in json.loads(declared.search)


@pytest.mark.autotune_database
def test_a_rendered_file_is_found_by_name_when_its_stored_path_is_elsewhere(context, tmp_path):
    Edited, kernel, include = _edited_template(tmp_path)

    class Undeclared(Edited):
        autotune_sources = None

    tuner = tune.tuner_of(Undeclared)
    Undeclared.autotune(context, 1000)
    store = ResultStore.open()
    row = store.get(tuner.key(Undeclared, context, 1000))
    search = json.loads(row.search)
    # tuned on another machine: the paths differ; the portability header is found by its name
    search["rendered"] = {"portability.mako": {**search["rendered"]["portability.mako"],
                                               "path": "/elsewhere/portability.mako"},
                          "gone.mako": {"digest": "0" * 64, "path": "../../etc/passwd"}}
    store.put(dataclasses.replace(row, search=json.dumps(search)))
    verdict = tuner.judge(Undeclared, context, 1000)
    assert verdict.freshness is tune.verdicts.Freshness.STALE and verdict.reason.endswith("(gone.mako)")
    del search["rendered"]["gone.mako"]
    store.put(dataclasses.replace(row, search=json.dumps(search)))
    assert tuner.judge(Undeclared, context, 1000).freshness is tune.verdicts.Freshness.FRESH


def test_changed_sources_names_every_file_that_differs():
    key = tune.TuningKey("m.T.autotune", 1, "dev", "plat", "1", "{}")
    record = tune.TuningRecord(key, "{}", 1e-5, "1", fingerprint="f" * 64,
                               sources=json.dumps({"a.mako": "1", "b.mako": "2", "gone.mako": "5"}))
    assert tune.validation.changed_sources(record, {"a.mako": "1", "b.mako": "2", "gone.mako": "5"}) == []
    assert tune.validation.changed_sources(record, {"a.mako": "1", "b.mako": "3", "new.mako": "4"}) == [
        "b.mako", "gone.mako", "new.mako"]
    unreadable = tune.TuningRecord(key, "{}", 1e-5, "1", fingerprint="f" * 64, sources="[not json")
    assert tune.validation.changed_sources(unreadable, {"a.mako": "1"}) == ["a.mako"]


@pytest.mark.autotune_database
def test_show_marks_stale_results_of_registered_templates(context, capsys):
    from operations.scale import ScaleTemplate

    store = ResultStore.open()
    key = tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.dtype(np.float32))
    store.put(tune.TuningRecord(key, '{"wgs":64}', 1e-5, "0.1"))  # no fingerprint: older autotune
    ScaleTemplate.autotune(context, np.float64)
    code, out, _ = run(capsys, "show", "--function", "ScaleTemplate")
    lines = [line for line in out.splitlines() if "ScaleTemplate" in line]
    assert code == 0 and len(lines) == 2
    assert any("float32" in line and "stale" in line for line in lines)
    assert any("float64" in line and "fresh" in line for line in lines)


@pytest.mark.autotune_database
def test_a_change_of_the_declared_space_expires_results(context):
    class Growing(FakeTimedTemplate):
        sizes = [1, 2, 3]

        @classmethod
        def autotune_space(cls, context, size):
            return tune.Space({"block": cls.sizes})

    ctx = context
    calls.clear()
    Growing.autotune(ctx, 1)
    tune.clear_memo()
    Growing.sizes = [1, 2, 3, 4]
    verdict = tune.tuner_of(Growing).judge(Growing, ctx, 1)
    assert verdict.freshness is tune.verdicts.Freshness.STALE and "space" in verdict.reason
    Growing.autotune(ctx, 1)
    assert calls["fake"] == 3 + 4


# -- the typed tuned function and the template protocol ----------------------------------------


def test_every_registered_template_follows_the_protocol(context):
    templates = registered_templates()
    assert {t.name for t in templates} >= {"scale", "reduce", "blas", "wilson_dslash", "diffusion",
                                          "convert"}
    for t in templates:
        tuner = tune.tuner_of(t.cls)
        assert isinstance(tuner, tune.TunedFunction) and tuner.test
        assert t.function == f"{t.cls.__module__}.{t.cls.__qualname__}.autotune"
        assert {f.name for f in tuner.sources(t.cls)} >= {"portability.mako"}
        for config in t.configurations(context)[:1]:
            space = t.cls.autotune_space(context, **config)
            assert isinstance(space, tune.Space) and space.configurations()
            assert space.runs(tuner.test) is None, (t.name, tuner.test)


def test_the_registry_names_what_a_template_lacks():
    class Half:
        autotune_version = 1

        @classmethod
        @tune.autotuner(test={"wgs": 64})
        def autotune(cls, context):
            return {"wgs": 64}

    with pytest.raises(RegistryError, match="autotune_sources.*autotune_space.*warm_configurations"
                                            ".*instantiate"):
        check_protocol("half", Half)
    with pytest.raises(RegistryError, match="needs an autotune classmethod"):
        check_protocol("plain", type("Plain", (), {}))


def test_a_broken_entry_point_elsewhere_is_skipped_with_a_warning(monkeypatch, caplog):
    import importlib.metadata as md

    from autotune.tune import registry

    real = md.entry_points

    def with_broken(group=None):
        found = list(real(group=group))
        broken = md.EntryPoint("broken", "no_such_module_anywhere:Template", group)
        return found + [broken]

    monkeypatch.setattr(registry, "entry_points", with_broken)
    with caplog.at_level(logging.WARNING):
        names = {t.name for t in registry.registered_templates()}
    assert "scale" in names and "broken" not in names and "broken" in caplog.text


# -- measurements: setup before the check, rates in every trial ---------------------------------


@pytest.mark.autotune_database
def test_trials_store_rates_and_show_prints_them(context, capsys):
    from operations.scale import ScaleTemplate

    ScaleTemplate.autotune(context, np.float32)
    trials = [t for t in ResultStore.open().trials() if t.status == "ok"]
    n = ScaleTemplate.tuning_length(context)
    for t in trials:
        assert t.gbps == pytest.approx(2 * n * 4 / t.median_seconds / 1e9)
        assert t.gflops == pytest.approx(n / t.median_seconds / 1e9)
    (row,) = ResultStore.open().records()
    assert row.gbps and row.gflops
    code, out, _ = run(capsys, "show")
    from autotune.cli.formatting import rate_text

    assert code == 0 and "GB/s" in out and f" {rate_text(row.gbps)} " in out


def test_setup_runs_before_each_candidates_check_and_restore_after(context):
    queue = context.create_tuning_command_queue()
    buffer = context.allocate(1 << 12, np.float32)
    order: list[str] = []

    def generate(value):
        def check():
            order.append(f"check {value}")
            return True

        return tune.make_measure(queue, lambda: buffer.zero(queue), check,
                                 setup=lambda: order.append(f"setup {value}"),
                                 restore=lambda: order.append(f"restore {value}"))

    tune.search(generate, {"value": [1, 2]}, workers=2)
    assert order[:6] == ["setup 1", "check 1", "restore 1", "setup 2", "check 2", "restore 2"]
    # then the choice times both again, interleaved: a setup before each batch (the warm-up's
    # and every round's), no check, and each restored once at the end
    again, last = order[6:-2], order[-2:]
    assert sorted(last) == ["restore 1", "restore 2"] and set(again) == {"setup 1", "setup 2"}
    assert min(again.count("setup 1"), again.count("setup 2")) >= 1 + tune.choice.MIN_ROUNDS


def test_a_measure_of_several_placements_alternates_and_checks_the_first(context):
    """``make_measure`` given one call per placement of the operands (two output buffers here,
    each written y = 2 x by the real toy kernel): the check after ``setup`` sees the first
    placement's output alone, and the timed calls alternate, from the first again at each
    setup; a single placement's call is timed as it is."""
    queue = context.create_tuning_command_queue()
    kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    n = 256
    x = context.to_device(queue, np.arange(n, dtype=np.float32))
    ys = [context.allocate(n, np.float32) for _ in range(2)]
    called: list[int] = []

    def run_on(i):
        def run():
            called.append(i)
            queue.enqueue_kernel(kernel, [ys[i], x, np.uint32(n)], n, 64)
        return run

    def setup():
        for y in ys:
            y.zero(queue)

    def check():
        return (np.array_equal(ys[0].get(queue), 2 * np.arange(n, dtype=np.float32))
                and not ys[1].get(queue).any())

    measure = tune.make_measure(queue, [run_on(0), run_on(1)], check, setup=setup)
    measure.prepare()  # setup, one call, check: raises WrongResult if the check fails
    assert measure(2) > 0 and called == [0, 1, 0]
    measure.prepare()
    assert called[3:] == [0]  # the first again, though the second was next
    single = run_on(0)
    assert tune.make_measure(queue, [single]).run is single
    with pytest.raises(TypeError, match="a sequence of callables"):
        tune.make_measure(queue, [])


def test_every_timed_batch_of_two_placements_times_both_alike(context):
    """A candidate of two placements whose one call fills the target batch duration: its batches
    are whole turns through both (``measurement.batch_iterations``), in the search's timing and
    in the choice's rounds, whose batches each start from the first placement again. Timed one
    call a batch, a candidate was timed on the first placement alone in the choice."""
    from autotune.tune.measurement import batch_iterations, time_candidate

    queue = context.create_tuning_command_queue()
    kernel = context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")
    n = 256
    x = context.to_device(queue, np.arange(n, dtype=np.float32))
    ys = [context.allocate(n, np.float32) for _ in range(2)]

    def candidate(called):
        def run_on(i):
            def run():
                called.append(i)
                queue.enqueue_kernel(kernel, [ys[i], x, np.uint32(n)], n, 64)
            return run
        return tune.make_measure(queue, [run_on(0), run_on(1)])

    called: list[int] = []
    measure = candidate(called)
    slow = 2 * measure.batch_seconds  # a call this long fills a batch alone
    assert batch_iterations(measure, slow) == 2  # one call fills it: a whole turn
    assert batch_iterations(measure, slow / 6) == 4  # three calls: two turns
    assert measure.placements == 2 and tune.make_measure(queue, lambda: None).placements == 1
    time_candidate(measure)
    assert called.count(0) - called.count(1) in (0, 1)  # the check's first call, then turns
    rounds: list[list[int]] = [[], []]
    contenders = [tune.choice.Contender({"c": i}, candidate(rounds[i]),
                                        batch_iterations(measure, slow), position=i)
                  for i in range(2)]
    tune.choice.settle(contenders, rounds=tune.choice.MIN_ROUNDS)
    for seen in rounds:  # the warm-up batch and eight rounds, each a turn through both
        assert seen.count(0) == seen.count(1) == 1 + tune.choice.MIN_ROUNDS


# -- katsdpsigproc's tuner tests, asked of our API ----------------------------------------------


class NumpySpace:
    autotune_version = 0

    @classmethod
    @tune.autotuner(test={"wgs": 64})
    def autotune(klass, context, n):  # noqa: N805 - the class is recognised by position
        def generate(wgs):
            return lambda iterations: abs(int(wgs) - 128) * 1e-6 + 1e-6

        best = tune.autotune(generate, wgs=2 ** np.arange(5, 9))
        return {"wgs": np.int64(best["wgs"])}


@pytest.mark.autotune_database
def test_numpy_values_in_a_space_and_in_a_result(context):
    assert NumpySpace.autotune(context, 10) == {"wgs": 128}
    assert type(NumpySpace.autotune(context, 10)["wgs"]) is int
    stored = [json.loads(t.parameters)["wgs"] for t in ResultStore.open().trials()]
    assert sorted(stored) == [32, 64, 128, 256]
    assert tune.tuner_of(NumpySpace).name(NumpySpace).endswith("NumpySpace.autotune")


def test_when_everything_fails_the_last_exception_is_chained(context):
    def generate(wgs):
        raise KeyError(f"no such thing {wgs}")

    with pytest.raises(tune.AutotuneError, match="error: 2") as info:
        tune.autotune(generate, wgs=[1, 2])
    assert isinstance(info.value.__cause__, KeyError)
    assert "no such thing 2" in str(info.value.__cause__)


class CountsCalls:
    autotune_version = 0

    @classmethod
    @tune.autotuner(test={"block": 1})
    def autotune(cls, context):
        calls["counted"] += 1
        return {"block": 2}


@pytest.mark.force_autotune
def test_force_autotune_runs_the_tuning_function_on_every_call(context):
    calls.clear()
    for _ in range(3):
        assert CountsCalls.autotune(context) == {"block": 2}
    assert calls["counted"] == 3


def test_decorating_in_the_wrong_order_says_what_to_write():
    with pytest.raises(TypeError, match="@classmethod\n    @tune.autotuner"):
        class Wrong:
            @tune.autotuner(test={"wgs": 64})
            @classmethod
            def autotune(cls, context):
                return {"wgs": 64}


def test_a_context_that_is_not_the_first_argument_is_a_clear_error(context):
    class Swapped:
        @classmethod
        @tune.autotuner(test={"wgs": 64})
        def autotune(cls, n, context):
            return {"wgs": 64}

    tune.serving().test.force = True
    try:
        with pytest.raises(TypeError, match="must be an accel.Context .*def autotune\\(cls, context"):
            Swapped.autotune(10, context)
    finally:
        tune.serving().test.force = False


# -- the command line uses the store's public API -----------------------------------------------


def test_db_option_leaves_the_environment_alone(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "env.db"))
    target = tmp_path / "option.db"
    code, out, _ = run(capsys, "warm", "--db", target, "--quiet", "--template",
                       "toy_templates:FakeTimedTemplate", "FakeTimedTemplate")
    assert code == 0 and os.environ["AUTOTUNE_DB"] == str(tmp_path / "env.db")
    assert len(ResultStore(f"sqlite:///{target}").records()) == 3
    assert not (tmp_path / "env.db").exists()


def test_trial_statuses_are_one_vocabulary():
    assert tune.records.TrialStatus.parse("wrong_result") is tune.records.TrialStatus.WRONG_RESULT
    with pytest.raises(ValueError, match="invalid trial status 'great'; expected one of ok, "):
        tune.records.TrialStatus.parse("great")
    assert tune.records.TRIAL_STATUSES == tuple(s.value for s in tune.records.TrialStatus)


def test_one_table_maps_dtypes_to_c_types():
    assert accel.c_type(np.float32) == "float" and accel.c_type(np.complex128) == "cdouble"
    assert accel.real_dtype(np.complex64) == np.float32
    with pytest.raises(TypeError, match="no kernel C type"):
        accel.c_type(np.float16)


def test_a_restriction_that_cannot_judge_a_combination_is_a_clear_error():
    def generate(wgs, vec):
        return lambda iterations: 1e-6

    with pytest.raises(tune.AutotuneError, match="restriction 'vec divides wgs' raised "
                                                 "ZeroDivisionError") as info:
        tune.autotune(generate, wgs=[32, 64], vec=[0, 1],
                      restrictions=[tune.restriction("vec divides wgs", lambda p: p["wgs"] % p["vec"] == 0)])
    assert isinstance(info.value.__cause__, ZeroDivisionError)


@pytest.mark.autotune_database
def test_show_plot_and_clear_select_functions_alike(context, capsys, tmp_path):
    from operations.scale import ScaleTemplate

    ScaleTemplate.autotune(context, np.float32)
    store = ResultStore.open()
    key = tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.dtype(np.float64))
    from dataclasses import replace
    store.put(tune.TuningRecord(replace(key, version=0), '{"wgs":64}', 1e-5, "0.0.1"))
    for name in ("ScaleTemplate", "scale.ScaleTemplate.autotune", "operations.scale.ScaleTemplate"):
        code, out, _ = run(capsys, "show", "--function", name)
        assert code == 0 and out.count("ScaleTemplate") == 2, name
        assert run(capsys, "plot", name, "--out", tmp_path / "p.png")[0] == 0, name
    code, out, _ = run(capsys, "show")
    assert "old version (now 1)" in out


_FIRST_USE = """
import logging, sys
sys.path.insert(0, {tests!r})
from autotune import tune
from test_trust import StandIn
from toy_templates import FakeTimedTemplate
if {configured}:
    logging.basicConfig(level=logging.ERROR)
with tune.use_database({db!r}):
    FakeTimedTemplate.autotune(StandIn(), 1)
    FakeTimedTemplate.autotune(StandIn(), 2)
"""


@pytest.mark.parametrize("configured", [False, True])
def test_the_first_tuning_in_a_process_says_what_it_does(tmp_path, configured):
    import subprocess
    import sys

    code = _FIRST_USE.format(tests=str(TESTS), db=str(tmp_path / "t.db"), configured=configured)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    lines = [line for line in child.stderr.splitlines() if line.strip()]
    if configured:  # the user chose what logging shows
        assert lines == []
    else:
        assert len(lines) == 1, lines
        line = lines[0]
        assert "FakeTimedTemplate.autotune (size=1)" in line and "Stand-in device" in line
        assert "first time over 5 configurations" in line and "python -m autotune warm" in line


def test_jobs_without_all_devices_is_an_error(capsys, tmp_path):
    code, _, err = run(capsys, "warm", "--db", tmp_path / "t.db", "--jobs", "2", "scale")
    assert code == 2 and "--jobs 2 tunes several devices at once: add --all-devices" in err


def test_under_pytest_an_option_serves_the_database(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "t.db"
    store = ResultStore.open(db)
    from test_trust import StandIn

    key = tune.tuner_of(FakeTimedTemplate).key(FakeTimedTemplate, StandIn(), 4)
    fingerprint = tune.tuner_of(FakeTimedTemplate).fingerprint(FakeTimedTemplate, StandIn(), 4)
    store.put(tune.TuningRecord(key, '{"block":5}', 1e-6, "x", fingerprint=fingerprint.digest,
                                sources=fingerprint.sources_json))
    test = tmp_path / "test_served.py"
    env = dict(__import__("os").environ, AUTOTUNE_DB=str(db))
    for option, expected in (([], 1), (["--autotune-use-db"], 5)):  # test=, then the stored row
        test.write_text(f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
from test_trust import StandIn
from toy_templates import FakeTimedTemplate

def test_served():
    assert FakeTimedTemplate.autotune(StandIn(), 4) == {{"block": {expected}}}
""")
        child = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                str(test), *option], capture_output=True, text=True, timeout=120,
                               env=env, cwd=tmp_path)
        assert child.returncode == 0, child.stdout + child.stderr


@pytest.mark.autotune_database
def test_results_and_trials_as_dataframes(context):
    from operations.scale import ScaleTemplate

    ScaleTemplate.autotune(context, np.float32)
    store = ResultStore.open()
    key = tune.tuner_of(ScaleTemplate).key(ScaleTemplate, context, np.dtype(np.float64))
    store.put(tune.TuningRecord(key, '{"wgs":64}', 1e-5, "0.0.1"))  # stale: no fingerprint
    store.put(tune.TuningRecord(tune.TuningKey("somebody.F.autotune", 0, "X", "P", "1",
                                               '{"e":{"__enum__":"m:Color","name":"RED"}}'),
                                '{"block":3}', -1.0, "x"))  # an invalid score
    results = tune.results_frame()
    assert len(results) == 3
    scale = results[results.function.str.contains("ScaleTemplate")].set_index("arg.dtype")
    assert set(scale.index) == {"float32", "float64"}
    assert scale.loc["float32", "param.wgs"] in (32, 64, 128, 256, 512, 1024)
    assert bool(scale.loc["float32", "valid"]) and not scale.loc["float32", "stale"]
    assert scale.loc["float64", "stale"] and scale.loc["float32", "gbps"] > 0
    other = results[results.function == "somebody.F.autotune"].iloc[0]
    assert not other["valid"] and "score" in other["problem"] and other["arg.e"] == "Color.RED"
    assert other["stale"] is None
    trials = tune.trials_frame(function="%ScaleTemplate%")
    assert (trials.status == "ok").all() and trials["param.wgs"].notna().all()
    assert {"median_seconds", "gbps", "created_at", "valid"} <= set(trials.columns)
    assert len(tune.results_frame(function="%ScaleTemplate%")) == 2


_ASKED_THEN_STALE = """
import json, sys
sys.path.insert(0, {tests!r})
from autotune import tune
from test_trust import StandIn
from toy_templates import FakeTimedTemplate
with tune.use_database({db!r}):
    FakeTimedTemplate.autotune.retune(FakeTimedTemplate, StandIn(), 1)  # asked for: no warning
    key = FakeTimedTemplate.autotune.key(FakeTimedTemplate, StandIn(), 2)
    tune.store.ResultStore({url!r}).put(tune.TuningRecord(key, '{{"block":3}}', 1e-6, "0.0.1"))
    FakeTimedTemplate.autotune(StandIn(), 2)  # stored but stale (no fingerprint): tuned again
"""


def test_asked_for_tuning_is_quiet_and_retuning_a_stale_row_says_again(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "t.db"
    code = _ASKED_THEN_STALE.format(tests=str(TESTS), db=str(db), url=f"sqlite:///{db}")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr
    lines = [line for line in child.stderr.splitlines() if line.startswith("tuning ")]
    assert len(lines) == 1, child.stderr
    assert "(size=2)" in lines[0] and "again (its stored result is unusable)" in lines[0]
