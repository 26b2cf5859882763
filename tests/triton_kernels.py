"""Triton kernels of the Triton integration's tests (``tests/test_triton.py``), written to files
so that Triton can read their source; ``write_module`` makes edited copies."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ADD = '''
import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * {factor}


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    y = tl.load(y_ptr + offsets, mask=inside)
    tl.store(out_ptr + offsets, twice(x) + y, mask=inside)


@triton.jit
def accumulate_kernel(x_ptr, total_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    tl.atomic_add(total_ptr + offsets, tl.load(x_ptr + offsets, mask=inside), mask=inside)
'''


def write_module(folder: Path, name: str, factor: str = "2", padding: int = 0) -> ModuleType:
    """Write the kernels to ``folder/name.py`` (``twice`` multiplies by ``factor``; ``padding``
    blank lines first, which moves the kernels without changing them) and import it."""
    path = folder / f"{name}.py"
    path.write_text("\n" * padding + ADD.format(factor=factor))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
