"""The tuner: declare a template's parameter space once, tune once per key, reuse forever.

>>> from autotune import tune
>>> class ScaleTemplate:
...     autotune_version = 1
...     autotune_sources = (TEMPLATE,)
...     @classmethod
...     def autotune_space(cls, context, dtype):
...         return tune.Space({"wgs": [32, 64, 128, 256]},
...                           [lambda p: p["wgs"] <= context.device.max_work_group_size])
...     @classmethod
...     @tune.autotuner(test={"wgs": 64})
...     def autotune(cls, context, dtype):
...         ...
...         return tune.autotune(generate)      # searches autotune_space
"""

from .decorator import (
    ENV_MATCH,
    MATCH_MODES,
    ConfigurationError,
    Fingerprint,
    Freshness,
    MatchMode,
    TunedFunction,
    TuningOutcome,
    Verdict,
    autotuner,
    clear_memo,
    get_store,
    match_mode,
    test_mode,
)
from .encoding import (
    ArgumentEncodingError,
    ArgumentsTooLongError,
    InvalidParametersError,
    MalformedJSONError,
    StoredEnum,
    decode_arguments,
    describe_arguments,
    encode_arguments,
    encode_parameters,
    validate_parameters,
)
from .expressions import ExpressionError
from .kernels import KernelTuning, TunedKernel, tune_kernel, tuned_kernel
from .frames import export_rows, results_frame, trials_frame
from .measurement import Measurement, WrongResult, make_measure
from .records import TRIAL_STATUSES, ResultOrigin, TrialRecord, TrialStatus, TuningKey, TuningRecord
from .evaluation import Budget
from .replay import Landscape, ReplayRun, landscape, replay
from .online import OnlineTuner, OnlineTuningError
from .templates import Tuning, checked_tuning, tuner_of, tuning_for
from .search import (
    AutotuneError,
    InvalidConfiguration,
    SearchResult,
    SearchSettings,
    Trial,
    autotune,
    classify,
    observers,
    search,
    search_settings,
)
from .strategies import STRATEGIES
from .space import RestrictionKind, Space, SpaceError, at_most, limit, preference, restriction
from .store import (
    MergeCounts,
    MergePolicy,
    NotAnExportError,
    ReadOnlyStoreError,
    ResultStore,
    StoreBusyError,
    StoreError,
    StorePathError,
    StoreUnavailableError,
    database_url,
    display,
    export_text,
    format_for,
    read_import,
    rows_text,
    sqlite_file,
    use_database,
)
from .validation import changed_sources, parameters_problem, record_problem, recorded_test, trial_problem

__all__ = [
    "ExpressionError",
    "KernelTuning",
    "TunedKernel",
    "tune_kernel",
    "tuned_kernel",
    "OnlineTuner",
    "OnlineTuningError",
    "ENV_MATCH",
    "STRATEGIES",
    "Budget",
    "Landscape",
    "ReplayRun",
    "SearchSettings",
    "landscape",
    "replay",
    "results_frame",
    "rows_text",
    "trials_frame",
    "search_settings",
    "MATCH_MODES",
    "TRIAL_STATUSES",
    "ArgumentEncodingError",
    "ArgumentsTooLongError",
    "AutotuneError",
    "ConfigurationError",
    "Fingerprint",
    "Freshness",
    "InvalidConfiguration",
    "InvalidParametersError",
    "MalformedJSONError",
    "MatchMode",
    "Measurement",
    "MergeCounts",
    "MergePolicy",
    "NotAnExportError",
    "ReadOnlyStoreError",
    "ResultOrigin",
    "ResultStore",
    "SearchResult",
    "Space",
    "SpaceError",
    "StoreBusyError",
    "StoreError",
    "StorePathError",
    "StoreUnavailableError",
    "StoredEnum",
    "Trial",
    "TrialRecord",
    "TrialStatus",
    "TunedFunction",
    "TuningKey",
    "TuningOutcome",
    "TuningRecord",
    "Verdict",
    "WrongResult",
    "autotune",
    "autotuner",
    "checked_tuning",
    "classify",
    "clear_memo",
    "database_url",
    "decode_arguments",
    "describe_arguments",
    "display",
    "encode_arguments",
    "encode_parameters",
    "export_rows",
    "export_text",
    "format_for",
    "get_store",
    "make_measure",
    "match_mode",
    "observers",
    "read_import",
    "parameters_problem",
    "record_problem",
    "changed_sources",
    "recorded_test",
    "restriction",
    "limit",
    "preference",
    "RestrictionKind",
    "at_most",
    "search",
    "sqlite_file",
    "test_mode",
    "trial_problem",
    "tuner_of",
    "Tuning",
    "tuning_for",
    "use_database",
    "validate_parameters",
]
