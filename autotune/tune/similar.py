"""``AUTOTUNE_MATCH=similar``: a key not tuned is served the parameters of the nearest size
tuned on the same device.

A template declares which numeric arguments may be generalised, and how, in
``autotune_similar``::

    class GemmTemplate:
        autotune_similar = {"m": "log", "n": "log", "k": "log"}

    class DslashTemplate:
        autotune_similar = {"dims": "log"}      # a tuple: element by element

The rule ``"log"`` measures the distance of two positive numbers as ``|ln(a / b)|`` (of two
tuples of equal length, the sum over their elements). A template that declares nothing has
nothing generalised.

For a key without a fresh row of its own, the rows of the same function, version and device
(name, platform and driver) whose other arguments are all equal are ranked by the sum of those
distances, the nearest first (the newest first among equals). Each is judged for *this* call
(:func:`candidate_judge`): its parameters must be in the space the template declares for this
call's arguments, limits included (a tile larger than the matrix, a work-group the lattice
cannot fill), and it must be fresh against the sources and space it was tuned with. The first
that passes is served; one that does not fit is skipped for the next nearest size. With none,
the lookup goes on as ``nearest`` does (:mod:`.lookup`).

Where the template also declares how a configuration fills the device (``autotune_fill``,
:mod:`.fill`), a candidate must fill it at this size about as well as at the size it was
measured at (:func:`~.fill.fills`). Where the nearest size's result does not, it is first
scaled to this size where the template declares how (``autotune_scaled``, :func:`scaler`:
the GEMM's tiles shrunk to launch as many work-groups as where they were tuned), judged as a
trial is. Otherwise that size's search still measured other configurations there (its
trials): the fastest of them that is
valid for this call and fills the device here is served instead (:func:`trial_rows`), and
only where none does is the next nearest size tried. Under-filling candidates are never
served: with no size left, the lookup goes on as ``nearest`` does, and a miss tunes.

Where the nearest size's result is served as it is, a configuration its search measured
within :data:`NEAR_TIE` of it there takes its place where more of the other tuned sizes chose it
than chose the result (:func:`chosen_elsewhere`, :func:`near_ties`): a search that ends on
one of two configurations a hair apart ends on luck, and the one other sizes chose carries
better to the sizes between them. Only sizes at most :data:`VOTE_REACH` times as far from the
asking size as the nearest one count.

A served size is stored as a row of the asking key with origin ``similar``, score ``inf`` (not
timed at this size) and its source in the search summary (:data:`SOURCE`; ``"trial": true``
where a trial was served, not the source's result; ``"scaled": true`` where the result
was scaled), so that ``show``,
``report`` and ``results_frame`` say where it came from. Such a row is never served as the
key's own: every lookup ranks the tuned sizes afresh (a size tuned since may be nearer), an
exact lookup or ``warm`` treats the key as not tuned, and tuning it replaces the row.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import autotune

from . import fill
from .encoding import (InvalidParametersError, MalformedJSONError, decode_arguments,
                       decode_parameters, describe_arguments, encode_parameters, load_json,
                       validate_parameters)
from .records import ResultOrigin, TrialRecord, TuningKey, TuningRecord
from .space import Space
from .verdicts import Freshness, Verdict, judge, make_fingerprint

#: The rules a template may declare for an argument.
RULES = ("log",)
#: The search-summary key of a similar row's source: the arguments and score it came from.
SOURCE = "similar"
#: The declaration a template class makes.
ATTRIBUTE = "autotune_similar"
#: The key, in the search text of a candidate row made of a trial (:func:`trial_rows`), that
#: marks it as one.
TRIAL = "similar_trial"
#: A configuration the search of a size measured within this share of that size's result
#: there is as good there for serving (:func:`near_ties`): of such configurations, the one that
#: more other tuned sizes chose is served (:func:`chosen_elsewhere`). On an H200 (2026-12-01)
#: 4096^3's search ended on 128 x 128 tiles in two runs of six and on 64 x 128, which 1024^3
#: and 8192^3 chose in every run, in the other four; served at 2048 x 4096 x 1024 the 128 x 128
#: tiles ran 1.14-1.18x that shape's own, at 1280 x 7168 x 3584 1.03-1.22x, and the 64 x 128
#: ones 0.99-1.01x at both.
NEAR_TIE = 0.05
#: A tuned size's choice counts for a near tie (:func:`chosen_elsewhere`) only where that size
#: is at most this many times as far (log distance) from the asking size as the nearest tuned
#: size is: a size much further away than the nearest chose for its own regime. On an H200
#: (2026-12-01, ``benchmarks/similar_sizes.py``) the GEMM's near ties that helped were chosen
#: at sizes 1.0-1.8x as far as the nearest (1280 x 7168 x 3584: 1.215 served 4096^3's result,
#: 1.02-1.06 its near tie); the dslash's half precision near ties chosen at 16^4 alone, 3.3-4.2x
#: as far from 28^4 and 24^3 x 48 as 32^4 and 24^4, ran 1.054 and 1.043, where the nearest
#: lattice's own results had run 0.996-1.036 in the runs before the rule.
VOTE_REACH = 2.0
#: The declaration of the parameters a template derives from a size's result for another
#: size (:func:`scaler`).
SCALE_ATTRIBUTE = "autotune_scaled"
#: The key, in the search text of a candidate row derived from a size's result
#: (:func:`scaler`), that marks it as one.
SCALED = "similar_scaled"

Judge = Callable[[TuningRecord], Verdict]
#: Why a candidate's parameters under-fill the device for this call (None: they fill it);
#: ``strict``: its parameters are validated (a measure's wrong answer is then an error).
FillCheck = Callable[..., "str | None"]
#: Judges a trial row for this call, given the verdict on its size's result (:func:`trial_judge`).
TrialJudge = Callable[[Verdict, TuningRecord], "Verdict | None"]
#: The candidate rows a template derives for this call from a size's result (:func:`scaler`).
Scaler = Callable[[Verdict], "list[TuningRecord]"]


class Tuned(Protocol):
    """What judging a candidate needs of a tuned function (:class:`~.decorator.TunedFunction`)."""

    @property
    def test(self) -> dict[str, Any]: ...

    def name(self, owner: Any = None) -> str: ...

    def sources(self, owner: Any = None) -> tuple: ...

    def declared_space(self, owner: Any, context: Any,
                       arguments: dict[str, Any]) -> Space | None: ...

    def space_of(self, call: Any) -> Space | None: ...


class CallLike(Protocol):
    owner: Any
    context: Any
    arguments: dict[str, Any]
    key: TuningKey


def declared_rules(owner: Any, name: str = "") -> dict[str, str]:
    """The generalisable arguments ``owner`` declares (``autotune_similar``), checked: a
    mapping of argument names to a rule of :data:`RULES`; {} where it declares none."""
    declared = getattr(owner, ATTRIBUTE, None) if owner is not None else None
    if declared is None:
        return {}
    if not isinstance(declared, Mapping) or not all(
            isinstance(k, str) and v in RULES for k, v in declared.items()):
        raise TypeError(f"{name or owner!r}: {ATTRIBUTE} must map argument names to one of "
                        f"{', '.join(map(repr, RULES))}, got {declared!r}")
    return dict(declared)


@dataclass(frozen=True)
class Request:
    """What a similar lookup needs for one call: the declared rules, the judge of a
    candidate row for this call and, where the template declares ``autotune_fill``, the
    check that a judged candidate fills the device here."""

    rules: dict[str, str]
    judge: Judge
    fill: FillCheck | None = None
    trial: TrialJudge | None = None
    scaled: Scaler | None = None

    def under_fills(self, verdict: Verdict) -> str | None:
        """Why the judged ``verdict``'s parameters under-fill the device for this call, or
        None (they fill it, or the template declares no measure)."""
        return None if self.fill is None or verdict.parameters is None else self.fill(verdict)


def _log_distance(ours: Any, theirs: Any) -> float | None:
    """``|ln(ours / theirs)|`` of two positive numbers; of two tuples or lists of equal length
    the sum over their elements; None where it is not defined (the values must be equal)."""
    if isinstance(ours, dict) and isinstance(theirs, dict) \
            and set(ours) == set(theirs) == {"__tuple__"}:
        ours, theirs = ours["__tuple__"], theirs["__tuple__"]
    if isinstance(ours, list) and isinstance(theirs, list):
        if len(ours) != len(theirs) or not ours:
            return None
        parts = [_log_distance(a, b) for a, b in zip(ours, theirs)]
        return None if any(p is None for p in parts) else sum(parts)  # type: ignore[misc]
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ours, theirs))
    if not numbers or ours <= 0 or theirs <= 0:
        return None
    try:  # (stored numbers are data: one too large for a float compares as not comparable)
        far = abs(math.log(ours) - math.log(theirs))
    except (OverflowError, ValueError):
        return None
    return far if math.isfinite(far) else None


def distance(ours: dict[str, Any], theirs: dict[str, Any], rules: dict[str, str]) -> float | None:
    """How far stored arguments (``theirs``, parsed JSON) are from this call's (``ours``):
    the sum of the declared arguments' distances; None where an argument not declared
    differs, the names differ, or a declared one cannot be compared."""
    if set(ours) != set(theirs):
        return None
    total = 0.0
    for name, value in ours.items():
        if value == theirs[name] and type(value) is type(theirs[name]):
            continue
        if name not in rules:
            return None
        part = _log_distance(value, theirs[name])
        if part is None:
            return None
        total += part
    return total


def ranked(records: Iterable[TuningRecord], key: TuningKey, rules: dict[str, str]
           ) -> list[tuple[float, TuningRecord]]:
    """The rows of other sizes (``records``, newest first) of ``key``'s function, version and
    device that differ from it only in declared arguments, nearest first (newest first among
    equals), each with its distance. Rows served as similar themselves are left out."""
    if not rules:
        return []
    try:
        ours = load_json(key.arguments, "arguments")
    except MalformedJSONError:
        return []
    found = []
    for i, record in enumerate(records):
        other = record.key
        if other.arguments == key.arguments or record.origin == ResultOrigin.SIMILAR.value \
                or (other.function, other.version, other.device) != (key.function, key.version,
                                                                     key.device):
            continue
        try:
            theirs = load_json(other.arguments, "arguments")
        except MalformedJSONError:
            continue
        if not isinstance(ours, dict) or not isinstance(theirs, dict):
            continue
        far = distance(ours, theirs, rules)
        if far is not None:
            found.append((far, i, record))
    found.sort(key=lambda item: (item[0], item[1]))
    return [(far, record) for far, _, record in found]


def candidate_judge(tuned: Tuned, call: CallLike, here: Judge) -> Judge:
    """The judge of another size's row for ``call``: ``here`` (the call's own judge: the
    names and kinds of ``test=``, the space this call's arguments declare, limits included)
    must not find it invalid; it is fresh if ``here`` finds it so, or else if it is fresh
    against the fingerprint of the arguments it was tuned for (a space whose lists depend
    on the size)."""
    def judged(record: TuningRecord) -> Verdict:
        verdict = here(record)
        if verdict.freshness is not Freshness.STALE:
            return verdict
        try:
            source = _source_arguments(call, record)
            space = tuned.declared_space(call.owner, call.context, source)
            fingerprint = make_fingerprint(tuned.sources(call.owner), space)
        except Exception:  # noqa: BLE001 - a template that cannot take them: as stale
            return verdict
        if judge(record, tuned.test, fingerprint, call.key.device_name).freshness \
                is Freshness.FRESH:
            return Verdict(record, Freshness.FRESH, "", verdict.parameters)
        return verdict

    return judged


def _source_arguments(call: CallLike, record: TuningRecord) -> dict[str, Any]:
    """The arguments ``record`` was tuned for, as a call takes them (this call's enums)."""
    enums = tuple({type(v) for v in call.arguments.values() if isinstance(v, enum.Enum)})
    return {**call.arguments, **decode_arguments(record.key.arguments, enums)}


def fill_check(tuned: Tuned, call: CallLike) -> FillCheck | None:
    """The check that a candidate fills the device for ``call`` about as well as at the
    arguments it was measured at (:func:`.fill.fills`), if the template declares
    ``autotune_fill``."""
    name = tuned.name(call.owner)
    measure = fill.declared(call.owner, name)
    if measure is None:
        return None
    read: dict[str, dict[str, Any]] = {}  # the sizes' arguments, read once for this call

    def check(verdict: Verdict, strict: bool = True) -> str | None:
        text = verdict.record.key.arguments
        if text not in read:
            try:
                read[text] = _source_arguments(call, verdict.record)
            except Exception as exc:  # noqa: BLE001 - stored arguments a call cannot take
                return f"its arguments cannot be read: {exc}"
        return fill.fills(measure, call.context, dict(verdict.parameters or {}),
                          call.arguments, read[text], name, strict=strict)

    return check


def trial_judge(tuned: Tuned, call: CallLike, fills: FillCheck | None) -> TrialJudge:
    """The judge of a trial row (:func:`trial_rows`) of a size whose result was judged
    (``anchor``) for ``call``: the row is the anchor's but for its parameters, so only they
    are judged: filling the device here (``fills``, where the template declares a measure;
    first, the cheapest test, on the decoded parameters: a measure that cannot take them
    counts as not filling), of ``test=``'s names
    and kinds, and in the space this call's arguments declare (limits included). A verdict
    with the anchor's freshness, or None where the trial does not fill or fit."""
    spaces: list[Space | None] = []  # this call's space, made once, when first needed

    def judged(anchor: Verdict, row: TuningRecord) -> Verdict | None:
        try:
            decoded = decode_parameters(row.parameters)
        except InvalidParametersError:
            return None
        if not isinstance(decoded, dict) or fills is not None and fills(
                Verdict(row, anchor.freshness, "", decoded), strict=False) is not None:
            return None
        try:
            params = validate_parameters(decoded, tuned.test)
        except InvalidParametersError:
            return None
        verdict = Verdict(row, anchor.freshness, "", params)
        if not spaces:
            spaces.append(tuned.space_of(call))
        if spaces[0] is not None and spaces[0].why_not(params, preferences=False) is not None:
            return None
        return verdict

    return judged


def request_for(tuned: Tuned, call: CallLike, here: Judge) -> Request | None:
    """The similar lookup of ``call`` if its template declares generalisable arguments."""
    rules = declared_rules(call.owner, tuned.name(call.owner))
    if not rules:
        return None
    fills = fill_check(tuned, call)  # (scaled only where a result under-fills)
    return Request(rules, candidate_judge(tuned, call, here), fills,
                   trial_judge(tuned, call, fills),
                   None if fills is None else scaler(tuned, call))


def scaler(tuned: Tuned, call: CallLike) -> Scaler | None:
    """Where ``call``'s template declares ``autotune_scaled(context, params, here, there,
    space)`` (the parameters it derives from ``params``, tuned at the arguments ``there``, for
    the arguments ``here``, whose space is ``space``: the call's own, already made for its
    fingerprint; the preferred first), the candidate rows it derives for this call from
    a size's judged result: that size's row with each derived configuration, :data:`SCALED` in
    its search text (judged as a trial is: :func:`trial_judge`); None where it declares none.
    A declaration that fails on a stored result derives nothing from it; one that answers
    what is not a list of dicts is a mistake in the template (TypeError)."""
    name = tuned.name(call.owner)
    derive = getattr(call.owner, SCALE_ATTRIBUTE, None) if call.owner is not None else None
    if derive is None:
        return None
    if not callable(derive):
        raise TypeError(f"{name}: {SCALE_ATTRIBUTE} must be a classmethod (context, params, "
                        f"here, there, space) returning parameter dicts, got {derive!r}")

    def rows(anchor: Verdict) -> list[TuningRecord]:
        try:
            there = _source_arguments(call, anchor.record)
            derived = derive(call.context, dict(anchor.parameters or {}), dict(call.arguments),
                             there, tuned.space_of(call))
        except Exception:  # noqa: BLE001 - stored parameters it cannot take: nothing derived
            return []
        if not isinstance(derived, (list, tuple)) or not all(isinstance(p, dict)
                                                            for p in derived):
            raise TypeError(f"{name}: {SCALE_ATTRIBUTE} must return a list of parameter "
                            f"dicts, got {derived!r}")
        try:
            texts = [encode_parameters(p) for p in derived]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{name}: {SCALE_ATTRIBUTE} returned parameters that cannot be "
                            f"stored: {exc}") from None
        search = json.dumps({SCALED: True})
        return [dataclasses.replace(anchor.record, parameters=text, search=search, ci_low=None,
                                    ci_high=None, ties=None, spread=None) for text in texts]

    return rows


