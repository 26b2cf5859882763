"""autotune: offline GPU kernel autotuning with a SQL result store.

``autotune.accel`` is the device layer (CUDA and OpenCL); ``autotune.tune`` is the tuner.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("autotune")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "0.0.0+unknown"


def __getattr__(name: str) -> str:
    # Looked up on first use: importlib.metadata costs more than serving a stored result.
    if name == "__version__":
        return _version()
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")
