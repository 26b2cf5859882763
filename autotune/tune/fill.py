"""How a configuration fills the device at given arguments: ``AUTOTUNE_MATCH=similar`` serves
another size's parameters only where they fill the device about as well as at the size they
were measured at (:mod:`.similar`).

A template declares the work-groups a configuration launches at given arguments, and where it
knows, how many of them one compute unit runs at once, in ``autotune_fill``::

    class GemmTemplate:
        @classmethod
        def autotune_fill(cls, context, params, dtype, m, n, k):
            return -(-m // params["MWG"]) * -(-n // params["NWG"])      # work-groups

    class DslashTemplate:
        @classmethod
        def autotune_fill(cls, context, params, dims, precision, reconstruct):
            ...
            return Fill(groups, per_unit=max(1, params["min_blocks"]))

It returns an ``int`` (the work-groups; one at a time per compute unit) or a :class:`Fill`.
With ``u`` compute units (``context.device.multiprocessors``) each running ``r`` work-groups
at once, a launch of ``g`` work-groups runs in ``w = ceil(g / (u r))`` waves, and its *fill*
is ``g / (w u r)``: the share of the device's places busy, over the waves (1: every wave
full; ``g / (u r)`` where it does not fill one wave; a partly empty last wave lowers it). The
waves and their tail are what cuBLASLt reports of an algorithm as ``wavesCount``.

The rule (:func:`fills`): a configuration measured at one size is served at another only if
its fill there is at least :data:`KEPT` (40%) of its fill at the size it was measured at,
where it does not fill one wave there (compute units idle throughout: a tile tuned at 1024^3
that launches 128 work-groups on 132 compute units, fill 0.97, launches 32 at 512^3, fill
0.24: not served there), or at least :data:`TAIL_KEPT` (60%) where it fills a wave or more
and only its last wave may be partly empty (a tail costs less than idle units: the other
waves run full, and a kernel bound by memory runs its last wave's work-groups faster).

Where another size's result under-fills and the configurations its search tried there are
looked at instead (:mod:`.similar`), they are ranked by their *predicted* time here, not by
their time there (:meth:`Change.predicted`): a configuration runs the same work-groups, each
about as long, spread over the device's places in waves, so its time scales with the work
and with its fill there over its fill here. The work's share is the same for every
configuration of one size and drops out of the ranking. On an H200 (2026-12-01) 1024^3's
fastest trial that filled 512^3 well enough, 32 x 128 tiles (fill 0.97 there, 0.48 here),
was 1.30x slower at 512^3 than 32 x 64 tiles (0.97 at both), its own search's choice: the
ranking by time there served the first; by predicted time, the second unless the first had
been twice as fast at 1024^3.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The declaration a template class makes.
ATTRIBUTE = "autotune_fill"
#: The share of its fill at the size it was measured at that a configuration must keep to be
#: served at another size where it does not fill one wave there (fewer work-groups than the
#: device has places: compute units left idle throughout). On an H200 (2026-11-26) GEMM tiles
#: tuned at 1024^3 kept 0.25 of their fill at 512^3 (1.51x the shape's own tuned time; a trial
#: that filled: 1.29x), but 0.57 at 768^3 and 0.78 at 640 x 1280 x 2560, where they were within
#: 1% of their own (the trials served at 85%: 1.22x and 1.14x): idle units cost less there than
#: another size's second-best tile.
KEPT = 0.4
#: The same where it fills at least one wave there, and only its last wave may be partly
#: empty: refused only for a much worse tail (1.05 waves where it had 3: fill 0.52 against 1).
TAIL_KEPT = 0.6


@dataclass(frozen=True)
class Fill:
    """What one launch asks of the device: ``groups`` work-groups, of which one compute unit
    runs ``per_unit`` at once (the template's estimate; 1 where it does not know)."""

    groups: int
    per_unit: int = 1

    def fraction(self, units: int) -> float:
        """The share of ``units`` compute units' places that the launch keeps busy, over its
        waves (see the module's text)."""
        places = units * self.per_unit
        waves = -(-self.groups // places)
        return self.groups / (waves * places)

    def describe(self, units: int) -> str:
        """For people: ``32 work-groups on 132 compute units (fill 0.24)``."""
        each = "" if self.per_unit == 1 else f", {self.per_unit} at once on each"
        return (f"{self.groups} work-groups on {units} compute units{each} "
                f"(fill {self.fraction(units):.2f})")


Measure = Callable[..., Any]


def declared(owner: Any, name: str = "") -> Measure | None:
    """The fill measure ``owner`` declares (``autotune_fill``), or None; TypeError if it is
    not callable."""
    measure = getattr(owner, ATTRIBUTE, None) if owner is not None else None
    if measure is not None and not callable(measure):
        raise TypeError(f"{name or owner!r}: {ATTRIBUTE} must be a classmethod "
                        f"(context, params, **arguments) returning work-groups, got {measure!r}")
    return measure


def as_fill(value: Any, name: str = "") -> Fill:
    """A declared measure's answer as a :class:`Fill`: an int of work-groups, or a Fill of
    positive ints; TypeError otherwise (a template's mistake, not data)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = Fill(value)
    if not isinstance(value, Fill) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1
            for v in (value.groups, value.per_unit)):
        raise TypeError(f"{name}: {ATTRIBUTE} must return a positive int of work-groups or a "
                        f"tune.fill.Fill of positive ints, got {value!r}")
    return value


def units_of(context: Any) -> int | None:
    """The compute units of ``context``'s device, or None where it does not say."""
    units = getattr(getattr(context, "device", None), "multiprocessors", None)
    return units if isinstance(units, int) and not isinstance(units, bool) and units >= 1 \
        else None


@dataclass(frozen=True)
class Change:
    """One configuration's launch at the arguments it was measured at (``there``) and at
    others (``here``), on a device of ``units`` compute units."""

    here: Fill
    there: Fill
    units: int

    @property
    def kept(self) -> float:
        """The share of its fill there that it keeps here (above 1: it fills more here)."""
        return self.here.fraction(self.units) / self.there.fraction(self.units)

    def under(self) -> str | None:
        """Why it under-fills the device here (its fill here below :data:`KEPT` of its fill
        there where it does not fill one wave here, below :data:`TAIL_KEPT` where it does),
        or None."""
        kept = KEPT if self.here.groups < self.units * self.here.per_unit else TAIL_KEPT
        if self.here.fraction(self.units) >= kept * self.there.fraction(self.units):
            return None
        return (f"it under-fills the device here: {self.here.describe(self.units)}, against "
                f"{self.there.describe(self.units)} where it was measured")

    def predicted(self, seconds: float) -> float:
        """Its time here, from its time there, up to the ratio of the work at the two sizes
        (the same for every configuration): ``seconds`` over the share of its fill kept."""
        return seconds / self.kept


def change(measure: Measure, context: Any, params: dict[str, Any], here: dict[str, Any],
           there: dict[str, Any], name: str = "", *, strict: bool = True) -> Change | str | None:
    """How ``params``' launch on ``context``'s device changes from the arguments ``there``
    (where they were measured) to ``here``; None where the device's compute units are not
    known; a reason where it cannot be measured. A measure that fails on these parameters
    cannot measure them; one that answers what is not a fill raises TypeError (``strict``:
    parameters already validated) or cannot measure them (parameters not validated yet)."""
    units = units_of(context)
    if units is None:
        return None
    try:
        answers = measure(context, params, **here), measure(context, params, **there)
    except Exception as exc:  # noqa: BLE001 - parameters the measure cannot take: not served
        return f"its fill cannot be measured: {type(exc).__name__}: {exc}"
    try:
        now, then = (as_fill(answer, name) for answer in answers)
    except TypeError as exc:
        if strict:
            raise
        return f"its fill cannot be measured: {exc}"
    return Change(now, then, units)


def fills(measure: Measure, context: Any, params: dict[str, Any], here: dict[str, Any],
          there: dict[str, Any], name: str = "", *, strict: bool = True) -> str | None:
    """Why ``params``, measured at the arguments ``there``, under-fill ``context``'s device at
    the arguments ``here`` (:meth:`Change.under`), or cannot be measured (:func:`change`); None
    where they fill it well enough (or the device's compute units are not known)."""
    found = change(measure, context, params, here, there, name, strict=strict)
    return found.under() if isinstance(found, Change) else found