def trial_rows(anchor: TuningRecord, ran: Iterable[TrialRecord]) -> Iterator[TuningRecord]:
    """The other configurations the search that found ``anchor`` measured at its size, as
    candidate rows of ``anchor``'s key, the fastest first, made as they are asked for:
    ``ran`` are the trials of its key that ran with its fingerprint, fastest first
    (:meth:`~.store.ResultStore.trials_that_ran`); malformed ones, ``anchor``'s own parameters
    and repeats (slower than the first) are left out (their parameters are judged by
    :func:`trial_judge`). Each row is ``anchor`` with the trial's parameters, its median as
    the score, and :data:`TRIAL` in its search text."""
    search = json.dumps({TRIAL: True})  # all a trial row's search text is read for
    seen: set[str] = set()
    for trial in ran:
        median = trial.median_seconds
        if trial.malformed or isinstance(median, bool) or not isinstance(median, (int, float)) \
                or not math.isfinite(median) or median <= 0 \
                or not isinstance(trial.parameters, str) \
                or trial.parameters == anchor.parameters or trial.parameters in seen:
            continue
        seen.add(trial.parameters)
        yield dataclasses.replace(anchor, parameters=trial.parameters, score=float(median),
                                  search=search, gbps=trial.gbps, gflops=trial.gflops,
                                  ci_low=None, ci_high=None, ties=None, spread=None)


