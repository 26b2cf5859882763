"""What a template constructor calls: :func:`tuning_for` turns its ``tuning=`` argument into
checked parameters or an online tuner, one call for every template.

>>> chosen = tune.tuning_for(ScaleTemplate, context, tuning, dtype=self.dtype)
>>> self.wgs = chosen.parameters["wgs"]

``tuning`` is None (the stored result, tuned now on a miss), a dict of parameters (those left
out take their ``test=`` values; checked against the names and kinds of ``test=`` and the
limits of the space the template declares) or ``"online"`` (tuned while the work runs, for a
template whose constructor passes ``online=``). :func:`checked_tuning` is the check alone,
:func:`~.decorator.tuner_of` the :class:`~.decorator.TunedFunction` behind a template
class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .decorator import tuner_of
from .encoding import InvalidParametersError, validate_parameters
from .text import guard_logger

if TYPE_CHECKING:
    from .online import OnlineTuner

logger = guard_logger("autotune.tune")  # stored text in its messages is shown escaped

#: what ``tuning=`` may be, by whether the template tunes online (for the errors)
_ACCEPTED = {True: "a dict of parameters, None or 'online'", False: "a dict of parameters or None"}


@dataclass(frozen=True)
class Tuning:
    """What :func:`tuning_for` chose: checked ``parameters`` to render the kernels with, or,
    for ``tuning="online"``, None and the ``online`` tuner that gives each launch its
    parameters (None too where the template makes its tuners later, one per instance it runs:
    then only :attr:`is_online` says so)."""

    parameters: dict[str, Any] | None
    online: OnlineTuner | None = None

    @property
    def is_online(self) -> bool:
        """True for ``tuning="online"``: the parameters are chosen while the work runs."""
        return self.parameters is None


def tuning_for(template: type, context: Any, tuning: Any, *,
               online: Mapping[str, Any] | bool = False, **arguments: Any) -> Tuning:
    """The tuning a constructor of ``template`` renders with, for its ``tuning=`` argument and
    the ``arguments`` of its ``autotune`` (by name: they make the tuning key):

    - None: ``template.autotune(context, **arguments)`` (the stored result, tuned on a miss),
      then checked as a dict is;
    - a dict: parameters left out take their ``test=`` values, then :func:`checked_tuning`
      (the names and kinds of ``test=``, the limits of the declared space; a broken preference
      is logged at INFO);
    - ``"online"``: for a template whose constructor says how it tunes online with ``online``:
      a mapping of :meth:`OnlineTuner.for_template` options (``prepare=``, ``samples=``, ...)
      makes the tuner now (:attr:`Tuning.online`); True accepts ``"online"`` and makes none,
      for a template that makes a tuner for each instance it runs (a fused pass, whose
      candidates are built for one queue and length: it calls ``tuning_for(template, context,
      "online", online={...}, **arguments)`` then). With ``online`` False (the default),
      ``"online"`` is a ValueError, as is any other value of ``tuning``.
    """
    supported = online is not False
    if tuning is None:
        tuning = template.autotune(context, **arguments)
    elif isinstance(tuning, Mapping):  # parameters left out take their test= values
        tuning = {**tuner_of(template).test, **tuning}
    elif isinstance(tuning, str) and tuning == "online" and supported:
        if isinstance(online, Mapping):
            from .online import OnlineTuner  # (the online tuner is built on the templates' face)

            return Tuning(None, OnlineTuner.for_template(template, context, **online, **arguments))
        return Tuning(None)
    else:
        why = "" if supported or tuning != "online" else f" ({template.__name__} has no online tuning)"
        raise ValueError(f"{template.__name__}: tuning must be {_ACCEPTED[supported]}{why}, "
                         f"got {tuning!r}")
    return Tuning(checked_tuning(template, context, tuning, **arguments))


def checked_tuning(template: type, context: Any, tuning: Any, **arguments: Any) -> dict[str, Any]:
    """Explicit tuning parameters for ``template`` on ``context``, checked: the names and kinds
    of its ``test=``, and allowed by the limits of the space it declares for these
    ``arguments`` (the device's limits among them). Returns a clean copy; ValueError naming
    the problem otherwise. Values need not be among the searched lists, and a preference they
    break (a shape not worth searching) is logged at INFO, not refused."""
    tuner = tuner_of(template)
    try:
        clean = validate_parameters(tuning, tuner.test)
    except InvalidParametersError as exc:
        raise ValueError(f"{template.__name__}: tuning {tuning!r}: {exc}") from None
    space = tuner.declared_space(template, context, arguments)
    if space is not None:
        why = space.runs(clean)
        if why is not None:
            raise ValueError(f"{template.__name__}: tuning {clean} cannot run on "
                             f"{context.device.name}: {why}")
        broken = space.preference_broken(clean)
        if broken is not None:
            logger.info("%s: tuning %s is used as given although the preference %s would not "
                        "search it on %s", template.__name__, clean, broken, context.device.name)
    return clean
