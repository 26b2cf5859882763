"""``warm --lookahead`` and what it stands on: turns that nest, copies to the device kept until a
turn comes, a key's clock that stands still until then, on the devices found (PoCL in CI)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import toy_templates
from autotune import accel, tune
from autotune.cli import main
from autotune.cli.warm_lookahead import KeyPipeline
from autotune.tune.store import ResultStore
from autotune.tune.turns import KeyTurn, TurnCancelled, clock

from test_cli import run

KERNEL = toy_templates.KERNEL
N = 1024


def _toy(context):
    return context.build(KERNEL, {"wrong": False, "factor": "2.0f"}).get_kernel("toy")


def test_turns_nest_the_outer_turn_first(context):
    queue = context.create_tuning_command_queue()
    kernel = _toy(context)
    x = context.to_device(queue, np.arange(N, dtype=np.float32))
    y = context.zeros(queue, N, np.float32)
    queue.finish()
    waited: list[str] = []
    with accel.tuning_turn(lambda: waited.append("outer")):
        with accel.tuning_turn(lambda: waited.append("inner")):
            queue.enqueue_kernel(kernel, [y, x, np.uint32(N)], N, 64)
            assert waited == ["outer", "inner"]
        queue.finish()  # the inner block is over: the outer turn alone
        assert waited == ["outer", "inner", "outer"]
    assert np.array_equal(y.get(queue), 2 * np.arange(N, dtype=np.float32))

    def closed() -> None:
        raise RuntimeError("not this thread's turn")

    y.zero(queue)
    queue.finish()
    with accel.tuning_turn(closed), accel.tuning_turn(lambda: waited.append("inner")):
        with pytest.raises(RuntimeError, match="not this thread's turn"):
            queue.enqueue_kernel(kernel, [y, x, np.uint32(N)], N, 64)
    assert waited[-1] == "outer", "the inner turn must not be asked before the outer one"
    assert not y.get(queue).any(), "a launch whose outer turn refused it ran"
    plain = context.create_command_queue()  # a plain queue is not ordered by turns
    with accel.tuning_turn(closed):
        y.set(plain, np.ones(N, np.float32))
    assert y.get(queue).sum() == N


def test_copies_to_the_device_wait_in_order_for_the_turn(context):
    queue = context.create_tuning_command_queue()
    a = context.allocate(N, np.float32)
    turn = KeyTurn()
    host = np.arange(N, dtype=np.float32)
    with turn.scope():
        x = context.to_device(queue, host)  # kept: the thread goes on
        host[:] = -1.0  # the kept copy carries the data as it was
        a.copy_from(queue, x)
        x.zero(queue)
        assert not turn.ready()
        opener = threading.Timer(0.2, turn.open)
        opener.daemon = True
        opener.start()
        began = time.perf_counter()
        got_a = a.get(queue)  # waits for the turn, then the kept copies run in order
        assert time.perf_counter() - began >= 0.15
        got_x = x.get(queue)
    opener.join()
    assert np.array_equal(got_a, np.arange(N, dtype=np.float32))
    assert not got_x.any()


def test_a_thread_of_the_turn_waits_for_the_kept_copies_another_thread_is_enqueueing():
    """Once a turn has come, the first of its threads to wait enqueues the copies kept until
    then; another thread that waits meanwhile goes on only after they are enqueued. Otherwise
    its launch could reach the queue ahead of an upload it reads: a candidate compiled ahead
    once computed on an input not yet uploaded (a rare ``wrong_result`` of the test below)."""
    from autotune.accel.queues import _Turn

    opened = threading.Event()
    turn = _Turn(opened.wait, opened.is_set, None)
    order: list[str] = []

    def slow_copy() -> None:  # stands for the enqueue of a large upload
        order.append("copy begins")
        time.sleep(0.2)
        order.append("copy enqueued")

    assert turn.keep(slow_copy), "before the turn a copy is kept"
    opened.set()
    first = threading.Thread(target=turn.take)
    first.start()
    deadline = time.monotonic() + 10
    while not order and time.monotonic() < deadline:
        time.sleep(0.001)
    turn.take()  # a second thread of the turn, while the first enqueues the kept copy
    order.append("second thread goes on")
    first.join(10)
    assert order == ["copy begins", "copy enqueued", "second thread goes on"]
    assert not turn.keep(slow_copy), "once the turn has come nothing is kept"


def test_a_keys_clock_stands_still_until_its_turn():
    turn = KeyTurn()
    with turn.scope():
        first = clock()
        time.sleep(0.05)
        assert clock() == first
        turn.open()
        time.sleep(0.05)
        assert 0.04 <= clock() - first < 1.0
    assert clock() == pytest.approx(time.perf_counter(), abs=0.01)


def test_a_search_compiles_ahead_within_a_closed_turn_and_measures_after(context):
    """The evaluator's compile-ahead turns inside a key's turn: candidates are built while the
    key waits, and not one of them reaches the device before the turn opens; the key's upload,
    kept until then, runs before the first of them (a compile-ahead thread's)."""
    queue = context.create_tuning_command_queue()
    given: dict = {}
    built: list[int] = []
    launched: list[float] = []

    def generate(wgs):
        kernel = _toy(context)
        built.append(wgs)
        # device work inside generate waits for both turns; each candidate's own output (a
        # generate running ahead may enqueue while another candidate is measured: one shared
        # output zeroed then would fail that candidate's check, as it once did)
        y = context.allocate(N, np.float32)
        y.zero(queue)

        def run():
            queue.enqueue_kernel(kernel, [y, given["x"], np.uint32(N)], N, wgs)
            launched.append(time.perf_counter())

        return tune.make_measure(queue, run, lambda: np.array_equal(
            y.get(queue), 2 * np.arange(N, dtype=np.float32)))

    turn = KeyTurn()
    found: dict = {}

    def key() -> None:
        with context.thread_scope(), turn.scope():
            given["x"] = context.to_device(queue, np.arange(N, dtype=np.float32))  # kept
            found["result"] = tune.search(generate, {"wgs": [16, 32, 64]}, workers=3)

    thread = threading.Thread(target=key, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while len(built) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.1)
        assert len(built) == 3, "the candidates are compiled ahead of the turn"
        assert not launched, "a candidate was launched before its key's turn"
    except AssertionError:
        turn.cancel()
        raise
    opened = time.perf_counter()
    turn.open()
    thread.join(60)
    assert not thread.is_alive()
    assert min(launched) > opened
    result = found["result"]
    assert result.best["wgs"] in (16, 32, 64) and len(result.trials) == 3
    assert all(t.status.value == "ok" for t in result.trials), [(t.status.value, t.message) for t in result.trials]


def _warm(capsys, db, *options):
    toy_templates.OrderedTemplate.log = []
    code, out, err = run(capsys, "warm", "--template", "toy_templates:OrderedTemplate",
                         "OrderedTemplate", "--warm-from", "none", *options)
    return code, out, err, list(toy_templates.OrderedTemplate.log)


def _events(log):
    return {(index, event): t for index, event, t in log}


def test_warm_with_lookahead_stores_what_warm_without_does(capsys, db, tmp_path, monkeypatch):
    code, out, err, log = _warm(capsys, db, "--lookahead")
    assert code == 0, out + err
    assert "warm: 3 keys on 1 device: 3 tuned, 0 stored, 0 failed" in out
    ahead = {r.key.arguments: r for r in ResultStore(f"sqlite:///{db}").records()}
    events = _events(log)
    for index in (1, 2):  # the key before was completely done before its first launch
        assert events[(index, "launch")] > events[(index - 1, "end")], log
    # ... yet it started ahead: its tuning function ran while the key before it was tuned
    assert any(events[(i, "start")] < events[(i - 1, "end")] for i in (1, 2)), log
    # the progress lines stay in key order
    lines = [line for line in err.splitlines() if "tuning OrderedTemplate" in line]
    assert [line.split("]")[0] for line in lines] == ["[1/3", "[2/3", "[3/3"]
    assert all(f"index={i}" in line for i, line in enumerate(lines)), lines

    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "without.db"))
    code, out, err, log = _warm(capsys, db, "--no-lookahead")
    assert code == 0, out + err
    without = {r.key.arguments: r for r in
               ResultStore(f"sqlite:///{tmp_path / 'without.db'}").records()}
    assert set(without) == set(ahead) and len(ahead) == 3
    assert {k: r.key.function for k, r in without.items()} == \
        {k: r.key.function for k, r in ahead.items()}
    events = _events(log)
    assert all(events[(i, "start")] > events[(i - 1, "end")] for i in (1, 2)), log


