"""The diffusion stencil tuned by autotune and by Kernel Tuner, side by side in one run.

Usage: python benchmarks/diffusion_vs_kernel_tuner.py [--device SELECTOR] [--size 4096]
       [--json FILE] [--kt-lang CUDA] [--kt-verify] [--no-kernel-tuner]

At ``size x size`` float32 points, on one device:

1. autotune tunes ``DiffusionTemplate`` into a fresh temporary database (``AUTOTUNE_DB``); the
   wall time of that whole call is recorded (compiling, checking and timing every candidate).
2. Kernel Tuner (if importable) tunes the same source, ``operations/diffusion.mako`` rendered
   for the device's backend with the tunable parameters left as the macros Kernel Tuner
   defines, over the same space (with our device limits as its restriction), with its
   ``brute_force`` strategy; the wall time of the whole ``tune_kernel`` call is recorded.
   On CUDA, ``lang="CUDA"`` picks Kernel Tuner's default backend (cuda-python's NVRTC, else
   CuPy, else PyCUDA); on OpenCL it runs through pyopencl. Importing it is not timed.
3. The best configuration of each and the plain 16 x 16 version (the template's ``test=``
   parameters) are then timed here by one method, interleaved: device events around batches
   of back-to-back steps, the median of the batches. Each tuner's own figure is shown too, but
   they time differently (Kernel Tuner: the mean of 7 separately synchronised launches).
   Every configuration timed here is first checked against a numpy step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from autotune import accel, tune
from autotune.tune.store import ResultStore
from operations import diffusion
from operations.diffusion import DiffusionTemplate

from timing import queue_time

DT = 0.225
FUNCTION = "operations.diffusion.DiffusionTemplate.autotune"
#: Kernel Tuner's names for our tunable parameters (the macros the template reads).
KT_NAMES = {"block_x": "block_size_x", "block_y": "block_size_y", "tile_x": "tile_size_x",
            "tile_y": "tile_size_y", "local": "use_local"}


def tune_ours(context: accel.Context, n: int) -> dict[str, Any]:
    """Tune into a fresh database; the wall time of the whole call and what it tried."""
    os.environ["AUTOTUNE_DB"] = str(Path(tempfile.mkdtemp(prefix="diffusion-bench-")) / "t.db")
    tune.clear_memo()
    start = time.perf_counter()
    best = DiffusionTemplate.autotune(context, n, n)
    wall = time.perf_counter() - start
    trials = ResultStore.open().trials(function=FUNCTION)
    ok = [t for t in trials if t.status == "ok"]
    best_seconds = min(t.median_seconds for t in ok)
    return {"best": best, "wall_seconds": wall, "configurations": len(trials),
            "failed": len(trials) - len(ok), "best_reported_ms": best_seconds * 1e3}


def kernel_tuner_space(context: accel.Context) -> tuple[dict[str, list[Any]], Any]:
    """Our space in Kernel Tuner's names, and the device-limit restriction we apply too."""
    space = DiffusionTemplate.autotune_space(context, 4096, 4096).parameters
    tune_params = {KT_NAMES[k]: [int(v) for v in values] for k, values in space.items()}
    device = context.device

    def fits(p: dict[str, Any]) -> bool:
        ours = {k: p[kt] for k, kt in KT_NAMES.items()}
        ours["local"] = bool(ours["local"])
        return diffusion.device_limit_exceeded(device, ours) is None

    return tune_params, fits


