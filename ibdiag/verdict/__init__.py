"""``ibdiag verdict``'s library: is the network the bottleneck of a data-parallel job?

:mod:`~ibdiag.verdict.model` (pure arithmetic: traffic, overlap, bucket search, scaling wall),
:mod:`~ibdiag.verdict.inputs` (the workload and the measured busbw from flags, bench JSON or nccl-tests logs),
:mod:`~ibdiag.verdict.config` (``[verdict]``), :mod:`~ibdiag.verdict.ceiling` (rails x link rate),
:mod:`~ibdiag.verdict.node` and :mod:`~ibdiag.verdict.health` (``--root``: rails and topo/port/counters health),
:mod:`~ibdiag.verdict.judge` (inputs -> the verdict), :mod:`~ibdiag.verdict.checks` (its findings, in
:mod:`~ibdiag.verdict.registry`'s ``CHECKS``), :mod:`~ibdiag.verdict.onfabric` and
:mod:`~ibdiag.verdict.placement` (``--fabric``: the job's nodes on the fabric),
:mod:`~ibdiag.verdict.command` (the entry point: ``run(VerdictRequest) -> VerdictResult``),
:mod:`~ibdiag.verdict.views` (sentences, tables, charts, CSV, Prometheus).
"""
