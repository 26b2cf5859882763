"""Where a scan starts: seeds as full configurations of the scan, and the scan's order."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Mapping

from ..encoding import encode_parameters
from ..space import Space
from .arguments import OnlineTuningError


def fixed_values(space: Space) -> dict[str, Any]:
    """The parameters ``space`` does not vary, with their one value."""
    return {n: v[0] for n, v in space.parameters.items() if len(v) == 1}


def complete_seed(seed: Mapping[str, Any], test: Mapping[str, Any], space: Space) -> dict[str, Any]:
    """A seed as a full configuration: a parameter it leaves out takes the value ``space``
    fixes it at, else its ``test=`` value."""
    return {**test, **fixed_values(space), **seed}


def declared_seeds(name: str, seeds: Iterable[Mapping[str, Any]], test: Mapping[str, Any],
                   space: Space) -> list[dict[str, Any]]:
    """The ``seeds`` argument as full configurations of the scan (see :func:`complete_seed`),
    without repeats, or a clear :class:`OnlineTuningError` naming the tuner ``name``."""
    if isinstance(seeds, Mapping) or isinstance(seeds, (str, bytes)):
        raise OnlineTuningError(f"OnlineTuner {name}: seeds= is a list of parameter dicts, "
                                f"got {seeds!r}")
    found: list[dict[str, Any]] = []
    for seed in seeds:
        if not isinstance(seed, Mapping):
            raise OnlineTuningError(f"OnlineTuner {name}: each seed is a dict of parameters, "
                                    f"got {seed!r}")
        unknown = sorted(set(seed) - set(test))
        if unknown:
            raise OnlineTuningError(f"OnlineTuner {name}: seed {dict(seed)} names {unknown}, "
                                    f"not parameters of the space {sorted(test)}")
        params = complete_seed(seed, test, space)
        problem = space.why_not(params)
        if problem is not None:
            raise OnlineTuningError(f"OnlineTuner {name}: seed {params} is not a candidate "
                                    f"of the scan: {problem}")
        if params not in found:
            found.append(params)
    return found


def template_seeds(seeds: Iterable[Any], test: Mapping[str, Any], space: Space) -> list[Any]:
    """A template's declared seeds that are candidates of ``space`` on this device (its
    guesses hold for a kind of device); a malformed one is kept, for the tuner's clear error."""
    return [seed for seed in seeds
            if not (isinstance(seed, Mapping) and set(seed) <= set(test))
            or space.why_not(complete_seed(seed, test, space)) is None]


def scan_order(configurations: Iterable[dict[str, Any]], test: Mapping[str, Any],
               seeds: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """``configurations`` in the order a scan takes them: the ``seeds`` first, in their order,
    then ``test=``, then the rest in their order."""
    ordered = sorted(configurations, key=lambda c: c != test)
    if seeds:
        first = {encode_parameters(p): i for i, p in enumerate(seeds)}
        ordered.sort(key=lambda c: first.get(encode_parameters(c), len(first) + (c != test)))
    return ordered
