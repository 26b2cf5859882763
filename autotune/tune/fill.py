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


def fills(measure: Measure, context: Any, params: dict[str, Any], here: dict[str, Any],
          there: dict[str, Any], name: str = "", *, strict: bool = True) -> str | None:
    """Why ``params``, measured at the arguments ``there``, under-fill ``context``'s device at
    the arguments ``here`` (their fill here below :data:`KEPT` of their fill where they were
    measured where they do not fill one wave here, below :data:`TAIL_KEPT` where they do),
    or None where they fill it well enough (or the device's compute units are not known). A measure that fails on these parameters counts as not filling; one that answers
    what is not a fill raises TypeError (``strict``: parameters already validated) or counts
    as not filling (parameters not validated yet)."""
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
    kept = KEPT if now.groups < units * now.per_unit else TAIL_KEPT
    if now.fraction(units) >= kept * then.fraction(units):
        return None
    return (f"it under-fills the device here: {now.describe(units)}, against "
            f"{then.describe(units)} where it was measured")
