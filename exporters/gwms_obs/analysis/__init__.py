"""``gwms-obs analyze``: where pilots spend their validation time, and what it costs.

One way, like the rest of the package (docs/analysis.md):

* :mod:`.spans` — a pilot's spans (from a spool or from Jaeger) as :class:`~.spans.Span` rows;
* :mod:`.collect` — the spans of a factory tree (its .err spools, read by the pipeline) and of
  Jaeger, joined with the accounting into :class:`~.collect.Sample` rows;
* :mod:`.stats` — quantiles, median, MAD, robust z (pure);
* :mod:`.distributions` — count, p50, p90, p99, mean per entry × phase or script;
* :mod:`.outliers` — fleet medians, each entry's robust z, pilots flagged within their entry;
* :mod:`.actions` — the ranked action list in canonical core-hours per week;
* :mod:`.render` — table, CSV, JSON and the PNG.
"""