def test_a_failing_key_ahead_is_reported_for_that_key_in_order(capsys, db, monkeypatch):
    monkeypatch.setattr(toy_templates.OrderedTemplate, "fail", 1)
    code, out, err, log = _warm(capsys, db, "--lookahead")
    assert code == 1
    rows = [line for line in out.splitlines() if line.lstrip().startswith("OrderedTemplate")]
    assert ["failed" if " failed " in line else "tuned" if " tuned " in line else line
            for line in rows] == ["tuned", "failed", "tuned"]
    assert "FAILED OrderedTemplate" in err and "key 1 fails on purpose" in err
    assert err.count("FAILED") == 1
    assert len(ResultStore(f"sqlite:///{db}").records()) == 2


def test_stopping_the_pipeline_cancels_the_key_ahead(context):
    """Ctrl-C in the key being tuned: the key started ahead is cancelled at its first device
    command and its thread ends; nothing of it ran on the device."""
    queue = context.create_tuning_command_queue()
    y = context.zeros(queue, N, np.float32)
    queue.finish()
    reached = threading.Event()
    seen: list[BaseException] = []

    def interrupted(ahead: bool):
        def work():
            reached.wait(10)
            raise KeyboardInterrupt

        return work

    def following(ahead: bool):
        def work():
            x = context.to_device(queue, np.ones(N, np.float32))  # kept
            reached.set()
            try:
                y.copy_from(queue, x)
                queue.finish()
            except BaseException as exc:
                seen.append(exc)
                raise

        return work

    pipeline = KeyPipeline(context, True)
    with pytest.raises(KeyboardInterrupt):
        with pipeline:
            pipeline.tune(interrupted, following)
    assert len(seen) == 1 and isinstance(seen[0], TurnCancelled)
    assert not y.get(queue).any(), "the cancelled key's copies reached the device"


