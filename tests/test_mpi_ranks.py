"""MPI runs never hang (issue #47): every rank on a usable device, the CPU device shared; a
rank that raises ends the run with its error and rank number; a stuck rank is named by the
rank that waits for it, after AUTOTUNE_MPI_TIMEOUT seconds. Each test starts two real ranks
(``tests/mpi_ranks.py``) and builds no kernel beyond the health check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from processes import mpiexec

from autotune import accel, parallel

HERE = Path(__file__).parent
SCRIPT = HERE / "mpi_ranks.py"


def _run(mode: str, env: dict, ranks: int = 2) -> tuple[subprocess.CompletedProcess, float]:
    """``mode`` of the script on ``ranks`` ranks; what it said and how long it took. (The
    timeout only keeps a broken build from blocking the suite: the tests check the time.)"""
    env = dict(env, PYTHONPATH=os.pathsep.join([str(HERE.parent),
                                                env.get("PYTHONPATH", "")]))
    start = time.monotonic()
    out = subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, str(SCRIPT), mode],
                         capture_output=True, text=True, timeout=120, env=env)
    return out, time.monotonic() - start


def test_every_rank_shares_the_working_cpu_device_beside_a_broken_platform(
        broken_opencl_two_working):
    """Three OpenCL CPU platforms, opencl:0 unable to build: every rank takes opencl:1:0,
    the device one process would choose (shared, not one device a rank: the ranks would
    otherwise cycle over opencl:1:0 and opencl:2:0), each with one warning that names the
    skipped device."""
    out, _ = _run("device", dict(broken_opencl_two_working, AUTOTUNE_DEVICE="cpu"))
    assert out.returncode == 0, out.stderr[-3000:]
    ranks = json.loads(out.stdout.strip().splitlines()[-1])
    assert [r["selector"] for r in ranks] == ["opencl:1:0", "opencl:1:0"]
    assert all(r["opened"] for r in ranks)
    assert out.stderr.count("skipping device opencl:0:0") == 2, out.stderr  # one per rank
    assert "cannot build a trivial kernel" in out.stderr


def test_on_a_cpu_every_local_rank_gets_the_device_one_process_would_choose():
    if not any(not s.identity.is_gpu for s in accel.list_devices()):
        pytest.skip("no CPU device here")
    best = accel.select_devices("cpu")[0]
    assert [accel.device_for_local_rank(k, "cpu") for k in range(4)] == [best] * 4
    with pytest.raises(ValueError, match="local_rank must be >= 0"):
        accel.device_for_local_rank(-1, "cpu")


def test_on_gpus_local_rank_i_takes_the_i_th_gpu():
    gpus = [s for s in accel.select_devices() if s.identity.is_gpu] if any(
        s.identity.is_gpu for s in accel.list_devices()) else []
    if not gpus:
        pytest.skip("no GPU here")
    for k in range(2 * len(gpus)):
        assert accel.device_for_local_rank(k, "gpu") == gpus[k % len(gpus)]


def test_a_rank_that_raises_mid_exchange_ends_every_rank_within_30_s():
    """Rank 1 raises between starting and finishing a halo exchange while rank 0 waits for
    its face: the run ends at once, its status not 0, with rank 1's error and traceback
    headed by its rank number."""
    out, seconds = _run("raise", dict(os.environ, AUTOTUNE_MPI_TIMEOUT="600"))
    assert out.returncode != 0
    assert seconds < 30, seconds
    assert "[rank 1] failed; aborting all 2 ranks" in out.stderr, out.stderr[-3000:]
    assert "[rank 1] RuntimeError: rank 1 fails on purpose in the middle of a halo exchange" \
        in out.stderr
    assert "[rank 1] Traceback" in out.stderr


def _given_up(mode: str, waiting_rank: int) -> str:
    """Run ``mode`` with a 2 s AUTOTUNE_MPI_TIMEOUT: the run fails within 30 s, the waiting
    rank aborting every rank; what the ranks wrote to standard error."""
    out, seconds = _run(mode, dict(os.environ, AUTOTUNE_MPI_TIMEOUT="2"))
    assert out.returncode != 0
    assert seconds < 30, seconds
    said = out.stderr
    assert f"[rank {waiting_rank}] failed; aborting all 2 ranks" in said, said[-3000:]
    return said


def test_a_stuck_rank_is_named_by_the_rank_that_waits_for_it():
    """Rank 1 never finishes its exchange (alive, asleep): rank 0 gives up after
    AUTOTUNE_MPI_TIMEOUT seconds with an error that names rank 1's face, and ends the run."""
    said = _given_up("stall", waiting_rank=0)
    assert "MPITimeoutError: rank 0 of 2: the halo exchange (host transport) did not " \
           "complete in 2 s" in said
    assert "rank 1's face (tag 3, 4 float64 values)" in said
    assert "AUTOTUNE_MPI_TIMEOUT" in said


def test_a_stuck_rank_is_named_by_the_peer_transports_watch():
    """The peer transport's flags (CUDA): rank 0's stream waits for rank 1's count on the
    device and its host blocks in ``queue.finish()``; rank 1 never sends again. After
    AUTOTUNE_MPI_TIMEOUT seconds the watch names rank 1's faces, releases the stream, and the
    next exchange raises, ending the run."""
    if not any(spec.selector.startswith("cuda") for spec in accel.all_devices()):
        pytest.skip("needs an NVIDIA GPU and the cuda extra (the flags are CUDA stream "
                    "memory operations)")
    said = _given_up("stall-peer", waiting_rank=0)
    assert "MPITimeoutError: rank 0 of 2: the halo exchange (peer transport) waited 2 s for " \
           "rank 1's faces of exchange 2, which never came" in said, said[-3000:]


def test_a_broadcast_from_a_rank_that_never_comes_is_named_by_the_rank_that_waits():
    """Rank 0 takes longer than AUTOTUNE_MPI_TIMEOUT to reach its broadcast of tuned
    parameters: rank 1 gives up naming it (an object collective never waits forever)."""
    said = _given_up("slow-root", waiting_rank=1)
    assert "MPITimeoutError: rank 1 of 2: the tuned parameters from rank 0 (every rank of 2 " \
           "reaching it) did not complete in 2 s" in said


@pytest.mark.parametrize("value", ["soon", "0", "-5", "inf", "nan"])
def test_a_bad_mpi_timeout_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv(parallel.ENV_TIMEOUT, value)
    with pytest.raises(ValueError, match=r"AUTOTUNE_MPI_TIMEOUT=.* is not a number of seconds "
                                         r"> 0: write e.g. AUTOTUNE_MPI_TIMEOUT=1200"):
        parallel.timeout_seconds()


def test_the_mpi_timeout_has_a_default_and_takes_a_number(monkeypatch):
    monkeypatch.delenv(parallel.ENV_TIMEOUT, raising=False)
    assert parallel.timeout_seconds() == parallel.DEFAULT_TIMEOUT == 600
    monkeypatch.setenv(parallel.ENV_TIMEOUT, " 42.5 ")
    assert parallel.timeout_seconds() == 42.5
