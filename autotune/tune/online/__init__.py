"""Online tuning: tune a kernel's launch parameters while the real work runs.

Each launch of an iterative computation is wrapped in ``with tuner.measure(queue) as params``.
While *scanning*, every launch uses the next candidate and is timed with device events that are
read later, when they have finished (never stalling the host in the hot path); after ``samples``
launches of every valid candidate, the median of each decides (those within a few percent of the
best are first timed as often again, :data:`REFINE_MARGIN`), and the tuner *locks* on the best
for ``period`` seconds, then scans again to follow changes. A launch that fails skips its
candidate for the rest of the scan. The best of each scan is stored in the tuning database under
the same kind of key as an offline result, with its trials, so the next process starts locked.

Locked, ``measure`` returns one preallocated object: no device work, no allocation, no lock.

Kernels whose parameters are compile-time constants name a ``prepare`` callable: it builds a
candidate's kernels in background threads while the work goes on, and a candidate is launched
only once it is prepared (until then, launches use the fastest candidate timed so far, else
its first seed, else ``test=``). Several kernels sharing one set of parameters (the variants of
a template) name the ``part`` of each launch: each part scans the candidates on its own, and a candidate's score is
its parts' medians weighted by how often each part is launched (seconds per launch of the
mix), so a periodic sequence of different kernels biases no candidate; parts launched rarely
(under ``RARE_PART`` of the launches) do not hold up the scan.

The modules: :mod:`.tuner` (``OnlineTuner``, the face: arguments, key, loading and storing,
the build pool, ``measure``), :mod:`.scan` (the scan itself: candidates and timings in, the
best and its score out; it knows nothing of keys or databases), :mod:`.timers` (the timers in
flight per queue), :mod:`.builds` (the build pool), :mod:`.seeds` (where a scan starts),
:mod:`.stored` (everything that reads or writes the database), :mod:`.arguments` (defaults
and checks) and :mod:`.settings` (:func:`template_budget`).
"""

from .arguments import DEFAULT_PERIOD, DEFAULT_SAMPLES, OnlineTuningError
from .scan import IDLE_RECHECK, RARE_PART, REFINE_AT_MOST, REFINE_MARGIN, Candidate, Scan, ScanResult
from .settings import template_budget, template_budget_now
from .timers import TIMERS_PER_QUEUE
from .tuner import OnlineTuner

__all__ = [
    "DEFAULT_PERIOD", "DEFAULT_SAMPLES", "IDLE_RECHECK", "RARE_PART", "REFINE_AT_MOST",
    "REFINE_MARGIN", "TIMERS_PER_QUEUE", "Candidate", "OnlineTuner", "OnlineTuningError", "Scan",
    "ScanResult", "template_budget", "template_budget_now",
]
