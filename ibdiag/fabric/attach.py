"""What the fabric's readers add to another command: ``ibdiag counters --far-end``, the switch port at
the other end of each InfiniBand cable, read with infiniband-diags (:mod:`ibdiag.fabric.farend`) and
judged with counters' rules (``fabric.far_end``).

``counters`` sits below this package: it takes the hook as a plain function of its reading
(:data:`ibdiag.counters.command.CountersExtra`), as it takes the history's (:mod:`ibdiag.history.attach`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ibdiag.counters.command import CountersExtra, CountersReading
from ibdiag.output.outputs import Addition, TableLayout

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ibdiag.fabric.farend import FarEnd


def counters_far_end(environ: Mapping[str, str]) -> CountersExtra:
    """The hook ``counters --far-end`` applies to its snapshot: the far ends (``far_end`` in the JSON),
    their findings, and their table above the ports' one. ``environ``: where the tools are found."""

    def add(reading: CountersReading) -> Addition:
        # The tools' runner, parsers and checks load for --far-end only: ibdiag counters imports
        # this module on every run (its start-up).
        from ibdiag.fabric.checks import far_end  # lazy: start-up, as above
        from ibdiag.fabric.farend import FarEndReader, far_ends  # lazy: start-up, as above

        ends = far_ends(reading.sysfs, reading.sample, FarEndReader(environ))
        return Addition(
            data={"far_end": [e.to_json() for e in ends]},
            findings=tuple(far_end(ends, reading.counters_cfg)),
            table=lambda layout: _table(ends, layout),
        )

    return add


def _table(ends: Sequence[FarEnd], layout: TableLayout) -> list[RenderableType]:
    from ibdiag.fabric.views.table import far_end_table  # lazy: rich, for the table output only

    return [far_end_table(list(ends))]
