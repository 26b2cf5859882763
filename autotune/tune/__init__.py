"""The tuner: declare a template's parameter space once, tune once per key, reuse forever.

>>> from autotune import tune
>>> class ScaleTemplate:
...     autotune_version = 1
...     @classmethod
...     @tune.autotuner(test={"wgs": 64})
...     def autotune(cls, context, dtype):
...         ...
...         return tune.autotune(generate, wgs=[32, 64, 128, 256])
"""

from .decorator import (
    ENV_MATCH,
    ConfigurationError,
    autotuner,
    clear_memo,
    match_mode,
    test_mode,
)
from .encoding import (
    ArgumentEncodingError,
    InvalidParametersError,
    decode_arguments,
    encode_arguments,
    validate_parameters,
)
from .records import TRIAL_STATUSES, TrialRecord, TuningKey, TuningRecord
from .search import (
    AutotuneError,
    InvalidConfiguration,
    SearchResult,
    Trial,
    WrongResult,
    autotune,
    make_measure,
    search,
)

__all__ = [
    "ENV_MATCH",
    "TRIAL_STATUSES",
    "ArgumentEncodingError",
    "AutotuneError",
    "ConfigurationError",
    "InvalidConfiguration",
    "InvalidParametersError",
    "SearchResult",
    "Trial",
    "TrialRecord",
    "TuningKey",
    "TuningRecord",
    "WrongResult",
    "autotune",
    "autotuner",
    "clear_memo",
    "decode_arguments",
    "encode_arguments",
    "make_measure",
    "match_mode",
    "search",
    "test_mode",
    "validate_parameters",
]
