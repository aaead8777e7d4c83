"""A command's result as the command line writes it, and what other packages add to a report.

Every command's library entry point (``ibdiag.<command>.command.run(Request) -> Result``) returns a
result its package's views turn into :class:`Outputs`: the report (JSON, ``-o line`` and JUnit are
written from it alone), the run's metadata, and the command's own table, CSV rows and metrics. The
command line picks the one ``-o`` asked for (``ibdiag.cli.common.emit``); a view left ``None`` is a
format the command cannot write (exit 2, never an empty output).

An :class:`Addition` is what another package contributes to a command's report without the command
importing it: the history and the kernel log (``--history``, ``--kernel-log``) to ``topo`` and
``counters``, the far ends of the cables (``counters --far-end``, read through infiniband-diags). The
command line builds the hooks that make them; the command applies each to its reading.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, BinaryIO

from ibdiag.findings.model import Finding, Report, RunMeta
from ibdiag.output.prom import Metric

if TYPE_CHECKING:
    from rich.console import RenderableType


@dataclass(frozen=True)
class TableLayout:
    """How the table output is laid out: ``--strict`` (warnings count as failing in the summary) and
    the columns it is printed in (the terminal's, else ``$COLUMNS``, else wide enough to cut nothing)."""

    strict: bool
    width: int


#: CSV: the header and one mapping per row.
CsvRows = tuple[Sequence[str], Sequence[Mapping[str, object]]]
#: A table view: the renderables printed one after the other.
TableView = Callable[[TableLayout], Sequence["RenderableType"]]


@dataclass(frozen=True)
class Outputs:
    """One run's result, ready to be written in any format the command has a view for."""

    report: Report
    meta: RunMeta
    table: TableView | None = None
    csv: Callable[[], CsvRows] | None = None
    prom: Callable[[], Sequence[Metric]] | None = None
    """The command's own metrics; the findings' and the run's are added by the writer."""
    png: Callable[[BinaryIO], None] | None = None
    """``--png``: the command's chart written to an open binary file."""
    line: Callable[[], str] | None = None
    """``-o line``: the command's own line (``sweep``'s and ``report``'s drain list); None: the findings'."""
    html: Callable[[], str] | None = None
    """``-o html``: the command's page (``report``); None: the command writes none."""


@dataclass(frozen=True)
class Addition:
    """What another package adds to a command's report: data under its own keys, findings, metrics and
    table items (the command's table view places them beside its own, before the findings: topo after
    its tables, counters between its head line and its ports table, where the far ends always were)."""

    data: Mapping[str, object] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    metrics: tuple[Metric, ...] = ()
    table: TableView | None = None


def with_additions(report: Report, additions: Sequence[Addition]) -> Report:
    """``report`` with each addition's data and findings, in order."""
    if not additions:
        return report
    data = dict(report.data)
    findings = list(report.findings)
    for a in additions:
        data.update(a.data)
        findings += a.findings
    return replace(report, data=data, findings=tuple(findings))


def added_metrics(additions: Sequence[Addition]) -> list[Metric]:
    return [m for a in additions for m in a.metrics]


def added_tables(additions: Sequence[Addition], layout: TableLayout) -> list[RenderableType]:
    return [item for a in additions if a.table is not None for item in a.table(layout)]
