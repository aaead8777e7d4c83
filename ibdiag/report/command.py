"""``ibdiag report`` as a library: :func:`run` reads many nodes' ibdiag JSON (topo, counters, bench,
sweep), checks every file (one that cannot be used is named and skipped), and returns the fleet view
with its findings; with ``fabric`` each sweep's slow pairs placed on a saved fabric. Its views
(:mod:`ibdiag.report.views`, the page :mod:`ibdiag.report.html`) draw it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ibdiag.config import Config
from ibdiag.errors import UsageError
from ibdiag.findings.model import Report, RunMeta
from ibdiag.outfile import check_output_path
from ibdiag.report.checks import report_findings
from ibdiag.report.fabrichealth import fabric_health, judge_snapshot, with_fabric_says
from ibdiag.report.inputs import read_all
from ibdiag.report.view import FleetView, build_view, view_json
from ibdiag.units import parse_size

#: Smallest ``--max-file-size``: below it not even one node's topo fits.
MIN_FILE_BYTES = 1024

_NO_SWEEP_HINT = "add the sweep's JSON (ibdiag sweep --save FILE) to the inputs"


@dataclass(frozen=True)
class ReportRequest:
    """What ``ibdiag report`` is asked: the inputs, where to place the sweeps, what to draw."""

    inputs: Sequence[str]
    """Directories (their ``*.json``, recursively), files, or patterns like ``nodes/*.json``."""
    fabric: Path | None = None
    """``--fabric``: place each sweep's slow pairs on this fabric (an ``ibdiag fabric --save`` directory
    or .tar.gz, or an ibnetdiscover file) and name the port or uplinks they share."""
    png: Path | None = None
    """``--png``: checked before anything is read (the writer draws the last sweep's matrix there);
    refused when no sweep is among the inputs."""
    max_file_size: str = "128M"
    """``--max-file-size``: the largest input read (binary units); a larger one is skipped."""
    config: Config = field(default_factory=lambda: Config(None, {}))
    """Thresholds the saved fabric is judged by (``[fabric]``, ``[counters]``: as ``ibdiag fabric``
    reads them); the built-in defaults when not given."""


@dataclass(frozen=True)
class ReportResult:
    report: Report
    meta: RunMeta
    view: FleetView


def run(req: ReportRequest) -> ReportResult:
    """The fleet view of ``req.inputs``; InputError (exit 2) when no file at all is usable."""
    max_bytes = parse_size(req.max_file_size, what="--max-file-size")
    if max_bytes < MIN_FILE_BYTES:
        raise UsageError(
            f"--max-file-size {req.max_file_size} is below 1 KiB", hint="the default is 128M"
        )
    check_output_path(req.png, "--png")
    docs, skipped = read_all(req.inputs, max_bytes=max_bytes)
    view = build_view(docs, skipped)
    if req.fabric is not None:
        view = _on_fabric(view, req.fabric, req.config)
    report = Report("report", view_json(view), tuple(report_findings(view)))
    # the host ibdiag report ran on (a report reads documents, never a node's tree)
    meta = RunMeta.now(os.uname().nodename)
    if req.png is not None and not view.sweeps:
        raise UsageError(
            "--png draws a sweep's matrix, and no sweep file was given", hint=_NO_SWEEP_HINT
        )
    return ReportResult(report, meta, view)


def _on_fabric(view: FleetView, snapshot: Path, config: Config) -> FleetView:
    """The view with each sweep placed on the saved fabric, and the fabric's own health: the snapshot
    judged by ``ibdiag fabric``'s entry point, as ``ibdiag fabric --from SNAPSHOT`` judges it."""
    if not view.sweeps:
        raise UsageError(
            "--fabric places a sweep's pairs on the fabric, and no sweep file was given",
            hint=_NO_SWEEP_HINT,
        )
    # lazy: networkx behind the placement (routes over the fabric's graph), for --fabric only
    from ibdiag.report.fabricpath import on_fabric
    from ibdiag.report.fabricpicture import picture  # lazy: as above (the fabric's tiers)

    judged = judge_snapshot(snapshot, config)
    placed = on_fabric(view.sweeps, judged.fabric, judged.names, judged.shape)
    health = fabric_health(judged, placed)
    placed = with_fabric_says(placed, health)
    return replace(
        view,
        fabric=placed,
        fabric_health=health,
        fabric_picture=picture(judged, placed, health),
    )
