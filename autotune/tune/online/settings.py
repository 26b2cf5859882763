"""Settings of online tuners chosen from outside the code that makes them (a benchmark's)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from contextvars import ContextVar

from .arguments import OnlineTuningError

_template_budget: ContextVar[float | None] = ContextVar("autotune_online_template_budget",
                                                        default=None)


@contextlib.contextmanager
def template_budget(seconds: float | None) -> Iterator[None]:
    """Within the block (in this thread or task), tuners made by
    :meth:`~autotune.tune.OnlineTuner.for_template` with ``prepare`` and no ``budget`` of their
    own take ``seconds`` as their budget (None: scan every candidate, the default)."""
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                or not (seconds > 0 and math.isfinite(seconds))):
        raise OnlineTuningError(f"template_budget({seconds!r}): give a positive number of "
                                "seconds, or None to scan every candidate")
    token = _template_budget.set(seconds)
    try:
        yield
    finally:
        _template_budget.reset(token)


def template_budget_now() -> float | None:
    """The budget :func:`template_budget` chose here (None: none)."""
    return _template_budget.get()