def chosen_elsewhere(others: Iterable[tuple[float, TuningRecord]], source: TuningRecord,
                     reach: float = math.inf) -> dict[str, list[TuningRecord]]:
    """Which of the tuned sizes ``others`` (:func:`ranked`: each with its distance from the
    asking size) chose each configuration, by its parameters' canonical text
    (:func:`canonical`): ``source`` left out, and every size further than ``reach``."""
    votes: dict[str, list[TuningRecord]] = {}
    for far, record in others:
        if far > reach or record.key.arguments == source.key.arguments:
            continue
        text = canonical(record.parameters)
        if text is not None:
            votes.setdefault(text, []).append(record)
    return votes


def canonical(parameters: str) -> str | None:
    """Stored parameters' text as :func:`~.encoding.encode_parameters` writes it (None: not a
    JSON object), so that one configuration stored by two writers compares equal."""
    try:
        value = decode_parameters(parameters)
        return encode_parameters(value) if isinstance(value, dict) else None
    except (InvalidParametersError, TypeError, ValueError):
        return None


def near_ties(source: TuningRecord, trials: Iterable[TuningRecord]) -> Iterator[TuningRecord]:
    """The rows of ``trials`` (:func:`trial_rows` of ``source``'s search, fastest first) that
    ran within :data:`NEAR_TIE` of ``source``'s own time there."""
    if not isinstance(source.score, (int, float)) or not math.isfinite(source.score) \
            or source.score <= 0:
        return
    for row in trials:
        if row.score > source.score * (1 + NEAR_TIE):
            return
        yield row


