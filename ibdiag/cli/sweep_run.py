"""``ibdiag sweep`` running: this rank's part of the sweep, and on rank 0 the outputs.

Split from :mod:`ibdiag.cli.sweep` (the options and ``--plan``) to keep each module small.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ibdiag.cli.common import (
    OutputFormat,
    check_output_path,
    emit,
    env,
    run_meta,
    table_width,
    write_atomically,
    write_stdout,
)


def run_sweep_command(
    pattern: str,
    rounds: int | None,
    seed: int,
    second_pass: bool,
    spec: Any,
    file: Any,
    rails: tuple[str, ...] | None,
    *,
    fmt: OutputFormat,
    save: Path | None,
    png: Path | None,
    strict: bool,
    debug: bool,
) -> int:
    from ibdiag.errors import UsageError
    from ibdiag.node.sysfs import SysfsRoot
    from ibdiag.runtime.hooks import TestHooks
    from ibdiag.runtime.launch import detect_launch
    from ibdiag.sweep.distributed import SweepJob, run_distributed
    from ibdiag.sweep.schedule import Pattern

    launch = detect_launch(env().environ)
    if launch is None:
        raise UsageError(
            "ibdiag sweep runs as one process per node under the cluster's launcher, and none was found (no RANK/WORLD_SIZE, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK)",
            hint="srun -N 4 --ntasks-per-node 1 ibdiag sweep, or torchrun --nnodes 4 --nproc-per-node 1 ... -m ibdiag sweep; to see a plan: ibdiag sweep --plan --nodes N",
        )
    if launch.rank == 0:  # only rank 0 writes: the paths need not exist on the other nodes
        check_output_path(save, "--save")
        check_output_path(png, "--png")
        if png is not None:
            from ibdiag.output.chart import need_matplotlib

            need_matplotlib("--png", "leave --png out (the matrix is in the table and the JSON)")
    if launch.rank == 0 and launch.local_world_size is not None and launch.local_world_size > 1:
        from ibdiag.cli.common import print_warning

        print_warning(
            f"{launch.local_world_size} ranks per node: a sweep tests nodes, one process per node (--ntasks-per-node 1, --nproc-per-node 1); ranks on one host test each other over loopback"
        )
    job = SweepJob(
        Pattern(pattern),
        rounds,
        seed,
        second_pass,
        spec,
        file.thresholds(),
        rails,
        file.start_timeout_s,
        sysfs=SysfsRoot("/"),  # this rank's one tree (rails, servers, clients)
        perftest_path=env().environ.get("PATH"),
    )
    started = time.monotonic()
    on_round = None
    if launch.rank == 0 and env().stderr_isatty:
        from ibdiag.sweep.progress import progress_line

        def on_round(done: Any) -> None:
            env().stderr.write("\r\x1b[2K" + progress_line(done, time.monotonic() - started))
            env().stderr.flush()

    def log(line: str) -> None:
        if debug:
            env().stderr.write(f"rank {launch.rank}: {line}\n")

    result = run_distributed(
        job, launch, log=log, on_round=on_round, hooks=TestHooks.from_env(env().environ)
    )
    if on_round is not None:
        env().stderr.write("\r\x1b[2K")
        env().stderr.flush()
    if result is None:
        return 0
    return _outputs(result, fmt=fmt, save=save, png=png, strict=strict)


def _outputs(
    result: Any, *, fmt: OutputFormat, save: Path | None, png: Path | None, strict: bool
) -> int:
    from ibdiag.findings.model import Report
    from ibdiag.output.jsonout import render_json
    from ibdiag.sweep.checks import sweep_findings

    report = Report("sweep", result.to_json(), tuple(sweep_findings(result)))
    meta = run_meta()
    if save is not None:
        write_atomically(save, render_json(report, meta), "--save")
    if png is not None:
        from ibdiag.sweep.chart import matrix_png
        from ibdiag.sweep.render import matrix_grid

        write_atomically(
            png, matrix_png([matrix_grid(result, k) for k in range(result.rails)]), "--png"
        )
    if fmt is OutputFormat.line:
        from ibdiag.cli.common import exit_status
        from ibdiag.sweep.render import line_view

        write_stdout(line_view(result) + "\n")
        return exit_status(report, strict)

    def table() -> list[Any]:
        from rich.text import Text

        from ibdiag.output.table import findings_block
        from ibdiag.sweep import render

        items: list[Any] = [Text(line) for line in render.summary_lines(result)]
        for k in range(result.rails):
            items += render.matrix_lines(render.matrix_grid(result, k))
        items += render.worst_tables(result, limit=10)
        if save is not None:
            items.append(Text(f"Saved to {save}"))
        return items + findings_block(report, strict=strict, width=table_width())

    def csv() -> tuple[Any, Any]:
        from ibdiag.sweep.render import CSV_HEADER, csv_rows

        return CSV_HEADER, csv_rows(result)

    def prom() -> list[Any]:
        from ibdiag.sweep.render import prom_metrics

        return prom_metrics(result)

    return emit(report, fmt, meta, strict=strict, table=table, csv=csv, prom=prom)
