"""Host spinors to and from the device layout on the device (operations/lqcd/spinor_layout.py):
every site and component where an independent loop over the lattice puts it, both ways, in
both precisions; WilsonOperator's to_device and from_device through it; bad calls refused."""

from __future__ import annotations

import numpy as np
import pytest

from operations.lqcd import WilsonOperator, weak_field
from operations.lqcd.lattice import Lattice
from operations.lqcd.spinor_layout import SpinorLayoutTemplate

DIMS = (4, 6, 2, 8)  # unequal extents: X, Y, Z, T


def _by_loops(psi: np.ndarray, dims) -> np.ndarray:
    """The (2, 12, V/2) device layout by a loop over the sites: parity (x + y + z + t) % 2,
    and a site's place in its parity the count of its parity's sites before it in
    lexicographic [t, z, y, x] order."""
    x_n, y_n, z_n, t_n = dims
    out = np.zeros((2, 12, x_n * y_n * z_n * t_n // 2), np.complex128)
    seen = [0, 0]
    for t in range(t_n):
        for z in range(z_n):
            for y in range(y_n):
                for x in range(x_n):
                    p = (x + y + z + t) % 2
                    out[p, :, seen[p]] = psi[t, z, y, x].reshape(12)
                    seen[p] += 1
    return out


@pytest.fixture(scope="module")
def host():
    x, y, z, t = DIMS
    rng = np.random.default_rng(3)
    shape = (t, z, y, x, 4, 3)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)  # every value distinct


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 0.0), (np.complex64, 1e-7)])
def test_each_site_goes_where_the_loop_puts_it_and_back(context, command_queue, host, dtype,
                                                        tol):
    if not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    lattice = Lattice(DIMS)
    layout = SpinorLayoutTemplate(context, dtype).instantiate(command_queue)
    inp = context.to_device(command_queue, host)
    field = context.allocate((2, 12, lattice.half_volume), dtype)
    back = context.allocate(host.shape, np.complex128)
    layout.to_checkerboard(field, inp, lattice)
    layout.from_checkerboard(back, field, lattice)
    want = _by_loops(host, DIMS)
    got = field.get(command_queue)
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want))
    assert np.max(np.abs(back.get(command_queue) - host)) <= tol * np.max(np.abs(host))


@pytest.mark.parametrize("precision", ["double", "single"])
def test_the_operator_moves_host_spinors_through_the_device_layout(context, host, precision):
    """WilsonOperator.to_device and from_device: the field's halves are the loop's layout, and
    the way back returns the host spinor (single: within its rounding)."""
    if not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    op = WilsonOperator(context, weak_field(DIMS, 0.3, seed=4), 0.12, precision, 18,
                        check=False, tuning={"wgs": 16})
    tol = 0.0 if precision == "double" else 1e-7
    field = op.to_device(host)
    want = _by_loops(host, DIMS)
    for p, half in enumerate((field.even, field.odd)):
        assert np.max(np.abs(half.get(op.queue) - want[p])) <= tol * np.max(np.abs(want))
    twice = op.to_device(2 * host)  # the staging array is reused: the first field keeps its own
    assert np.max(np.abs(op.from_device(field) - host)) <= tol * np.max(np.abs(host))
    assert np.max(np.abs(op.from_device(twice) - 2 * host)) <= 2 * tol * np.max(np.abs(host))


def test_bad_reorders_are_refused_by_name(context, command_queue):
    if not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    lattice = Lattice(DIMS)
    with pytest.raises(TypeError, match="complex64 or complex128, not float32"):
        SpinorLayoutTemplate(context, np.float32)
    layout = SpinorLayoutTemplate(context, np.complex64).instantiate(command_queue)
    field = context.allocate((2, 12, lattice.half_volume), np.complex64)
    with pytest.raises(ValueError, match="expected the host layout as 4608 complex128, got 4608 x complex64"):
        layout.to_checkerboard(field, context.allocate(12 * lattice.volume, np.complex64),
                               lattice)
    with pytest.raises(ValueError, match="expected a device field of 4608 complex64, got 12 x complex64"):
        layout.to_checkerboard(context.allocate(12, np.complex64),
                               context.allocate(12 * lattice.volume, np.complex128), lattice)
