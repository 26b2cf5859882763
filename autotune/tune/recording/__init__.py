"""Recording: what a search or a scan leaves in the database.

- :mod:`.trials`: a run's trials, buffered and written in batches, and its result;
- :mod:`.kept`: results a database could not take, kept in the process and written later;
- :mod:`.writer`: the one background thread that writes online tuners' results;
- :mod:`.seeds`: where a search starts from what is stored (warm starts, stored choices for
  other arguments, the trials of an interrupted search).

The objects holding state (:class:`.kept.KeptResults`, :class:`.writer.ResultsWriter`) belong
to the serving object (:mod:`autotune.tune.serving`).
"""
