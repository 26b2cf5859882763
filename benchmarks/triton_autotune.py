"""The first call of a Triton matmul in a second process: with
``autotune.integrations.triton.autotune`` (served from the tuning database) against Triton's
own ``@triton.autotune`` (which benchmarks its configurations again in every new process).

Target (issue #43): with 8 configurations, the first call in a second process starts at least
10x sooner than with Triton's autotuner, with the same configuration chosen.

    python benchmarks/triton_autotune.py [--size 4096] [--work 0] [--db PATH]

For each decorator (ours; ours with ``prefetch=False``; Triton's) it starts two child
processes one after the other, each running this file with ``--child``: the first tunes (and
fills Triton's compile cache, one cache folder per decorator, so every second process loads
compiled kernels from disk), the second is measured. A child times its first call, from just
before the launch until the result is on the GPU, and checks it against ``torch.matmul``; it
also reports the time from decoration to that result, which includes making the arguments
(the CUDA context's start among it): what ``prefetch`` overlaps. The children share a user
cache folder of their own, so the first process of ``ours`` computes the digest of Triton's
installation and remembers it, and the second binds it (``how`` says so). ``--work S``: each child waits
S seconds after decorating, before making its arguments, as a program reading its input does
(the wait releases the interpreter, as file and network reads do). Needs torch, Triton and a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parent.parent
#: child modes: ours (prefetching Triton's start at decoration), ours without it, Triton's
#: autotuner, and a plain launch of one given configuration
MODES = ["ours", "ours_no_prefetch", "triton", "plain"]
#: (BLOCK_M, BLOCK_N, BLOCK_K, num_stages, num_warps)
SHAPES = [(128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4),
          (64, 128, 64, 4, 4), (128, 128, 32, 4, 4), (64, 64, 64, 5, 2), (64, 32, 32, 5, 2)]


@triton.jit
def matmul_kernel(a, b, c, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
                  stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    depth = tl.arange(0, BLOCK_K)
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + depth
        tile_a = tl.load(a + rows[:, None] * stride_am + ks[None, :] * stride_ak,
                         mask=(rows[:, None] < M) & (ks[None, :] < K), other=0.0)
        tile_b = tl.load(b + ks[:, None] * stride_bk + cols[None, :] * stride_bn,
                         mask=(ks[:, None] < K) & (cols[None, :] < N), other=0.0)
        total = tl.dot(tile_a, tile_b, total)
    tl.store(c + rows[:, None] * stride_cm + cols[None, :] * stride_cn, total.to(tl.float16),
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def child(mode: str, size: int, database: str, chosen: list[int] | None = None,
          work: float = 0.0) -> dict:
    """Build the kernel with decorator ``mode`` (``ours``, ``triton``, or ``plain``: Triton's
    with the one configuration ``chosen``, which it launches without timing), time its first
    call."""
    started = time.perf_counter()
    import torch

    sys.path.insert(0, str(ROOT))
    from autotune.integrations.triton import autotune, start_digest_remembered

    configs = [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k}, num_stages=s, num_warps=w)
               for m, n, k, s, w in ([chosen] if mode == "plain" else SHAPES)]
    decorate = (autotune(configs, key=["M", "N", "K"], database=database,
                         prefetch=mode == "ours") if mode.startswith("ours")
                else triton.autotune(configs, key=["M", "N", "K"]))

    matmul = decorate(matmul_kernel)
    decorated = time.perf_counter()
    time.sleep(work)  # the program's own work before its first launch (reading its input)

    a = torch.randn(size, size, device="cuda", dtype=torch.float16)
    b = torch.randn(size, size, device="cuda", dtype=torch.float16)
    c = torch.empty(size, size, device="cuda", dtype=torch.float16)
    torch.cuda.synchronize()
    ready = time.perf_counter()
    matmul[lambda meta: (triton.cdiv(size, meta["BLOCK_M"]), triton.cdiv(size, meta["BLOCK_N"]))](
        a, b, c, size, size, size, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
        c.stride(0), c.stride(1))
    torch.cuda.synchronize()
    done = time.perf_counter()
    first = done - ready
    torch.testing.assert_close(c, (a @ b), atol=1e-1, rtol=1e-2)
    best = matmul.best_config
    shape = [best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.kwargs["BLOCK_K"],
             best.num_stages, best.num_warps]
    how = matmul.last_choice.how if mode.startswith("ours") else "benchmark" if mode == "triton" else "given"
    if start_digest_remembered():
        how += "; Triton's digest remembered"
    return {"first_call_s": first, "setup_s": ready - started,
            "from_decoration_s": done - decorated, "config": shape, "how": how,
            "device": torch.cuda.get_device_name(), "triton": triton.__version__}


def run_child(mode: str, size: int, database: str, cache: str,
              chosen: list[int] | None = None, work: float = 0.0) -> dict:
    # Triton's compile cache per decorator, and a user cache folder (where the digest of
    # Triton's installation is remembered) for the run: each first process computes it
    env = dict(os.environ, TRITON_CACHE_DIR=cache, PYTHONPATH=str(ROOT),
               XDG_CACHE_HOME=str(Path(cache).parent / "user-cache"))
    extra = (["--config", ",".join(map(str, chosen))] if chosen else []) + ["--work", str(work)]
    done = subprocess.run([sys.executable, __file__, "--child", mode, "--size", str(size),
                           "--db", database, *extra], capture_output=True, text=True, env=env,
                          timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"the {mode} child failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=4096, help="M = N = K (default 4096)")
    parser.add_argument("--work", type=float, default=0.0,
                        help="seconds each child waits between decorating and making its "
                             "arguments (a program reading its input); default 0")
    parser.add_argument("--db", help="tuning database (default: a new file in a temporary folder)")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        chosen = [int(v) for v in args.config.split(",")] if args.config else None
        print(json.dumps(child(args.child, args.size, args.db, chosen, args.work)))
        return 0
    with tempfile.TemporaryDirectory(prefix="triton-autotune-") as folder:
        database = args.db or str(Path(folder) / "tune.db")
        runs = {}
        for mode in ("ours", "ours_no_prefetch", "triton"):
            cache = str(Path(folder) / f"cache-{mode}")
            runs[mode] = [run_child(mode, args.size, database, cache, work=args.work)
                          for _ in range(2)]
        chosen = runs["ours"][1]["config"]
        runs["plain"] = [run_child("plain", args.size, database, str(Path(folder) / "cache-plain"),
                                   chosen, work=args.work) for _ in range(2)]
    ours, theirs, floor = runs["ours"][1], runs["triton"][1], runs["plain"][1]["first_call_s"]
    print(f"device: {ours['device']}; Triton {ours['triton']}; matmul {args.size}^3 float16, "
          f"{len(SHAPES)} configurations; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC")
    print(f"command: python benchmarks/triton_autotune.py --size {args.size} --work {args.work}")
    print(f"{'decorator':<34}{'process 1':>12}{'process 2':>12}{'2 less plain':>14}"
          f"{'2 from decoration':>19}  config (BM, BN, BK, stages, warps), how process 2 chose")
    for mode, label in (("ours", "autotune.integrations.triton"),
                        ("ours_no_prefetch", "the same, prefetch=False"),
                        ("triton", "@triton.autotune"), ("plain", "plain launch (chosen config)")):
        one, two = runs[mode]
        print(f"{label:<34}{one['first_call_s'] * 1e3:>9.1f} ms{two['first_call_s'] * 1e3:>9.1f} ms"
              f"{(two['first_call_s'] - floor) * 1e3:>11.1f} ms"
              f"{two['from_decoration_s'] * 1e3:>16.1f} ms  {two['config']} ({two['how']})")
    speedup = theirs["first_call_s"] / ours["first_call_s"]
    added = (theirs["first_call_s"] - floor) / max(ours["first_call_s"] - floor, 1e-4)
    same = runs["ours"][0]["config"] == theirs["config"]
    print(f"first call of process 2: {speedup:.1f}x sooner; time added to a plain launch: "
          f"{added:.1f}x less; same configuration chosen: {'yes' if same else 'no'}")
    return 0 if added >= 10 and same else 1


if __name__ == "__main__":
    sys.exit(main())
