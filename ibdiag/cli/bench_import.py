"""``ibdiag bench import``: the nccl-tests and perftest logs people already have, read into the
results schema (``ibdiag.bench/1``) and judged. The library is :mod:`ibdiag.bench.importers.command`."""

from __future__ import annotations

from typing import Annotated

import typer

from ibdiag.bench import views
from ibdiag.bench.importers.command import ImportRequest, run
from ibdiag.cli.app import bench_app
from ibdiag.cli.common import handle_errors, read_config
from ibdiag.cli.emit import emit
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    FormatOption,
    OutputFormat,
    SaveOption,
    StrictOption,
)


@bench_app.command("import")
@handle_errors
def import_command(
    file: Annotated[
        str,
        typer.Argument(
            metavar="FILE",
            help="nccl-tests or perftest output, or NCCL's own NCCL_DEBUG log (text, JSON, .gz), or - for stdin.",
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
    save: SaveOption = None,
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
    import.run_failed). A log without a result table (a job's NCCL_DEBUG=INFO output, a benchmark that
    died before its table) is read for what NCCL's lines say: transport, GPUDirect RDMA, devices,
    hosts, GID index, network errors; exit 1 where they show a fault. Exit 2: nothing to read (no
    table, no error line, no NCCL line), a row that does not fit its header (with its line number), an
    empty or binary file.

    \b
    Examples:
      ibdiag bench import all_reduce_perf.log -o json > imported.json
      mpirun --tag-output -np 16 all_reduce_perf -b 8 -e 8G | ibdiag bench import -
      ibdiag bench import ib_write_bw.log --save link.json
      NCCL_DEBUG=INFO torchrun ... train.py 2>&1 | ibdiag bench import -    # transport, GDR, errors
    """
    request = ImportRequest(file, run_index=run_index, op=op, config=read_config(config), save=save)
    return emit(views.outputs(run(request)), fmt, strict=strict, save=save, files_last=True)
