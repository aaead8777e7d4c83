"""``-o line``: a report in one ASCII line, for a Slurm drain reason, an NHC message or an NPD condition.

``FAIL topo.pcie_width mlx5_6, topo.port_rate mlx5_7:1 +2 more`` — the word is the outcome (FAIL when
the command exits 1, WARN when only warnings are left, OK otherwise), then the findings that decide it
as ``check subject``, cut at :data:`MAX_LINE` characters with a ``+N more`` tail (node-problem-detector
keeps the first 80 bytes of a plugin's stdout). A run that could not judge anything is
``UNKNOWN ibdiag: <why>`` (:func:`unknown_line`).
"""

from __future__ import annotations

import re

from ibdiag.findings.model import Report, Severity

MAX_LINE = 80
_UNSAFE = re.compile(r"[^\x21-\x7e]+")  # no spaces, controls or non-ASCII inside one item


def _clean(text: str) -> str:
    return _UNSAFE.sub("?", text.strip()) or "-"


def _fit(head: str, items: list[str], limit: int) -> str:
    """``head`` and as many ``items`` (comma-separated) as fit in ``limit`` with the ``+N more`` tail."""
    for shown in range(len(items), -1, -1):
        rest = len(items) - shown
        body = ", ".join(items[:shown])
        line = head + (" " + body if body else "") + (f" +{rest} more" if rest else "")
        if len(line) <= limit:
            return line
    return (head + f" +{len(items)} more")[:limit]


def render_line(report: Report, *, strict: bool = False, limit: int = MAX_LINE) -> str:
    """The one line (no newline) for ``report``; ASCII only, at most ``limit`` characters."""
    failing = report.failing(strict)
    if failing:
        word, shown = "FAIL", failing
    else:
        shown = tuple(f for f in report.findings if f.severity is Severity.WARN)
        word = "WARN" if shown else "OK"
    if not shown:
        n = len(report.findings)
        return _fit(f"OK ibdiag {_clean(report.command)}: {n} check(s) passed", [], limit)
    items = []
    for f in shown:
        item = f"{_clean(f.check)} {_clean(f.subject)}" if f.subject else _clean(f.check)
        if item not in items:
            items.append(item)
    return _fit(word, items, limit)


def unknown_line(message: str, limit: int = MAX_LINE) -> str:
    """``UNKNOWN ibdiag: <why>`` for a run that ended with exit 2, 3 or 130."""
    text = re.sub(r"[^\x20-\x7e]", "?", " ".join(message.split()))
    line = f"UNKNOWN ibdiag: {text}"
    return line if len(line) <= limit else line[: limit - 3] + "..."
