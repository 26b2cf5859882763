"""In-process CUDA compilation with NVRTC (through cuda-python's bindings).

NVRTC builds a small kernel in tens of milliseconds where a subprocess ``nvcc`` takes about a
second; compilation dominates tuning time, so this is the default CUDA compiler.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from . import build_locks, kernel_cache

try:  # cuda-python >= 12.6 moved the bindings here
    from cuda.bindings import nvrtc as _nvrtc
except ImportError:  # pragma: no cover - older cuda-python, or none
    try:
        from cuda import nvrtc as _nvrtc  # type: ignore[no-redef]
    except ImportError:
        _nvrtc = None

_arch_lock = threading.Lock()
_supported: list[int] | None = None


class NvrtcError(RuntimeError):
    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class NvrtcOutput:
    binary: bytes  #: CUBIN for the device's own architecture, or PTX when NVRTC is older
    kind: str  #: "cubin" or "ptx"
    log: str
    arch: int


def available() -> bool:
    """True if the NVRTC library can actually be loaded."""
    if _nvrtc is None:
        return False
    try:
        err, _major, _minor = _nvrtc.nvrtcVersion()
    except Exception:  # the shared library is missing
        return False
    return int(err) == 0


def version() -> tuple[int, int] | None:
    if not available():
        return None
    _, major, minor = _nvrtc.nvrtcVersion()
    return (major, minor)


def _ok(result: tuple, what: str) -> list:
    """Raise on an NVRTC error code; return the call's other results."""
    err, *rest = result
    if int(err) != 0:
        _, name = _nvrtc.nvrtcGetErrorString(err)
        raise NvrtcError(f"{what} failed: {name.decode() if isinstance(name, bytes) else name}")
    return rest


def _supported_archs() -> list[int]:
    global _supported
    with _arch_lock:
        if _supported is None:
            _supported = sorted(int(a) for a in _ok(_nvrtc.nvrtcGetSupportedArchs(), "archs")[0])
        return _supported


def compile_source(text: str, name: str, compute_capability: tuple[int, int],
                   options: tuple[str, ...] = ()) -> NvrtcOutput:
    """Compile CUDA C++ ``text`` for the given device.

    Emits CUBIN for the device's own architecture when NVRTC knows it, else PTX for the newest
    architecture it knows (which the driver then JIT-compiles). Raises :class:`NvrtcError`
    with the compiler log on failure. A build made before, by any process, is read from the
    disk cache (:mod:`.kernel_cache`) instead; failures are not kept.
    """
    want = compute_capability[0] * 10 + compute_capability[1]
    archs = [a for a in _supported_archs() if a <= want]
    if not archs:
        raise NvrtcError(f"NVRTC supports no architecture at or below sm_{want}")
    arch = archs[-1]
    kind = "cubin" if arch == want else "ptx"
    target = f"--gpu-architecture={'sm' if kind == 'cubin' else 'compute'}_{arch}"
    opts = [target, "--std=c++17", *options]
    folder = kernel_cache.directory() if kernel_cache.cacheable(text, tuple(options)) else None
    if folder is None:
        return _compile(text, name, opts, kind, arch)
    major_minor = ".".join(str(v) for v in version() or ())
    entry_name = build_locks.key("nvrtc", major_minor, kind, str(arch), *opts, name, text)
    cached = _cached(entry_name, folder, kind, arch)
    if cached is not None:
        return cached
    # one process of the host compiles it; the others (MPI ranks, warm's helpers) wait and
    # then read its entry
    with build_locks.shared_build(entry_name):
        cached = _cached(entry_name, folder, kind, arch)
        if cached is not None:
            return cached
        out = _compile(text, name, opts, kind, arch)
        kernel_cache.save(entry_name, kernel_cache.Entry(out.binary, kind, arch, out.log), folder)
    return out


def _cached(entry_name: str, folder: Path, kind: str, arch: int) -> NvrtcOutput | None:
    """The kernel cache's build named ``entry_name``, if it has a valid one for ``arch``."""
    entry = kernel_cache.load(entry_name, folder)
    if entry is None or entry.kind != kind or entry.arch != arch:
        return None
    return NvrtcOutput(binary=entry.binary, kind=kind, log=entry.log, arch=arch)


def _compile(text: str, name: str, opts: list[str], kind: str, arch: int) -> NvrtcOutput:
    """NVRTC's build of ``text`` with ``opts`` (its target among them)."""
    (prog,) = _ok(_nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], []), "create")
    try:
        result = _nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        (size,) = _ok(_nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        # NVRTC writes into these buffers: they must be fresh and mutable (a one-byte bytes
        # object is a CPython singleton shared by the whole interpreter).
        buf = bytearray(size)
        _nvrtc.nvrtcGetProgramLog(prog, buf)
        log = bytes(buf).rstrip(b"\0 ").decode(errors="replace").strip()
        if int(result[0]) != 0:
            raise NvrtcError("NVRTC compilation failed", log)
        if kind == "cubin":
            (size,) = _ok(_nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
            out = bytearray(size)
            _ok(_nvrtc.nvrtcGetCUBIN(prog, out), "cubin")
        else:
            (size,) = _ok(_nvrtc.nvrtcGetPTXSize(prog), "ptx size")
            out = bytearray(size)
            _ok(_nvrtc.nvrtcGetPTX(prog, out), "ptx")
        return NvrtcOutput(binary=bytes(out), kind=kind, log=log, arch=arch)
    finally:
        _nvrtc.nvrtcDestroyProgram(prog)
