"""How much of a kernel test's grid a device runs (one rule for every dslash test file).

Each dslash variant (parity, dagger, xpay) and each (precision, link compression) is a kernel
of its own. NVRTC compiles one in a second or two, in the GPU suite's eight workers; PoCL, on
CI's two cores, spends about 0.3 s building a program and 0.6 s generating each kernel's code
at its first launch (docs/performance.md, "The suite on a CPU"). So GPUs run every case, and
CPU devices run a covering subset that each test names: every value of each of the grid's
dimensions at least once (and, where the test says so, every pair of values of any two); a
case skipped there says so and names where it runs."""

from __future__ import annotations

import itertools

import pytest

#: (dagger, parity, xpay), all eight
ALL_VARIANTS = list(itertools.product((False, True), (0, 1), (False, True)))
#: the half of the eight in which any two of the three take each of their four pairs of
#: values once: D and D^dagger each on both parities, each with and without x + a D psi; the
#: parity (which moves a staged block's x neighbours) with and without xpay (written after
#: the split directions' sums are added). Dagger only flips the projectors' signs.
PAIRWISE_VARIANTS = [(False, 0, False), (False, 1, True), (True, 0, True), (True, 1, False)]


def variants(context) -> list[tuple[bool, int, bool]]:
    """The (dagger, parity, xpay) variants a test runs on ``context``'s device."""
    return ALL_VARIANTS if context.device.is_gpu else PAIRWISE_VARIANTS


def on_device(context, every: list, cpu_subset: list) -> list:
    """``every`` on GPUs; on CPU devices the members of ``cpu_subset`` (the covering subset a
    test names), in ``every``'s order."""
    return list(every) if context.device.is_gpu else [c for c in every if c in cpu_subset]


def only_on_gpus(context, case, cpu_cases) -> None:
    """Skip ``case`` on a CPU device unless it is one of ``cpu_cases`` (the grid's covering
    subset); GPUs run every case."""
    if not context.device.is_gpu and case not in cpu_cases:
        pytest.skip(f"case {case} runs on GPUs (pytest --devices=cuda); CPU devices run the "
                    f"covering subset {sorted(cpu_cases, key=str)} (tests/device_breadth.py)")
