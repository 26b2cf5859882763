"""The storage logic under the Triton integration (``autotune.integrations.stored_configs``),
without Triton: configurations are plain dicts, and the benchmark is a function that records
which configurations it was asked to time and returns their (given) times. Those are the real
inputs of this logic; the database is a real one."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.integrations.stored_configs import (ConfigFailed, NoConfigurationError, StoredChoices,
                                                  Timing, digest, list_fingerprint)
from autotune.tune.records import TrialStatus
from autotune.tune.store import ResultStore

ROOT = Path(__file__).resolve().parent.parent
SOURCE = digest("def add(x, y, out, n, BLOCK): ...")
DEVICE = ("Test GPU", "CUDA", "triton 3.9.0, CUDA 12.8")
CONFIGS = [{"BLOCK": b, "num_warps": w} for b in (64, 128, 256, 512) for w in (2, 4)]


def seconds_of(params: dict) -> float:
    """A made-up but definite time per configuration: BLOCK 256 with 4 warps is fastest."""
    return 1e-5 * (1 + abs(params["BLOCK"] - 256) / 64 + 0.5 * abs(params["num_warps"] - 4))


class Bench:
    """Times configuration ``i`` of ``configs`` as :func:`seconds_of` says, and records it."""

    def __init__(self, configs: list[dict], failing: dict[int, TrialStatus] | None = None):
        self.configs, self.failing, self.timed = configs, failing or {}, []

    def __call__(self, index: int) -> Timing:
        self.timed.append(index)
        if index in self.failing:
            raise ConfigFailed("out of resources: shared memory", self.failing[index])
        t = seconds_of(self.configs[index])
        return Timing(t, 0.9 * t, 1.1 * t)


def choices(url: str, source: str = SOURCE) -> StoredChoices:
    """The choices of a kernel as a new process makes them: nothing in memory."""
    return StoredChoices("triton.kernels.add", source, DEVICE, database=url, sources_name="add")


def test_first_lookup_times_every_configuration_and_stores_them(tmp_path):
    url = str(tmp_path / "t.db")
    bench = Bench(CONFIGS)
    choice = choices(url).choose({"n": 4096, "dtypes": ["float32"] * 3}, CONFIGS, bench)
    assert bench.timed == list(range(8))
    assert choice.parameters == {"BLOCK": 256, "num_warps": 4} and choice.how == "benchmark"
    assert choice.index == CONFIGS.index(choice.parameters)
    store = ResultStore.open(url)
    [record] = store.records()
    assert record.key.function == "triton.kernels.add"
    assert json.loads(record.key.arguments) == {"dtypes": ["float32"] * 3, "n": 4096}
    assert record.key.device == DEVICE
    assert json.loads(record.parameters) == {"BLOCK": 256, "num_warps": 4}
    assert record.score == pytest.approx(seconds_of(choice.parameters))
    assert json.loads(record.sources) == {"add": SOURCE}
    assert json.loads(record.search)["measured"] == 8
    trials = store.trials(record.key)
    assert len(trials) == 8 and {t.fingerprint for t in trials} == {SOURCE}
    assert all(t.min_seconds < t.median_seconds < t.max_seconds for t in trials)


def test_a_new_lookup_serves_the_stored_result_without_timing(tmp_path):
    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096}, CONFIGS, Bench(CONFIGS))
    again = Bench(CONFIGS)
    choice = choices(url).choose({"n": 4096}, CONFIGS, again)
    assert again.timed == [] and choice.how == "database"
    assert choice.parameters == {"BLOCK": 256, "num_warps": 4}
    same = choices(url)
    same.choose({"n": 4096}, CONFIGS, again)
    assert same.choose({"n": 4096}, CONFIGS, again).how == "memory"
    assert again.timed == []


def test_a_new_process_serves_the_stored_result(tmp_path):
    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096}, CONFIGS, Bench(CONFIGS))
    program = (
        "import json, sys\n"
        "from autotune.integrations.stored_configs import StoredChoices\n"
        f"c = StoredChoices('triton.kernels.add', {SOURCE!r}, {DEVICE!r}, database={url!r})\n"
        "def bench(i):\n"
        "    raise SystemExit('timed configuration %d' % i)\n"
        f"choice = c.choose({{'n': 4096}}, {CONFIGS!r}, bench)\n"
        "print(json.dumps([choice.how, choice.parameters]))\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["database", {"BLOCK": 256, "num_warps": 4}]


def test_a_changed_list_times_only_its_new_configurations(tmp_path):
    url = str(tmp_path / "t.db")
    first = CONFIGS[:6]  # BLOCK 64..256
    choices(url).choose({"n": 4096}, first, Bench(first))
    # the winner removed, BLOCK 512 added
    changed = [c for c in CONFIGS if c != {"BLOCK": 256, "num_warps": 4}]
    bench = Bench(changed)
    choice = choices(url).choose({"n": 4096}, changed, bench)
    assert sorted(changed[i]["BLOCK"] for i in bench.timed) == [512, 512]
    assert choice.how == "benchmark" and choice.reused == 5 and len(choice.timed) == 2
    assert choice.parameters == {"BLOCK": 256, "num_warps": 2}  # the fastest of the new list
    assert choice.parameters == min(changed, key=seconds_of)
    record = ResultStore.open(url).records()[0]
    texts = [json.dumps(c, separators=(",", ":"), sort_keys=True) for c in changed]
    assert record.fingerprint == list_fingerprint(SOURCE, texts)
    assert json.loads(record.search)["reused"] == 5
    # the list in another order is the same list: served
    reordered = list(reversed(changed))
    assert choices(url).choose({"n": 4096}, reordered, Bench(reordered)).how == "database"


def test_a_changed_source_times_everything_again(tmp_path):
    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096}, CONFIGS, Bench(CONFIGS))
    bench = Bench(CONFIGS)
    edited = digest("def add(x, y, out, n, BLOCK): ...  # edited")
    choice = choices(url, edited).choose({"n": 4096}, CONFIGS, bench)
    assert bench.timed == list(range(8)) and choice.reused == 0
    [record] = ResultStore.open(url).records()  # the key's row now describes the new source
    assert json.loads(record.sources) == {"add": edited}


def test_each_key_is_tuned_for_itself(tmp_path):
    url = str(tmp_path / "t.db")
    kernel = choices(url)
    for n in (1024, 4096):
        bench = Bench(CONFIGS)
        kernel.choose({"n": n}, CONFIGS, bench)
        assert bench.timed == list(range(8))
    stored = ResultStore.open(url).records()
    assert sorted(json.loads(r.key.arguments)["n"] for r in stored) == [1024, 4096]


def test_failed_configurations_are_recorded_never_chosen_nor_timed_again(tmp_path):
    url = str(tmp_path / "t.db")
    winner = CONFIGS.index({"BLOCK": 256, "num_warps": 4})
    bench = Bench(CONFIGS, {winner: TrialStatus.LAUNCH_ERROR, 0: TrialStatus.COMPILE_ERROR})
    choice = choices(url).choose({"n": 4096}, CONFIGS, bench)
    assert choice.index != winner and choice.parameters == {"BLOCK": 256, "num_warps": 2}
    statuses = sorted(t.status for t in ResultStore.open(url).trials())
    assert statuses.count("ok") == 6 and "launch_error" in statuses and "compile_error" in statuses
    grown = CONFIGS + [{"BLOCK": 1024, "num_warps": 8}]
    bench = Bench(grown)
    choices(url).choose({"n": 4096}, grown, bench)
    assert bench.timed == [8]  # the failures of this source are not retried


def test_every_configuration_failing_is_one_clear_error(tmp_path):
    bench = Bench(CONFIGS[:2], {0: TrialStatus.LAUNCH_ERROR, 1: TrialStatus.LAUNCH_ERROR})
    with pytest.raises(NoConfigurationError, match=r"every one of the 2 configurations failed .*"
                                                   r"launch_error: ConfigFailed: out of resources"):
        choices(str(tmp_path / "t.db")).choose({"n": 1}, CONFIGS[:2], bench)


def test_an_error_of_the_benchmark_is_raised_and_the_timings_before_it_kept(tmp_path):
    url = str(tmp_path / "t.db")

    def bench(index: int) -> float:
        if index == 3:
            raise RuntimeError("the kernel crashed")
        return seconds_of(CONFIGS[index])

    with pytest.raises(RuntimeError, match="the kernel crashed"):
        choices(url).choose({"n": 4096}, CONFIGS, bench)
    assert len(ResultStore.open(url).trials()) == 3 and ResultStore.open(url).records() == []
    again = Bench(CONFIGS)
    choices(url).choose({"n": 4096}, CONFIGS, again)
    assert again.timed == [3, 4, 5, 6, 7]


def test_rows_that_do_not_match_are_not_trusted(tmp_path):
    """A stored result naming a configuration outside the list, or with a foreign fingerprint,
    is not served; a trial with an unusable time is not reused."""
    from dataclasses import replace

    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096}, CONFIGS, Bench(CONFIGS))
    store = ResultStore.open(url)
    [record] = store.records()
    store.put(replace(record, parameters='{"BLOCK":4096,"num_warps":32}'))
    bench = Bench(CONFIGS)
    choice = choices(url).choose({"n": 4096}, CONFIGS, bench)
    assert choice.how == "benchmark" and bench.timed == [] and choice.reused == 8
    assert choice.parameters == {"BLOCK": 256, "num_warps": 4}
    [trial] = [t for t in store.trials() if json.loads(t.parameters) == CONFIGS[0]]
    store.add_trial(replace(trial, median_seconds=-1.0))  # newer, and malformed: ignored
    store.put(replace(store.records()[0], fingerprint="0" * 64))
    bench = Bench(CONFIGS)
    choices(url).choose({"n": 4096}, CONFIGS, bench)
    assert bench.timed == []  # the older, well-formed trial of CONFIGS[0] is used


@pytest.mark.parametrize("configs, message", [
    ([], "give at least one configuration"),
    ([{"BLOCK": 64}, {"BLOCK": 64}], r"configs\[1\] repeats configs\[0\]"),
    ([{"BLOCK": [64]}], r"configs\[0\] .* is not a plain value"),
    (["BLOCK=64"], r"configs\[0\] 'BLOCK=64': not a dict"),
])
def test_bad_configurations_are_one_clear_error(tmp_path, configs, message):
    with pytest.raises(ValueError, match=message):
        choices(str(tmp_path / "t.db")).choose({"n": 1}, configs, Bench(configs))


@pytest.mark.parametrize("value", [0.0, float("nan"), -1e-3, float("inf")])
def test_a_benchmark_must_return_positive_seconds(tmp_path, value):
    with pytest.raises(ValueError, match="returned .*; it must return positive seconds"):
        choices(str(tmp_path / "t.db")).choose({"n": 1}, CONFIGS, lambda i: value)


def test_key_arguments_that_cannot_be_stored_are_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"triton.kernels.add: argument 'n' has type object"):
        choices(str(tmp_path / "t.db")).choose({"n": object()}, CONFIGS, Bench(CONFIGS))


def test_an_unusable_database_costs_a_warning_not_the_choice(tmp_path, caplog):
    folder = tmp_path / "a-folder"
    folder.mkdir()
    (folder / "x").write_text("")  # the database path is a non-empty folder: cannot be opened
    bench = Bench(CONFIGS)
    with caplog.at_level(logging.WARNING, logger="autotune.integrations"):
        choice = choices(f"sqlite:///{folder}").choose({"n": 8}, CONFIGS, bench)
    assert choice.parameters == {"BLOCK": 256, "num_warps": 4} and bench.timed == list(range(8))
    assert "could not be read" in caplog.text and "could not be stored" in caplog.text


def test_two_machines_share_results_through_postgresql(postgres_url):
    bench = Bench(CONFIGS)
    choices(postgres_url).choose({"n": 4096}, CONFIGS, bench)
    assert bench.timed == list(range(8))
    other = Bench(CONFIGS)
    from autotune.tune.serving import using_serving

    with using_serving():  # another machine: its own memo and store objects on the same server
        choice = choices(postgres_url).choose({"n": 4096}, CONFIGS, other)
    assert other.timed == [] and choice.how == "database"


def test_show_lists_triton_kernels_with_their_key(tmp_path, capsys):
    from autotune.cli.main import main

    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096, "dtypes": ["torch.float32"] * 3}, CONFIGS, Bench(CONFIGS))
    assert main(["show", "--db", url]) == 0
    out = capsys.readouterr().out
    row = [line for line in out.splitlines() if "triton.kernels.add" in line]
    assert len(row) == 1
    assert "dtypes=['torch.float32', 'torch.float32', 'torch.float32'], n=4096" in row[0]
    assert "BLOCK=256, num_warps=4" in row[0] and "Test GPU" in row[0] and "triton" in row[0]


def test_report_lists_triton_kernels_with_their_trials(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the report's pictures need the plot extra: "
                        "pip install -e '.[plot]'")
    from autotune.cli.main import main

    url = str(tmp_path / "t.db")
    choices(url).choose({"n": 4096, "dtypes": ["torch.float16"]}, CONFIGS, Bench(CONFIGS))
    assert main(["report", "--db", url, "--out", str(tmp_path / "report")]) == 0
    page = (tmp_path / "report" / "index.html").read_text()
    assert "<h2 id='f0'>triton.kernels.add</h2>" in page
    assert "dtypes=[&#x27;torch.float16&#x27;], n=4096" in page and "BLOCK=256, num_warps=4" in page
    assert (tmp_path / "report" / "img" / "key0001.png").stat().st_size > 1000


def test_under_pytest_a_kernel_without_a_database_launches_its_first_configuration(db):
    """autotune's pytest plugin puts tuning in test mode: no timing, no database (``db`` is
    AUTOTUNE_DB here, and stays uncreated)."""
    bench = Bench(CONFIGS)
    kernel = StoredChoices("triton.kernels.add", SOURCE, DEVICE)
    choice = kernel.choose({"n": 4096}, CONFIGS, bench)
    assert (choice.index, choice.how, bench.timed) == (0, "test", []) and not db.exists()


@pytest.mark.autotune_database
def test_marked_autotune_database_a_kernel_is_timed_and_stored_as_outside_tests():
    import os

    bench = Bench(CONFIGS)
    choice = StoredChoices("triton.kernels.add", SOURCE, DEVICE).choose({"n": 4096}, CONFIGS, bench)
    assert choice.how == "benchmark" and bench.timed == list(range(8))
    assert len(ResultStore.open(os.environ["AUTOTUNE_DB"]).trials()) == 8


def test_a_list_of_one_is_launched_untimed_and_not_stored(tmp_path):
    url = str(tmp_path / "t.db")
    bench = Bench(CONFIGS[:1])
    choice = choices(url).choose({"n": 4096}, CONFIGS[:1], bench)
    assert (choice.how, bench.timed) == ("single", []) and not (tmp_path / "t.db").exists()
