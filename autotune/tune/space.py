"""Parameter spaces: named value lists plus restrictions, pruned before anything is built.

>>> space = Space({"wgs": [32, 64, 128], "ipt": [1, 2, 4]},
...               restrictions=[lambda p: p["wgs"] * p["ipt"] <= 256])
>>> space.size, len(space.configurations())
(9, 8)

A template declares its space once (``autotune_space``); the tuner searches it, and checks
every stored, nearest-matched or imported value against it before the value is used.

Restrictions are of two kinds. A *limit* says the device cannot run a configuration (its
work-group and local-memory limits, what the kernel assumes); a *preference* says it is not worth
searching (whole warps, preferred shapes). Searches prune both; an explicit ``tuning=``, a stored
row and an imported row are checked against the limits only, so that a configuration that runs
is accepted on every device.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from .encoding import is_identifier, is_plain_parameter, plain

#: A restriction: True for configurations that may be built.
Restriction = Callable[[dict[str, Any]], bool]


class RestrictionKind(Enum):
    """What a restriction says of the configurations it excludes."""

    #: the device cannot run them (resources, work-group and local-memory limits, what the
    #: kernel assumes): every configuration used is checked against limits
    LIMIT = "limit"
    #: they are not worth searching (whole warps, preferred shapes): searches skip them, but an
    #: explicit, stored or imported configuration that breaks one is still used
    PREFERENCE = "preference"


@dataclass(frozen=True)
class DescribedRestriction:
    """A restriction with a description that error messages quote, and its kind."""

    predicate: Restriction
    description: str
    kind: RestrictionKind = RestrictionKind.LIMIT

    def __call__(self, config: dict[str, Any]) -> bool:
        return bool(self.predicate(config))


def restriction(description: str, predicate: Restriction,
                kind: RestrictionKind | str = RestrictionKind.LIMIT) -> DescribedRestriction:
    """``predicate`` with a description, which error messages quote when it excludes a
    configuration (``"a work-group fits the device"`` says more than ``<lambda>``), and its
    kind: a limit (the default: the device cannot run what it excludes) or a preference."""
    if not callable(predicate):
        raise SpaceError(f"restriction {description!r}: {predicate!r} is not callable")
    try:
        kind = RestrictionKind(kind.value if isinstance(kind, RestrictionKind) else kind)
    except ValueError:
        raise SpaceError(f"restriction {description!r}: kind {kind!r} is not one of "
                         f"{[k.value for k in RestrictionKind]}") from None
    return DescribedRestriction(predicate, str(description), kind)


def limit(description: str, predicate: Restriction) -> DescribedRestriction:
    """A restriction the device cannot run past (checked for every configuration used)."""
    return restriction(description, predicate, RestrictionKind.LIMIT)


def preference(description: str, predicate: Restriction) -> DescribedRestriction:
    """A restriction saying what is not worth searching (searches skip what it excludes; an
    explicit, stored or imported configuration that breaks it is still used)."""
    return restriction(description, predicate, RestrictionKind.PREFERENCE)


def kind_of(restriction: Restriction) -> RestrictionKind:
    """The kind of a restriction: a plain callable is a limit."""
    return getattr(restriction, "kind", RestrictionKind.LIMIT)


def at_most(name: str, limit: int, what: str = "the device's limit") -> DescribedRestriction:
    """The limit ``1 <= config[name] <= limit`` (a work-group size and its device's maximum,
    say), described for error messages."""
    return restriction(f"{name} from 1 to {limit} ({what})", lambda p: 1 <= p[name] <= limit)


class SpaceError(ValueError):
    """A parameter space that cannot be searched (empty, malformed)."""


class Space:
    """Named lists of values and restrictions on their combinations.

    Values must be plain (bool, int, finite float, identifier-like string; numpy scalars are
    converted). Restrictions are callables taking one configuration (a dict) and returning a
    true value if it may be built; the device's limits belong here (work-group size, local
    memory), so a configuration that cannot run is never generated.
    """

    def __init__(self, parameters: Mapping[str, Iterable[Any]],
                 restrictions: Sequence[Restriction] = ()):
        if isinstance(parameters, Space):
            restrictions = (*parameters.restrictions, *restrictions)
            parameters = parameters.parameters
        if not parameters:
            raise SpaceError("autotune() was given no parameters: name at least one list")
        clean: dict[str, tuple[Any, ...]] = {}
        for name, values in parameters.items():
            if not is_identifier(name):
                raise SpaceError(f"parameter name {name!r} is not an identifier")
            if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
                raise SpaceError(f"parameter {name!r} must be a list of values, got {values!r}")
            items: list[Any] = []
            for value in values:
                value = plain(value)
                if not is_plain_parameter(value):
                    raise SpaceError(
                        f"parameter {name!r} has value {value!r}; values must be bools, ints, "
                        "finite floats or identifier-like strings")
                if not any(_same(value, seen) for seen in items):
                    items.append(value)
            if not items:
                raise SpaceError(f"the parameter space is empty: {name} has no values")
            clean[name] = tuple(items)
        for restriction in restrictions:
            if not callable(restriction):
                raise SpaceError(f"restriction {restriction!r} is not callable; pass functions "
                                 "taking a configuration dict and returning True to keep it")
        self.parameters: dict[str, tuple[Any, ...]] = clean
        self.restrictions: tuple[Restriction, ...] = tuple(restrictions)
        self._valid: list[dict[str, Any]] | None = None

    def __repr__(self) -> str:
        lists = ", ".join(f"{k}={list(v)}" for k, v in self.parameters.items())
        return f"Space({lists}, {len(self.restrictions)} restrictions)"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.parameters)

    def narrowed(self, **lists: Iterable[Any]) -> Space:
        """This space with the named parameters limited to ``lists`` (each part of its own
        list), its restrictions kept: a part of the space to search first, or to scan online."""
        for name, values in lists.items():
            if name not in self.parameters:
                raise SpaceError(f"narrowed({name}=...): the space has no parameter {name!r}")
            outside = [v for v in values if not any(_same(plain(v), own) for own in self.parameters[name])]
            if outside:
                raise SpaceError(f"narrowed({name}=...): {outside} not among its values "
                                 f"{list(self.parameters[name])}")
        return Space({**self.parameters, **lists}, self.restrictions)

    @property
    def size(self) -> int:
        """Combinations before restrictions."""
        size = 1
        for values in self.parameters.values():
            size *= len(values)
        return size

    def _allowed(self, config: dict[str, Any]) -> bool:
        for restriction in self.restrictions:
            try:
                if not restriction(config):
                    return False
            except Exception as exc:
                raise SpaceError(f"restriction {_name(restriction)} raised {type(exc).__name__}: "
                                 f"{exc} on {config}; a restriction must return True or False "
                                 "for every combination of the lists") from exc
        return True

    def product(self) -> Iterator[dict[str, Any]]:
        """Every combination, restrictions ignored, in the declared order."""
        names = self.names
        for combo in itertools.product(*self.parameters.values()):
            yield dict(zip(names, combo))

    def configurations(self) -> list[dict[str, Any]]:
        """The valid configurations (restrictions applied), in the declared order; cached."""
        if self._valid is None:
            self._valid = [c for c in self.product() if self._allowed(c)]
        return [dict(c) for c in self._valid]

    def why_not(self, config: Any, *, members: bool = True,
                preferences: bool = True) -> str | None:
        """Why ``config`` is not a valid configuration of this space, or None if it is.

        ``members=False`` checks the names and the restrictions only, not that each value is
        one of the listed ones; ``preferences=False`` checks the limits only (see
        :class:`RestrictionKind`). A user's explicit ``tuning=`` must satisfy
        ``members=False, preferences=False`` (:meth:`runs`); a stored or imported row, which is
        data, ``preferences=False``: only listed values reach kernel source from a database.
        The preferences say what is worth searching on this device, not what runs.
        """
        if not isinstance(config, dict):
            return f"{config!r} is not a dict of parameters"
        if set(config) != set(self.parameters):
            return f"it has parameters {sorted(map(str, config))}, the space {sorted(self.parameters)}"
        for name, values in self.parameters.items():
            value = plain(config[name])
            if members and not any(_same(value, v) for v in values):
                return f"{name}={value!r} is not one of {list(values)}"
        clean = {name: plain(config[name]) for name in self.parameters}
        for restriction in self.restrictions:
            if not preferences and kind_of(restriction) is RestrictionKind.PREFERENCE:
                continue
            try:
                allowed = restriction(clean)
            except Exception as exc:  # a restriction that cannot judge it does not allow it
                return f"restriction {_name(restriction)} failed on it: {type(exc).__name__}: {exc}"
            if not allowed:
                return f"restriction {_name(restriction)} excludes it"
        return None

    def runs(self, config: Any) -> str | None:
        """Why the device cannot run ``config`` (a limit it breaks, or a malformed config), or
        None: the check for explicit, stored and imported configurations."""
        return self.why_not(config, members=False, preferences=False)

    def preference_broken(self, config: dict[str, Any]) -> str | None:
        """The first preference a (runnable) ``config`` breaks, described, or None."""
        clean = {name: plain(config[name]) for name in self.parameters}
        for restriction in self.restrictions:
            if kind_of(restriction) is RestrictionKind.PREFERENCE:
                try:
                    if not restriction(clean):
                        return _name(restriction)
                except Exception:  # noqa: BLE001 - a preference that cannot judge is not broken
                    continue
        return None

    def __contains__(self, config: Any) -> bool:
        return self.why_not(config) is None

    def describe(self) -> dict[str, Any]:
        """The value lists as plain data (what a result records of the space it searched)."""
        return {name: list(values) for name, values in self.parameters.items()}

    def digest(self) -> str:
        """SHA-256 of the value lists (restrictions are code: their changes go in the version)."""
        text = json.dumps(self.describe(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind: ``True`` is not ``1``, ``1`` is not ``1.0``."""
    return type(a) is type(b) and a == b


def _name(fn: Callable) -> str:
    description = getattr(fn, "description", None)
    if description:
        return repr(description)
    return getattr(fn, "__qualname__", None) or repr(fn)
