"""Templates registered for ``python -m autotune warm`` through the ``autotune.templates`` entry points.

A registered template follows the template protocol, checked when it is loaded:

- an ``autotune`` classmethod decorated with ``@tune.autotuner`` (its :class:`TunedFunction`);
- ``autotune_version`` (an int) and ``autotune_sources`` (the ``.mako`` files it renders);
- ``autotune_space(context, **arguments)``, the space it searches on a device;
- ``warm_configurations``: a list of keyword-argument dicts for ``autotune(context, **kwargs)``,
  or a classmethod ``warm_configurations(context)`` returning such a list (so that a template
  can leave out, say, double precision on a device without it);
- ``instantiate(queue, ...)`` returning a callable instance.
"""

from __future__ import annotations

import logging
import pkgutil
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from .decorator import TunedFunction, tuner_of
from .records import TuningKey
from .verdicts import TuningOutcome, Verdict

ENTRY_POINT_GROUP = "autotune.templates"
logger = logging.getLogger("autotune")


class RegistryError(ValueError):
    """A template could not be loaded or does not follow the template protocol."""


@dataclass(frozen=True)
class RegisteredTemplate:
    name: str  #: the entry point name, e.g. ``scale``
    cls: type

    @property
    def tuner(self) -> TunedFunction:
        return tuner_of(self.cls)

    def configurations(self, context: Any) -> list[dict[str, Any]]:
        warm = self.cls.warm_configurations
        configs = warm(context) if callable(warm) else warm
        return [dict(c) for c in configs]

    def key(self, context: Any, config: dict[str, Any]) -> TuningKey:
        return self.tuner.key(self.cls, context, **config)

    def judge(self, context: Any, config: dict[str, Any]) -> Verdict | None:
        """What the database holds for this configuration on ``context``, judged."""
        return self.tuner.judge(self.cls, context, **config)

    def retune(self, context: Any, config: dict[str, Any]) -> TuningOutcome:
        """Tune ``config`` on ``context`` afresh, replacing any stored result."""
        return self.tuner.retune(self.cls, context, **config)

    @property
    def function(self) -> str:
        """The ``function`` column of this template's rows."""
        return self.tuner.name(self.cls)

    @property
    def test_parameters(self) -> dict[str, Any]:
        return self.tuner.test

    def current_sources(self) -> dict[str, str]:
        """Template file name -> digest of the kernel sources as they are now."""
        return {f.name: f.digest for f in self.tuner.sources(self.cls)}


def check_protocol(name: str, cls: Any) -> RegisteredTemplate:
    """A :class:`RegisteredTemplate`, or :class:`RegistryError` naming what ``cls`` lacks."""
    if not isinstance(cls, type):
        raise RegistryError(f"{name}: {cls!r} is not a class")
    try:
        tuner = tuner_of(cls)
    except TypeError as exc:
        raise RegistryError(f"{name}: {exc}") from None
    problems = []
    version = getattr(cls, "autotune_version", None)
    if isinstance(version, bool) or not isinstance(version, int):
        problems.append("autotune_version (an int)")
    if tuner.source_templates(cls) is None:
        problems.append("autotune_sources (the .mako templates it renders)")
    if not callable(getattr(cls, "autotune_space", None)):
        problems.append("autotune_space(context, **arguments) (the space it searches)")
    if getattr(cls, "warm_configurations", None) is None:
        problems.append("warm_configurations (a list, or a classmethod taking a context)")
    if not callable(getattr(cls, "instantiate", None)):
        problems.append("instantiate(queue, ...) returning a callable instance")
    if problems:
        raise RegistryError(f"template {name} ({cls.__module__}.{cls.__qualname__}) does not follow "
                            f"the template protocol: it needs {'; '.join(problems)}")
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
    return check_protocol(attr.rsplit(".", 1)[-1], obj)


def registered_templates() -> list[RegisteredTemplate]:
    """Every template registered by an installed package, sorted by name.

    An entry point that fails to load, or names a class that does not follow the protocol, is
    skipped with a warning: another package's broken entry must not break every ``warm``.
    """
    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.append(check_protocol(ep.name, ep.load()))
        except Exception as exc:  # noqa: BLE001 - any failure of someone else's package
            logger.warning("skipping template entry point %s = %s: %s", ep.name, ep.value, exc)
    return sorted(found, key=lambda t: t.name)
