"""Nsight Compute profile summaries of the tuned Wilson dslash, one variant a process.

Usage (GPU machine, with ncu):
    python benchmarks/dslash_profile.py --ncu /usr/local/cuda/bin/ncu [--dims 32,32,32,32]
        [--variants half,8 half,12 ...] [--db FILE] [--json FILE]

For each (precision, reconstruct) the script runs itself as a child under ``ncu`` (clocks
locked by ncu, one launch profiled after two warm-ups): the child applies the dslash with the
parameters the tuning database serves (``AUTOTUNE_DB``; ``AUTOTUNE_MATCH=nearest`` takes another
driver's rows). It prints, per variant: the kernel's time, DRAM bytes per site against the least
traffic (``least_bytes_per_site``), DRAM throughput (% of peak), L1 and L2 hit rates, issue
slots busy, registers, achieved occupancy, and the largest share of the SM's pipes; on a
second line the L2 and L1 throughput (% of peak, bytes per site) and the three largest reasons
warps wait; and names the limiter: memory (DRAM throughput >= 80% of peak), issue (issue slots
>= 80%), cache throughput (L2 or L1 >= 80% of peak), occupancy (achieved occupancy below a third
with issue and memory both under 60%) or latency.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METRICS = {
    "gpu__time_duration.sum": "ns",
    "dram__bytes_read.sum": "read",
    "dram__bytes_write.sum": "written",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
    "l1tex__t_sector_hit_rate.pct": "l1_hit_pct",
    "sm__inst_issued.avg.pct_of_peak_sustained_active": "issue_pct",
    "launch__registers_per_thread": "registers",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active": "fma_pipe_pct",
    "sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active": "alu_pipe_pct",
    "sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active": "lsu_pipe_pct",
    "sm__inst_executed_pipe_fp64.avg.pct_of_peak_sustained_active": "fp64_pipe_pct",
    "smsp__inst_executed.sum": "instructions",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed": "l2_pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1_pct",
    "lts__t_bytes.sum": "l2_bytes",
    "l1tex__t_bytes.sum": "l1_bytes",
}
# why warps wait: each reason's share of the cycles a warp is resident (ncu's warp state
# statistics); the three largest are printed
STALLS = ("long_scoreboard", "short_scoreboard", "lg_throttle", "mio_throttle", "wait",
          "math_pipe_throttle", "not_selected", "selected", "dispatch_stall", "no_instruction",
          "barrier", "tex_throttle", "drain", "imc_miss", "branch_resolving")
METRICS.update({f"smsp__warp_issue_stalled_{s}_per_warp_active.pct": f"stall_{s}" for s in STALLS})


def child(dims: tuple[int, ...], precision: str, reconstruct: int, launches: int) -> None:
    """Apply the served dslash ``launches`` times (the profiled process)."""
    import numpy as np

    from autotune import accel
    from operations.lqcd import DslashTemplate, Lattice, gauge, half
    from operations.lqcd.dslash import ARITHMETIC

    context = accel.create_some_context("cuda")
    queue = context.create_command_queue()
    lattice = Lattice(dims)
    vh = lattice.half_volume
    rng = np.random.default_rng(3)
    psi = rng.standard_normal(lattice.shape + (4, 3)) + 1j * rng.standard_normal(lattice.shape + (4, 3))
    _, dtype = ARITHMETIC[precision]
    if precision == "half":
        src = half.to_device(context, queue, lattice.spinor_to_device(psi, 1, np.complex128))
        out = half.HalfSpinor.allocate(context, vh)
    else:
        src = context.to_device(queue, lattice.spinor_to_device(psi, 1, dtype))
        out = context.allocate((12, vh), dtype)
    template = DslashTemplate(context, dims, precision, reconstruct)
    print(json.dumps({"tuned": template.tuning}), flush=True)
    links = template.gauge_to_device(queue, gauge.haar_field(dims, seed=1))
    dslash = template.instantiate(queue)
    for _ in range(launches):
        dslash(out, src, links, 0)
    queue.finish()


def profile(ncu: str, dims: tuple[int, ...], precision: str, reconstruct: int) -> dict:
    """One variant's metrics, from a child process under ncu."""
    from operations.lqcd.dslash import least_bytes_per_site

    names = list(METRICS)
    for _ in range(2):  # again without any metric this ncu does not know
        command = [ncu, "--target-processes", "all", "-k", "regex:dslash", "--launch-skip", "2",
                   "--launch-count", "1", "--csv", "--page", "raw", "--metrics", ",".join(names),
                   sys.executable, __file__, "--child", ",".join(map(str, dims)), precision,
                   str(reconstruct)]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        unknown = [n for n in names if f"metric {n}" in done.stdout + done.stderr]
        if not unknown:
            break
        print(f"ncu does not know {', '.join(unknown)}: left out", file=sys.stderr)
        names = [n for n in names if n not in unknown]
    tuned = next((json.loads(line)["tuned"] for line in done.stdout.splitlines()
                  if line.startswith('{"tuned"')), None)
    table = [line for line in done.stdout.splitlines() if line.startswith('"')]
    if len(table) < 3:
        raise RuntimeError(f"ncu gave no metrics for {precision} {reconstruct}:\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    rows = list(csv.DictReader(io.StringIO("\n".join(table))))
    values = rows[-1]  # (the first row after the header holds the units)
    found = {short: float(values[name].replace(",", "")) for name, short in METRICS.items()
             if values.get(name) not in (None, "", "n/a")}
    sites = 1
    for d in dims:
        sites *= d
    sites //= 2
    found.update(precision=precision, reconstruct=reconstruct, tuned=tuned,
                 dram_bytes_per_site=(found["read"] + found["written"]) / sites,
                 least_bytes_per_site=least_bytes_per_site(precision, reconstruct))
    for level in ("l1", "l2"):
        if f"{level}_bytes" in found:
            found[f"{level}_bytes_per_site"] = found[f"{level}_bytes"] / sites
    found["limiter"] = limiter(found)
    return found


def limiter(m: dict) -> str:
    """What bounds a kernel, from its metrics (thresholds in the module's docstring)."""
    if m.get("dram_pct", 0) >= 80:
        return "memory"
    if m.get("issue_pct", 0) >= 80:
        return "issue"
    if max(m.get("l2_pct", 0), m.get("l1_pct", 0)) >= 80:
        return "cache throughput"
    if m.get("occupancy_pct", 100) < 33 and m.get("issue_pct", 0) < 60 and m.get("dram_pct", 0) < 60:
        return "occupancy"
    return "latency"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        dims = tuple(int(v) for v in sys.argv[2].split(","))
        child(dims, sys.argv[3], int(sys.argv[4]), launches=4)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--dims", default="32,32,32,32")
    parser.add_argument("--variants", nargs="+",
                        default=[f"{p},{r}" for p in ("half", "single", "double") for r in (18, 12, 8)])
    parser.add_argument("--db", help="tuning database (default: AUTOTUNE_DB)")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.db:
        os.environ["AUTOTUNE_DB"] = args.db
    dims = tuple(int(v) for v in args.dims.split(","))
    results = []
    print("| precision | recon | us | DRAM B/site | least B/site | DRAM % | L1 hit % | L2 hit % | "
          "issue % | regs | occupancy % | fma/alu/lsu/fp64 pipe % | limiter |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for variant in args.variants:
        precision, reconstruct = variant.split(",")
        m = profile(args.ncu, dims, precision, int(reconstruct))
        results.append(m)
        pipes = "/".join(f"{m.get(k, 0):.0f}" for k in ("fma_pipe_pct", "alu_pipe_pct",
                                                         "lsu_pipe_pct", "fp64_pipe_pct"))
        print(f"| {precision} | {reconstruct} | {m['ns'] / 1e3:.1f} | {m['dram_bytes_per_site']:.0f} | "
              f"{m['least_bytes_per_site']} | {m.get('dram_pct', 0):.0f} | {m.get('l1_hit_pct', 0):.0f} | "
              f"{m.get('l2_hit_pct', 0):.0f} | {m.get('issue_pct', 0):.0f} | {m.get('registers', 0):.0f} | "
              f"{m.get('occupancy_pct', 0):.0f} | {pipes} | {m['limiter']} |", flush=True)
        stalls = sorted(((m[f"stall_{s}"], s) for s in STALLS if f"stall_{s}" in m), reverse=True)
        print(f"|   | L2 {m.get('l2_pct', 0):.0f}% of peak, {m.get('l2_bytes_per_site', 0):.0f} B/site; "
              f"L1 {m.get('l1_pct', 0):.0f}%, {m.get('l1_bytes_per_site', 0):.0f} B/site; stalls "
              + ", ".join(f"{s} {v:.0f}%" for v, s in stalls[:3]) + " |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
