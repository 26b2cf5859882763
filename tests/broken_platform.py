"""A second OpenCL platform whose builds all fail, beside the working one: the machine of
issue #38/#47 (the pyopencl wheel's PoCL cannot compile on AMD Zen 5; the distribution's can),
made on any machine with the pyopencl wheel.

The broken platform is a copy of the wheel's PoCL library (its SONAME renamed, so that the
loader does not take it for the wheel's own, already loaded) in a folder without PoCL's
``share/pocl`` (its headers and kernel library): it lists its CPU device like the real one but
every build fails (``pocl_types.h`` not found). An ICD vendor file in ``OCL_ICD_VENDORS``
names it; the wheel's ICD loader lists those vendors first, so the broken platform is
``opencl:0`` and the working one ``opencl:1``. Nothing but what pip installs is needed.

Run as a script, it makes one in the given folder and prints the environment to set:
``eval $(python tests/broken_platform.py /tmp/broken)`` before running the suite (the copy
takes about 110 MB).
"""

from __future__ import annotations

import sys
from pathlib import Path

#: where the pyopencl wheel keeps its PoCL and the ICD loader's own vendor file
_LIBS = ".libs"


def wheel_pocl() -> tuple[Path, Path] | str:
    """(the wheel's libpocl, the folder of its own dependencies) or why there is none."""
    try:
        import pyopencl
    except ImportError:
        return "pyopencl is not installed (pip install -e '.[opencl]')"
    libs = Path(pyopencl.__file__).parent / _LIBS
    found = sorted(libs.glob("libpocl-*.so"))
    if not found:
        return f"no libpocl-*.so in {libs}: this pyopencl is not the PyPI wheel with PoCL"
    deps = libs.parent.parent / "pocl_binary_distribution" / _LIBS
    if not deps.is_dir():
        return f"no {deps}: the pocl-binary-distribution wheel is missing"
    return found[0], deps


def _copy(library: Path, to: Path, letter: str) -> None:
    """``library`` copied to ``to``, its SONAME made unique with ``letter``."""
    if to.exists():
        return
    data = library.read_bytes()
    soname = library.name.encode() + b"\0"
    renamed = b"libpocl-" + letter.encode() * (len(library.name) - len("libpocl-.so")) + b".so\0"
    if data.count(soname) != 1:
        raise RuntimeError(f"{library} does not name itself once; cannot rename its copy")
    to.parent.mkdir(parents=True, exist_ok=True)
    to.write_bytes(data.replace(soname, renamed))


def make(folder: Path, working: bool = False) -> dict[str, str]:
    """Make the broken platform in ``folder``; the environment that adds it to a process's
    OpenCL platforms (as ``opencl:0``). With ``working``, a second copy that works (it finds
    PoCL's ``share/pocl`` where the wheel's does) comes next (``opencl:1``; the wheel's own
    PoCL is then ``opencl:2``): two usable CPU platforms beside the broken one. Raises
    RuntimeError (with the reason) where the pyopencl wheel's PoCL is not installed."""
    found = wheel_pocl()
    if isinstance(found, str):
        raise RuntimeError(found)
    library, deps = found
    broken = folder / "broken" / "lib" / "libpocl-broken.so"
    _copy(library, broken, "x")
    for dep in deps.iterdir():  # its other libraries (hwloc), not share/
        if dep.is_file() and not (broken.parent / dep.name).exists():
            (broken.parent / dep.name).symlink_to(dep)
    vendors = folder / ("vendors-working" if working else "vendors")
    vendors.mkdir(exist_ok=True)
    (vendors / "0-broken.icd").write_text(f"{broken}\n")
    if working:
        # the wheel's layout: <site>/pyopencl/.libs/libpocl, <site>/pocl_binary_distribution/.libs
        copy = folder / "site" / "pyopencl" / _LIBS / "libpocl-working.so"
        _copy(library, copy, "y")
        link = folder / "site" / "pocl_binary_distribution" / _LIBS
        if not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(deps)
        (vendors / "1-working.icd").write_text(f"{copy}\n")
    return {"OCL_ICD_VENDORS": str(vendors)}


if __name__ == "__main__":
    where = Path(sys.argv[1] if len(sys.argv) > 1 else "broken-opencl")
    where.mkdir(parents=True, exist_ok=True)
    for name, value in make(where.resolve()).items():
        print(f"export {name}={value}")
