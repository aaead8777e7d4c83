"""Views of a judged fabric: JSON data, table, CSV rows, Prometheus metrics (one module each), and
:func:`outputs`, the result in every format ``ibdiag fabric`` writes.

The modules are imported where a format is written, not here: they stand on the judgement's
modules, which a live run loads while the tools run (:data:`FORMAT_MODULES`,
:attr:`ibdiag.fabric.command.FabricRequest.preload`)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ibdiag.output.outputs import CsvRows, Outputs, TableLayout

if TYPE_CHECKING:
    from rich.console import RenderableType

    from ibdiag.fabric.command import FabricResult
    from ibdiag.output.prom import Metric

#: ``-o`` format -> the modules writing it needs beyond the JSON data's (imported while a live
#: fabric's tools run).
FORMAT_MODULES: dict[str, tuple[str, ...]] = {
    "json": ("ibdiag.output.jsonout",),
    "table": ("ibdiag.fabric.views.table", "ibdiag.output.table"),
    "csv": ("ibdiag.fabric.views.csv_rows", "ibdiag.output.csvout"),
    "prom": ("ibdiag.fabric.views.prom_metrics", "ibdiag.output.prom"),
}


def outputs(result: FabricResult) -> Outputs:
    """The result in every format ``ibdiag fabric`` writes."""
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=partial(csv, result),
        prom=partial(prom, result),
    )


def table_items(result: FabricResult, layout: TableLayout) -> list[RenderableType]:
    """The fabric's head line, the findings (worst first), then the subnet manager, the shape and the
    switches."""
    # lazy: rich, for the table output only (start-up of -o json)
    from ibdiag.fabric.views import table as view
    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    judged = result.judged
    return [
        view.head(judged),
        *findings_block(result.report, strict=layout.strict, width=layout.width),
        *view.items(judged, layout.width),
    ]


def csv(result: FabricResult) -> CsvRows:
    """One row per cabled port, with its far end and its counters."""
    # lazy: the judgement's modules behind it (see the module's docstring)
    from ibdiag.fabric.views import csv_rows

    return csv_rows.CSV_HEADER, csv_rows.csv_rows(result.judged)


def prom(result: FabricResult) -> list[Metric]:
    """Per switch port, the shape's per-switch and fabric-wide series, the masters."""
    # lazy: as csv
    from ibdiag.fabric.views import prom_metrics

    return prom_metrics.prom_metrics(result.judged)
