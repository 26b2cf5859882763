"""Argument parsing and error reporting for ``python -m autotune``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any
from collections.abc import Sequence

from .. import accel
from ..tune.registry import RegistryError
from ..tune.store.location import StorePathError, path_problem
from ..tune.text import printable
from ..tune import AutotuneError, ConfigurationError, StoreError
from ..tune.store import NotAnExportError, database_url, sqlite_file
from ..tune.strategies import STRATEGIES

EPILOG_DB = (
    "The database is AUTOTUNE_DB (a file path or an SQLAlchemy URL), or --db, default "
    "<user cache dir>/autotune/tuning.db. Example: AUTOTUNE_DB=tune.db python -m autotune {cmd}"
)

WARM_STATUSES = (
    "\n\nExit status: 0 every key tuned and stored, or stored already (keys tuned into a "
    "read-only database are used, not stored, and count as done); 1 some key failed to tune; 2 "
    "bad input, or a database path that cannot be used; 3 some tuned result could not be "
    "written (full disk, database outage, lock held too long: named on standard error; 3 wins "
    "over 1); 130 interrupted."
)


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", metavar="PATH_OR_URL",
                        help="tuning database (overrides AUTOTUNE_DB), e.g. ./tune.db or "
                             "postgresql+psycopg://host/tuning")
    parser.add_argument("-v", "--verbose", action="store_true", help="log tuning details")


def _sub(subparsers, name: str, help: str, example: str) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        name, help=help, description=help,
        epilog=f"Example: {example}\n\n" + EPILOG_DB.format(cmd=name),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_db(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m autotune",
        description="Pre-tune GPU kernels, inspect and share tuning results.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    _add_warm(sub)
    _sub(sub, "devices", "list the devices found and the identity used in tuning keys",
         "python -m autotune devices")
    _add_results(sub)
    _add_pictures(sub)
    return parser


def _add_warm(sub: Any) -> None:
    """The ``warm`` command's arguments."""
    warm = _sub(sub, "warm", "pre-tune the registered templates' warm configurations",
                "python -m autotune warm scale --device cuda:0")
    warm.epilog += WARM_STATUSES
    warm.add_argument("operations", nargs="*", metavar="OPERATION",
                      help="registered template names (default: all)")
    warm.add_argument("--device", help="device selector as for AUTOTUNE_DEVICE (cuda, cuda:1, "
                                        "opencl:0:0, cpu, gpu); default AUTOTUNE_DEVICE or best")
    warm.add_argument("--all-devices", action="store_true", help="warm every device found, or every one that --device "
                           "selects (--all-devices --device cuda: all CUDA GPUs)")
    warm.add_argument("--force", action="store_true", help="re-tune keys already stored")
    warm.add_argument("--dry-run", action="store_true", help="list what would be tuned")
    warm.add_argument("--jobs", type=int, default=1, metavar="N",
                      help="tune on N devices at once (with --all-devices)")
    warm.add_argument("--template", action="append", default=[], metavar="MODULE:CLASS",
                      help="warm a template that is not registered (repeatable); with no "
                           "operation named, only these are warmed")
    warm.add_argument("--recorded", metavar="FILE",
                      help="tune the keys an AUTOTUNE_RECORD file lists for this device, each "
                           "once (its functions resolved among the registered templates and "
                           "--template ones, never imported)")
    warm.add_argument("--quiet", action="store_true", help="no progress output")
    warm.add_argument("--strategy", action="append", default=[], metavar="[TEMPLATE=]NAME",
                      help="search strategy for every key, or for one template's keys "
                           f"(repeatable): {', '.join(sorted(STRATEGIES))}, or auto (the "
                           "plan's: brute_force for small spaces, else local within a budget, "
                           "warm-started; --dry-run shows each key's)")
    warm.add_argument("--max-evals", action="append", default=[], metavar="[TEMPLATE=]N",
                      help="measure at most N distinct configurations per key, for every "
                           "template or for one (repeatable)")
    warm.add_argument("--max-seconds", type=float, metavar="S",
                      help="spend at most S seconds searching per key, compiling included")
    warm.add_argument("--max-minutes", type=float, metavar="M",
                      help="fit the whole run into about M minutes: each key gets a share in "
                           "proportion to its expected cost, never below a floor")
    warm.add_argument("--warm-from", action="append", default=[], metavar="DB",
                      help="another database whose trials warm-start the searches and set the "
                           "expected costs (repeatable; read, never written); default "
                           "tune.db.example where it is found, none for no other")
    warm.add_argument("--seed", type=int, help="seed of the strategies' random choices")
    warm.add_argument("--batches", type=int, metavar="N",
                      help="timed batches per configuration (default 5; their median is its "
                           "time): fewer for a quick survey of a large space")
    warm.add_argument("--lookahead", action=argparse.BooleanOptionalAction, default=None,
                      help="start each next key (its data, allocations and compiles) while the "
                           "key before it is tuned, its device work waiting until that key is "
                           "done (default: on for GPUs, off for CPU devices)")
    warm.add_argument("--prebuild", action=argparse.BooleanOptionalAction, default=None,
                      help="low-priority processes build the keys' first candidates ahead "
                           "into the compiler's disk cache (PoCL's; NVRTC's kernel cache on "
                           "CUDA), stopped while a batch is timed (default: on for OpenCL CPU "
                           "devices and CUDA devices with 16 keys or more, off elsewhere)")
    warm.add_argument("--resume", action="store_true",
                      help="go on from the trials a search interrupted earlier stored (this "
                           "device, same sources, after the key's stored result), measuring "
                           "only what it had not")


