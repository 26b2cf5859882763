"""Templates registered for ``python -m autotune warm`` through the ``autotune.templates`` entry points.

A registered template is a class with an ``@autotuner``-decorated ``autotune`` classmethod and a
``warm_configurations`` attribute: a list of keyword-argument dicts for ``autotune(context,
**kwargs)``, or a classmethod ``warm_configurations(context)`` returning such a list (so that a
template can leave out, say, double precision on a device without it).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .tune import TuningKey

ENTRY_POINT_GROUP = "autotune.templates"


class RegistryError(ValueError):
    """A template could not be loaded or does not follow the warm protocol."""


@dataclass(frozen=True)
class RegisteredTemplate:
    name: str  #: the entry point name, e.g. ``scale``
    cls: type

    @property
    def tuner(self) -> Callable[..., dict[str, Any]]:
        return self.cls.autotune.__func__

    def configurations(self, context: Any) -> list[dict[str, Any]]:
        warm = getattr(self.cls, "warm_configurations", None)
        if warm is None:
            raise RegistryError(f"template {self.name} has no warm_configurations")
        configs = warm(context) if callable(warm) else warm
        return [dict(c) for c in configs]

    def key(self, context: Any, config: dict[str, Any]) -> TuningKey:
        return self.tuner.key(self.cls, context, **config)

    def retune(self, context: Any, config: dict[str, Any]) -> dict[str, Any]:
        """Tune ``config`` on ``context`` afresh, replacing any stored result."""
        return self.tuner.retune(self.cls, context, **config)

    @property
    def function(self) -> str:
        """The ``function`` column of this template's rows."""
        return self.tuner.autotune_function(self.cls)

    @property
    def test_parameters(self) -> dict[str, Any]:
        return dict(self.tuner.autotune_test)


def _check(name: str, cls: Any) -> RegisteredTemplate:
    method = getattr(cls, "autotune", None)
    func = getattr(method, "__func__", None)
    if func is None or not hasattr(func, "autotune_test"):
        raise RegistryError(
            f"{name}: {cls!r} needs an autotune classmethod decorated with @tune.autotuner"
        )
    return RegisteredTemplate(name, cls)


def load_template(spec: str) -> RegisteredTemplate:
    """Load ``module:Class`` (a template that is not registered)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise RegistryError(f"template {spec!r} must be written module:Class")
    try:
        obj: Any = pkgutil.resolve_name(spec)
    except (ImportError, AttributeError, ValueError) as exc:
        raise RegistryError(f"cannot load template {spec}: {exc}") from None
    return _check(attr.rsplit(".", 1)[-1], obj)


def registered_templates() -> list[RegisteredTemplate]:
    """Every template registered by an installed package, sorted by name."""
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as exc:
            raise RegistryError(f"entry point {ep.name} = {ep.value} failed to load: {exc}") from exc
        found.append(_check(ep.name, cls))
    return sorted(found, key=lambda t: t.name)
