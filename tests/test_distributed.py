"""The distributed Wilson operator under real MPI (mpiexec, 2 and 4 ranks on this device):
equal to the single-process operator, and its solvers reach the same answers in as many
iterations. Each run is ``tests/mpi_wilson.py``; partitions in one and two directions, unequal
block extents, both time boundaries, every link compression."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from device_breadth import on_device
from processes import mpiexec

HERE = Path(__file__).parent
SCRIPT = HERE / "mpi_wilson.py"


def _mpiexec() -> str:
    return mpiexec()


def _selector(context) -> str:
    return "cuda" if context.device.backend == "cuda" else "opencl"


def _launch(context, dims, grid, t_boundary, reconstruct, precision, solves, policy,
            transport="auto") -> subprocess.CompletedProcess:
    ranks = math.prod(grid)
    # -m mpi4py: a rank that raises aborts them all (MPI_Abort) with its traceback, instead of
    # leaving the others waiting on it until the timeout
    command = [_mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", str(SCRIPT),
               "--dims", *map(str, dims), "--grid", *map(str, grid),
               "--t-boundary", str(t_boundary), "--reconstruct", str(reconstruct),
               "--precision", precision, "--policy", policy, "--transport", transport,
               "--solves", *solves]
    return _mpi_run(context, command, ranks)


def _mpi_run(context, command, ranks) -> subprocess.CompletedProcess:
    """``command`` (an mpiexec of ``ranks`` ranks) run to its end, or the test failed with what
    the ranks had said when they did not finish in 600 s (to see where they hung)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=600,
                              env=_env(context))
    except subprocess.TimeoutExpired as exc:
        said = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr
        pytest.fail(f"the {ranks} ranks did not finish in 600 s; their stderr:\n"
                    f"{(said or '')[-4000:]}")


def _env(context, **extra) -> dict:
    # a rank stuck in an exchange is an error on its neighbour after 180 s (each rank's
    # scripts abort every rank when one raises), well before the 600 s subprocess timeout
    timeout = os.environ.get("AUTOTUNE_MPI_TIMEOUT", "180")
    return dict(os.environ, AUTOTUNE_DEVICE=_selector(context), AUTOTUNE_MPI_TIMEOUT=timeout,
                PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]),
                **extra)


