"""Plain records exchanged between the tuner and the result store.

The store keeps these as rows and knows nothing about kernels; the tuner builds and validates
them and knows nothing about SQL. JSON fields are carried as text: the tuner encodes them and
validates what it reads back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

#: Status of one tried configuration. ``ok`` trials have timings; the others a message.
TRIAL_STATUSES = (
    "ok",
    "invalid",
    "compile_error",
    "launch_error",
    "wrong_result",
    "error",
)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class TuningKey:
    """What one tuning result is for: a function, its version, a device and its arguments."""

    function: str  #: qualified name, e.g. ``operations.reduce.ReduceTemplate.autotune``
    version: int  #: the template class's ``autotune_version``
    device_name: str
    device_platform: str
    driver_version: str
    arguments: str  #: canonical JSON of the arguments after ``cls`` and ``context``

    @property
    def device(self) -> tuple[str, str, str]:
        return (self.device_name, self.device_platform, self.driver_version)


@dataclass(frozen=True)
class TuningRecord:
    """The best parameters found for a key (one row of ``tuning_results``)."""

    key: TuningKey
    parameters: str  #: JSON object text, e.g. ``{"wgs": 256}``
    score: float  #: median seconds per iteration of the winning configuration
    package_version: str
    created_at: datetime = field(default_factory=utcnow)


@dataclass(frozen=True)
class TrialRecord:
    """One configuration tried while tuning a key (one row of ``tuning_trials``)."""

    key: TuningKey
    parameters: str  #: JSON object text
    status: str  #: one of :data:`TRIAL_STATUSES`
    message: str = ""
    min_seconds: float | None = None
    median_seconds: float | None = None
    max_seconds: float | None = None
    created_at: datetime = field(default_factory=utcnow)
