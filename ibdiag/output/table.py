"""Rich building blocks shared by every command's table output (they build renderables; cli/ prints)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text

from ibdiag.findings.model import Finding, Report, Severity

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
        table.add_row(
            severity_text(f.severity), f.check, f.subject, f.message, _value(f), f.hint or ""
        )
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


#: Below this many columns a findings table with hints does not fit: findings become paragraphs.
COMPACT_BELOW_COLUMNS = 120


def findings_paragraphs(
    findings: Sequence[Finding], *, limit: int | None = None, hints: bool = True, more: str = ""
) -> Text:
    """Findings as one paragraph each (narrow terminals, live views); ``hints`` adds each hint below it.

    With ``limit``, the rest is counted in a last line that ends with ``more`` (where to see them all).
    """
    text = Text()
    shown = list(findings) if limit is None else list(findings)[:limit]
    for i, f in enumerate(shown):
        if i:
            text.append("\n")
        text.append(f"{SEVERITY_LABEL[f.severity]:<5}", style=SEVERITY_STYLE[f.severity])
        text.append(f"{f.subject} {f.check}: {f.message}")
        if hints and f.hint:
            text.append(f"\n     hint: {f.hint}", style="dim")
    if limit is not None and len(findings) > limit:
        text.append(
            f"\n... and {len(findings) - limit} more{(' ' + more) if more else ''}", style="dim"
        )
    return text


def findings_block(report: Report, *, strict: bool = False, width: int | None = None) -> list[Any]:
    """What every command's table output ends with: its WARN/FAIL findings and the status line.

    A table when the output is wide enough (or its width unknown), a paragraph per finding otherwise.
    """
    items: list[Any] = []
    problems = report.problems()
    if problems:
        if width is not None and width < COMPACT_BELOW_COLUMNS:
            items.append(findings_paragraphs(problems))
        else:
            items.append(findings_table(problems))
    items.append(summary_line(report, strict=strict))
    return items