def is_trial(record: TuningRecord) -> bool:
    """Whether ``record`` is a candidate row made of a trial (:func:`trial_rows`)."""
    return _marked(record, TRIAL)


def is_scaled(record: TuningRecord) -> bool:
    """Whether ``record`` is a candidate row derived from a size's result (:func:`scaler`)."""
    return _marked(record, SCALED)


def _marked(record: TuningRecord, mark: str) -> bool:
    if mark not in record.search:
        return False
    try:
        summary = load_json(record.search, "search")
    except MalformedJSONError:
        return False
    return isinstance(summary, dict) and summary.get(mark) is True


def served_as(verdict: Verdict | None, key: TuningKey) -> str:
    """How a lookup answered ``key``: ``exact``, ``stale`` (its own row, stale), ``similar``
    (another size), ``nearest`` (another device) or ``missed``."""
    if verdict is None:
        return "missed"
    other = verdict.record.key
    if other.arguments != key.arguments:
        return "similar"
    if other != key:
        return "nearest"
    return "exact" if verdict.freshness is Freshness.FRESH else "stale"


def similar_row(key: TuningKey, verdict: Verdict, far: float,
                device: dict[str, Any] | None = None) -> TuningRecord:
    """The row that records a similar serve of ``key``: the source's parameters and
    fingerprint, score ``inf`` (not timed at this size), origin ``similar`` and the source's
    arguments, device and score in the search summary (and ``"trial": true`` where the source
    is a trial of that size's search, :func:`trial_rows`; ``"scaled": true`` where it was
    derived from that size's result, :func:`scaler`)."""
    source = verdict.record
    origin: dict[str, Any] = {
        "arguments": source.key.arguments, "distance": round(far, 6),
        "device": list(source.key.device),
        "score": source.score if math.isfinite(source.score) else None}
    if is_trial(source):  # a configuration its search tried, not its result
        origin["trial"] = True
    elif is_scaled(source):  # derived from its result for this size
        origin["scaled"] = True
    search: dict[str, Any] = {"strategy": "similar", SOURCE: origin}
    if device is not None:
        search["device"] = device
    return TuningRecord(
        key=key, parameters=source.parameters, score=math.inf,
        package_version=autotune.__version__, fingerprint=source.fingerprint,
        sources=source.sources, search=json.dumps(search, sort_keys=True, separators=(",", ":")),
        origin=ResultOrigin.SIMILAR.value)


