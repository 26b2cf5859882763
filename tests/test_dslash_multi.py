"""The dslash on several right-hand sides in one launch (operations/lqcd/dslash_multi.py):
every right-hand side against the numpy reference, and against the one-field dslash with the
same parameters; bad calls refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from operations.lqcd import DslashTemplate, MultiDslash, haar_field, half, reference
from operations.lqcd.lattice import Lattice

from device_breadth import only_on_gpus

DIMS = (4, 6, 2, 8)
NRHS = 3
TOL = {"half": 5e-3, "single": 2e-5, "double": 1e-12}
#: per precision, the one-field dslash's output against the multi one's: the same arithmetic,
#: which a compiler may contract differently (half: two 16-bit steps)
SAME = {"half": 2 / 32767, "single": 1e-6, "double": 1e-14}


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.fixture(scope="module")
def problem():
    lat = Lattice(DIMS)
    u = haar_field(DIMS, seed=11)
    rng = np.random.default_rng(12)
    shape = (NRHS,) + lat.shape + (4, 3)
    psi = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    x = rng.standard_normal(shape) + 1j * rng.standard_normal(shape)
    return lat, u, psi, x


def _fields(context, queue, template, lat, spinors, parity):
    """Each right-hand side's sites of ``parity`` on the device, as the template takes them."""
    halves = [lat.spinor_to_device(s, parity, np.complex128) for s in spinors]
    if template.half:
        return [half.to_device(context, queue, h) for h in halves]
    return [context.to_device(queue, h.astype(template.dtype)) for h in halves]


def _new(context, template, lat):
    if template.half:
        return half.HalfSpinor.allocate(context, lat.half_volume)
    return context.allocate((12, lat.half_volume), template.dtype)


def _get(queue, template, field):
    return half.from_device(queue, field) if template.half else field.get(queue)


CASES = [(p, r) for p in ("half", "single", "double") for r in (18, 12, 8)]
#: on a CPU device, each precision and each compression once (device_breadth); the one-field
#: dslash of every pair is proven there by test_lqcd and test_half
CPU_CASES = [("half", 8), ("single", 18), ("double", 12)]


@pytest.mark.parametrize("precision,reconstruct", CASES, ids=[f"{p}-{r}" for p, r in CASES])
def test_each_right_hand_side_is_the_one_field_dslash(context, command_queue, problem, precision,
                                                      reconstruct):
    """D and x + a D^dag on three right-hand sides in one launch, both parities: each within
    the precision's bound of the numpy reference, and as the one-field dslash of the same
    parameters computes it. GPUs run every (precision, compression); CPU devices
    :data:`CPU_CASES`."""
    only_on_gpus(context, (precision, reconstruct), CPU_CASES)
    if precision == "double" and not context.device.double_precision:
        pytest.skip(f"{context.device.name} has no double precision")
    lat, u, psi, x = problem
    # two sites a work-item where the device allows it: the rounds loop around every rhs
    template = DslashTemplate(context, DIMS, precision, reconstruct, -1, {"wgs": 16, "sites": 2})
    links = template.gauge_to_device(command_queue, u)
    multi = MultiDslash(template, command_queue, NRHS, tuning={})  # the template's shape
    assert multi.parameters["sites"] == 2
    single = template.instantiate(command_queue)
    a = 0.37
    for parity, dagger, xpay in ((0, False, False), (1, True, True)):
        inps = _fields(context, command_queue, template, lat, psi, 1 - parity)
        xs = _fields(context, command_queue, template, lat, x, parity) if xpay else None
        outs = [_new(context, template, lat) for _ in range(NRHS)]
        multi(outs, inps, links, parity, dagger=dagger, xs=xs, a=a)
        for r in range(NRHS):
            one = _new(context, template, lat)
            single(one, inps[r], links, parity, dagger=dagger,
                   **({"x": xs[r], "a": a} if xpay else {}))
            got, alone = _get(command_queue, template, outs[r]), _get(command_queue, template, one)
            hop = reference.hop(u, psi[r], -1, dagger=dagger)
            want = lat.spinor_to_device(x[r] + a * hop if xpay else hop, parity, np.complex128)
            assert _rel(got, want) <= TOL[precision], (r, parity, dagger, xpay)
            assert _rel(got, alone) <= SAME[precision], (r, parity, dagger, xpay)


