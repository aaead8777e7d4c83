"""One view per result kind: what ``-o table``, ``-o csv``, ``-o prom`` and ``--png`` draw of a :class:`BenchRun`,
and :func:`outputs`, a bench command's :class:`~ibdiag.bench.results.document.BenchResult` in every format.

``bench p2p``, ``bench collective`` and ``bench import`` draw a run through :func:`view_for`, so a
measured run and an imported one of the same kind look the same in every format. A kind's view is pure
functions of the run (``ibdiag.bench.p2p.views``, ``ibdiag.bench.collective.views``); a format a kind
has no builder for (``prom`` for p2p) is refused by the command line as a usage error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, BinaryIO

from ibdiag.bench.collective import views as collective_views
from ibdiag.bench.p2p import views as p2p_views
from ibdiag.bench.results.document import BenchResult
from ibdiag.bench.results.model import BenchRun
from ibdiag.errors import UsageError
from ibdiag.output.outputs import CsvRows, Outputs, TableLayout
from ibdiag.output.prom import Metric

if TYPE_CHECKING:  # rich only where a table is drawn: `-o json` does not import it
    from rich.console import RenderableType


@dataclass(frozen=True)
class View:
    table: Callable[[BenchRun], list[RenderableType]]
    """Rich renderables printed before the findings."""
    csv: Callable[[BenchRun], CsvRows]
    """(header, rows) of the long-form CSV."""
    prom: Callable[[BenchRun], list[Metric]] | None = None
    """Prometheus metrics; None when the kind has none (a p2p benchmark is not a node metric)."""
    png: Callable[[BenchRun, BinaryIO], None] | None = None
    """``--png``: the kind's chart; None when it has none."""


def _p2p() -> View:
    return View(
        table=p2p_views.table_items,
        csv=lambda run: (p2p_views.CSV_HEADER, p2p_views.csv_rows(run)),
        png=p2p_views.write_png,
    )


def _collective() -> View:
    return View(
        table=collective_views.table_items,
        csv=lambda run: (collective_views.CSV_HEADER, collective_views.csv_rows(run)),
        prom=collective_views.prom_metrics,
    )


#: ``kind`` -> its view (rich, which the kinds' tables need, is imported only when they build one).
VIEWS: dict[str, Callable[[], View]] = {"p2p": _p2p, "collective": _collective}


def view_for(run: BenchRun) -> View:
    return VIEWS[run.kind]()


def outputs(result: BenchResult) -> Outputs:
    """The result in every format its run's kind has a view for; several runs (one imported file) as
    one document, each drawn by its kind's view."""
    if len(result.runs) != 1:
        return Outputs(
            result.report,
            result.meta,
            table=partial(_runs_table, result),
            csv=partial(_runs_csv, result.runs),
        )
    run = result.runs[0]
    view = view_for(run)
    prom, png = view.prom, view.png
    return Outputs(
        result.report,
        result.meta,
        table=partial(_run_table, result, view),
        csv=partial(view.csv, run),
        prom=None if prom is None else partial(prom, run),
        png=None if png is None else partial(png, run),
    )


def _run_table(result: BenchResult, view: View, layout: TableLayout) -> list[RenderableType]:
    from ibdiag.output.table import findings_block  # lazy: rich behind it, for the table only

    items = view.table(result.runs[0])
    return [*items, *findings_block(result.report, strict=layout.strict, width=layout.width)]


def _runs_table(result: BenchResult, layout: TableLayout) -> list[RenderableType]:
    """Each run under ``run N of M``, then the findings of all (named ``run N: subject``)."""
    from ibdiag.output.table import findings_block  # lazy: rich behind it, for the table only

    runs = result.runs
    items: list[RenderableType] = []
    for i, run in enumerate(runs, start=1):
        items += [f"run {i} of {len(runs)}", *view_for(run).table(run)]
    return [*items, *findings_block(result.report, strict=layout.strict, width=layout.width)]


def _runs_csv(runs: Sequence[BenchRun]) -> CsvRows:
    """One CSV of runs of one kind (their rows one after the other); runs of several kinds have none."""
    if len({r.kind for r in runs}) != 1:
        raise UsageError("-o csv: the runs are of different kinds", hint="import one with --run N")
    view = view_for(runs[0])
    header = view.csv(runs[0])[0]
    return header, [row for r in runs for row in view.csv(r)[1]]
