"""``ibdiag bench import``: the nccl-tests and perftest logs people already have, read into the
results schema (``ibdiag.bench/1``) and judged (:mod:`ibdiag.bench.importers`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ibdiag.cli.app import bench_app
from ibdiag.cli.bench_collective import emit_run
from ibdiag.cli.common import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    StrictOption,
    check_output_path,
    emit,
    handle_errors,
    read_config,
    run_meta,
    table_width,
)
from ibdiag.errors import UsageError


@bench_app.command("import")
@handle_errors
def import_command(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE", help="nccl-tests or perftest output (text, JSON, .gz), or - for stdin."
        ),
    ],
    run_index: Annotated[
        int | None,
        typer.Option(
            "--run",
            metavar="N",
            help="The file holds several runs: import run N (1-based); they are never averaged.",
        ),
    ] = None,
    op: Annotated[
        str | None,
        typer.Option(
            "--op",
            metavar="OP",
            help="The collective, when an old nccl-tests log does not say (all_gather and alltoall look alike).",
        ),
    ] = None,
    fmt: FormatOption = OutputFormat.table,
    save: Annotated[
        Path | None,
        typer.Option(
            "--save",
            metavar="FILE",
            help="Also write the JSON result (ibdiag.bench/1) to FILE, atomically.",
        ),
    ] = None,
    config: ConfigOption = None,
    strict: StrictOption = False,
    debug: DebugOption = False,
) -> int:
    """Read nccl-tests (*_perf) and perftest (ib_*_bw, ib_*_lat, --out_json) logs into ibdiag's results.

    Every nccl-tests format era, mpirun --tag-output prefixes, interleaved runs (reported, never
    averaged); perftest MB/sec, MiB/sec and Gb/sec, duration mode. Logs as captured are fine: prompts,
    command lines, NCCL INFO lines, launcher output, '> ' quotes, CRLF and colours around the table
    are read for provenance or skipped. A file of several runs one after the other (different ops
    too) imports each; interleaved runs are refused unless --run N picks one. A run that ended in the
    tool's error line (Test NCCL failure, Couldn't connect to ...) is read and fails (exit 1,
    import.run_failed). Exit 2: nothing to read (no table and no error line), a row that does not fit
    its header (with its line number), an empty or binary file.

    \b
    Examples:
      ibdiag bench import all_reduce_perf.log -o json > imported.json
      mpirun --tag-output -np 16 all_reduce_perf -b 8 -e 8G | ibdiag bench import -
      ibdiag bench import ib_write_bw.log --save link.json
    """
    from ibdiag.bench.importers import read_runs, select_run, separate_runs
    from ibdiag.bench.importers.checks import import_findings
    from ibdiag.bench.results.collective_config import CollectiveConfig

    cfg = read_config(config).section("collective", CollectiveConfig)
    check_output_path(save, "--save")
    runs, source = read_runs(file, op=op)
    if run_index is None and separate_runs(runs):
        if save is not None:
            raise UsageError(
                f"--save: {source} holds {len(runs)} runs; a saved result is one run",
                hint=f"save one with --run N (1..{len(runs)})",
            )
        return _emit_runs(runs, [import_findings(r, cfg) for r in runs], fmt, strict)
    run, extra = select_run(runs, source, run_index)
    findings = extra + import_findings(run, cfg)
    return emit_run(run, findings, fmt, save, strict)


def _emit_runs(runs: list[Any], findings: list[list[Any]], fmt: OutputFormat, strict: bool) -> int:
    """Several runs of one file, each through its kind's view: JSON ``{"runs": [...]}`` in the
    ``ibdiag.bench/1`` envelope, findings named ``run N: subject``; CSV when they are of one kind."""
    from dataclasses import replace

    from ibdiag.bench.views import view_for
    from ibdiag.findings.model import Report
    from ibdiag.output.table import findings_block

    named = tuple(
        replace(f, subject=f"run {i}: {f.subject}")
        for i, fs in enumerate(findings, start=1)
        for f in fs
    )
    report = Report("bench", {"runs": [r.to_data() for r in runs]}, named)

    def table() -> list[Any]:
        out: list[Any] = []
        for i, r in enumerate(runs, start=1):
            out += [f"run {i} of {len(runs)}", *view_for(r).table(r)]
        return [*out, *findings_block(report, strict=strict, width=table_width())]

    def csv() -> tuple[Any, list[dict[str, Any]]]:
        if len({r.kind for r in runs}) != 1:
            raise UsageError(
                "-o csv: the runs are of different kinds", hint="import one with --run N"
            )
        view = view_for(runs[0])
        header = view.csv(runs[0])[0]
        return header, [row for r in runs for row in view.csv(r)[1]]

    return emit(report, fmt, run_meta(None), strict=strict, table=table, csv=csv)
