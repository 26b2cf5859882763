"""Bridges from other autotuners to autotune's shared result store.

- :mod:`autotune.integrations.stored_configs`: the choice among a fixed list of launch
  configurations, kept in the tuning database per configuration (no third-party import).
- :mod:`autotune.integrations.triton`: ``autotune`` in place of ``@triton.autotune`` (needs the
  ``triton`` extra).

Nothing here is imported by ``autotune`` itself: the optional packages load only when used.
"""
