"""``ibdiag counters``: is any RDMA port erroring, flapping or backpressured — now, over an interval, or across a job?"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ibdiag.cli.app import app
from ibdiag.cli.common import env, handle_errors, print_warning, read_config
from ibdiag.cli.console import console
from ibdiag.cli.counters_options import (
    CountOption,
    DeviceOption,
    FarEndOption,
    IntervalOption,
    SinceOption,
    WatchOption,
)
from ibdiag.cli.emit import emit, exit_status, record
from ibdiag.cli.options import (
    ConfigOption,
    DebugOption,
    ExpectRateOption,
    FormatOption,
    HistoryOption,
    KernelLogOption,
    KernelLogSinceOption,
    KernelLogWindowOption,
    OutputFormat,
    RootOption,
    StrictOption,
    TextfileOption,
)
from ibdiag.counters import command
from ibdiag.counters.result import SeriesProgress
from ibdiag.counters.views import outputs as views
from ibdiag.errors import UsageError
from ibdiag.fabric.attach import counters_far_end
from ibdiag.history import attach
from ibdiag.output.outputs import TableLayout


@app.command("counters")
@handle_errors
def counters_command(
    root: RootOption = Path("/"),
    fmt: FormatOption = OutputFormat.table,
    config: ConfigOption = None,
    strict: StrictOption = False,
    device: DeviceOption = None,
    interval: IntervalOption = None,
    count: CountOption = None,
    watch: WatchOption = False,
    since: SinceOption = None,
    expect_rate: ExpectRateOption = None,
    far_end: FarEndOption = False,
    history: HistoryOption = None,
    kernel_log: KernelLogOption = None,
    kernel_log_window: KernelLogWindowOption = None,
    kernel_log_since: KernelLogSinceOption = None,
    textfile: TextfileOption = None,  # written by the boundary (cli/errors.py) from the report's metrics
    debug: DebugOption = False,
) -> int:
    """Port error, backpressure and throughput counters (like perfquery -x): snapshot, --interval, --watch, --since."""
    if watch:
        _check_watch(fmt, textfile is not None)
    cfg = read_config(config)
    hist = attach.setup(
        history,
        cfg,
        watch=watch,
        kernel_log=kernel_log,
        kernel_window=kernel_log_window,
        kernel_since=kernel_log_since,
        root=root,
    )
    # -o csv of a series: rows go out as each sample arrives (a long series survives Ctrl-C as valid CSV)
    streamed = fmt is OutputFormat.csv and interval is not None and not watch
    request = command.CountersRequest(
        root=root,
        config=cfg,
        devices=tuple(device or ()),
        interval_s=interval,
        count=count,
        watch=watch,
        since=since,
        expect_rate_gbps=expect_rate,
        keep_steps=fmt is OutputFormat.json or ((count or 1) == 1 and not streamed),
        extras=() if hist is None else (attach.counters_addition(hist),),
        far_end=counters_far_end(env().environ) if far_end else None,
        on_progress=_series_progress(streamed),
        on_warning=print_warning,
    )
    if watch:
        return _watch(request, strict)
    out = views.outputs(command.run(request))
    if not streamed:
        return emit(out, fmt, strict=strict)
    record(out, strict=strict)  # for --textfile and --exit-codes: the rows are out already
    return exit_status(out.report, strict)


def _check_watch(fmt: OutputFormat, textfile: bool) -> None:
    """``--watch`` draws on a terminal, and only there."""
    if fmt is not OutputFormat.table:
        raise UsageError(
            f"--watch draws a live table; it cannot write {fmt.value}",
            hint="for machines use --interval S --count N -o csv (or json)",
        )
    if not env().stdout_isatty:
        raise UsageError(
            "--watch needs a terminal on stdout",
            hint="for a log use --interval S --count N -o csv",
        )
    if textfile:
        raise UsageError(
            "--watch draws a live table; it cannot write --textfile",
            hint="for node_exporter run ibdiag counters --textfile FILE.prom from cron or a timer",
        )


def _series_progress(stream_csv: bool) -> Callable[[SeriesProgress], None]:
    """A status line for people on stderr (nothing when stderr is not a terminal: scripts, CI logs),
    and with ``stream_csv`` each sample's CSV rows on stdout as it arrives."""
    e = env()
    header = [True]

    def show(p: SeriesProgress) -> None:
        if e.stderr_isatty:
            end = "\n" if p.step is None or p.step.index >= p.count else ""
            e.stderr.write(f"\r\x1b[Kibdiag: {views.progress_line(p)}{end}")
            e.stderr.flush()
        if stream_csv and p.step is not None:
            e.stdout.write(views.csv_step_text(p.step, header=header[0]))
            e.stdout.flush()
            header[0] = False

    return show


def _watch(request: command.CountersRequest, strict: bool) -> int:
    """``--watch``: the library's frames drawn in place until --count or Ctrl-C (exit 130)."""
    from rich.live import Live  # lazy: rich, for the live view only
    from rich.text import Text  # lazy: as above

    con = console("stdout")
    status = 0
    with command.watching(request) as live_counters:
        # Live hides the cursor and redraws in place; leaving the block (Ctrl-C included) shows it again.
        with Live(
            Text(views.watch_start(live_counters)),
            console=con,
            auto_refresh=False,
            transient=False,
        ) as live:
            for frame in live_counters.frames:
                layout = TableLayout(strict=strict, width=int(con.width))
                live.update(views.watch_view(frame, layout), refresh=True)
                status = exit_status(frame.report, strict)
    return status