def _source_summary(record: TuningRecord) -> dict[str, Any]:
    """A similar row's summary of its source ({} for other rows or where it does not say)."""
    if record.origin != ResultOrigin.SIMILAR.value or not record.search:
        return {}
    try:
        summary = load_json(record.search, "search")
    except MalformedJSONError:
        return {}
    source = summary.get(SOURCE) if isinstance(summary, dict) else None
    return source if isinstance(source, dict) else {}


def source_arguments(record: TuningRecord) -> str | None:
    """The arguments (canonical JSON text) a similar row's parameters were tuned for; None for
    other rows or where the summary does not say."""
    arguments = _source_summary(record).get("arguments")
    return arguments if isinstance(arguments, str) else None


def served_a_trial(record: TuningRecord) -> bool:
    """Whether a similar row's parameters are a trial of its source's search, not the
    source's result."""
    return _source_summary(record).get("trial") is True


def served_scaled(record: TuningRecord) -> bool:
    """Whether a similar row's parameters were derived from its source's result for its own
    size (``autotune_scaled``), not served as they were tuned."""
    return _source_summary(record).get("scaled") is True


def similar_from(record: TuningRecord) -> str | None:
    """The size a similar row came from, for people: the arguments that differ from the row's
    own (``m=1024, n=1024``)."""
    arguments = source_arguments(record)
    if arguments is None:
        return None
    try:
        theirs, ours = load_json(arguments, "arguments"), load_json(record.key.arguments,
                                                                    "arguments")
    except MalformedJSONError:
        return describe_arguments(arguments)
    if not isinstance(theirs, dict) or not isinstance(ours, dict):
        return describe_arguments(arguments)
    differ = {k: v for k, v in theirs.items() if k not in ours or ours[k] != v}
    return describe_arguments(json.dumps(differ or theirs, separators=(",", ":")))


def origin_text(record: TuningRecord) -> str:
    """How a row was found, for tables: ``offline``, ``online``, ``similar (from ...)``, or
    ``similar (from ..., a trial)`` where a configuration that size's search tried was served,
    ``similar (from ..., scaled)`` where one derived from its result was (its result
    under-filled the device at this size)."""
    source = similar_from(record)
    if source is None:
        return record.origin
    how = ", a trial" if served_a_trial(record) else ", scaled" if served_scaled(record) else ""
    return f"similar (from {source}{how})"
