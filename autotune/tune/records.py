"""Plain records exchanged between the tuner and the result store, and their vocabularies.

The store keeps these as rows and knows nothing about kernels; the tuner builds and validates
them and knows nothing about SQL. JSON fields are carried as text: the tuner encodes them and
validates what it reads back.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timezone


class TrialStatus(str, enum.Enum):
    """Outcome of one tried configuration. ``ok`` trials have timings; the others a message."""

    OK = "ok"
    INVALID = "invalid"  #: ``generate`` raised :class:`~autotune.tune.InvalidConfiguration`
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"
    WRONG_RESULT = "wrong_result"  #: the candidate's check failed; it never wins
    ERROR = "error"  #: any other exception

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, value: object) -> TrialStatus:
        """The status named by ``value``; ValueError listing the known ones."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"invalid trial status {value!r}; expected one of "
                             f"{', '.join(s.value for s in cls)}") from None


#: The status names, in declaration order (for code that wants plain strings).
TRIAL_STATUSES = tuple(s.value for s in TrialStatus)


class ResultOrigin(str, enum.Enum):
    """How a stored result was found."""

    OFFLINE = "offline"  #: by a search before use (``@autotuner``, ``warm``)
    ONLINE = "online"  #: while the real work ran
    #: not tuned for its key: served (``AUTOTUNE_MATCH=similar``) from the nearest size tuned;
    #: the search summary says which (:mod:`~autotune.tune.similar`). Exact lookups and
    #: ``warm`` treat it as not tuned.
    SIMILAR = "similar"

    def __str__(self) -> str:
        return self.value


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
    """The best parameters found for a key (one row of ``tuning_results``).

    ``malformed`` is set by the store when a stored cell does not have its column's type (a
    date that is not a date, a score that is not a number): such a row is never used.
    """

    key: TuningKey
    parameters: str  #: JSON object text, e.g. ``{"wgs": 256}``
    score: float  #: median seconds per call of the winner; ``inf`` if chosen without timing
    package_version: str
    created_at: datetime = field(default_factory=utcnow)
    #: what the result was tuned against: a digest of the kernel sources and the space
    fingerprint: str = ""
    sources: str = ""  #: JSON object text ``{template file name: SHA-256}``
    search: str = ""  #: JSON object text: strategy, budget, configurations tried
    origin: str = ResultOrigin.OFFLINE.value
    gbps: float | None = None  #: bytes moved per call / score, in GB/s, where declared
    gflops: float | None = None  #: flops per call / score, in GFLOP/s, where declared
    #: the 95% interval of the winner's median, in seconds (None: chosen without re-timing)
    ci_low: float | None = None
    ci_high: float | None = None
    ties: int | None = None  #: candidates that could not be told apart from the fastest
    spread: float | None = None  #: of the winner's batches: IQR / (1.349 * median)
    malformed: str = ""


@dataclass(frozen=True)
class TrialRecord:
    """One configuration tried while tuning a key (one row of ``tuning_trials``)."""

    key: TuningKey
    parameters: str  #: JSON object text
    status: str  #: a :class:`TrialStatus` value
    message: str = ""
    min_seconds: float | None = None
    median_seconds: float | None = None
    max_seconds: float | None = None
    created_at: datetime = field(default_factory=utcnow)
    fingerprint: str = ""  #: the fingerprint of the run that tried it
    gbps: float | None = None
    gflops: float | None = None
    malformed: str = ""
