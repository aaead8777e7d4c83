"""Rich building blocks shared by every command's table output (they build renderables; cli/ prints)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from ibdiag.report.model import Finding, Report, Severity

SEVERITY_STYLE = {Severity.OK: "green", Severity.WARN: "yellow", Severity.FAIL: "bold red"}
SEVERITY_LABEL = {Severity.OK: "OK", Severity.WARN: "WARN", Severity.FAIL: "FAIL"}


def severity_text(sev: Severity) -> Text:
    return Text(SEVERITY_LABEL[sev], style=SEVERITY_STYLE[sev])


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _value(f: Finding) -> str:
    if f.value is None:
        return ""
    unit = f" {f.unit}" if f.unit else ""
    if f.limit is None:
        return f"{_fmt(f.value)}{unit}"
    return f"{_fmt(f.value)}{unit} (limit {_fmt(f.limit)}{unit})"


def findings_table(findings: Sequence[Finding], *, title: str = "Findings") -> Table:
    """WARN and FAIL findings, most severe first, with their hints."""
    table = Table(title=title, title_justify="left", show_lines=False, expand=False)
    table.add_column("severity", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("subject", no_wrap=True)
    table.add_column("finding")
    table.add_column("value")
    table.add_column("hint", style="dim")
    for f in findings:
        table.add_row(severity_text(f.severity), f.check, f.subject, f.message, _value(f), f.hint or "")
    return table


def summary_line(report: Report, *, strict: bool = False) -> Text:
    """``status: FAIL — 3 failing, 1 warning, 42 checks passed``."""
    n_fail = sum(1 for f in report.findings if f.severity is Severity.FAIL)
    n_warn = sum(1 for f in report.findings if f.severity is Severity.WARN)
    n_ok = sum(1 for f in report.findings if f.severity is Severity.OK)
    text = Text("status: ")
    text.append(SEVERITY_LABEL[report.status], style=SEVERITY_STYLE[report.status])
    text.append(f" — {n_fail} failing, {n_warn} warning{'s' if n_warn != 1 else ''}, {n_ok} passed")
    if strict and n_warn:
        text.append(" (--strict: warnings fail)")
    return text
