"""Views of the fleet report: its outputs (:func:`outputs`: tables, the drain line, csv, prom, the page
of :mod:`ibdiag.report.html`, the last sweep's matrix as a PNG).

Pure functions of :class:`~ibdiag.report.view.FleetView`; ``cli/report.py`` prints what they return.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ibdiag.findings.model import Report, Severity
from ibdiag.output.outputs import Outputs, TableLayout
from ibdiag.output.prom import Metric, PromSample
from ibdiag.report.command import ReportResult
from ibdiag.report.fabrichealth import health_lines
from ibdiag.report.fabricmodel import fabric_lines
from ibdiag.report.html import render_html
from ibdiag.report.view import NODE_COLUMNS, OUTLIER_COLUMNS, FleetView, outlier_rows
from ibdiag.sweep import views as sweep_views
from ibdiag.sweep.views import LINE_WIDTH, fit_line

if TYPE_CHECKING:  # rich only where a table is drawn: `ibdiag report -o json` does not import it
    from rich.console import RenderableType


def outputs(result: ReportResult) -> Outputs:
    """The fleet view in every format ``ibdiag report`` writes; ``--png`` draws the last sweep's matrix."""
    view = result.view
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=lambda: (CSV_HEADER, csv_rows(view)),
        prom=lambda: prom_metrics(view),
        png=partial(sweep_views.write_png, view.sweeps[-1].result) if view.sweeps else None,
        line=lambda: line_view(view),
        html=lambda: render_html(view, result.report.findings, result.meta),
    )


def table_items(result: ReportResult, layout: TableLayout) -> list[RenderableType]:
    """The fleet's tables, then the findings but each node's status (the nodes table shows it)."""
    from ibdiag.output.table import findings_block, summary_line  # lazy: rich behind them

    report = result.report
    rest = Report("report", {}, tuple(f for f in report.findings if f.check != "report.node"))
    return [
        *tables(result.view),
        *findings_block(rest, strict=layout.strict, width=layout.width)[:-1],
        summary_line(report, strict=layout.strict),
    ]


#: Nodes listed in the table (all of them are in JSON, CSV and HTML).
TABLE_ROWS = 40


def line_view(view: FleetView, *, width: int = LINE_WIDTH) -> str:
    """``fleet FAIL: drain gpu-017 gpu-040 +3 more; 2 config outliers (64 nodes)``: one ASCII line."""
    n = len(view.rows)
    extra = []
    odd = len({o.host for o in view.outliers})
    if odd:
        extra.append(f"{odd} node{'s' if odd != 1 else ''} off the config majority")
    bad_links = sum(
        1
        for part in view.sweeps
        for f in part.findings
        if f.check == "sweep.link" and f.severity is Severity.FAIL
    )
    if bad_links:
        extra.append(f"{bad_links} bad link{'s' if bad_links != 1 else ''}")
    culprits = [c.hop.subject for placed in view.fabric for c in placed.culprits]
    if culprits:
        extra.append(f"fabric: {', '.join(culprits[:2])}" + (" ..." if len(culprits) > 2 else ""))
    if view.skipped:
        extra.append(f"{len(view.skipped)} file{'s' if len(view.skipped) != 1 else ''} skipped")
    count = f" ({n} node{'s' if n != 1 else ''})"
    tails = [
        (("; " + ", ".join(extra)) if extra else "") + count,
        *([f"; {extra[0]}{count}"] if extra else []),
        count,
    ]
    if view.drain:
        text = fit_line("fleet FAIL: drain", list(view.drain), tails, width)
    else:
        status = (
            "FAIL"
            if bad_links
            else ("WARN" if extra or any(r.status is Severity.WARN for r in view.rows) else "OK")
        )
        text = fit_line(
            f"fleet {status}: {', '.join(extra) if extra else 'nothing to drain'} ({n} node{'s' if n != 1 else ''})",
            [],
            "",
            width,
        )
    return text.encode("ascii", "replace").decode("ascii")


def tables(view: FleetView) -> list[Any]:
    """Rich renderables: nodes (worst first), configuration outliers, counter errors, sweeps, skipped files."""
    from rich.table import Table  # lazy: rich, for the table output only
    from rich.text import Text

    items: list[Any] = []
    n_fail = sum(1 for r in view.rows if r.status is Severity.FAIL)
    n_warn = sum(1 for r in view.rows if r.status is Severity.WARN)
    files = f"{len(view.inputs)} file{'s' if len(view.inputs) != 1 else ''}"
    skipped = f"{len(view.skipped)} file{'s' if len(view.skipped) != 1 else ''} skipped"
    items.append(
        Text(
            f"fleet: {len(view.rows)} node{'s' if len(view.rows) != 1 else ''} from {files} ({n_fail} failing, {n_warn} with warnings); {skipped}"
        )
    )
    if view.drain:
        items.append(Text("drain: " + " ".join(view.drain), style="bold red"))
    items.append(_nodes_table(view))
    items += _outlier_tables(view)
    for part in view.sweeps:
        items.append(Text(f"sweep {part.path}:", style="bold"))
        items += [Text(line) for line in sweep_views.summary_lines(part.result)]
        items += sweep_views.worst_tables(part.result, limit=10)
    for placed in view.fabric:
        items += [Text(line) for line in fabric_lines(placed)]
    if view.fabric_health is not None:
        items += [Text(line) for line in health_lines(view.fabric_health)]
    if view.skipped:
        t = Table(title="Files skipped", title_justify="left")
        t.add_column("file")
        t.add_column("why")
        for s in view.skipped:
            t.add_row(s.path, s.reason)
        items.append(t)
    if view.not_compared:
        items.append(
            Text(
                f"not compared (not in ibdiag topo's JSON): {', '.join(view.not_compared)}",
                style="dim",
            )
        )
    return items