def _run_cases(context, cases: list[dict]) -> list[list[dict]]:
    """One launch (as many ranks as every case's grid has) that checks each case in turn; per
    case, what every rank reported."""
    ranks = {math.prod(case["grid"]) for case in cases}
    assert len(ranks) == 1, "the cases of one launch have one rank count"
    ranks = ranks.pop()
    command = [_mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", str(SCRIPT),
               "--cases", json.dumps(cases)]
    out = _mpi_run(context, command, ranks)
    assert out.returncode == 0, out.stderr[-4000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(results) == len(cases)
    for case_results in results:
        assert [r["rank"] for r in case_results] == list(range(ranks))
    return results


EVERY_SOLVE = ["cg_eo", "cg_eo_classic", "cg_eo_pipelined", "cg", "bicgstab_eo", "cg_eo_mixed",
               "cg_eo_mixed_classic", "cg_eo_mixed_pipelined", "bicgstab_eo_mixed",
               "gcr_eo_schwarz", "gcr_eo_mixed_schwarz"]
#: EVERY_SOLVE's covering subset on CPU devices (tests/device_breadth.py): each recurrence of CG
#: once, each solver once in mixed precision, Schwarz once. Left out there: the mixed classic and
#: pipelined CG (their recurrences run in double, mixed CG in its default one), BiCGstab and
#: GCR-Schwarz in double (BiCGstab in double is the x cut's, GCR-Schwarz in double the
#: four-rank launch's).
CPU_SOLVES = ["cg_eo", "cg_eo_classic", "cg_eo_pipelined", "cg", "cg_eo_mixed",
              "bicgstab_eo_mixed", "gcr_eo_mixed_schwarz", "cg_eo_mixed_half"]
#: The cases of one launch share its rank count: one launch of two ranks, one of four (each
#: mpiexec starts its ranks and builds their kernels anew).
LAUNCHES = {
    "2-ranks": [
        # (a t cut, antiperiodic; every solver)
        dict(id="t-cut-2-antiperiodic", dims=(4, 4, 4, 8), grid=(1, 1, 1, 2), t_boundary=-1,
             reconstruct=18, precision="double", solves=EVERY_SOLVE + ["cg_eo_mixed_half"],
             policy="overlap", transport="auto"),
        # (16-bit fields and links: 16-bit faces where a field is 16-bit, the ghost links
        # rounded as the block's are)
        dict(id="z-cut-2-half-8", dims=(4, 4, 8, 4), grid=(1, 1, 2, 1), t_boundary=-1,
             reconstruct=8, precision="half", solves=[], policy="overlap", transport="auto"),
        dict(id="x-cut-2-unequal-periodic-serial-host", dims=(8, 6, 4, 4), grid=(2, 1, 1, 1),
             t_boundary=1, reconstruct=12, precision="double",
             solves=["cg_eo", "bicgstab_eo", "gcr_eo"], policy="serial", transport="host"),
    ],
    # (GCR's many reductions are kept to two ranks: four ranks on CI's two cores poll MPI hard)
    "4-ranks": [
        dict(id="yt-cut-4-fused", dims=(4, 8, 6, 8), grid=(1, 2, 1, 2), t_boundary=-1,
             reconstruct=8, precision="double", solves=["cg_eo", "bicgstab_eo", "gcr_eo_schwarz"],
             policy="fused", transport="auto", tuning={"wgs": 128, "dir_split": 4},
             graphs=False),
        dict(id="xt-cut-4-single-in-order", dims=(8, 4, 4, 8), grid=(2, 1, 1, 2),
             t_boundary=1, reconstruct=12, precision="single", solves=["cg_eo"],
             policy="overlap_in_order", transport="auto", tuning={"wgs": 64, "dir_split": 2},
             graphs=None),
    ],
}


@pytest.mark.parametrize("launch", list(LAUNCHES))
def test_the_distributed_operator_equals_the_single_process_one(context, launch):
    """Per case (one launch runs the cases of one rank count in turn): partitions in one and
    two directions, unequal block extents, both time boundaries, every link compression; on
    every rank, each operator within rounding of the single-process one, CG and BiCGstab in as
    many iterations, every solve to the same solution and true residual."""
    cases = [case for case in LAUNCHES[launch]
             if case["precision"] != "double" or context.device.double_precision]
    # (GPUs solve with every method; CPU devices with the covering subset)
    cases = [dict(case, solves=on_device(context, case["solves"], CPU_SOLVES))
             if case["id"] == "t-cut-2-antiperiodic" else case for case in cases]
    if not cases:
        pytest.skip(f"{context.device.name} has no double precision")
    runs = _run_cases(context, [{k: v for k, v in case.items() if k != "id"} for case in cases])
    for case, ranks in zip(cases, runs):
        _check_case(context, case, ranks)


def _check_case(context, case, ranks):
    name, dims, grid, solves = case["id"], case["dims"], case["grid"], case["solves"]
    precision, transport = case["precision"], case["transport"]
    tol = 1e-12 if precision == "double" else 1e-6
    # half: the same 16-bit numbers as one process, and float arithmetic in the same order but
    # for the ghost hops; between M_pc^dag and M_pc a value may round one 16-bit step apart
    loose = {"apply_pc_normal": 1e-4} if precision == "half" else {}
    # "auto" goes device to device where the devices can map each other's memory (CUDA)
    expected = transport if transport != "auto" else (
        "peer" if context.device.backend == "cuda" else "host")
    for rank in ranks:
        assert rank["transport"] == expected, name
        expected_local = [d // g for d, g in zip(dims, grid)]
        assert rank["local"] == expected_local, name
        for op in ("dslash", "apply", "apply_dagger", "apply_pc", "apply_pc_dagger",
                   "apply_pc_normal", "kernels_alone", "repeated"):
            assert rank[op] <= loose.get(op, tol), (name, op, rank[op])
        # the block's kernels run the dslash's tuned shape (the case's, where it names one)
        assert rank["dir_split"] == (case.get("tuning") or {}).get("dir_split", 1), name
        # both faces of each cut direction, 12 components a site of one parity
        assert rank["face_elements"] == sum(
            2 * 12 * math.prod(expected_local) // (2 * n)
            for n, g in zip(expected_local, grid) if g > 1), (name, rank["face_elements"])
        # graphs=None (the default): the overlapped dslashes are recorded and launched again
        # with one call (CUDA graphs) where the exchange waits for nothing on the host: the
        # peer transport's flags (graphs=False: never)
        if expected == "peer" and case.get("graphs") is not False:
            recordings = rank["recordings"]
            assert recordings["failed"] is None, (name, recordings)
            if case["policy"] in ("overlap", "overlap_in_order") and solves:
                # (a solve launches its dslashes many times; without one, the same dslash
                # four times on the same arrays is recorded and launched at least once)
                assert recordings["recorded"] > 0 and recordings["launched"] >= 2 * \
                    recordings["recorded"], (name, recordings)
            elif case["policy"] in ("overlap", "overlap_in_order"):
                assert recordings["launched"] >= 1, (name, recordings)
            else:
                assert recordings["launched"] == 0, (name, recordings)
        else:
            assert rank["recordings"] is None, name
        assert sorted(k for k in rank if k.startswith(("cg", "bicgstab", "gcr"))) == sorted(solves)
        for label in solves:
            solve = rank[label]
            assert solve["into_out"], (name, label)  # solve(out=...) wrote the caller's array
            distributed, single = solve["iterations"]
            if "schwarz" in label:
                assert "never spans two GPUs" in rank["schwarz_refusal"], rank["schwarz_refusal"]
                # each rank's MR steps use its own part's dot products (no communication in
                # the preconditioner), one process uses the whole lattice's: other step
                # lengths, a few more or fewer outer steps, the same solution
                assert abs(distributed - single) <= max(3, single // 4), (name, label, solve)
                assert min(solve["inner_iterations"]) > 0, (name, label, solve)
            else:
                assert distributed == single, (name, label, solve)
            assert solve["true_residual"][0] <= 10 * max(solve["true_residual"][1], 1e-13 if
                                                        precision == "double" else 1e-6), solve
            assert solve["difference"] <= (1e-9 if precision == "double" else 1e-4), (name, label,
                                                                                      solve)


def test_the_peer_transport_goes_device_to_device_or_says_why_not(context):
    """transport="peer" asked for outright: CUDA ranks of one host map each other's ghost
    zones, signal arrivals with stream-ordered flags, and match the single-process operator; elsewhere the run stops with an error that
    says why and names the fallback."""
    out = _launch(context, (4, 4, 4, 8), (1, 1, 1, 2), -1, 12, "double", ["cg_eo"], "overlap",
                  "peer")
    if context.device.backend == "cuda":
        assert out.returncode == 0, out.stderr[-4000:]
        for rank in json.loads(out.stdout.strip().splitlines()[-1]):
            assert rank["transport"] == "peer" and rank["dslash"] <= 1e-12
            # the GPUs tell each other that faces arrived; the host waits for neither
            assert "stream-ordered flags" in rank["description"], rank["description"]
            assert rank["cg_eo"]["iterations"][0] == rank["cg_eo"]["iterations"][1]
    else:
        assert out.returncode != 0
        assert "peer transport cannot be used" in out.stderr
        assert "only CUDA" in out.stderr and "transport='host'" in out.stderr


def test_a_dslash_is_recorded_only_where_the_host_waits_for_nothing(context):
    """Recording a dslash (a CUDA graph) needs a device that records a queue's work and an
    exchange the host never waits in: the host transport (MPI on the host) is never recorded,
    and devices without graphs say so."""
    import numpy as np

    from operations.lqcd.recordings import DslashRecordings
    from operations.lqcd.transport import HostStaged

    queue = context.create_command_queue()
    why = DslashRecordings.usable(queue, HostStaged(None, context, queue, 12, np.float64, []))
    if context.device.backend == "cuda":
        assert "host transport's host waits" in why, why
    else:
        assert "CUDA graphs" in why, why


def test_bad_options_are_refused_before_anything_is_built(context):
    """The policy, the transport and ``graphs`` are checked first, each with a one-line error
    that names the choices (no communicator is touched)."""
    from operations.lqcd import DistributedWilsonOperator, weak_field

    u = weak_field((4, 4, 4, 4), 0.1, seed=1)
    for options, message in (({"policy": "eager"}, "policy must be one of overlap"),
                             ({"transport": "nccl"}, "transport must be one of peer, host"),
                             ({"graphs": "yes"}, "graphs must be None")):
        with pytest.raises(ValueError, match=message):
            DistributedWilsonOperator(None, context, u, 0.1, **options)


def test_a_grid_that_does_not_fit_is_a_clear_error(context):
    from operations.lqcd.partition import Partition

    with pytest.raises(ValueError, match="does not divide"):
        Partition((4, 4, 4, 6), (1, 1, 1, 4), 0)
    with pytest.raises(ValueError, match="must be even"):
        Partition((4, 4, 4, 6), (1, 1, 1, 2), 0)
    with pytest.raises(ValueError, match="not in a grid"):
        Partition((4, 4, 4, 8), (1, 1, 1, 2), 2)
    part = Partition((8, 4, 4, 8), (2, 1, 1, 2), 3)
    assert part.coords == (1, 0, 0, 1) and part.origin == (4, 0, 0, 4)
    assert part.neighbour(0, 1) == 2 and part.neighbour(3, -1) == 1 and part.face_sites(3) == 32


def test_the_policy_is_tuned_by_every_rank_together_and_stored_once(context, tmp_path):
    """policy="tuned": each rank times its own dslash, the slowest rank decides, so all ranks
    lock on one policy; rank 0 stores it, and the next run starts locked on every rank."""
    db = tmp_path / "policy.db"

    def run(dims, grid):
        # the dslash and pack kernels are tuned on a miss too, here two candidates each timed
        # once: which rank tunes what is the next test's, every candidate each template's own
        command = [_mpiexec(), "-n", str(math.prod(grid)), sys.executable, str(SCRIPT),
                   "--dims", *map(str, dims), "--grid", *map(str, grid), "--tune-policy",
                   "--max-evals", "2", "--solves"]
        out = subprocess.run(command, capture_output=True, text=True, timeout=600,
                             env=_env(context, AUTOTUNE_DB=str(db)))
        assert out.returncode == 0, out.stderr[-4000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    first = run((4, 4, 4, 8), (1, 1, 1, 2))
    policies = [r["policy"] for r in first]
    assert len({json.dumps(p["best"]) for p in policies}) == 1  # one choice for all ranks
    assert policies[0]["best"]["policy"] in ("overlap", "overlap_in_order", "fused", "serial")
    assert [p["scans"] for p in policies] == [1, 1]
    assert [p["stored"] for p in policies] == [True, False]  # rank 0 writes for all
    for r in first:  # right during the scan (every policy ran) and after it
        assert r["dslash"] <= 1e-12 and r["apply_pc"] <= 1e-12 and r["policy"]["after"] <= 1e-12
    again = run((4, 4, 4, 8), (1, 1, 1, 2))
    assert [r["policy"]["scans"] for r in again] == [0, 0]
    assert [r["policy"]["best"] for r in again] == [policies[0]["best"]] * 2


def test_one_rank_tunes_every_kernel_of_a_distributed_solve_for_all(context, tmp_path):
    """QUDA's rule for everything a distributed GCR-Schwarz and BiCGstab solve tunes (the
    dslash, the pack kernel, the block dslash, the Schwarz MR step, the half precision
    conversions, the BLAS passes): rank 0 tunes on a miss and tells the others, which tune
    nothing. Each rank is given its own empty database: afterwards rank 1's is empty."""
    command = [_mpiexec(), "-n", "2", sys.executable, "-m", "mpi4py", str(SCRIPT),
               "--dims", "4", "4", "4", "8", "--grid", "1", "1", "1", "2", "--reconstruct", "12",
               "--store-per-rank", str(tmp_path), "--max-evals", "2"]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env(context))
    assert out.returncode == 0, out.stderr[-4000:]
    first, second = json.loads(out.stdout.strip().splitlines()[-1])
    assert second["functions"] == []
    prefix = "operations.lqcd."
    assert {prefix + "dslash.DslashTemplate.autotune", prefix + "halo.HaloTemplate.autotune",
            prefix + "schwarz.SchwarzMRTemplate.autotune",
            prefix + "half.HalfConvertTemplate.autotune",
            "operations.blas.BlasTemplate.autotune"} <= set(first["functions"])
    for solve in ("gcr", "bicgstab"):  # one solve, the same on both ranks
        assert first[solve] == second[solve] and first[solve][-1] < 1e-10


@pytest.mark.force_autotune
def test_the_pack_kernel_is_tuned_and_gathers_the_faces(context):
    """Every candidate of the pack kernel's search is checked; the chosen one, run on a field
    of known values, gives each face's sites in the documented order (the other three
    coordinates lexicographic, x fastest, halved), written out here site by site."""
    import numpy as np

    from operations.lqcd.halo import HaloTemplate
    from operations.lqcd.lattice import Lattice

    dims, cut = (4, 6, 2, 4), (True, False, False, True)
    template = HaloTemplate(context, dims, cut, "single")
    space = HaloTemplate.autotune_space(context, dims, cut, "single").parameters
    assert template.wgs in space["wgs"] and template.comps in space["comps"]
    lat = Lattice(dims)
    queue = context.create_command_queue()
    for parity in (0, 1):
        # component k of checkerboard site i holds k * 1000 + i
        field = (np.arange(12)[:, None] * 1000 + np.arange(lat.half_volume)[None, :]).astype(np.complex64)
        send = context.zeros(queue, template.size, np.complex64)
        template.instantiate(queue, parity)(send, context.to_device(queue, field))
        got = send.get(queue)
        position = {site: i for i, site in enumerate(lat.sites(parity))}
        for mu, step, offset, fh in template.sections:
            others = [nu for nu in range(4) if nu != mu]
            count = 0
            for t in range(dims[3]):
                for z in range(dims[2]):
                    for y in range(dims[1]):
                        for x in range(dims[0]):
                            c = (x, y, z, t)
                            if c[mu] != (dims[mu] - 1 if step == 1 else 0) or sum(c) % 2 != parity:
                                continue
                            a, b, d = (c[nu] for nu in others)
                            la, lb = dims[others[0]], dims[others[1]]
                            face = (a + la * (b + lb * d)) // 2
                            site = ((t * dims[2] + z) * dims[1] + y) * dims[0] + x
                            for k in (0, 5, 11):
                                assert got[offset + k * fh + face] == k * 1000 + position[site]
                            count += 1
            assert count == fh


def test_counters_compare_as_the_device_does():
    """The peer transport's watch reads its counters as ``cuStreamWaitValue32`` compares
    them: cyclically, so that a count that wrapped past 2^32 is not taken for one behind."""
    from operations.lqcd.peer_flags import behind

    assert behind(1, 2) and not behind(2, 2) and not behind(3, 2)
    assert not behind(1, 2**32 - 1)  # 1 came after 2^32 - 1 (wrapped)
    assert behind(2**32 - 1, 1 + 2**32)  # written as 1: still ahead
    assert behind(0, 2**31 - 1) and not behind(0, 2**31 + 1)


def test_faces_for_one_neighbour_go_in_one_copy():
    """The pack kernel puts each face where its receiver keeps it (``halo.send_sections``), so
    the faces one neighbour takes lie side by side at both ends and the peer transport copies
    them at once: with two ranks along a direction, one copy a direction; with a neighbour on
    each side, one a face."""
    from operations.lqcd.halo import sections, send_sections
    from operations.lqcd.partition import Partition
    from operations.lqcd.transport import Route, merged_copies

    dims, cut = (4, 4, 6, 8), (False, True, False, True)
    ghost = {(mu, step): slice(offset, offset + 12 * fh)
             for mu, step, offset, fh in sections(dims, cut)}
    sent = {(mu, step): slice(offset, offset + 12 * fh)
            for mu, step, offset, fh in send_sections(dims, cut)}
    assert all(sent[mu, step] == ghost[mu, -step] for mu, step in ghost)
    for grid, copies in (((1, 2, 1, 2), 2), ((1, 2, 1, 4), 3)):
        part = Partition((4, 8, 6, 8 * grid[3]), grid, 1)  # blocks of dims
        routes = [Route(dest=part.neighbour(mu, step), source=part.neighbour(mu, -step),
                        send=sent[mu, step], recv=ghost[mu, -step], tag=2 * mu + (step < 0))
                  for mu in (1, 3) for step in (1, -1)]
        merged = merged_copies(routes)
        assert len(merged) == copies, merged
        # every face is copied once, to its route's destination and place
        covered = sorted((d, i) for d, s, _ in merged for i in range(s.start, s.stop))
        assert covered == sorted((r.dest, i) for r in routes for i in range(r.send.start, r.send.stop))
        for dest, send, recv in merged:
            assert send == recv  # the sender's layout is the receiver's
