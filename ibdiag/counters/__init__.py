"""``ibdiag counters``: RDMA port error, backpressure and throughput counters — read, delta, judge.

Data flow: :mod:`~ibdiag.counters.read` (sysfs -> :class:`~ibdiag.counters.model.Sample`),
:mod:`~ibdiag.counters.delta` (saturation- and reset-aware deltas), :mod:`~ibdiag.counters.checks`
(findings), :mod:`~ibdiag.counters.reading` (one reading judged, for other commands), :mod:`~ibdiag.counters.views` (JSON, CSV, Prometheus, table: one module each). Nothing here imports pandas,
numpy, torch or pyverbs.
"""
