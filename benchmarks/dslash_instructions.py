"""Static SASS instruction counts of the Wilson dslash kernels, per precision and reconstruct.

Usage (any machine with cuda-python's NVRTC; no GPU needed):
    python benchmarks/dslash_instructions.py [--arch 90] [--nvdisasm PATH] [--params '{"fast_math": true}'] [--json FILE]
        [--tuned "NVIDIA H200" [--db FILE] [--sms 132] [--clock-ghz 1.98]]

Renders ``dslash.mako`` for CUDA as the template would (D_eo, no dagger, no xpay; half
precision with 16-bit in and out), compiles it with NVRTC for ``sm_<arch>`` and counts the
instructions ``nvdisasm`` lists, by opcode. The kernel is straight-line code, so the static
count is close to the instructions a site executes (Nsight Compute measured 1830 executed
against 1856 static for single precision with 12 parameters). A proxy for issue-bound kernels
(the 8-parameter ones), not a speed: time them with ``wilson_dslash.py`` on the GPU.
nvdisasm comes with the CUDA toolkit, or as the ``nvidia-cuda-nvdisasm`` wheel.

``--tuned DEVICE`` takes each kernel's parameters from that device's rows in ``--db`` (default
tune.db.example; ``--params`` then goes on top, e.g. ``{"project16": "cvt"}``), and prints the
issue-bound time of kernels with one site a work-item and no split directions: sites x
instructions / (``--sms`` x 128 a clock x ``--clock-ghz``), what the GPU needs just to issue them.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotune.accel import nvrtc  # noqa: E402
from dslash_unpacking import stored_parameters  # noqa: E402
from autotune.accel.render import render  # noqa: E402
from autotune import tune  # noqa: E402
from operations.lqcd.dslash import (RECONSTRUCTS, TEMPLATE, DslashTemplate,  # noqa: E402
                                    kernel_arguments, render_tuned)

_INSTRUCTION = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)")


def find_nvdisasm(given: str | None) -> str:
    candidates = [given, shutil.which("nvdisasm"),
                  os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvdisasm")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise SystemExit("nvdisasm not found: pass --nvdisasm PATH (CUDA toolkit's bin, or the "
                     "nvidia-cuda-nvdisasm wheel's nvidia/cu13/bin)")


def opcodes(cubin: bytes, nvdisasm: str) -> collections.Counter:
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        listing = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True,
                                 check=True).stdout
    counts: collections.Counter = collections.Counter()
    for line in listing.splitlines():
        m = _INSTRUCTION.match(line)
        if m:
            counts[m.group(1)] += 1
    return counts


def count(precision: str, reconstruct: int, params: dict, arch: int, nvdisasm: str,
          dims: tuple[int, int, int, int], template: Path = TEMPLATE) -> collections.Counter:
    variant = (0, False, False, "hhh") if precision == "half" else (0, False, False)
    tuned = {**tune.tuner_of(DslashTemplate).test, "wgs": 128, **params}
    arguments = {**kernel_arguments(dims, precision, reconstruct),
                 **render_tuned(precision, reconstruct, tuned), "variants": [variant]}
    if "fast_math" in params and (precision == "double" or reconstruct != 8):
        arguments["fast_math"] = False  # a parameter of single precision 8-parameter forms
    source = render(template, "cuda", arguments, header_kws={"backend": "cuda"})
    out = nvrtc.compile_source(source.text, "dslash.cu", (arch // 10, arch % 10))
    if out.kind != "cubin":
        raise SystemExit(f"this NVRTC cannot emit sm_{arch} code")
    return opcodes(out.binary, nvdisasm)


def issue_bound_us(total: int, params: dict, dims: tuple[int, ...], sms: int, ghz: float
                   ) -> float | None:
    """Microseconds to issue ``total`` instructions a site for every site of one parity (None
    where a site is not one work-item's straight-line run: split directions or several sites)."""
    if params.get("dir_split", 1) != 1 or params.get("sites", 1) != 1:
        return None
    sites = dims[0] * dims[1] * dims[2] * dims[3] // 2
    return sites * total / (sms * 128 * ghz * 1e9) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--nvdisasm")
    parser.add_argument("--params", default="{}", help="template parameters as JSON")
    parser.add_argument("--precisions", nargs="+", default=["half", "single", "double"])
    parser.add_argument("--dims", type=int, nargs=4, default=[32, 32, 32, 32])
    parser.add_argument("--template", type=Path, default=TEMPLATE,
                        help="another dslash.mako to count (an earlier commit's, checked out "
                             "with its includes beside it), rendered with today's arguments")
    parser.add_argument("--tuned", metavar="DEVICE",
                        help="each kernel's parameters from this device's rows of --db")
    parser.add_argument("--db", default=str(Path(__file__).resolve().parents[1] / "tune.db.example"))
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--clock-ghz", type=float, default=1.98)
    parser.add_argument("--json")
    args = parser.parse_args()
    if not nvrtc.available():
        raise SystemExit("NVRTC is not available (pip install cuda-python)")
    nvdisasm = find_nvdisasm(args.nvdisasm)
    params = json.loads(args.params)
    rows = []
    print(f"{args.template}: sm_{args.arch}, NVRTC {'.'.join(map(str, nvrtc.version()))}, "
          f"parameters {params}")
    print(f"{'precision':9s} {'recon':>5s} {'total':>6s}  most frequent")
    for precision in args.precisions:
        for reconstruct in RECONSTRUCTS:
            chosen = params
            if args.tuned:
                stored = stored_parameters(args.db, args.tuned, tuple(args.dims), reconstruct,
                                           precision)
                if stored is None:
                    print(f"{precision:9s} {reconstruct:5d}  no row of {args.tuned} in {args.db}")
                    continue
                chosen = {**stored, **params}
            ops = count(precision, reconstruct, chosen, args.arch, nvdisasm, tuple(args.dims),
                        args.template)
            total = sum(ops.values())
            bound = issue_bound_us(total, chosen, tuple(args.dims), args.sms, args.clock_ghz) \
                if args.tuned else None
            rows.append({"precision": precision, "reconstruct": reconstruct, "total": total,
                         "params": chosen, "issue_bound_us": bound, "opcodes": dict(ops)})
            top = ", ".join(f"{k} {v}" for k, v in ops.most_common(8))
            shown = f" (issue-bound {bound:.1f} us)" if bound is not None else ""
            print(f"{precision:9s} {reconstruct:5d} {total:6d}{shown}  {top}")
    if args.json:
        Path(args.json).write_text(json.dumps({"template": str(args.template),
                                               "arch": args.arch, "params": params,
                                               "nvrtc": nvrtc.version(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
