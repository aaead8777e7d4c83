"""Views of counter readings and spans, one module per output format; pure functions of the models.
:mod:`~ibdiag.counters.views.outputs` turns ``ibdiag counters``' result into them (``cli/counters.py``
prints what they return and picks one by ``--format``), and draws a series' progress and ``--watch``. The formats:

:mod:`~ibdiag.counters.views.json_data` (``ibdiag.counters/1`` data), :mod:`~ibdiag.counters.views.csv_rows`
(long form, one row per sample x port x counter), :mod:`~ibdiag.counters.views.prom_metrics` (Prometheus,
node_exporter's names), :mod:`~ibdiag.counters.views.table` (rich tables and their legend).
"""