def tune_kernel_tuner(context: accel.Context, selector: str, n: int, field: np.ndarray,
                      lang: str | None, verify: bool) -> dict[str, Any]:
    """Kernel Tuner's brute force over the same source and space; wall time of the whole call."""
    import kernel_tuner

    # Our device selector, cuda:N or opencl:P:D, in Kernel Tuner's terms.
    indices = [int(i) for i in selector.split(":")[1:]]
    device, platform = (indices[0], 0) if context.backend == "cuda" else (indices[1], indices[0])
    if lang is None:
        lang = "CUDA" if context.backend == "cuda" else "OpenCL"
    kws = diffusion.render_kws(n, n, None)
    source = accel.render(diffusion.TEMPLATE, context.backend, kws).text
    tune_params, fits = kernel_tuner_space(context)
    args = [np.zeros_like(field), field, np.float32(DT)]
    answer = [diffusion.reference_step(field, DT), None, None] if verify else None
    start = time.perf_counter()
    results, env = kernel_tuner.tune_kernel(
        "diffuse", source, (n, n), args, tune_params,
        grid_div_x=["block_size_x", "tile_size_x"], grid_div_y=["block_size_y", "tile_size_y"],
        restrictions=fits, answer=answer, atol=1e-5, lang=lang, device=device,
        platform=platform, strategy="brute_force", quiet=True)
    wall = time.perf_counter() - start
    timed = [r for r in results if isinstance(r.get("time"), (float, int))]
    if not timed:
        raise RuntimeError(f"Kernel Tuner timed no configuration; first result: {results[:1]}")
    best = min(timed, key=lambda r: r["time"])
    params = {k: int(best[kt]) for k, kt in KT_NAMES.items()}
    params["local"] = bool(params["local"])
    return {"best": params, "wall_seconds": wall, "configurations": len(results),
            "failed": len(results) - len(timed), "best_reported_ms": float(best["time"]),
            "version": _kernel_tuner_version(), "lang": lang,
            "device_name": env.get("device_name") if isinstance(env, dict) else None}


def _kernel_tuner_version() -> str:
    try:
        from importlib.metadata import version

        return version("kernel_tuner")
    except Exception:  # not installed as a distribution: report what the module says
        import kernel_tuner

        return str(getattr(kernel_tuner, "__version__", "unknown"))


def retime(context: accel.Context, n: int, field: np.ndarray,
           configs: dict[str, dict[str, Any]], rounds: int = 3) -> dict[str, float]:
    """Check each configuration once, then time them interleaved; best median per label (s)."""
    queue = context.create_tuning_command_queue()
    src = context.to_device(queue, field)
    dst = context.allocate(field.shape, np.float32)
    expected = diffusion.reference_step(field, DT)
    steps = {}
    for label, params in configs.items():
        step = DiffusionTemplate(context, n, n, DT, params).instantiate(queue)
        step(src, dst)
        err = float(np.max(np.abs(dst.get(queue) - expected)))
        if err > diffusion.CHECK_TOLERANCE:
            raise AssertionError(f"{label} {params}: max error {err} against numpy")
        steps[label] = step
    best = {label: float("inf") for label in configs}
    for _ in range(rounds):
        for label, step in steps.items():
            best[label] = min(best[label], queue_time(queue, lambda: step(src, dst)))
    return best


