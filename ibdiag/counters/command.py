"""``ibdiag counters`` as a library: the request, the reading other packages add to, the result.

(The entry point ``run(CountersRequest) -> CountersResult`` joins this module with the command line's
move to library entry points; :class:`CountersReading` is what ``--history``, ``--kernel-log`` and
``--far-end`` add to, through hooks the command line makes.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ibdiag.counters.config import CountersConfig
from ibdiag.counters.model import Sample
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.output.outputs import Addition


@dataclass(frozen=True)
class CountersReading:
    """One reading of the node's counters, while its tree is open."""

    sample: Sample
    sysfs: SysfsRoot
    host: str
    counters_cfg: CountersConfig


#: What another package adds to a counters reading (history, kernel log, far ends).
CountersExtra = Callable[[CountersReading], Addition]
