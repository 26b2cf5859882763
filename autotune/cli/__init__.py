"""``python -m autotune``: pre-tune (warm), inspect, share and plot tuning results."""

from .main import main

__all__ = ["main"]
