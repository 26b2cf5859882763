"""``warm --all-devices --jobs N``: workers on devices of one class take their keys as each
becomes free (``autotune.cli.warm_sharing``), each key tuned once, by one of them."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

from autotune import accel
from autotune.cli.warm import _warm_worker
from autotune.cli.warm_plan import WarmPolicy
from autotune.cli.warm_sharing import KeyClaims, busy_text, claim_boards, start_manager
from autotune.tune.store import ResultStore

TESTS = Path(__file__).resolve().parent


def _take_all(claims: KeyClaims, count: int) -> list[int]:
    return [p for p in range(count) if claims.take(p)]


def test_each_position_is_taken_by_one_worker_of_its_class():
    gpu, cpu = ("NVIDIA H200", "CUDA", "13.0"), ("pthread-AMD EPYC", "Portable", "3.0")
    with start_manager() as manager:
        claims = claim_boards([gpu, cpu, gpu, gpu], manager)
        assert claims[1] is None  # alone in its class: it takes every key
        assert [c.worker for c in (claims[0], claims[2], claims[3])] == [0, 1, 2]
        assert claims[0].workers == 3
        with multiprocessing.get_context("spawn").Pool(3) as pool:
            taken = pool.starmap(_take_all, [(claims[i], 200) for i in (0, 2, 3)])
        assert sorted(p for t in taken for p in t) == list(range(200))  # each once
        # taking again: True for the worker that holds it, False for the others
        assert all(sum(claims[i].take(p) for i in (0, 2, 3)) == 1 for p in range(200))


def test_workers_of_one_class_tune_each_key_once(tmp_path, context, monkeypatch):
    """Two workers on devices of one class (here one device, twice) warm six keys into one
    database: every key is searched once, by one of them, and each reports its own keys."""
    db, log = tmp_path / "claims.db", tmp_path / "generate.log"
    monkeypatch.setenv("SLOW_TEMPLATE_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS),
                                                      os.environ.get("PYTHONPATH", "")]))
    spec = next(s for s in accel.list_devices() if s.identity == context.device)
    settings = {"max_seconds": None, "seed": None, "batches": None, "resume": None}
    with start_manager() as manager:
        claims = claim_boards([("same",)] * 2, manager)
        work = [(spec, ["toy_templates:SlowTemplate"], [], f"sqlite:///{db}", False, False,
                 settings, (0, 1), WarmPolicy(), None, False, claim) for claim in claims]
        with multiprocessing.get_context("spawn").Pool(2) as pool:
            parts = pool.map(_warm_worker, work)
    outcomes = [o for part in parts for o in part]
    assert sorted(o.arguments for o in outcomes) == sorted(f"index={i}" for i in range(6))
    assert all(o.status == "tuned" for o in outcomes)
    rows = ResultStore(f"sqlite:///{db}").records()
    assert len(rows) == 6 and len({r.key for r in rows}) == 6
    calls = [line.split() for line in log.read_text().splitlines()]
    assert len(calls) == 6 * 3  # every key searched once: three blocks each
    by_key: dict[str, set[str]] = {}
    for index, _block, pid in calls:
        by_key.setdefault(index, set()).add(pid)
    assert all(len(pids) == 1 for pids in by_key.values())
    assert all(parts), "a worker took no key"  # the second did not find them all gone


def test_the_summary_says_how_busy_each_device_was():
    from dataclasses import dataclass

    @dataclass
    class Done:
        where: str
        seconds: float
        began_at: float
        device: str = "GPU"

    two = [Done("host/cuda:0", 4.0, 102.0), Done("host/cuda:1", 3.0, 103.5),
           Done("host/cuda:0", 5.0, 106.0)]
    assert busy_text(two, lambda s: f"{s:g} s") == "; each device busy 3 s to 9 s"
    assert busy_text(two, lambda s: f"{s:g} s", 100.0) == (
        "; each device busy 3 s to 9 s, its first key 2 s to 3.5 s after the start")
    assert busy_text([Done("host/cuda:0", 4.0, 101.0)], str) == ""
