"""``ibdiag report``: many nodes' JSON (topo, counters, bench, sweep) in one fleet view."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ibdiag.cli.app import app
from ibdiag.cli.common import handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    OutputFormat,
    PageFormatOption,
    PngOption,
    StrictOption,
)
from ibdiag.report import views
from ibdiag.report.command import ReportRequest, run

InputsArgument = Annotated[
    list[str],
    typer.Argument(
        metavar="PATH",
        help="Directories (their *.json, recursively), files, or quoted patterns like 'nodes/*.json'.",
        show_default=False,
    ),
]
FabricOption = Annotated[
    Path | None,
    typer.Option(
        "--fabric",
        metavar="SNAPSHOT",
        help="Place each sweep's slow pairs on this fabric (an `ibdiag fabric --save` directory or .tar.gz, or an ibnetdiscover file) and name the port or uplinks they share.",
    ),
]
MaxFileSizeOption = Annotated[
    str,
    typer.Option(
        "--max-file-size",
        metavar="SIZE",
        help="Largest input file read; a larger one is skipped.",
    ),
]


@app.command("report")
@handle_errors
def report_command(
    inputs: InputsArgument,
    fmt: PageFormatOption = OutputFormat.table,
    png: PngOption = None,
    fabric: FabricOption = None,
    max_file_size: MaxFileSizeOption = "128M",
    config: ConfigOption = None,
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
    request = ReportRequest(
        inputs,
        fabric=fabric,
        png=png,
        max_file_size=max_file_size,
        config=read_config(
            config
        ),  # [fabric] and [counters]: the snapshot judged as ibdiag fabric does
    )
    return emit(views.outputs(run(request)), fmt, strict=strict, png=png)
