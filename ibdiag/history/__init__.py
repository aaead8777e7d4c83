"""Port history: what the node's links did over time (``--history DIR`` on ``counters`` and ``topo``).

Data flow: :mod:`~ibdiag.history.store` (records in a directory, written atomically, pruned, read back
through jsonread), :mod:`~ibdiag.history.analysis` (records -> each port's flaps and error bursts, with
``counters``' reset and saturation rules), :mod:`~ibdiag.history.checks` (findings),
:mod:`~ibdiag.history.run` (one run: read, record, judge).
"""
