"""Views of counter readings and spans, one module per output format; pure functions of the models
(``cli/counters.py`` prints what they return and picks one by ``--format``):

:mod:`~ibdiag.counters.views.json_data` (``ibdiag.counters/1`` data), :mod:`~ibdiag.counters.views.csv_rows`
(long form, one row per sample x port x counter), :mod:`~ibdiag.counters.views.prom_metrics` (Prometheus,
node_exporter's names), :mod:`~ibdiag.counters.views.table` (rich tables and their legend).
"""
