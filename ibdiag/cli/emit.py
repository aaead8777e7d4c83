"""Writing a command's result: :func:`emit` puts its :class:`~ibdiag.output.outputs.Outputs` on stdout in
the ``-o`` format asked for, writes ``--save`` and ``--png``, keeps the report and metrics for the end of
the run (``--textfile``, ``--exit-codes nagios``) and returns the exit status the findings call for."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from ibdiag.cli.console import console, console_print
from ibdiag.cli.env import current
from ibdiag.cli.errors import _silence
from ibdiag.cli.options import OutputFormat
from ibdiag.errors import ExitStatus, UsageError
from ibdiag.findings.model import Report
from ibdiag.outfile import atomic_output, write_atomically
from ibdiag.output.csvout import render_csv
from ibdiag.output.jsonout import render_json
from ibdiag.output.line import render_line
from ibdiag.output.outputs import Outputs, TableLayout
from ibdiag.output.prom import Metric, finding_metrics, render_prom, run_metrics


def emit(
    out: Outputs,
    fmt: OutputFormat,
    *,
    strict: bool = False,
    save: Path | None = None,
    png: Path | None = None,
    png_option: str = "--png",
    files_last: bool = False,
) -> int:
    """Write ``out`` to stdout in ``fmt`` (and ``--save``, ``--png``); keep it for the end of the run;
    return the exit status its findings call for. A format the command has no view for is a usage
    error (exit 2), never an empty output. ``png_option``: the option that named ``png``, for errors
    (verdict's ``--chart``). ``files_last``: ``--save`` and ``--png`` after stdout (a measurement: a
    file that cannot be written then loses nothing already measured)."""
    record(out, strict=strict)
    if not files_last:
        _write_files(out, save, png, png_option)
    try:
        _write(out, fmt, strict=strict)
    except BrokenPipeError:
        # The reader closed the pipe (`| head`): the exit status still tells what was found.
        _silence(current().env.stdout)
    if files_last:
        _write_files(out, save, png, png_option)
    return exit_status(out.report, strict)


def _write_files(out: Outputs, save: Path | None, png: Path | None, png_option: str) -> None:
    if save is not None:
        write_atomically(save, render_json(out.report, out.meta), "--save")
    if png is not None:
        if out.png is None:
            raise UsageError(f"ibdiag {out.report.command} draws no chart", hint="drop --png")
        with atomic_output(png, png_option) as fh:
            out.png(fh)


def record(out: Outputs, *, strict: bool) -> None:
    """Keep the report for the end of the run (``--exit-codes nagios``), and its metrics for ``--textfile``."""
    session = current()
    session.report, session.strict = out.report, strict
    if session.textfile is not None:
        if out.prom is None:
            raise UsageError(
                f"ibdiag {out.report.command} has no metrics for --textfile",
                hint="use --textfile with ibdiag topo, counters or fabric",
            )
        session.prom_text = render_prom(metrics(out))


def metrics(out: Outputs) -> list[Metric]:
    """The command's metrics, its findings' and the run's (``ibdiag_up``, the time of the run)."""
    own: Sequence[Metric] = out.prom() if out.prom is not None else ()
    return [
        *own,
        *finding_metrics(out.report),
        *run_metrics(out.report.command, up=True, timestamp=time.time()),
    ]


def exit_status(report: Report, strict: bool) -> int:
    return int(ExitStatus.FAILED if report.failing(strict) else ExitStatus.OK)


def _cannot(out: Outputs, what: str, hint: str) -> UsageError:
    return UsageError(f"ibdiag {out.report.command} cannot write {what}", hint=hint)


def _write(out: Outputs, fmt: OutputFormat, *, strict: bool) -> None:
    stream = current().env.stdout
    report = out.report
    if fmt is OutputFormat.json:
        stream.write(render_json(report, out.meta))
    elif fmt is OutputFormat.line:
        line = out.line() if out.line is not None else render_line(report, strict=strict)
        stream.write(line + "\n")
    elif fmt is OutputFormat.junit:
        # lazy: xml.etree, for -o junit only
        from ibdiag.output.junit import render_junit

        stream.write(render_junit(report, out.meta, strict=strict, time_s=current().elapsed()))
    elif fmt is OutputFormat.csv:
        if out.csv is None:
            raise _cannot(out, "csv", "use -o table or -o json")
        header, rows = out.csv()
        stream.write(render_csv(header, rows))
    elif fmt is OutputFormat.prom:
        if out.prom is None:
            raise _cannot(
                out, "prom", "use -o json, or a command that reads the node (topo, counters)"
            )
        stream.write(render_prom(metrics(out)))
    elif fmt is OutputFormat.html:
        if out.html is None:
            raise _cannot(out, "html", "ibdiag report FILES -o html")
        stream.write(out.html())
    else:
        if out.table is None:
            raise _cannot(out, "a table", "use -o json")
        con = console("stdout")
        for item in out.table(TableLayout(strict=strict, width=int(con.width))):
            console_print(con, item)
    stream.flush()
