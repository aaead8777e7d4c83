"""``ibdiag counters``' result in every format it writes (:func:`outputs`), a series' progress line and
its CSV rows as each sample arrives, and the frames of ``--watch``. Pure functions of the result;
cli/ prints what they return. rich is imported inside the table functions only (``-o json`` never
loads it)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from ibdiag.counters.model import SeriesStep
from ibdiag.counters.result import CountersResult, SeriesProgress, Watch, WatchFrame
from ibdiag.counters.views import csv_rows, prom_metrics
from ibdiag.counters.views import table as view
from ibdiag.output.csvout import render_csv
from ibdiag.output.outputs import CsvRows, Outputs, TableLayout, added_metrics, added_tables
from ibdiag.output.prom import Metric
from ibdiag.units import format_duration

if TYPE_CHECKING:  # rich only where a table is drawn
    from rich.console import RenderableType

#: Under a snapshot's table: where rates and a job's increases come from.
SNAPSHOT_HINT = (
    "for rates: ibdiag counters --interval 10 · across a job: ibdiag counters -o json > before.json; "
    "<job>; ibdiag counters --since before.json"
)


def outputs(result: CountersResult) -> Outputs:
    """The result in every format ``ibdiag counters`` writes."""
    return Outputs(
        result.report,
        result.meta,
        table=partial(table_items, result),
        csv=partial(csv_view, result),
        prom=partial(prom_view, result),
    )


def csv_view(result: CountersResult) -> CsvRows:
    """Long form: a snapshot's counters, or each step of a span (the steps it kept)."""
    if result.span is None:
        return csv_rows.CSV_HEADER, csv_rows.csv_rows_snapshot(result.sample)
    return csv_rows.CSV_HEADER, [r for s in result.span.steps for r in csv_rows.csv_rows_step(s)]


def prom_view(result: CountersResult) -> list[Metric]:
    own = prom_metrics.prom_metrics(result.sample, result.judging.cfg, result.span)
    return own + added_metrics(result.additions)


def table_items(result: CountersResult, layout: TableLayout) -> list[RenderableType]:
    """The host line, what the hooks added (the far ends), the ports' table, the findings, then the
    hint and the legend."""
    from rich.text import Text  # lazy: rich, for the table output only (start-up of -o json)

    from ibdiag.output.table import findings_block  # lazy: rich behind it, as above

    report, span, cfg = result.report, result.span, result.judging.cfg
    n_ports = sum(1 for p in result.sample.ports if p.port is not None)
    head: list[RenderableType]
    if span is None:
        head = [
            Text(
                f"{result.meta.host}: {n_ports} RDMA port(s); counts since the last counter reset (the time of that reset is unknown)."
            )
        ]
        table = view.snapshot_table(
            result.sample, report.findings, cfg, result.judging.ports, width=layout.width
        )
        hint: str | None = SNAPSHOT_HINT
        legend = view.legend(result.sample, cfg, interval=False, width=layout.width)
    else:
        head = [Text(f"{result.meta.host}: {n_ports} RDMA port(s)")]
        if span.missing:
            head.append(Text(f"gone since the baseline: {', '.join(span.missing)}", style="yellow"))
        table = view.interval_table(
            span.last,
            span.totals,
            span.totals,
            report.findings,
            cfg,
            result.judging.ports,
            title=span_title(result),
            width=layout.width,
        )
        hint = None
        legend = view.legend(span.last, cfg, interval=True, width=layout.width, span=span)
    items = [*head, *added_tables(result.additions, layout), table]
    items += findings_block(report, strict=layout.strict, width=layout.width)
    if hint:
        items.append(Text(hint, style="dim"))
    if legend:
        items.append(Text(legend, style="dim"))
    return items


def span_title(result: CountersResult) -> str:
    """The title of a span's table: since when, or how many samples how far apart."""
    span = result.span
    if span is None:
        return ""
    took = format_duration(span.interval_s)
    if span.mode == "since":
        info = result.baseline or {}
        when = info.get("sampled_at") or info.get("generated_at")
        return f"since {when} ({took}; baseline {info.get('file')})"
    if span.mode == "series":
        return f"{span.samples_count} samples every {result.interval_s:g} s ({took}): rates over the whole run, error increases in total"
    return f"rates over {took}"


def progress_line(p: SeriesProgress) -> str:
    """For people watching a series: the baseline read, then each sample taken."""
    if p.step is None:
        return f"baseline read of {p.ports} port(s); {p.count} sample(s) every {p.interval_s:g} s — Ctrl-C stops"
    return f"sample {p.step.index}/{p.count} taken"


def csv_step_text(step: SeriesStep, *, header: bool) -> str:
    """One step's CSV rows, with the header before the first: rows written as each sample arrives make
    a valid CSV however early the series stops (Ctrl-C)."""
    text = render_csv(csv_rows.CSV_HEADER, csv_rows.csv_rows_step(step))
    return text if header else text.split("\n", 1)[1]


def watch_start(watch: Watch) -> str:
    """What ``--watch`` shows until the first rates are in."""
    return f"ibdiag counters --watch: first sample taken; rates in {watch.interval_s:g} s (Ctrl-C to stop)"


def watch_view(frame: WatchFrame, layout: TableLayout) -> RenderableType:
    """One redraw of ``--watch``: rates over the last interval, error increases since the start, the
    first problems (no hints: ``--interval`` gives the full report) and the status line."""
    from rich.console import Group  # lazy: rich, for the live view only

    from ibdiag.output.table import findings_paragraphs, summary_line  # lazy: rich, as above

    report, span = frame.report, frame.span
    title = f"{frame.host} · sample {frame.index} · rates over the last {frame.interval_s:g} s · error increases since start ({format_duration(span.interval_s)}) · Ctrl-C stops"
    items: list[RenderableType] = [
        view.interval_table(
            frame.step.sample,
            frame.step.deltas,
            span.totals,
            report.findings,
            frame.judging.cfg,
            frame.judging.ports,
            title=title,
            width=layout.width,
        )
    ]
    problems = report.problems()
    if problems:
        items.append(
            findings_paragraphs(
                problems,
                limit=8,
                hints=False,
                more="(ibdiag counters --interval N for the full report with hints)",
            )
        )
    items.append(summary_line(report, strict=layout.strict))
    return Group(*items)
