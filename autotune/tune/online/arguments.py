"""The online tuner's arguments: defaults, and the checks that turn bad values into one clear
:class:`OnlineTuningError` naming the argument."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Mapping

from ... import accel
from ..verdicts import Fingerprint, make_fingerprint
from ..encoding import validate_test_parameters
from ..space import Space, SpaceError

DEFAULT_SAMPLES = 5
DEFAULT_PERIOD = 600.0


class OnlineTuningError(ValueError):
    """An online tuner was set up with values it cannot use."""


def check_options(context: accel.Context, name: str, *, samples: Any, period: Any, version: Any,
                  prepare: Any, workers: Any, budget: Any, comm: Any) -> tuple[accel.DeviceIdentity, int]:
    """The context's device and the number of build threads (``workers``, defaulted), or an
    :class:`OnlineTuningError` for the first bad value."""
    device = getattr(context, "device", None)
    if comm is not None and prepare is not None:
        raise OnlineTuningError(f"OnlineTuner {name}: a collective tuner (comm=) builds its "
                                "candidates at their first launch, the same on every rank: "
                                "drop prepare=")
    if not isinstance(device, accel.DeviceIdentity):
        raise OnlineTuningError(f"OnlineTuner needs an autotune.accel context, got "
                                f"{type(context).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise OnlineTuningError(f"OnlineTuner name must be a non-empty string, got {name!r}")
    _check_counts(samples, period, version)
    if prepare is not None and not callable(prepare):
        raise OnlineTuningError(f"prepare={prepare!r}: give a function of the parameters")
    if workers is None:
        workers = max(1, min(4, (os.cpu_count() or 2) - 1))
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 64:
        raise OnlineTuningError(f"workers={workers!r}: give an int from 1 to 64")
    if budget is not None and not _positive_seconds(budget):
        raise OnlineTuningError(f"budget={budget!r}: give a positive number of seconds, or None "
                                "to scan every candidate")
    if budget is not None and prepare is None:
        raise OnlineTuningError(f"OnlineTuner {name}: budget= bounds the wait for candidates "
                                "being prepared; without prepare= every candidate is ready at "
                                "once: drop budget=")
    return device, workers


def _check_counts(samples: Any, period: Any, version: Any) -> None:
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= 1000:
        raise OnlineTuningError(f"samples={samples!r}: give an int from 1 to 1000")
    if not _positive_seconds(period):
        raise OnlineTuningError(f"period={period!r}: give a positive number of seconds")
    if isinstance(version, bool) or not isinstance(version, int):
        raise OnlineTuningError(f"version={version!r}: give an int")


def _positive_seconds(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and \
        value > 0 and math.isfinite(value)


def check_space(name: str, space: Mapping[str, Any] | Space, test: dict[str, Any],
                sources: Iterable[str | Path], fingerprint: Fingerprint | None,
                ) -> tuple[Space, dict[str, Any], list[dict[str, Any]], Fingerprint]:
    """The space, the checked ``test=``, the valid configurations (perhaps none) and the
    fingerprint (made from ``sources`` and the space where none is given), or a clear error."""
    try:
        space = space if isinstance(space, Space) else Space(space)
        test = validate_test_parameters(test)
        configurations = space.configurations()
        if fingerprint is None:
            files: dict[str, accel.SourceFile] = {}
            for template in sources:
                files.update((f.name, f) for f in accel.template_sources(template))
            fingerprint = make_fingerprint([files[n] for n in sorted(files)], space)
    except (SpaceError, TypeError, ValueError, FileNotFoundError) as exc:
        raise OnlineTuningError(f"OnlineTuner {name}: {exc}") from None
    if set(test) != set(space.names):
        raise OnlineTuningError(f"OnlineTuner {name}: test= names {sorted(test)} differ "
                                f"from the space's {sorted(space.names)}")
    return space, test, configurations, fingerprint

