"""Port health: is each RDMA port ACTIVE/LinkUp and at the rate it should run? One judgement and one
``[ports]`` table for ``ibdiag topo``, ``ibdiag counters`` and ``ibdiag verdict`` alike.

:mod:`~ibdiag.ports.config` (``[ports]``: the expected rate, patterns to ignore or to expect at a rate),
:mod:`~ibdiag.ports.rates` (the rate each port must reach, and why), :mod:`~ibdiag.ports.checks`
(``port.state`` and ``port.rate``), :mod:`~ibdiag.node.ports` (every port of the node, for the peers).
"""
