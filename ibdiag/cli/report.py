"""``ibdiag report``: many nodes' JSON (topo, counters, bench, sweep) in one fleet view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import (
    DebugOption,
    OutputFormat,
    StrictOption,
    check_output_path,
    emit,
    env,
    exit_status,
    handle_errors,
    run_meta,
    table_width,
    write_atomically,
)


@app.command("report")
@handle_errors
def report_command(
    inputs: Annotated[
        list[str],
        typer.Argument(
            metavar="PATH",
            help="Directories (their *.json, recursively), files, or quoted patterns like 'nodes/*.json'.",
            show_default=False,
        ),
    ],
    fmt: Annotated[
        OutputFormat,
        typer.Option(
            "--format",
            "-o",
            case_sensitive=False,
            help="table for people; html (one self-contained page), json, csv, prom, junit, line (one-line drain list).",
        ),
    ] = OutputFormat.table,
    png: Annotated[
        Path | None,
        typer.Option(
            "--png",
            metavar="FILE",
            help="Write the sweep's node x node matrix per rail as a PNG (needs matplotlib).",
        ),
    ] = None,
    fabric: Annotated[
        Path | None,
        typer.Option(
            "--fabric",
            metavar="SNAPSHOT",
            help="Place each sweep's slow pairs on this fabric (an `ibdiag fabric --save` directory or .tar.gz, or an ibnetdiscover file) and name the port or uplinks they share.",
        ),
    ] = None,
    max_file_size: Annotated[
        str,
        typer.Option(
            "--max-file-size",
            metavar="SIZE",
            help="Largest input file read; a larger one is skipped.",
        ),
    ] = "128M",
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """One fleet view from many nodes' ibdiag JSON: node status, configuration outliers, counter errors, sweeps, drain list.

    Every file is checked; one that cannot be used is named and skipped (a report.input warning). No
    readable file at all is exit 2.

    \b
    Examples:
      ibdiag report /shared/ibdiag/                # every *.json below it
      ibdiag report 'nodes/*.json' sweep.json -o html > fleet.html
      ibdiag report /shared/ibdiag/ -o line        # drain list in one line
      ibdiag report sweep.json --fabric fabric.tar.gz   # slow pairs on the fabric, the shared port
    """
    from ibdiag.errors import UsageError
    from ibdiag.findings.model import Report
    from ibdiag.report.checks import report_findings
    from ibdiag.report.inputs import read_all
    from ibdiag.report.view import build_view, view_json
    from ibdiag.units import parse_size

    max_bytes = parse_size(max_file_size, what="--max-file-size")
    if max_bytes < 1024:
        raise UsageError(
            f"--max-file-size {max_file_size} is below 1 KiB", hint="the default is 128M"
        )
    check_output_path(png, "--png")
    docs, skipped = read_all(inputs, max_bytes=max_bytes)
    view = build_view(docs, skipped)
    if fabric is not None:
        view = _on_fabric(view, fabric)
    report = Report("report", view_json(view), tuple(report_findings(view)))
    meta = run_meta()
    if png is not None:
        _write_png(view, png)
    return _output(view, report, meta, fmt, strict)


def _on_fabric(view: Any, snapshot: Path) -> Any:
    """The view with each sweep placed on the saved fabric (read through fabric's dump reader)."""
    from dataclasses import replace

    from ibdiag.errors import UsageError
    from ibdiag.fabric import dump
    from ibdiag.fabric.build import build_fabric
    from ibdiag.report.fabricpath import on_fabric

    if not view.sweeps:
        raise UsageError(
            "--fabric places a sweep's pairs on the fabric, and no sweep file was given",
            hint="add the sweep's JSON (ibdiag sweep --save FILE) to the inputs",
        )
    fab = build_fabric(dump.load(snapshot))
    return replace(view, fabric=on_fabric(view.sweeps, fab))


def _write_png(view: Any, path: Path) -> None:
    from ibdiag.errors import UsageError
    from ibdiag.sweep.chart import matrix_png
    from ibdiag.sweep.matrix import matrix_grid

    if not view.sweeps:
        raise UsageError(
            "--png draws a sweep's matrix, and no sweep file was given",
            hint="add the sweep's JSON (ibdiag sweep --save FILE) to the inputs",
        )
    result = view.sweeps[-1].result
    write_atomically(
        path, matrix_png([matrix_grid(result, k) for k in range(result.rails)]), "--png"
    )


def _output(view: Any, report: Any, meta: Any, fmt: OutputFormat, strict: bool) -> int:
    """The fleet view in ``fmt`` on stdout; the exit status."""
    if fmt is OutputFormat.html:
        from ibdiag.report.html import render_html

        env().stdout.write(render_html(view, report.findings, meta))
        return exit_status(report, strict)
    if fmt is OutputFormat.line:
        from ibdiag.report.render import line_view

        env().stdout.write(line_view(view) + "\n")
        return exit_status(report, strict)

    def table() -> list[Any]:
        from ibdiag.findings.model import Report
        from ibdiag.output.table import findings_block, summary_line
        from ibdiag.report.render import tables

        # The nodes table already shows every node's status: the findings block lists the rest.
        rest = Report("report", {}, tuple(f for f in report.findings if f.check != "report.node"))
        return [
            *tables(view),
            *findings_block(rest, strict=strict, width=table_width())[:-1],
            summary_line(report, strict=strict),
        ]

    def csv() -> tuple[Any, Any]:
        from ibdiag.report.render import CSV_HEADER, csv_rows

        return CSV_HEADER, csv_rows(view)

    def prom() -> list[Any]:
        from ibdiag.report.render import prom_metrics

        return prom_metrics(view)

    return emit(report, fmt, meta, strict=strict, table=table, csv=csv, prom=prom)