def test_the_multi_dslash_takes_one_work_item_a_site_and_refuses_bad_calls(context, command_queue,
                                                                         problem):
    lat, u, psi, _ = problem
    template = DslashTemplate(context, DIMS, "single", 12, -1, {"wgs": 32, "dir_split": 2})
    multi = MultiDslash(template, command_queue, 2)
    assert multi.parameters["dir_split"] == 1 and multi.parameters["stage"] is False
    assert multi.global_size == template.launch_size(multi.parameters)
    links = template.gauge_to_device(command_queue, u)
    inps = _fields(context, command_queue, template, lat, psi[:2], 1)
    outs = [_new(context, template, lat) for _ in range(2)]
    with pytest.raises(ValueError, match="inps must be a sequence of 2 fields"):
        multi(outs, inps[:1], links, 0)
    with pytest.raises(ValueError, match="outs must be a sequence of 2 fields"):
        multi(outs[0], inps, links, 0)
    with pytest.raises(ValueError, match=r"inps\[1\] has"):
        multi(outs, [inps[0], context.allocate((12, 7), template.dtype)], links, 0)
    for bad, message in ((0, "nrhs must be an int from 1 to 16"), (17, "from 1 to 16"),
                         (True, "nrhs must be an int")):
        with pytest.raises(ValueError, match=message):
            MultiDslash(template, command_queue, bad)
    with pytest.raises(ValueError, match="dir_split 1 and stage False"):
        MultiDslash(template, command_queue, 2, tuning={"dir_split": 2})
    with pytest.raises(ValueError, match="wgs"):
        MultiDslash(template, command_queue, 2, tuning={"wgs": "many"})
    with pytest.raises(ValueError, match="link_load"):  # the links' layout is the template's
        MultiDslash(template, command_queue, 2, tuning={"link_load": 8})
    with pytest.raises(ValueError, match="None or a dict"):
        MultiDslash(template, command_queue, 2, tuning="online")
    half_template = DslashTemplate(context, DIMS, "half", 12, -1, {"wgs": 16})
    mixed = [half.to_device(context, command_queue, lat.spinor_to_device(psi[0], 1, np.complex128)),
             context.allocate((12, lat.half_volume), np.complex64)]
    with pytest.raises(ValueError, match="stored alike"):
        MultiDslash(half_template, command_queue, 2)(
            [_new(context, half_template, lat) for _ in range(2)], mixed,
            half_template.gauge_to_device(command_queue, u), 0)


@pytest.mark.autotune_database
def test_the_multi_dslash_is_tuned_on_a_key_of_its_own(context, command_queue, problem):
    """Its own key (lattice, precision, compression, right-hand sides, the links' layout): every
    candidate checked on every right-hand side and correct, one work-item a site and nothing
    staged; the result is served to the next instance without a search, and computes D."""
    import json

    from autotune.tune.store import ResultStore

    lat, u, psi, _ = problem
    function = "operations.lqcd.dslash_multi.MultiDslash.autotune"
    # the template's own shape (one work-item a site kept out of the first step by sites 2,
    # wgs 256 one work-group here: slow) is the first measured beyond that step's
    template = DslashTemplate(context, DIMS, "single", 8, -1,
                              {"wgs": 256, "sites": 2, "fast_math": True, "link_load": 8})
    multi = MultiDslash(template, command_queue, 2)
    store = ResultStore.open()
    trials = store.trials(function=function)
    assert trials and all(t.status == "ok" for t in trials), [(t.parameters, t.message)
                                                              for t in trials]
    tried = [json.loads(t.parameters) for t in trials]
    beyond = [p for p in tried if p["sites"] == 2]
    assert beyond and beyond[0] == {**{k: v for k, v in template.parameters.items()
                                      if k != "link_load"}, "dir_split": 1, "stage": False}
    assert all(p["dir_split"] == 1 and p["stage"] is False and "link_load" not in p
               for p in tried)
    assert {p["fast_math"] for p in tried} == {False, True}
    [record] = store.records(function=function)
    assert json.loads(record.key.arguments)["link_load"] == 8
    again = MultiDslash(template, command_queue, 2)
    assert len(store.trials(function=function)) == len(trials)  # served, not searched again
    assert again.parameters == multi.parameters and multi.parameters["link_load"] == 8
    links = template.gauge_to_device(command_queue, u)
    inps = _fields(context, command_queue, template, lat, psi[:2], 1)
    outs = [_new(context, template, lat) for _ in range(2)]
    again(outs, inps, links, 0)
    for r in range(2):
        want = lat.spinor_to_device(reference.hop(u, psi[r], -1), 0, np.complex128)
        assert _rel(outs[r].get(command_queue), want) <= TOL["single"]
