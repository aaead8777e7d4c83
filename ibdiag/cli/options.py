"""The options more than one command takes, declared once: the name, the type, the metavar and the help
of ``--root``, ``-o``, ``--config``, ``--strict``, ``--save``, ``--png``, ``--timeout``, ``--textfile``,
``--exit-codes`` and ``--debug``. A command's own options live in its module (``cli/<command>.py``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from ibdiag.parse import parse_decimal


class OutputFormat(str, Enum):
    """Every ``--format`` of every command; a command refuses one it has no view for (exit 2)."""

    table = "table"
    json = "json"
    csv = "csv"
    prom = "prom"
    junit = "junit"
    html = "html"
    line = "line"


class ExitCodes(str, Enum):
    ibdiag = "ibdiag"
    nagios = "nagios"


def refuse_html(value: OutputFormat) -> str:
    """Refuse ``-o html`` before the command runs: only ``ibdiag report`` writes a page. Returns the
    value as typed (typer converts a callback's result to the enum again)."""
    if value is OutputFormat.html:
        raise typer.BadParameter("html is a page of many nodes: ibdiag report FILES -o html")
    return str(value.value)


RootOption = Annotated[
    Path,
    typer.Option(
        "--root",
        metavar="DIR|TAR",
        help="Read DIR/sys instead of /sys: a fixture, an extracted snapshot, or a snapshot .tar.gz.",
    ),
]
FormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-o",
        case_sensitive=False,
        callback=refuse_html,
        help="table for people; json, csv, prom, junit for machines; line: one ASCII line (drain reason, NHC, NPD).",
    ),
]
PageFormatOption = Annotated[
    OutputFormat,
    typer.Option(
        "--format",
        "-o",
        case_sensitive=False,
        help="table for people; html (one self-contained page), json, csv, prom, junit, line (one-line drain list).",
    ),
]
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        metavar="FILE",
        help="TOML thresholds and expectations (default: $IBDIAG_CONFIG, else built-in).",
    ),
]
StrictOption = Annotated[bool, typer.Option("--strict", help="Warnings fail too (exit 1).")]
SaveOption = Annotated[
    Path | None,
    typer.Option(
        "--save",
        metavar="FILE",
        help="Also write the JSON result (what -o json prints) to FILE, atomically.",
    ),
]
PngOption = Annotated[
    Path | None,
    typer.Option(
        "--png",
        metavar="FILE",
        help="Also draw the result's chart as a PNG in FILE (needs matplotlib).",
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--timeout",
        parser=parse_decimal,
        metavar="SECONDS",
        help="Longest wait on a peer or a tool, seconds: what stays silent that long is named (exit 3 when nothing can be judged without it).",
    ),
]
ExpectRateOption = Annotated[
    float | None,
    typer.Option(
        "--expect-rate",
        parser=parse_decimal,
        metavar="GBPS",
        help="Rate every RDMA port must reach, Gb/s (overrides [ports] expected_rate_gbps; default: the node's fastest port).",
    ),
]
TextfileOption = Annotated[
    Path | None,
    typer.Option(
        "--textfile",
        metavar="FILE.prom",
        help="Also write the metrics (-o prom) to FILE atomically, for node_exporter's textfile collector; a run that cannot judge writes ibdiag_up 0.",
    ),
]
ExitCodesOption = Annotated[
    ExitCodes,
    typer.Option(
        "--exit-codes",
        case_sensitive=False,
        help="nagios: 0 OK, 1 WARNING (warnings only), 2 CRITICAL (a failing finding), 3 UNKNOWN (could not run).",
    ),
]
HistoryOption = Annotated[
    Path | None,
    typer.Option(
        "--history",
        metavar="DIR",
        help="Record this reading in the port history DIR (e.g. /var/lib/ibdiag/history) and judge flaps, "
        "recoveries and error bursts over [history] window_hours. Nothing is written without it.",
    ),
]
KernelLogOption = Annotated[
    str | None,
    typer.Option(
        "--kernel-log",
        metavar="SOURCE",
        help="Judge the kernel's own words about ports, cables, PCIe and AER: kmsg (/dev/kmsg, what is buffered), "
        "journal (journalctl -k), auto (kmsg, else the journal), or a saved log in any shape nodes write (dmesg, "
        "dmesg -T, syslog or /var/log/messages, journalctl -k short/-precise/-iso/json, kmsg), judged over its own "
        "last [history] window_hours.",
    ),
]
KernelLogWindowOption = Annotated[
    str | None,
    typer.Option(
        "--kernel-log-window",
        metavar="SPAN",
        help="Judge the kernel log over this span (6h, 2d, 90m; a bare number is hours): up to now for kmsg/journal, "
        "up to a saved file's last line (default [history] window_hours).",
    ),
]
KernelLogSinceOption = Annotated[
    str | None,
    typer.Option(
        "--kernel-log-since",
        metavar="TIME",
        help="Leave out kernel-log lines before TIME (ISO 8601, e.g. 2026-12-02T06:00Z; no zone is UTC).",
    ),
]
DebugOption = Annotated[bool, typer.Option("--debug", help="Show Python tracebacks for errors.")]