def _add_results(sub: Any) -> None:
    """The commands that read and write stored results: show, export, import, clear."""
    show = _sub(sub, "show", "show stored results as a table",
                "python -m autotune show --function %Reduce% --device H100")
    show.add_argument("--function", help="part of a qualified function name, or a pattern with %% wildcards")
    show.add_argument("--device", help="part of a device name (case-insensitive)")

    export = _sub(sub, "export", "write stored results as CSV or JSON",
                  "python -m autotune export --out results.json")
    export.add_argument("--format", choices=("csv", "json"),
                        help="csv or json (default: from the --out extension, else csv)")
    export.add_argument("--out", metavar="FILE", help="output file (default: standard output)")
    export.add_argument("--function", help="part of a qualified function name, or a pattern with %% wildcards")
    export.add_argument("--device", help="part of a device name")

    imp = _sub(sub, "import", "merge results from another database or an export: every row is "
                              "checked first, and one bad row refuses the file; keys we lack are "
                              "added and, by default, ours are kept",
               "python -m autotune import tune.db.example")
    imp.add_argument("file", metavar="FILE", help="an autotune SQLite database (only read), .csv or .json")
    policy = imp.add_mutually_exclusive_group()
    policy.add_argument("--on-conflict", choices=("keep", "replace", "better"), default="keep",
                        help="when a key has a result here: keep ours (default; timings from "
                             "another machine are not comparable), replace it, or replace it "
                             "if the imported score is lower")
    policy.add_argument("--replace", dest="on_conflict", action="store_const", const="replace",
                        help="same as --on-conflict replace")

    clear = _sub(sub, "clear", "delete stored results (and their trials)",
                 "python -m autotune clear --device 'EPYC' --yes")
    clear.add_argument("--function", help="part of a qualified function name, or a pattern with %% wildcards")
    clear.add_argument("--device", help="part of a device name")
    clear.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _add_pictures(sub: Any) -> None:
    """The commands that draw stored trials: plot and report."""
    plot = _sub(sub, "plot", "draw each key's trials of one function: the distribution of their "
                             "times, and how the time depends on the parameters (one PNG a key)",
                "python -m autotune plot ScaleTemplate --device epyc --out scale.png")
    plot.add_argument("function", help="part of a qualified function name, or a pattern with %%")
    plot.add_argument("--device", help="part of a device name (case-insensitive)")
    plot.add_argument("--out", required=True, metavar="FILE.png",
                      help="the picture; with several keys FILE-1.png, FILE-2.png, ...")

    report = _sub(sub, "report", "write a static HTML report with pictures: per function its "
                                 "results per device, each key's trials, the parameters each "
                                 "device chose",
                  "python -m autotune report --out report/ --function Reduce")
    report.add_argument("--out", required=True, metavar="DIR", help="folder for index.html and img/")
    report.add_argument("--function", help="part of a qualified function name, or a pattern with %%")


def _devices() -> int:
    specs = accel.all_devices()
    if not specs:
        print("no devices found: pip install 'autotune[opencl]' gives a CPU device (PoCL)")
        return 1
    for spec in specs:
        d = spec.identity
        print(f"{spec.selector}: {d.name}" + ("  (UNUSABLE)" if spec.unusable else ""))
        print(f"    platform {d.platform!r}, driver {d.driver_version!r}")
        cc = f", compute capability {d.compute_capability[0]}.{d.compute_capability[1]}" \
            if d.compute_capability else ""
        print(f"    {d.multiprocessors} compute units{cc}, {d.global_memory / 2**30:.1f} GiB, "
              f"work-group <= {d.max_work_group_size}, local memory {d.local_memory // 1024} KiB")
        if spec.unusable:
            print(f"    unusable: {spec.unusable}")
    if not any(s.usable for s in specs):
        print("autotune devices: error: no usable device (the reasons are above)", file=sys.stderr)
        return 1
    return 0


def _require_existing(url: str) -> None:
    """Reading commands never create a database: a missing SQLite file is an error."""
    path = sqlite_file(url)
    try:
        missing = path is not None and not path.exists()
    except OSError as exc:  # a folder it may not search, a name too long
        raise StorePathError(path_problem(path, exc)) from None
    if missing:
        raise FileNotFoundError(
            f"no tuning database at {path}; run `python -m autotune warm` first, or point "
            "AUTOTUNE_DB/--db at an existing one"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "devices":
            return _devices()
        url = database_url(args.db)
        if args.command == "warm":
            from .warm import run_warm

            return run_warm(args, url)
        if args.command in ("show", "export", "plot", "clear", "report"):
            _require_existing(url)
        from . import results
        from .plot import run_plot
        from .report import run_report

        handlers = {"show": results.run_show, "export": results.run_export,
                    "import": results.run_import, "clear": results.run_clear, "plot": run_plot,
                    "report": run_report}
        return handlers[args.command](args, url)
    except (StoreError, ConfigurationError, RegistryError, accel.DeviceNotFoundError,
            FileNotFoundError, NotAnExportError, AutotuneError, ValueError) as exc:
        print(f"autotune {args.command}: error: {printable(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a path that cannot be used: one line, as for other bad input
        where = exc.filename if exc.filename is not None else "a file"
        print(printable(f"autotune {args.command}: error: cannot use {where}: "
                        f"{exc.strerror or exc}; check the path and its permissions"),
              file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        hint = (" (with --resume, the interrupted key's search also goes on from its measured "
                "configurations)") if args.command == "warm" else ""
        print(f"autotune {args.command}: interrupted; finished keys are stored, rerun to resume"
              + hint, file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
