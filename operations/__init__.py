"""Tuned operation templates built on :mod:`autotune` (public API only)."""