def describe(params: dict[str, Any]) -> str:
    """``32x4, tile 2x2, local``: a configuration in a few words."""
    return (f"{params['block_x']}x{params['block_y']}, tile {params['tile_x']}x{params['tile_y']}"
            f", {'local' if params['local'] else 'global'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="device selector (AUTOTUNE_DEVICE form)")
    parser.add_argument("--size", type=int, default=4096, help="field of size x size points")
    parser.add_argument("--json", default=None, help="write the results to this file")
    parser.add_argument("--kt-lang", default=None,
                        help="Kernel Tuner's lang; default CUDA (its default CUDA backend: "
                             "cuda-python NVRTC, else CuPy, else PyCUDA) or OpenCL")
    parser.add_argument("--kt-verify", action="store_true",
                        help="let Kernel Tuner check every configuration's output too (slower)")
    parser.add_argument("--no-kernel-tuner", action="store_true")
    args = parser.parse_args()

    spec = accel.select_devices(args.device)[0]
    context = spec.create_context()
    n = args.size
    field = np.random.default_rng(7).random((n, n), dtype=np.float32)
    info: dict[str, Any] = {
        "device": context.device.describe(), "date": time.strftime("%Y-%m-%d"),
        "command": "python " + " ".join(["benchmarks/" + Path(sys.argv[0]).name, *sys.argv[1:]]),
        "size": n, "space": DiffusionTemplate.autotune_space(context, n, n).describe(),
    }
    print(f"device: {info['device']}\ndate: {info['date']}\ncommand: {info['command']}",
          flush=True)

    ours = tune_ours(context, n)
    info["autotune"] = ours
    print(f"autotune: {ours['configurations']} configurations in {ours['wall_seconds']:.2f} s, "
          f"best {describe(ours['best'])}", flush=True)

    kt: dict[str, Any] | None = None
    if args.no_kernel_tuner:
        info["kernel_tuner_skipped"] = "--no-kernel-tuner"
    else:
        try:
            kt = tune_kernel_tuner(context, spec.selector, n, field, args.kt_lang,
                                   args.kt_verify)
            info["kernel_tuner"] = kt
            print(f"Kernel Tuner {kt['version']} ({kt['lang']}): {kt['configurations']} "
                  f"configurations in {kt['wall_seconds']:.2f} s, best {describe(kt['best'])}",
                  flush=True)
        except ImportError as exc:
            info["kernel_tuner_skipped"] = f"kernel_tuner is not importable: {exc}"
        except Exception as exc:  # report it; our figures still stand
            info["kernel_tuner_skipped"] = f"Kernel Tuner failed: {type(exc).__name__}: {exc}"
    if "kernel_tuner_skipped" in info:
        print(f"Kernel Tuner skipped: {info['kernel_tuner_skipped']}", flush=True)

    # When both tuners pick the same configuration it is timed twice: the difference between
    # the two figures is then the run-to-run spread.
    configs = {"autotune best": ours["best"], "plain 16x16 (test=)": diffusion.TEST_PARAMETERS}
    if kt is not None:
        configs["Kernel Tuner best"] = kt["best"]
        info["same_best_configuration"] = kt["best"] == ours["best"]
    times = retime(context, n, field, configs)
    info["retimed_ms"] = {label: t * 1e3 for label, t in times.items()}
    info["tuned_speedup_over_plain"] = times["plain 16x16 (test=)"] / times["autotune best"]
    if kt is not None:
        info["best_time_ratio_ours_over_kernel_tuner"] = (
            times["autotune best"] / times["Kernel Tuner best"])
        info["wall_time_ratio_ours_over_kernel_tuner"] = ours["wall_seconds"] / kt["wall_seconds"]
    print_table(info, ours, kt, times, n)
    if args.json:
        Path(args.json).write_text(json.dumps(info, indent=1, default=str))
    tune.clear_memo()


def print_table(info: dict[str, Any], ours: dict[str, Any], kt: dict[str, Any] | None,
                times: dict[str, float], n: int) -> None:
    gbps = {label: 2 * n * n * 4 / t / 1e9 for label, t in times.items()}
    print(f"\n**{info['device']}**, {info['date']}, `{info['command']}`, "
          f"{n} x {n} float32\n")
    print("| | autotune | Kernel Tuner |")
    print("| --- | --- | --- |")
    k = kt or {}

    def row(name: str, a: str, b: str) -> None:
        print(f"| {name} | {a} | {b} |")

    row("configurations tried (failed)", f"{ours['configurations']} ({ours['failed']})",
        f"{k['configurations']} ({k['failed']})" if kt else "-")
    row("wall time of the tuning call", f"{ours['wall_seconds']:.2f} s",
        f"{k['wall_seconds']:.2f} s" if kt else "-")
    row("best configuration", describe(ours["best"]), describe(k["best"]) if kt else "-")
    row("best time as the tuner reports it", f"{ours['best_reported_ms']:.4f} ms",
        f"{k['best_reported_ms']:.4f} ms" if kt else "-")
    ours_t = times["autotune best"]
    kt_t = times.get("Kernel Tuner best")
    row("best configuration timed here",
        f"{ours_t * 1e3:.4f} ms ({gbps['autotune best']:.0f} GB/s)",
        f"{kt_t * 1e3:.4f} ms ({gbps['Kernel Tuner best']:.0f} GB/s)" if kt_t else "-")
    plain = times["plain 16x16 (test=)"]
    print(f"\nplain 16x16 (test=) timed here: {plain * 1e3:.4f} ms "
          f"({gbps['plain 16x16 (test=)']:.0f} GB/s); tuned speed-up {plain / ours_t:.2f}x")
    if kt_t:
        same = " (the same configuration)" if info["same_best_configuration"] else ""
        print(f"ours / Kernel Tuner's best, timed here: "
              f"{info['best_time_ratio_ours_over_kernel_tuner']:.3f}{same} (target <= 1.02); "
              f"tuning wall time ratio {info['wall_time_ratio_ours_over_kernel_tuner']:.2f} "
              "(target <= 0.5)")


if __name__ == "__main__":
    main()
