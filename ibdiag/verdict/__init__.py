"""``ibdiag verdict``'s library: is the network the bottleneck of a data-parallel job?

:mod:`~ibdiag.verdict.model` (pure arithmetic: traffic, overlap, bucket search, scaling wall),
:mod:`~ibdiag.verdict.inputs` (the workload and the measured busbw from flags, bench JSON or nccl-tests logs),
:mod:`~ibdiag.verdict.node` (``--root``: rails and topo/counters health), :mod:`~ibdiag.verdict.judge`
(inputs -> verdict and findings), :mod:`~ibdiag.verdict.render` (sentences, tables, charts, CSV, Prometheus).
"""
