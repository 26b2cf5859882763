"""One choice for all ranks (issue #41): inside ``tune.collective(comm)`` every tuned call
returns the same parameters on every rank, one rank measuring and storing; ranks that ask for
different keys neither hang nor silently disagree; the resolving rank's failure reaches the
others. Real ranks (``mpiexec`` with 2 and 4 ranks, ``tests/mpi_collective.py``) on this
machine's device, each rank seeing its own timings: tuned alone, the ranks choose differently.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import mpiexec

from autotune import tune
from autotune.tune.collective import (CollectiveError, Mismatch, communicator, owners,
                                      who_asked)
from autotune.tune.records import TuningKey
from autotune.tune.store import ResultStore

HERE = Path(__file__).parent
SCRIPT = HERE / "mpi_collective.py"
FUNCTION = "__main__.rank_timed"
SPACE = 4  #: candidates of rank_timed's space


def _env(context, **extra) -> dict:
    return dict(os.environ, AUTOTUNE_DEVICE="cuda" if context.device.backend == "cuda"
                else "opencl", PYTHONPATH=os.pathsep.join([str(HERE.parent),
                                                           os.environ.get("PYTHONPATH", "")]),
                **extra)


def _mpi(context, tmp_path: Path, ranks: int, mode: str, timeout: str = "60"
         ) -> tuple[subprocess.CompletedProcess, float, list[dict]]:
    """``mode`` of the script on ``ranks`` MPI ranks: what it said, how long it took, and
    each rank's report (those written)."""
    env = _env(context, AUTOTUNE_DB=str(tmp_path / "shared.db"), AUTOTUNE_MPI_TIMEOUT=timeout)
    start = time.monotonic()
    out = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py",
                          str(SCRIPT), mode, str(tmp_path)],
                         capture_output=True, text=True, timeout=180, env=env)
    return out, time.monotonic() - start, _reports(tmp_path, ranks)


def _reports(folder: Path, ranks: int) -> list[dict]:
    found = [folder / f"rank{r}.json" for r in range(ranks)]
    return [json.loads(p.read_text()) for p in found if p.exists()]


def _measured(reports: list[dict], case: str) -> list[int]:
    return [r["measured"].get(case, 0) for r in reports]


def _trials(db: Path, arguments_contain: str) -> int:
    return sum(1 for t in ResultStore(f"sqlite:///{db}").trials(function=FUNCTION)
               if arguments_contain in t.key.arguments)


def _check_cases(reports: list[dict], ranks: int, db: Path) -> None:
    assert [r["rank"] for r in reports] == list(range(ranks))
    cases = [r["cases"] for r in reports]
    # alone, each rank tunes for itself: its own choice, block (r + 1) % 4
    alone = [c["alone"]["params"]["block"] for c in cases]
    assert alone == [(r + 1) % 4 for r in range(ranks)]
    assert _measured(reports, "alone") == [SPACE] * ranks
    # together: rank 0's choice on every rank, measured by rank 0 alone, stored once
    assert [c["same"] for c in cases] == [{"params": {"block": 1}, "warnings": []}] * ranks
    assert _measured(reports, "same") == [SPACE] + [0] * (ranks - 1)
    assert _trials(db, '"same"') == SPACE
    # even ranks ask for n=64, odd ranks for n=128: each key resolved by the lowest rank
    # that asked (0 and 1), the others of its kind get its choice; every rank is warned
    differ = [c["differ"] for c in cases]
    assert [d["params"]["block"] for d in differ] == [1 if r % 2 == 0 else 2
                                                      for r in range(ranks)]
    assert _measured(reports, "differ-warn") == [SPACE, SPACE] + [0] * (ranks - 2)
    assert _trials(db, '"differ-warn"') == 2 * SPACE
    evens = ", ".join(str(r) for r in range(0, ranks, 2))
    odds = ", ".join(str(r) for r in range(1, ranks, 2))
    for d in differ:
        (said,) = d["warnings"]
        assert "the ranks asked for different keys in one tuned call" in said
        assert f"{'ranks' if ranks > 2 else 'rank'} {evens} asked for {FUNCTION} v1 " \
               '{"case":"differ-warn","n":64}' in said, said
        assert f"{'ranks' if ranks > 2 else 'rank'} {odds} asked for {FUNCTION} v1 " \
               '{"case":"differ-warn","n":128}' in said, said
    # mismatch="error": the same error on every rank, nothing tuned
    for c in cases:
        error = c["differ-error"]
        assert error["error"] == "KeyMismatchError", error
        assert "with mismatch='error' every rank must ask for the same key" in error["message"]
        assert '{"case":"differ-error","n":128}' in error["message"]
    assert _measured(reports, "differ-error") == [0] * ranks
    # the resolving rank fails: its own error there, a CollectiveError naming it elsewhere
    fails = [c["fails"] for c in cases]
    assert "no candidate works for n=64 on purpose" in fails[0]["message"]
    assert fails[0]["error"] != "CollectiveError"
    for f in fails[1:]:
        assert f["error"] == "CollectiveError", f
        assert f["message"].startswith("tune.collective: rank 0 failed to tune __main__.failing")
        assert "no candidate works for n=64 on purpose" in f["message"]


