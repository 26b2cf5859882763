"""The tuner: declare a template's parameter space once, tune once per key, reuse forever.

>>> from autotune import tune
>>> class ScaleTemplate:
...     autotune_version = 1
...     autotune_sources = (TEMPLATE,)
...     @classmethod
...     def autotune_space(cls, context, dtype):
...         return tune.Space({"wgs": [32, 64, 128, 256]},
...                           [tune.limit("fits", lambda p: p["wgs"] <= context.device.max_work_group_size)])
...     @classmethod
...     @tune.autotuner(test={"wgs": 64})
...     def autotune(cls, context, dtype):
...         ...
...         return tune.autotune(generate)      # searches autotune_space
...     def __init__(self, context, dtype, tuning=None):
...         self.tuning = tune.tuning_for(ScaleTemplate, context, tuning, dtype=dtype).parameters

This module is the contract a user writes against (``__all__``). The machinery behind it is
importable from named submodules (see docs/architecture.md): ``serving`` (the process state),
``verdicts`` (the judge of stored rows), ``lookup``, ``recording``, ``offline``, ``online``,
``search``/``strategies``/``evaluation``, ``space``, ``records``, ``encoding``,
``validation``, ``store``, ``registry``, ``frames``, ``replay`` (``landscape``), ``kernels``,
``collective`` (its errors, communicators and ``split``).
"""

from .collective import collective
from .decorator import TunedFunction, autotuner, tuner_of
from .encoding import InvalidParametersError
from .expressions import ExpressionError
from .frames import results_frame, trials_frame
from .kernels import tune_kernel, tuned_kernel
from .measurement import Measurement, WrongResult, make_measure
from .online import OnlineTuner, OnlineTuningError
from .records import TuningKey, TuningRecord
from .replay import replay
from .search import AutotuneError, InvalidConfiguration, SearchResult, autotune, observing, search, search_settings
from .serving import ConfigurationError, clear_memo, serving, using_serving
from .space import Space, SpaceError, at_most, limit, preference, restriction
from .store import StoreError, use_database
from .templates import Tuning, checked_tuning, tuning_for

__all__ = [
    # declaring and calling a tuned template
    "autotuner", "TunedFunction", "tuner_of", "tuning_for", "Tuning", "checked_tuning",
    # searching
    "autotune", "search", "search_settings", "observing", "SearchResult", "Measurement",
    "make_measure", "WrongResult",
    # spaces
    "Space", "limit", "preference", "restriction", "at_most",
    # online tuning
    "OnlineTuner",
    # Kernel Tuner's calling convention
    "tune_kernel", "tuned_kernel",
    # serving and the store
    "serving", "using_serving", "clear_memo", "use_database", "TuningKey", "TuningRecord",
    # one choice for all ranks (MPI, torch.distributed)
    "collective",
    # reading results
    "results_frame", "trials_frame", "replay",
    # errors
    "AutotuneError", "InvalidConfiguration", "ConfigurationError", "SpaceError", "StoreError",
    "InvalidParametersError", "OnlineTuningError", "ExpressionError",
]
