"""autotune: offline GPU kernel autotuning with a SQL result store.

``autotune.accel`` is the device layer (CUDA and OpenCL); ``autotune.tune`` is the tuner.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("autotune")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+unknown"
