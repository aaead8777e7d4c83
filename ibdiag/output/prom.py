"""Prometheus text exposition format (version 0.0.4), for node_exporter's textfile collector.

``--textfile FILE.prom`` writes it atomically beside FILE (node_exporter never reads half a file) on
every way out, keeping the exit status; a run that could not judge writes ``ibdiag_up 0``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ibdiag.findings.model import Finding, Report, Severity

_NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


@dataclass(frozen=True)
class PromSample:
    """One line of the exposition: a metric's value for one set of labels (Prometheus' "sample";
    not a counters reading, which is :class:`ibdiag.counters.model.Sample`)."""

    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True)
class Metric:
    name: str
    help: str
    type: str  # "gauge" or "counter"
    samples: tuple[PromSample, ...]

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"invalid metric name {self.name!r}")
        if self.type not in ("gauge", "counter", "untyped"):
            raise ValueError(f"invalid metric type {self.type!r}")
        for s in self.samples:
            for k in s.labels:
                if not _LABEL_RE.match(k):
                    raise ValueError(f"invalid label name {k!r}")


def _escape_label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _number(v: float) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def render_prom(metrics: Iterable[Metric]) -> str:
    lines: list[str] = []
    seen: set[str] = set()
    for m in metrics:
        if m.name in seen:
            raise ValueError(f"metric {m.name!r} rendered twice")
        seen.add(m.name)
        lines.append(f"# HELP {m.name} {_escape_help(m.help)}")
        lines.append(f"# TYPE {m.name} {m.type}")
        for s in m.samples:
            if s.labels:
                labels = ",".join(f'{k}="{_escape_label(v)}"' for k, v in s.labels.items())
                lines.append(f"{m.name}{{{labels}}} {_number(s.value)}")
            else:
                lines.append(f"{m.name} {_number(s.value)}")
    return "\n".join(lines) + "\n" if lines else ""


_SEVERITY_VALUE = {Severity.OK: 0, Severity.WARN: 1, Severity.FAIL: 2}


def finding_metrics(report: Report) -> list[Metric]:
    """Metrics every command exports: overall status and one gauge per finding (0 ok, 1 warn, 2 fail),
    a check shared by several commands exported by its owner only (:data:`SERIES_OWNERS`)."""
    cmd = report.command
    status = Metric(
        "ibdiag_status",
        "Worst finding severity of the last ibdiag run: 0 ok, 1 warn, 2 fail.",
        "gauge",
        (PromSample({"command": cmd}, _SEVERITY_VALUE[report.status]),),
    )
    counts = Metric(
        "ibdiag_findings",
        "Number of findings of the last ibdiag run by severity.",
        "gauge",
        tuple(
            PromSample(
                {"command": cmd, "severity": sev.value},
                sum(1 for f in report.findings if f.severity is sev),
            )
            for sev in Severity
        ),
    )
    checks = Metric(
        "ibdiag_check_severity",
        "Severity of each ibdiag check and subject: 0 ok, 1 warn, 2 fail.",
        "gauge",
        tuple(
            PromSample(
                {"command": cmd, "check": f.check, "subject": f.subject},
                _SEVERITY_VALUE[f.severity],
            )
            for f in _dedupe(report)
            if series_owner(f.check) in (None, cmd)
        ),
    )
    return [status, counts, checks]


#: Checks more than one command runs, and the one command that exports their ``ibdiag_check_severity``
#: series: ``topo --textfile`` and ``counters --textfile`` both judge the ports, and one alert on a
#: failing check must page once per port, not once per command (issue #27).
SERIES_OWNERS = {"port.": "topo"}


def series_owner(check: str) -> str | None:
    """The command whose textfile carries ``check``'s series; None: whichever command found it."""
    return next((cmd for prefix, cmd in SERIES_OWNERS.items() if check.startswith(prefix)), None)


def run_metrics(command: str, *, up: bool, timestamp: float) -> list[Metric]:
    """Whether the last run of ``command`` could judge the node, and when it ran: a textfile left by a
    run that could not judge (exit 2/3) says so (``ibdiag_up 0``), and a stale one shows its age."""
    return [
        Metric(
            "ibdiag_up",
            "1 if the last ibdiag run could read and judge the node, 0 if it could not run (exit 2 or 3).",
            "gauge",
            (PromSample({"command": command}, 1 if up else 0),),
        ),
        Metric(
            "ibdiag_last_run_timestamp_seconds",
            "When the last ibdiag run ended, Unix time.",
            "gauge",
            (PromSample({"command": command}, round(timestamp, 3)),),
        ),
    ]


def _dedupe(report: Report) -> Sequence[Finding]:
    # Prometheus rejects two samples with the same labels: keep the worst per (check, subject).
    best: dict[tuple[str, str], Finding] = {}
    for f in report.findings:
        key = (f.check, f.subject)
        cur = best.get(key)
        if cur is None or f.severity.rank > cur.severity.rank:
            best[key] = f
    return list(best.values())