def _nodes_table(view: FleetView) -> Any:
    """The nodes, worst first, the first TABLE_ROWS of them."""
    from rich.table import Table  # lazy: rich, for the table output only
    from rich.text import Text

    from ibdiag.output.table import (  # lazy: output.table imports rich, loaded only where a table is drawn
        SEVERITY_LABEL,
        SEVERITY_STYLE,
    )

    nodes = Table(title="Nodes (worst first)", title_justify="left")
    for col in NODE_COLUMNS:
        nodes.add_column(col, no_wrap=col in ("node", "status", "sweep", "read"))
    order = view.worst_first()
    for r in order[:TABLE_ROWS]:
        nodes.add_row(
            r.host,
            Text(SEVERITY_LABEL[r.status], style=SEVERITY_STYLE[r.status]),
            ", ".join(r.failing),
            ", ".join(r.warnings),
            _first(r.outliers, 3),
            r.sweep or "",
            ",".join(r.sources),
        )
    if len(order) > TABLE_ROWS:
        nodes.caption = f"{len(order) - TABLE_ROWS} more nodes: -o json, csv or html has them all"
    return nodes


def _outlier_tables(view: FleetView) -> list[Any]:
    """Configuration outliers (against the fleet's majority) and the top counter errors."""
    from rich.table import Table  # lazy: rich, for the table output only

    items: list[Any] = []
    if view.outlier_groups or view.split_groups:
        t = Table(
            title="Configuration outliers (against the fleet's majority)", title_justify="left"
        )
        for col in OUTLIER_COLUMNS:
            t.add_column(col)
        for row in outlier_rows(view):
            t.add_row(*row)
        items.append(t)
    if view.counter_errors:
        t = Table(title="Top counter errors", title_justify="left")
        for col in ("node", "port", "counter", "value"):
            t.add_column(col, justify="right" if col == "value" else "left")
        for c in view.counter_errors:
            t.add_row(
                c.host,
                c.port,
                c.counter,
                c.value_text,
            )
        items.append(t)
    if view.flapping:
        t = Table(title="Most-flapping ports (counters --history)", title_justify="left")
        for col in ("node", "port", "flaps", "last flap"):
            t.add_column(col, justify="right" if col == "flaps" else "left")
        for f in view.flapping:
            t.add_row(f.host, f.port, str(f.flaps), f.last_flap or "-")
        items.append(t)
    return items


def _first(items: tuple[str, ...], n: int) -> str:
    return ", ".join(items[:n]) + (f" (+{len(items) - n} more)" if len(items) > n else "")


CSV_HEADER = ("host", "status", "failing", "warnings", "outliers", "sweep", "sources")


def csv_rows(view: FleetView) -> list[dict[str, Any]]:
    """One row per node; lists joined with ``; ``."""
    return [
        {
            "host": r.host,
            "status": r.status.value,
            "failing": "; ".join(r.failing),
            "warnings": "; ".join(r.warnings),
            "outliers": "; ".join(r.outliers),
            "sweep": r.sweep,
            "sources": " ".join(r.sources),
        }
        for r in view.rows
    ]


def prom_metrics(view: FleetView) -> list[Metric]:
    """Fleet counts by status and the number of configuration outliers per node."""
    by_status = [
        PromSample({"status": s.value}, sum(1 for r in view.rows if r.status is s))
        for s in Severity
    ]
    outliers = [PromSample({"host": r.host}, len(r.outliers)) for r in view.rows]
    return [
        Metric(
            "ibdiag_fleet_nodes",
            "Nodes in the fleet report by worst status.",
            "gauge",
            tuple(by_status),
        ),
        Metric(
            "ibdiag_fleet_config_outliers",
            "Configuration keys on which a node differs from the fleet's majority.",
            "gauge",
            tuple(outliers),
        ),
        Metric(
            "ibdiag_fleet_drain",
            "Nodes the fleet report says to drain.",
            "gauge",
            (PromSample({}, len(view.drain)),),
        ),
    ]