@pytest.mark.parametrize("ranks", [2, 4])
def test_every_rank_gets_one_ranks_choice_and_mismatches_never_hang(context, tmp_path, ranks):
    out, seconds, reports = _mpi(context, tmp_path, ranks, "cases")
    assert out.returncode == 0, out.stderr[-4000:]
    _check_cases(reports, ranks, tmp_path / "shared.db")
    assert seconds < 120, seconds


def test_a_tuned_call_the_other_ranks_never_make_gives_up_naming_its_rank(context, tmp_path):
    """The last rank makes one tuned call more than the others: it gives up after
    AUTOTUNE_MPI_TIMEOUT (2 s) naming itself and the key it asked for, and ends the run."""
    out, seconds, reports = _mpi(context, tmp_path, 2, "lonely", timeout="2")
    assert out.returncode != 0
    assert seconds < 60, seconds
    said = out.stderr
    assert "[rank 1] failed; aborting all 2 ranks" in said, said[-3000:]
    assert ("MPITimeoutError: rank 1 of 2: tune.collective: the keys the ranks ask for (rank 1 "
            f'asks for {FUNCTION} v1 {{"case":"lonely","n":16}}') in said, said[-3000:]
    assert "did not complete in 2 s" in said
    # the call every rank made gave every rank the same choice
    assert [r["cases"]["params"] for r in reports if r["rank"] == 0] == [{"block": 1}]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torch_distributed_default_group_gets_one_choice(context, tmp_path):
    """The same cases with ``tune.collective(torch.distributed)`` (gloo, 2 processes)."""
    pytest.importorskip("torch.distributed",
                        reason="torch is not installed (the 'triton' extra's PyTorch)")
    ranks, port = 2, _free_port()
    env = _env(context, AUTOTUNE_DB=str(tmp_path / "shared.db"), MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port), WORLD_SIZE=str(ranks))
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), "--torch", "cases", str(tmp_path)],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(ranks)]
    said = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * ranks, [s[1][-3000:] for s in said]
    _check_cases(_reports(tmp_path, ranks), ranks, tmp_path / "shared.db")


# -- the rule itself, without ranks ------------------------------------------------------------

def test_a_key_several_ranks_ask_for_goes_to_them_in_turn():
    """One key for all: the lowest rank. Lists shared by a set of ranks: their keys dealt to
    them in turn (warm's split); a key one rank asks for: its own."""
    assert owners([["a"], ["a"], ["a"]]) == {"a": 0}
    assert owners([["a"], ["b"], ["a"], ["b"]]) == {"a": 0, "b": 1}
    assert owners([list("pqrst"), ["x"], list("pqrst")]) == {
        "p": 0, "q": 2, "r": 0, "s": 2, "t": 0, "x": 1}


def test_who_asked_names_the_ranks_of_each_key():
    a = TuningKey("f", 1, "GPU A", "CUDA", "13.0", '{"n":1}')
    b = TuningKey("f", 1, "GPU B", "CUDA", "13.0", '{"n":1}')
    assert who_asked([a, b, a]) == ('ranks 0, 2 asked for f v1 {"n":1} on GPU A (CUDA, driver '
                                    '13.0); rank 1 asked for f v1 {"n":1} on GPU B (CUDA, '
                                    'driver 13.0)')


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match=r"tune.collective\(mismatch='maybe'\): use 'warn' "
                                         r"\(the default\), 'error' or 'allow'"):
        with tune.collective(object(), mismatch="maybe"):
            pass
    with pytest.raises(TypeError, match="tune.collective needs an mpi4py communicator"):
        with tune.collective(42):
            pass
    assert [m.value for m in Mismatch] == ["warn", "error", "allow"]
    assert issubclass(CollectiveError, RuntimeError)
    with pytest.raises(TypeError):
        communicator("COMM_WORLD")