def test_lookahead_is_on_for_gpus_only_and_the_option_overrides(capsys, db, context):
    from autotune.cli.warm_lookahead import lookahead_default

    assert lookahead_default(context) is (context.device.is_gpu is True)
    with pytest.raises(SystemExit):
        main(["warm", "--help"])
    assert "--lookahead" in capsys.readouterr().out


def test_a_tuned_call_inside_a_key_ahead_waits_for_the_turn_before_its_lock():
    """A key tuned ahead must not hold a tuned call's key lock while its turn is closed (the key
    being tuned may need that lock): ``wait_for_turn`` holds it back until the turn, and a
    cancelled turn ends it."""
    from autotune.tune.turns import wait_for_turn

    wait_for_turn()  # outside a key's turn: returns at once
    for end in ("open", "cancel"):
        turn, passed, errors = KeyTurn(), [], []

        def key() -> None:
            with turn.scope():
                try:
                    wait_for_turn()
                    passed.append(time.perf_counter())
                except TurnCancelled as exc:
                    errors.append(exc)

        thread = threading.Thread(target=key, daemon=True)
        thread.start()
        time.sleep(0.1)
        assert not passed and not errors and thread.is_alive()
        getattr(turn, end)()
        thread.join(10)
        assert not thread.is_alive()
        assert (len(passed), len(errors)) == ((1, 0) if end == "open" else (0, 1))


def test_ctrl_c_stops_the_key_tuned_and_the_key_ahead(capsys, db, monkeypatch):
    monkeypatch.setattr(toy_templates.OrderedTemplate, "interrupt", 0)
    threads = threading.active_count()
    code, _, _, log = _warm(capsys, db, "--lookahead")
    assert code == 130
    events = _events(log)
    assert (1, "start") in events, "the next key should have started ahead"
    assert (1, "launch") not in events and (2, "start") not in events, log
    assert threading.active_count() == threads, "a key's thread outlived warm"


def test_lookahead_keeps_the_time_limits(capsys, db):
    code, out, err, _ = _warm(capsys, db, "--lookahead", "--max-minutes", "1", "--max-seconds", "5")
    assert code == 0, out + err
    assert "3 tuned, 0 stored, 0 failed" in out
