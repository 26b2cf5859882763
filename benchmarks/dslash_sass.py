"""Instruction mix of the tuned Wilson dslash kernels (issue 45), read from the compiled code.

Renders the single-parity kernel (D_eo, no xpay) of each ``--variants`` entry with the
parameters ``--db`` (default tune.db.example) holds for this device and ``--dims``, compiles it
the way the CUDA backend does (NVRTC, a cubin for this GPU), disassembles it with
``cuobjdump -sass`` and counts the instructions by opcode. ``project16`` (dslash.mako: the
16-bit neighbours' spin projection before conversion) can be set per variant (``half,18,bits``).

The counts are static: for kernels with one site a work-item and no split directions
(``sites`` 1, ``dir_split`` 1) the straight-line body runs once per site, so the total is the
instructions a site costs, and ``issue-bound`` is the time the device needs just to issue them
(sites x instructions / (SMs x 128 per clock x ``--clock-ghz``)). With ``dir_split`` > 1 each
work-item runs one part, and the total counts every part once.

Usage (GPU machine): python benchmarks/dslash_sass.py [--variants half,8 half,12,cvt ...]
                     [--dims 32,32,32,32] [--db FILE] [--clock-ghz 1.98] [--json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from autotune import accel
from operations.lqcd import DslashTemplate
from operations.lqcd.dslash import TEMPLATE

from dslash_unpacking import ROOT, stored_parameters

OPCODE = re.compile(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")
DEFAULT_VARIANTS = ["half,8", "half,8,cvt", "half,12", "half,12,cvt", "half,18", "half,18,bits",
                    "single,8", "single,12", "single,18", "double,8", "double,12", "double,18"]


def opcodes(binary: bytes, cuobjdump: str) -> collections.Counter:
    """Instructions of a cubin by opcode (the part before the first dot)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as handle:
        handle.write(binary)
        handle.flush()
        sass = subprocess.run([cuobjdump, "-sass", handle.name], capture_output=True, text=True,
                              check=True).stdout
    return collections.Counter(m.group(1) for line in sass.splitlines() if (m := OPCODE.match(line)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", nargs="+", default=DEFAULT_VARIANTS,
                        help="precision,reconstruct[,project16]")
    parser.add_argument("--dims", default="32,32,32,32")
    parser.add_argument("--db", default=str(ROOT / "tune.db.example"))
    parser.add_argument("--clock-ghz", type=float, default=1.98)
    parser.add_argument("--json")
    args = parser.parse_args()
    cuobjdump = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
    context = accel.create_some_context("cuda")
    dims = tuple(int(v) for v in args.dims.split(","))
    sites = math.prod(dims) // 2
    units = context.device.multiprocessors
    result = {}
    print("| variant | tuned parameters | instructions | issue-bound us | top opcodes |\n|---|---|---|---|---|")
    for text in args.variants:
        precision, reconstruct, *rest = text.split(",")
        project16 = rest[0] if rest else False
        params = stored_parameters(args.db, context.device.name, dims, int(reconstruct), precision)
        if params is None:
            print(f"| {text} | not in {args.db} | | | |")
            continue
        template = DslashTemplate(context, dims, precision, int(reconstruct), -1, params)
        variant = (0, False, False, "hhh") if precision == "half" else (0, False, False)
        program = context.build(TEMPLATE, {**template.render_arguments({**params, "project16": project16}),
                                           "variants": [variant]})
        counts = opcodes(program.binary, cuobjdump)
        total = sum(counts.values())
        bound = sites * total / (units * 128 * args.clock_ghz * 1e9)
        shape = {k: params[k] for k in ("wgs", "min_blocks", "dir_split", "sites")}
        top = ", ".join(f"{k} {v}" for k, v in counts.most_common(8))
        print(f"| {text} | {shape} | {total} | {bound * 1e6:.1f} | {top} |", flush=True)
        result[text] = {"params": params, "total": total, "issue_bound_us": bound * 1e6,
                        "ops": dict(counts.most_common())}
    if args.json:
        Path(args.json).write_text(json.dumps({"device": context.device.describe(), "dims": dims,
                                               "variants": result}, indent=1))


if __name__ == "__main__":
    main()
